//! Unicode character classes as llama.cpp's pre-tokenizer sees them.
//!
//! llama.cpp classifies code points with tables generated from Unicode 15.1, so code points
//! assigned later count as "undefined" there. The classes here come from `regex-syntax`'s
//! tables intersected with `Age <= 15.1` to reproduce that.

use std::sync::OnceLock;

use regex_syntax::hir::{Class, HirKind};

/// Per-code-point classification bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct CharFlags(u8);

impl CharFlags {
    const LETTER: u8 = 1;
    const NUMBER: u8 = 2;
    const PUNCTUATION: u8 = 4;
    const SYMBOL: u8 = 8;
    const MARK: u8 = 16;
    const WHITESPACE: u8 = 32;

    pub(crate) fn is_letter(self) -> bool {
        self.0 & Self::LETTER != 0
    }
    pub(crate) fn is_number(self) -> bool {
        self.0 & Self::NUMBER != 0
    }
    pub(crate) fn is_punctuation(self) -> bool {
        self.0 & Self::PUNCTUATION != 0
    }
    pub(crate) fn is_whitespace(self) -> bool {
        self.0 & Self::WHITESPACE != 0
    }
}

/// Sorted, disjoint `(first, last, flags)` ranges of the general categories we need.
struct Table {
    ascii: [CharFlags; 128],
    ranges: Vec<(u32, u32, CharFlags)>,
}

fn category_ranges(pattern: &str) -> Vec<(u32, u32)> {
    // The patterns are constants; a parse failure would only mean regex-syntax lost its
    // Unicode tables, which the unit tests below catch.
    let Ok(hir) = regex_syntax::parse(pattern) else {
        return Vec::new();
    };
    match hir.kind() {
        HirKind::Class(Class::Unicode(class)) => class
            .ranges()
            .iter()
            .map(|r| (u32::from(r.start()), u32::from(r.end())))
            .collect(),
        _ => Vec::new(),
    }
}

fn build_table() -> Table {
    let mut ranges = Vec::new();
    for (category, flag) in [
        ("L", CharFlags::LETTER),
        ("N", CharFlags::NUMBER),
        ("P", CharFlags::PUNCTUATION),
        ("S", CharFlags::SYMBOL),
        ("M", CharFlags::MARK),
    ] {
        let pattern = format!(r"[\p{{{category}}}&&\p{{Age=15.1}}]");
        ranges.extend(
            category_ranges(&pattern)
                .into_iter()
                .map(|(a, b)| (a, b, CharFlags(flag))),
        );
    }
    ranges.sort_unstable_by_key(|r| r.0);
    let mut ascii = [CharFlags::default(); 128];
    for (c, slot) in (0u8..128).zip(ascii.iter_mut()) {
        *slot = lookup(&ranges, u32::from(c));
    }
    Table { ascii, ranges }
}

fn lookup(ranges: &[(u32, u32, CharFlags)], cp: u32) -> CharFlags {
    let idx = ranges.partition_point(|r| r.0 <= cp);
    let mut flags = match idx.checked_sub(1).map(|i| ranges[i]) {
        Some((first, last, f)) if first <= cp && cp <= last => f,
        _ => CharFlags::default(),
    };
    // White_Space is stable across Unicode versions and matches llama.cpp's set exactly.
    if char::from_u32(cp).is_some_and(char::is_whitespace) {
        flags.0 |= CharFlags::WHITESPACE;
    }
    flags
}

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(build_table)
}

/// The classes of `c`.
pub(crate) fn classify(c: char) -> CharFlags {
    let t = table();
    match t.ascii.get(c as usize) {
        Some(f) => *f,
        None => lookup(&t.ranges, u32::from(c)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_follow_unicode_15_1() {
        assert!(classify('a').is_letter());
        assert!(classify('Ж').is_letter());
        assert!(classify('中').is_letter());
        assert!(classify('7').is_number());
        assert!(classify('²').is_number());
        assert!(classify('Ⅻ').is_number());
        assert!(classify('!').is_punctuation());
        assert!(!classify('$').is_punctuation());
        assert!(classify('$').0 & CharFlags::SYMBOL != 0);
        assert!(classify('\u{301}').0 & CharFlags::MARK != 0);
        assert!(classify(' ').is_whitespace());
        assert!(classify('\u{3000}').is_whitespace());
        assert!(!classify('\u{200B}').is_whitespace());
        // CJK extension I was added in 15.1, Cyrillic TJE (U+1C89) only in 16.0.
        assert!(classify('\u{2EBF0}').is_letter());
        assert_eq!(classify('\u{1C89}'), CharFlags::default());
    }
}
