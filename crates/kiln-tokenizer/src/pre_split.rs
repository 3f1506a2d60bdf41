//! Word splitting before byte-level BPE, reproducing llama.cpp's pre-tokenizers.
//!
//! llama.cpp does not run the Hugging Face regexes through a regex engine: it runs a
//! sequence of passes, each splitting every piece produced by the previous pass, with
//! hand-written matchers for the common GPT-2 / Llama 3 / Qwen 2 patterns. Each pass sees
//! one piece at a time, so look-ahead (`\s+(?!\S)`) stops at piece boundaries. The passes
//! below follow those semantics so that word boundaries, and therefore token ids, match.

use crate::unicode_class::{classify, CharFlags};

/// The pre-tokenizer of a `gpt2`-type vocabulary, chosen by `tokenizer.ggml.pre`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PreSplit {
    /// `'s|'t|... | ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
    Gpt2,
    /// Every number character on its own, then [`PreSplit::Gpt2`] (StarCoder, SmolLM).
    DigitsThenGpt2,
    /// Case-insensitive contractions, letters with one leading non-letter, `\p{N}{1,3}`.
    Llama3,
    /// As [`PreSplit::Llama3`] but one number character per word (Qwen 2).
    Qwen2,
    /// llama.cpp's fallback: punctuation runs, GPT-2, number runs, ASCII digit triples.
    Default,
}

/// One pass over a piece: returns the lengths (in chars) of the words it splits into.
type Pass = fn(&[char], &[CharFlags], &mut Vec<usize>);

impl PreSplit {
    fn passes(self) -> &'static [Pass] {
        match self {
            PreSplit::Gpt2 => &[gpt2],
            PreSplit::DigitsThenGpt2 => &[each_number, gpt2],
            PreSplit::Llama3 => &[llama3],
            PreSplit::Qwen2 => &[qwen2],
            PreSplit::Default => &[punctuation_runs, gpt2, number_runs, ascii_digit_triples],
        }
    }

    /// Splits `text` into words (slices of `text`, in order, covering all of it).
    pub(crate) fn split(self, text: &str) -> Vec<&str> {
        let mut starts: Vec<usize> = Vec::with_capacity(text.len() + 1);
        let mut chars: Vec<char> = Vec::with_capacity(text.len());
        for (i, c) in text.char_indices() {
            starts.push(i);
            chars.push(c);
        }
        starts.push(text.len());
        let flags: Vec<CharFlags> = chars.iter().map(|&c| classify(c)).collect();

        let mut lengths = vec![chars.len()];
        for pass in self.passes() {
            let mut next = Vec::with_capacity(lengths.len());
            let mut at = 0;
            for len in lengths {
                let end = at + len;
                pass(&chars[at..end], &flags[at..end], &mut next);
                at = end;
            }
            lengths = next;
        }

        let mut words = Vec::with_capacity(lengths.len());
        let mut at = 0;
        for len in lengths.into_iter().filter(|&l| l > 0) {
            words.push(&text[starts[at]..starts[at + len]]);
            at += len;
        }
        words
    }
}

/// Emits the word `[*prev, end)` if non-empty and moves `prev` to `end`.
fn emit(out: &mut Vec<usize>, prev: &mut usize, end: usize) {
    if end > *prev {
        out.push(end - *prev);
    }
    *prev = end;
}

/// Emits each maximal run of `pred` chars and each run between them as separate words.
fn split_runs(flags: &[CharFlags], out: &mut Vec<usize>, in_run: impl Fn(usize) -> bool) {
    let mut prev = 0;
    let mut pos = 0;
    while pos < flags.len() {
        if in_run(pos) {
            emit(out, &mut prev, pos);
            while pos < flags.len() && in_run(pos) {
                pos += 1;
            }
            emit(out, &mut prev, pos);
        } else {
            pos += 1;
        }
    }
    emit(out, &mut prev, flags.len());
}

/// `\p{N}`: every number character is a word of its own.
fn each_number(_chars: &[char], flags: &[CharFlags], out: &mut Vec<usize>) {
    let mut prev = 0;
    for (pos, f) in flags.iter().enumerate() {
        if f.is_number() {
            emit(out, &mut prev, pos);
            emit(out, &mut prev, pos + 1);
        }
    }
    emit(out, &mut prev, flags.len());
}

/// `[\p{P}\$\+<=>\^~\|]+`
fn punctuation_runs(chars: &[char], flags: &[CharFlags], out: &mut Vec<usize>) {
    split_runs(flags, out, |i| {
        flags[i].is_punctuation()
            || matches!(chars[i], '$' | '+' | '<' | '=' | '>' | '^' | '~' | '|')
    });
}

/// `\p{N}+`
fn number_runs(_chars: &[char], flags: &[CharFlags], out: &mut Vec<usize>) {
    split_runs(flags, out, |i| flags[i].is_number());
}

/// `[0-9][0-9][0-9]`: leftmost non-overlapping triples of ASCII digits.
fn ascii_digit_triples(chars: &[char], _flags: &[CharFlags], out: &mut Vec<usize>) {
    let mut prev = 0;
    let mut pos = 0;
    while pos + 3 <= chars.len() {
        if chars[pos..pos + 3].iter().all(char::is_ascii_digit) {
            emit(out, &mut prev, pos);
            emit(out, &mut prev, pos + 3);
            pos += 3;
        } else {
            pos += 1;
        }
    }
    emit(out, &mut prev, chars.len());
}

/// Read access to one piece with llama.cpp's out-of-range conventions: past the end a
/// position has no character and no flags (not even "undefined").
struct Piece<'a> {
    chars: &'a [char],
    flags: &'a [CharFlags],
}

impl Piece<'_> {
    fn len(&self) -> usize {
        self.chars.len()
    }
    fn char_at(&self, pos: usize) -> Option<char> {
        self.chars.get(pos).copied()
    }
    fn flags_at(&self, pos: usize) -> Option<CharFlags> {
        self.flags.get(pos).copied()
    }
    fn is_letter(&self, pos: usize) -> bool {
        self.flags_at(pos).is_some_and(CharFlags::is_letter)
    }
    fn is_number(&self, pos: usize) -> bool {
        self.flags_at(pos).is_some_and(CharFlags::is_number)
    }
    fn is_whitespace(&self, pos: usize) -> bool {
        self.flags_at(pos).is_some_and(CharFlags::is_whitespace)
    }
    /// In range and neither whitespace, letter nor number: `[^\s\p{L}\p{N}]`.
    fn is_other(&self, pos: usize) -> bool {
        self.flags_at(pos)
            .is_some_and(|f| !(f.is_whitespace() || f.is_letter() || f.is_number()))
    }

    /// Length of a contraction (`'s`, `'t`, `'re`, `'ve`, `'m`, `'ll`, `'d`) at `pos`.
    fn contraction(&self, pos: usize, any_case: bool) -> Option<usize> {
        if self.char_at(pos) != Some('\'') || pos + 1 >= self.len() {
            return None;
        }
        let fold = |c: Option<char>| match c {
            Some(c) if any_case => Some(c.to_ascii_lowercase()),
            other => other,
        };
        let next = fold(self.char_at(pos + 1));
        if matches!(next, Some('s' | 't' | 'm' | 'd')) {
            return Some(2);
        }
        if pos + 2 < self.len() {
            let pair = (next, fold(self.char_at(pos + 2)));
            if matches!(
                pair,
                (Some('r'), Some('e')) | (Some('v'), Some('e')) | (Some('l'), Some('l'))
            ) {
                return Some(3);
            }
        }
        None
    }

    /// Whitespace handling shared by all patterns; returns the end of the word at `pos`.
    /// With `newline_runs`, `\s*[\r\n]+` is tried first (Llama 3, Qwen 2).
    fn whitespace_word(&self, pos: usize, newline_runs: bool) -> usize {
        let mut n = 0;
        let mut last_newline_end = None;
        while self.is_whitespace(pos + n) {
            if newline_runs && matches!(self.char_at(pos + n), Some('\r' | '\n')) {
                last_newline_end = Some(pos + n + 1);
            }
            n += 1;
        }
        if let Some(end) = last_newline_end {
            return end;
        }
        // `\s+(?!\S)`: leave the last blank for the word that follows.
        if n > 1 && pos + n < self.len() {
            return pos + n - 1;
        }
        if n > 0 {
            return pos + n;
        }
        pos + 1
    }
}

/// GPT-2's pattern.
fn gpt2(chars: &[char], flags: &[CharFlags], out: &mut Vec<usize>) {
    let p = Piece { chars, flags };
    let mut prev = 0;
    let mut pos = 0;
    while pos < p.len() {
        if let Some(n) = p.contraction(pos, false) {
            pos += n;
            emit(out, &mut prev, pos);
            continue;
        }
        // ` ?X+` for X in letters, numbers, other: the class is that of the char after an
        // optional leading space.
        let space = p.char_at(pos) == Some(' ');
        let head = pos + usize::from(space);
        let classes: [fn(&Piece<'_>, usize) -> bool; 3] = [
            |p, i| p.is_letter(i),
            |p, i| p.is_number(i),
            |p, i| p.is_other(i),
        ];
        if let Some(test) = classes.into_iter().find(|t| t(&p, head)) {
            pos = head;
            while test(&p, pos) {
                pos += 1;
            }
            emit(out, &mut prev, pos);
            continue;
        }
        pos = p.whitespace_word(pos, false);
        emit(out, &mut prev, pos);
    }
}

/// Llama 3's pattern (`\p{N}{1,3}`).
fn llama3(chars: &[char], flags: &[CharFlags], out: &mut Vec<usize>) {
    llama3_like(chars, flags, out, 3);
}

/// Qwen 2's pattern (`\p{N}`).
fn qwen2(chars: &[char], flags: &[CharFlags], out: &mut Vec<usize>) {
    llama3_like(chars, flags, out, 1);
}

fn llama3_like(chars: &[char], flags: &[CharFlags], out: &mut Vec<usize>, max_digits: usize) {
    let p = Piece { chars, flags };
    let mut prev = 0;
    let mut pos = 0;
    while pos < p.len() {
        if let Some(n) = p.contraction(pos, true) {
            pos += n;
            emit(out, &mut prev, pos);
            continue;
        }
        let c = p.char_at(pos);
        // `[^\r\n\p{L}\p{N}]?\p{L}+`
        if !(matches!(c, Some('\r' | '\n')) || p.is_number(pos))
            && (p.is_letter(pos) || p.is_letter(pos + 1))
        {
            pos += 1;
            while p.is_letter(pos) {
                pos += 1;
            }
            emit(out, &mut prev, pos);
            continue;
        }
        // `\p{N}{1,max_digits}`
        if p.is_number(pos) {
            let mut group_start = pos;
            while p.is_number(pos) {
                pos += 1;
                if pos - group_start >= max_digits {
                    emit(out, &mut prev, pos);
                    group_start = pos;
                }
            }
            emit(out, &mut prev, pos);
            continue;
        }
        // ` ?[^\s\p{L}\p{N}]+[\r\n]*`; llama.cpp tests the optional space's successor, and
        // a trailing lone space takes this branch too (with an empty run).
        let space = c == Some(' ');
        let head = pos + usize::from(space);
        if p.is_other(head) || (space && head == p.len()) {
            pos = head;
            while p.is_other(pos) {
                pos += 1;
            }
            while matches!(p.char_at(pos), Some('\r' | '\n')) {
                pos += 1;
            }
            emit(out, &mut prev, pos);
            continue;
        }
        pos = p.whitespace_word(pos, true);
        emit(out, &mut prev, pos);
    }
}

#[cfg(test)]
mod tests {
    use super::PreSplit;

    fn split(kind: PreSplit, text: &str) -> Vec<&str> {
        kind.split(text)
    }

    #[test]
    fn gpt2_words() {
        assert_eq!(
            split(PreSplit::Gpt2, "Hello world's  end!!\n\n x"),
            ["Hello", " world", "'s", " ", " end", "!!", "\n\n", " x"]
        );
        assert_eq!(split(PreSplit::Gpt2, "a   "), ["a", "   "]);
        assert_eq!(split(PreSplit::Gpt2, " 123 $x"), [" 123", " $", "x"]);
    }

    #[test]
    fn smollm_isolates_digits() {
        assert_eq!(
            split(PreSplit::DigitsThenGpt2, "year 2024, a  1"),
            ["year", " ", "2", "0", "2", "4", ",", " a", "  ", "1"]
        );
    }

    #[test]
    fn qwen2_and_llama3_words() {
        assert_eq!(
            split(PreSplit::Qwen2, "I'M 42!\n\nok  \n x"),
            ["I", "'M", " ", "4", "2", "!\n\n", "ok", "  \n", " x"]
        );
        assert_eq!(split(PreSplit::Llama3, "12345 abc"), ["123", "45", " abc"]);
        assert_eq!(split(PreSplit::Qwen2, "a "), ["a", " "]);
        assert_eq!(split(PreSplit::Qwen2, "\"hi\""), ["\"hi", "\""]);
    }

    #[test]
    fn default_passes() {
        assert_eq!(
            split(PreSplit::Default, "x+=12345;"),
            ["x", "+=", "123", "45", ";"]
        );
    }

    #[test]
    fn words_cover_the_text() {
        let text = "Ünïcödé ½ ⅷ 中文 \t\r\n  😀 'll 'LL";
        for kind in [
            PreSplit::Gpt2,
            PreSplit::DigitsThenGpt2,
            PreSplit::Llama3,
            PreSplit::Qwen2,
            PreSplit::Default,
        ] {
            assert_eq!(split(kind, text).concat(), text, "{kind:?}");
        }
    }
}
