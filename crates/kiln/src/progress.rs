//! Adapts [`kiln_catalog::Progress`] to an `indicatif` progress bar on stderr.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use kiln_catalog::Progress;

const TEMPLATE: &str =
    "{prefix:.bold} {wide_msg}\n{wide_bar:.cyan/blue} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}";

/// A byte progress bar showing rate and ETA, with the current stage above it. When stderr
/// is not a terminal the bar is hidden and stages are printed as plain lines instead.
pub struct BarProgress {
    bar: ProgressBar,
}

impl BarProgress {
    /// A bar labelled with `label` (usually the model name).
    pub fn new(label: &str) -> Self {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template(TEMPLATE)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
        bar.set_style(style);
        bar.set_prefix(label.to_owned());
        BarProgress { bar }
    }
}

impl Progress for BarProgress {
    fn stage(&self, msg: &str) {
        if self.bar.is_hidden() {
            eprintln!("{}: {msg}", self.bar.prefix());
        }
        self.bar.set_message(msg.to_owned());
    }

    fn set_len(&self, n: u64) {
        self.bar.set_length(n);
    }

    fn inc(&self, n: u64) {
        self.bar.inc(n);
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
