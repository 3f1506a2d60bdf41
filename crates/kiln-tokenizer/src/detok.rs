//! Byte-level helpers for detokenization: llama.cpp's space clean-up and a streaming UTF-8
//! decoder.

/// llama.cpp's `clean_up_tokenization_spaces`, in place: removes the space before `?!.,`,
/// the spaces around a lone `'`, and the space before `'s`, `'m`, `'re` and `'ve`.
pub(crate) fn clean_spaces(text: &mut Vec<u8>) {
    if text.is_empty() {
        return;
    }
    // Each pass compacts in place: `total` is the write position, `i` the read position.
    let n = text.len();
    let mut total = 1;
    for i in 1..n {
        let x = text[i];
        if text[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            total -= 1;
        }
        text[total] = x;
        total += 1;
    }
    text.truncate(total);

    let n = text.len();
    let mut total = 1;
    let mut i = 1;
    while i < n {
        let x = text[i];
        if x == b'\'' && i + 1 < n && text[i - 1] == b' ' && text[i + 1] == b' ' {
            total -= 1;
            // The following space is dropped too.
            i += 1;
            text[i] = 0;
        }
        text[total] = x;
        total += 1;
        i += 1;
    }
    text.truncate(total);

    let n = text.len();
    let mut total = 1;
    for i in 1..n {
        let x = text[i];
        if text[i - 1] == b' ' && x == b'\'' && i + 1 < n {
            let x1 = text[i + 1];
            let x2 = text.get(i + 2).copied().filter(|_| i + 2 < n);
            let drop_space = match (x1, x2) {
                (b't' | b'd', _) => false,
                (b's' | b'm', _) => true,
                (b'r' | b'v', Some(b'e')) => true,
                _ => false,
            };
            if drop_space {
                total -= 1;
            }
        }
        text[total] = x;
        total += 1;
    }
    text.truncate(total);
}

/// Turns a byte stream into text, holding back an incomplete UTF-8 sequence at the end
/// until it completes. Invalid bytes become U+FFFD exactly as
/// [`String::from_utf8_lossy`] would replace them on the whole stream.
#[derive(Debug, Default)]
pub(crate) struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    /// Appends `bytes` and returns the text that is now complete.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    // `valid` is UTF-8 by the error's own account.
                    out.push_str(&String::from_utf8_lossy(valid));
                    match e.error_len() {
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[bad..];
                        }
                        // A sequence cut short by the end: wait for more bytes.
                        None => {
                            rest = after;
                            break;
                        }
                    }
                }
            }
        }
        let keep = rest.len();
        let drop = self.pending.len() - keep;
        self.pending.drain(..drop);
        out
    }

    /// Flushes what is held back (an incomplete sequence becomes one U+FFFD).
    pub(crate) fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cleaned(s: &str) -> String {
        let mut v = s.as_bytes().to_vec();
        clean_spaces(&mut v);
        String::from_utf8_lossy(&v).into_owned()
    }

    #[test]
    fn clean_spaces_matches_llama_cpp_rules() {
        assert_eq!(cleaned("Hello , world !"), "Hello, world!");
        assert_eq!(cleaned("it ' s"), "it's");
        assert_eq!(
            cleaned("it 's I 'm we 're they 've"),
            "it's I'm we're they've"
        );
        assert_eq!(cleaned("don 't you 'll"), "don 't you 'll");
        assert_eq!(cleaned(""), "");
    }

    #[test]
    fn utf8_stream_holds_partial_characters() {
        let mut s = Utf8Stream::default();
        let bytes = "é中😀".as_bytes();
        assert_eq!(s.push(&bytes[..1]), "");
        assert_eq!(s.push(&bytes[1..3]), "é");
        assert_eq!(s.push(&bytes[3..5]), "中");
        assert_eq!(s.push(&bytes[5..7]), "");
        assert_eq!(s.push(&bytes[7..]), "😀");
        assert_eq!(s.finish(), "");
    }

    #[test]
    fn utf8_stream_replaces_invalid_bytes() {
        let mut s = Utf8Stream::default();
        assert_eq!(s.push(b"a\xffb"), "a\u{FFFD}b");
        assert_eq!(s.push(b"\xe4\xb8"), "");
        assert_eq!(s.push(b"x"), "\u{FFFD}x");
        assert_eq!(s.push(b"\xf0\x9f"), "");
        assert_eq!(s.finish(), "\u{FFFD}");
    }
}
