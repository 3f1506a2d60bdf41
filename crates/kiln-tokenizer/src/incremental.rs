//! Streaming detokenization: feed generated ids one at a time, get complete text back.

use std::ops::Deref;

use crate::detok::Utf8Stream;
use crate::tokenizer::{Backend, Tokenizer};

/// Turns a stream of token ids into text as soon as it is complete UTF-8.
///
/// A token may end in the middle of a multi-byte character (byte-level BPE and `<0xXX>`
/// byte tokens do this for emoji and CJK); those bytes are held until the character
/// completes, and bytes that cannot start or continue a character are replaced with
/// U+FFFD as soon as that is certain. The concatenation of everything returned by
/// [`push`](Self::push) and [`finish`](Self::finish) equals
/// `String::from_utf8_lossy` of all the tokens' bytes.
///
/// Like llama.cpp's detokenizer, a SentencePiece model with `add_space_prefix` drops the
/// leading space of the first token's text, unless that first token is a BOS that
/// `skip_special` removes. Unlike [`Tokenizer::decode`], no space clean-up is applied
/// (llama.cpp streams raw pieces too); none of the bundled models uses it.
///
/// `T` is how the decoder holds its tokenizer: `&Tokenizer`, or `Arc<Tokenizer>` for a
/// decoder that must own its share (a stream handed to another task).
#[derive(Debug)]
pub struct IncrementalDecoder<T: Deref<Target = Tokenizer>> {
    tokenizer: T,
    skip_special: bool,
    utf8: Utf8Stream,
    seen_first: bool,
    strip_next_space: bool,
    /// `tokenizer.json` models: ids so far and how much of their decoding was returned.
    ids: Vec<u32>,
    emitted: usize,
}

impl<T: Deref<Target = Tokenizer>> IncrementalDecoder<T> {
    /// A decoder for `tokenizer`; `skip_special` as in [`Tokenizer::decode`].
    pub fn new(tokenizer: T, skip_special: bool) -> Self {
        IncrementalDecoder {
            tokenizer,
            skip_special,
            utf8: Utf8Stream::default(),
            seen_first: false,
            strip_next_space: false,
            ids: Vec::new(),
            emitted: 0,
        }
    }

    /// Feeds one id; returns the text it completes (often empty, never partial UTF-8).
    pub fn push(&mut self, id: u32) -> String {
        match &self.tokenizer.backend {
            Backend::Gguf(g) => {
                let first = !self.seen_first;
                self.seen_first = true;
                if first {
                    let v = &g.vocab;
                    self.strip_next_space = v.add_space_prefix;
                    if self.skip_special && v.add_bos && Some(id) == v.special.bos {
                        self.strip_next_space = false;
                        return String::new();
                    }
                }
                let piece = g.piece(id, self.skip_special);
                let piece = match (self.strip_next_space, piece.strip_prefix(b" ")) {
                    (true, Some(rest)) => rest,
                    _ => piece,
                };
                // Only the first token's text is stripped, even when it renders empty.
                self.strip_next_space = false;
                self.utf8.push(piece)
            }
            Backend::Json(_) => {
                self.ids.push(id);
                let text = self.tokenizer.decode(&self.ids, self.skip_special);
                // Hold back a trailing replacement character: it may be half a character.
                if text.ends_with(char::REPLACEMENT_CHARACTER) {
                    return String::new();
                }
                self.take_new(&text)
            }
        }
    }

    /// Flushes held-back bytes at the end of the stream.
    pub fn finish(&mut self) -> String {
        match &self.tokenizer.backend {
            Backend::Gguf(_) => self.utf8.finish(),
            Backend::Json(_) => {
                let text = self.tokenizer.decode(&self.ids, self.skip_special);
                self.take_new(&text)
            }
        }
    }

    fn take_new(&mut self, text: &str) -> String {
        let new = text.get(self.emitted..).unwrap_or_default().to_string();
        self.emitted = text.len().max(self.emitted);
        new
    }
}
