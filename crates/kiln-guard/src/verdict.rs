//! What the firewall says about a prompt: an injection score in Cloudflare's convention
//! and the PII categories found.

use std::collections::BTreeSet;

use crate::pii::PiiCategory;

/// One prompt's (or text's) scores.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Verdict {
    /// 1 to 99, lower is riskier ([`injection_score`]); `None` when there was no text
    /// to score.
    pub injection_score: Option<u8>,
    pub pii: BTreeSet<PiiCategory>,
}

impl Verdict {
    /// Several texts' verdicts as one: the riskiest score, every category.
    pub fn merge(verdicts: impl IntoIterator<Item = Verdict>) -> Self {
        verdicts.into_iter().fold(Verdict::default(), |mut acc, v| {
            acc.injection_score = match (acc.injection_score, v.injection_score) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            acc.pii.extend(v.pii);
            acc
        })
    }

    /// The categories as they appear in headers: comma-separated, `none` for none.
    pub fn pii_header(&self) -> String {
        if self.pii.is_empty() {
            return "none".into();
        }
        self.pii
            .iter()
            .map(|c| c.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// The classifier's injection probability `p` as Cloudflare's `injection_score`: an
/// integer from 1 to 99 where lower means riskier, `1 + round(98 · (1 − p))`. So p = 0
/// is 99, p = 1 is 1, p = 0.5 is 50, and the default block threshold of 20 blocks
/// prompts with p above about 0.81.
pub fn injection_score(p: f32) -> u8 {
    let p = if p.is_nan() { 1.0 } else { p.clamp(0.0, 1.0) };
    (1.0 + (98.0 * (1.0 - p)).round()) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_run_from_riskiest_to_safest() {
        assert_eq!(injection_score(1.0), 1);
        assert_eq!(injection_score(0.0), 99);
        assert_eq!(injection_score(0.5), 50);
        assert_eq!(injection_score(0.82), 19);
        assert_eq!(injection_score(0.80), 21);
        assert_eq!(
            injection_score(f32::NAN),
            1,
            "a broken score is treated as risky"
        );
        assert_eq!(injection_score(7.0), 1);
    }

    #[test]
    fn verdicts_merge_to_the_riskiest() {
        let a = Verdict {
            injection_score: Some(80),
            pii: [PiiCategory::EmailAddress].into(),
        };
        let b = Verdict {
            injection_score: Some(12),
            pii: [PiiCategory::UsSsn].into(),
        };
        let m = Verdict::merge([a, b, Verdict::default()]);
        assert_eq!(m.injection_score, Some(12));
        assert_eq!(m.pii_header(), "EMAIL_ADDRESS,US_SSN");
        assert_eq!(Verdict::default().pii_header(), "none");
    }
}
