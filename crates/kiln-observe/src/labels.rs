//! A bound on distinct label values: the first `max` colos (or models) seen keep
//! their names, later ones are counted as `other`, so a misconfigured fleet or a client
//! naming random models cannot grow the rollups or the Prometheus series without end.

use std::collections::HashSet;
use std::sync::Mutex;

/// The label every value past the bound shares.
pub const OTHER: &str = "other";

#[derive(Debug)]
pub struct Labels {
    max: usize,
    seen: Mutex<HashSet<String>>,
}

impl Labels {
    pub fn new(max: usize) -> Self {
        Self {
            max,
            seen: Mutex::new(HashSet::new()),
        }
    }

    /// `value` made safe as a label (see [`clean`]), or [`OTHER`] once `max` others
    /// are known.
    pub fn bound(&self, value: &str) -> String {
        let value = &clean(value);
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.contains(value) {
            return value.to_string();
        }
        if seen.len() < self.max {
            seen.insert(value.to_string());
            return value.to_string();
        }
        OTHER.to_string()
    }
}

/// Longest label value kept.
const MAX_LEN: usize = 64;

/// `value` with anything but letters, digits and `_ - . : / @` replaced by `_`, at most
/// [`MAX_LEN`] bytes: safe in Prometheus' text format and in a page.
pub fn clean(value: &str) -> String {
    value
        .chars()
        .take(MAX_LEN)
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_-.:/@".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_past_the_bound_are_other() {
        let l = Labels::new(2);
        assert_eq!(l.bound("ams"), "ams");
        assert_eq!(l.bound("fra"), "fra");
        assert_eq!(l.bound("lhr"), OTHER);
        assert_eq!(l.bound("ams"), "ams");
        assert_eq!(clean("a\"b\nc"), "a_b_c");
    }
}
