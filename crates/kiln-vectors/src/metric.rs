//! The three metrics and what a score means under each, as Vectorize reports them:
//! cosine similarity and dot product (higher is closer), euclidean distance (lower is
//! closer).

/// How vectors are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    Cosine,
    Euclidean,
    DotProduct,
}

impl Metric {
    /// Vectorize's names: `cosine`, `euclidean`, `dot-product`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "cosine" => Some(Self::Cosine),
            "euclidean" => Some(Self::Euclidean),
            "dot-product" => Some(Self::DotProduct),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cosine => "cosine",
            Self::Euclidean => "euclidean",
            Self::DotProduct => "dot-product",
        }
    }

    /// The metric's number in a graph file's header.
    pub(crate) fn code(self) -> u8 {
        match self {
            Self::Cosine => 0,
            Self::Euclidean => 1,
            Self::DotProduct => 2,
        }
    }

    /// Whether a vector must have a length to be scored: cosine divides by it, so an
    /// all-zero vector would score 0 against everything in an exact scan and 1 in the
    /// graph. Such vectors are refused, stored or asked.
    pub fn needs_length(self) -> bool {
        matches!(self, Self::Cosine)
    }

    /// Whether a larger score is a closer match.
    pub fn higher_is_closer(self) -> bool {
        !matches!(self, Self::Euclidean)
    }

    /// The exact score of `v` against `q` (same length).
    pub fn score(self, q: &[f32], v: &[f32]) -> f32 {
        match self {
            Self::DotProduct => dot(q, v),
            Self::Cosine => {
                let denom = (dot(q, q) * dot(v, v)).sqrt();
                if denom > 0.0 {
                    dot(q, v) / denom
                } else {
                    0.0
                }
            }
            Self::Euclidean => q
                .iter()
                .zip(v)
                .map(|(a, b)| (a - b) * (a - b))
                .sum::<f32>()
                .sqrt(),
        }
    }

    /// The score for the graph's distance: usearch's `Cos` and `IP` are `1 - x`, `L2sq`
    /// is the squared distance.
    pub(crate) fn score_of_distance(self, d: f32) -> f32 {
        match self {
            Self::Cosine | Self::DotProduct => 1.0 - d,
            Self::Euclidean => d.max(0.0).sqrt(),
        }
    }

    /// Orders `a` before `b` when it is the closer match.
    pub(crate) fn closer_first(self, a: f32, b: f32) -> std::cmp::Ordering {
        if self.higher_is_closer() {
            b.total_cmp(&a)
        } else {
            a.total_cmp(&b)
        }
    }
}

/// Whether `v` has a length cosine can divide by: not all zeros, nor so small that its
/// squared length is 0 in `f32`.
pub(crate) fn has_length(v: &[f32]) -> bool {
    dot(v, v) > 0.0
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    // Eight independent sums, so the compiler keeps them in vector registers.
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + ra.iter().zip(rb).map(|(x, y)| x * y).sum::<f32>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_follow_vectorize() {
        let (a, b) = ([1.0, 0.0, 0.0], [0.0, 2.0, 0.0]);
        assert_eq!(Metric::Cosine.score(&a, &a), 1.0);
        assert_eq!(Metric::Cosine.score(&a, &b), 0.0);
        assert_eq!(Metric::Euclidean.score(&a, &b), 5f32.sqrt());
        assert_eq!(Metric::DotProduct.score(&[1.0, 2.0], &[3.0, 4.0]), 11.0);
        let long: Vec<f32> = (0..19).map(|i| i as f32).collect();
        assert_eq!(
            Metric::DotProduct.score(&long, &long),
            (0..19).map(|i| (i * i) as f32).sum::<f32>()
        );
        for m in [Metric::Cosine, Metric::Euclidean, Metric::DotProduct] {
            assert_eq!(Metric::parse(m.as_str()), Some(m));
        }
        assert_eq!(Metric::parse("l2"), None);
        assert!(Metric::Euclidean.closer_first(1.0, 2.0).is_lt());
        assert!(Metric::Cosine.closer_first(1.0, 2.0).is_gt());
    }

    #[test]
    fn only_cosine_needs_a_length_and_zeros_have_none() {
        assert!(Metric::Cosine.needs_length());
        assert!(!Metric::Euclidean.needs_length());
        assert!(!Metric::DotProduct.needs_length());
        assert!(!has_length(&[0.0; 9]));
        assert!(!has_length(&[-0.0, 0.0]));
        assert!(!has_length(&[1e-30, 0.0]), "its square underflows");
        assert!(has_length(&[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1e-3]));
    }
}
