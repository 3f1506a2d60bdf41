//! Stop strings matched on streamed text, across token and UTF-8 boundaries.
//!
//! Text that could still be the start of a stop string is held back until it can't, so
//! a stop string is never emitted, not even in part.

#[derive(Debug, Clone, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    /// Bytes of the longest stop string, minus one: the most that must be held back.
    hold: usize,
    pending: String,
}

impl StopMatcher {
    pub fn new(stops: Vec<String>) -> Self {
        let stops: Vec<String> = stops.into_iter().filter(|s| !s.is_empty()).collect();
        let hold = stops
            .iter()
            .map(|s| s.len())
            .max()
            .unwrap_or(1)
            .saturating_sub(1);
        Self {
            stops,
            hold,
            pending: String::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.stops.is_empty()
    }

    /// Adds `text`; appends to `out` what is safe to emit. Returns the index of the stop
    /// string that matched, after which the stream must end (the match is not emitted).
    pub fn push(&mut self, text: &str, out: &mut String) -> Option<usize> {
        if self.stops.is_empty() {
            out.push_str(text);
            return None;
        }
        self.pending.push_str(text);
        let hit = self
            .stops
            .iter()
            .enumerate()
            .filter_map(|(i, s)| self.pending.find(s.as_str()).map(|p| (p, i)))
            .min();
        if let Some((pos, i)) = hit {
            out.push_str(&self.pending[..pos]);
            self.pending.clear();
            return Some(i);
        }
        let mut keep_from = self.pending.len().saturating_sub(self.hold);
        while !self.pending.is_char_boundary(keep_from) {
            keep_from -= 1;
        }
        out.push_str(&self.pending[..keep_from]);
        self.pending.drain(..keep_from);
        None
    }

    /// Emits whatever was held back (the stream ended without a match).
    pub fn flush(&mut self, out: &mut String) {
        out.push_str(&self.pending);
        self.pending.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, Option<usize>) {
        let mut m = StopMatcher::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = String::new();
        for p in pieces {
            if let Some(i) = m.push(p, &mut out) {
                return (out, Some(i));
            }
        }
        m.flush(&mut out);
        (out, None)
    }

    #[test]
    fn match_across_pieces_is_never_emitted() {
        assert_eq!(
            run(&["STOP"], &["hello S", "TO", "P world"]),
            ("hello ".into(), Some(0))
        );
        assert_eq!(run(&["\n\n"], &["a\n", "\nb"]), ("a".into(), Some(0)));
    }

    #[test]
    fn no_match_emits_everything() {
        assert_eq!(run(&["xyz"], &["ab", "cxy", "d"]), ("abcxyd".into(), None));
        assert_eq!(run(&[], &["ab", "c"]), ("abc".into(), None));
    }

    #[test]
    fn earliest_of_several_stops_wins() {
        assert_eq!(
            run(&["world", "lo"], &["hello world"]),
            ("hel".into(), Some(1))
        );
    }

    #[test]
    fn multibyte_text_is_split_on_char_boundaries() {
        assert_eq!(run(&["ßß"], &["ääää", "ß", "x"]), ("ääääßx".into(), None));
        assert_eq!(
            run(&["日本"], &["今日", "は日", "本"]),
            ("今日は".into(), Some(0))
        );
    }
}
