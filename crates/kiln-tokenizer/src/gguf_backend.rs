//! Encoding and decoding for GGUF vocabularies with llama.cpp's semantics.

use kiln_formats::GgufFile;

use crate::bpe::Bpe;
use crate::byte_level;
use crate::error::{Error, Result};
use crate::special_split::{Fragment, SpecialSplitter};
use crate::vocab::{TokenAttr, Vocab, VocabKind};
use crate::{bpe_build, detok};

/// SentencePiece's visible space.
const SPM_SPACE: &str = "\u{2581}";

#[derive(Debug)]
pub(crate) struct GgufBackend {
    pub(crate) vocab: Vocab,
    model: Bpe,
    splitter: SpecialSplitter,
    pub(crate) pieces: PieceTable,
}

/// Every token's bytes as llama.cpp renders it with specials shown, in one buffer.
#[derive(Debug, Default)]
pub(crate) struct PieceTable {
    bytes: Vec<u8>,
    /// `offsets[id]..offsets[id + 1]`; one more entry than tokens.
    offsets: Vec<usize>,
}

impl PieceTable {
    pub(crate) fn new(pieces: impl Iterator<Item = Vec<u8>>) -> Self {
        let mut table = PieceTable {
            bytes: Vec::new(),
            offsets: vec![0],
        };
        for piece in pieces {
            table.bytes.extend_from_slice(&piece);
            table.offsets.push(table.bytes.len());
        }
        table
    }

    pub(crate) fn get(&self, id: u32) -> &[u8] {
        let i = id as usize;
        match (self.offsets.get(i), self.offsets.get(i + 1)) {
            (Some(&a), Some(&b)) => &self.bytes[a..b],
            _ => &[],
        }
    }
}

/// `<0xXX>` -> the byte.
fn parse_byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// A token's text as llama.cpp's `token_to_piece(special = true)` renders it: special and
/// user-defined tokens verbatim, normal tokens decoded (byte-level or `▁` -> space), byte
/// tokens as their byte, anything else (unused, undefined) as nothing.
fn render_piece(vocab: &Vocab, id: u32) -> Vec<u8> {
    let text = &vocab.texts[id as usize];
    let attr = vocab.attr(id);
    if attr.has(TokenAttr::CONTROL | TokenAttr::UNKNOWN | TokenAttr::USER_DEFINED) {
        return text.as_bytes().to_vec();
    }
    if attr.has(TokenAttr::NORMAL) {
        return match vocab.kind {
            VocabKind::SentencePiece => text.replace(SPM_SPACE, " ").into_bytes(),
            VocabKind::BytePairs(_) => byte_level::decode(text),
        };
    }
    if attr.has(TokenAttr::BYTE) {
        return match parse_byte_token(text) {
            Some(b) => vec![b],
            None => text.as_bytes().to_vec(),
        };
    }
    Vec::new()
}

impl GgufBackend {
    pub(crate) fn new(gguf: &GgufFile) -> Result<Self> {
        let vocab = Vocab::from_gguf(gguf)?;
        let model = match vocab.kind {
            VocabKind::BytePairs(_) => bpe_build::gpt2_model(gguf, &vocab)?,
            VocabKind::SentencePiece => bpe_build::spm_model(&vocab),
        };
        let splitter = SpecialSplitter::new(&vocab);
        let pieces = PieceTable::new((0..vocab.len() as u32).map(|id| render_piece(&vocab, id)));
        Ok(GgufBackend {
            vocab,
            model,
            splitter,
            pieces,
        })
    }

    pub(crate) fn token_id(&self, text: &str) -> Option<u32> {
        self.vocab.id(text)
    }

    fn special(&self, id: Option<u32>, which: &'static str) -> Result<u32> {
        id.ok_or(Error::MissingSpecialToken { which })
    }

    pub(crate) fn encode(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>> {
        let v = &self.vocab;
        let fragments = self.splitter.split(v, text, parse_special);
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && v.add_bos {
            out.push(self.special(v.special.bos, "bos")?);
        }
        // SentencePiece prefixes a space to text at the start or right after a special token.
        let mut after_special = true;
        for fragment in fragments {
            match fragment {
                Fragment::Token(id) => {
                    out.push(id);
                    after_special = true;
                }
                Fragment::Text(t) => match v.kind {
                    VocabKind::SentencePiece => {
                        let prefix = if v.add_space_prefix && after_special {
                            " "
                        } else {
                            ""
                        };
                        let escaped = format!("{prefix}{t}").replace(' ', SPM_SPACE);
                        self.model.tokenize(v, &escaped, &mut out);
                        after_special = false;
                    }
                    VocabKind::BytePairs(pre) => {
                        for word in pre.split(t) {
                            self.model.tokenize(v, &byte_level::encode(word), &mut out);
                        }
                    }
                },
            }
        }
        if add_special && v.add_eos {
            out.push(self.special(v.special.eos, "eos")?);
        }
        Ok(out)
    }

    /// llama.cpp's `detokenize(remove_special = skip_special, unparse_special =
    /// !skip_special)`, as raw bytes.
    pub(crate) fn decode_bytes(&self, ids: &[u32], skip_special: bool) -> Vec<u8> {
        let v = &self.vocab;
        let mut ids = ids;
        let mut strip_space = v.add_space_prefix;
        if let (true, Some((&first, rest))) = (skip_special && v.add_bos, ids.split_first()) {
            if Some(first) == v.special.bos {
                strip_space = false;
                ids = rest;
            }
        }
        if let (true, Some((&last, rest))) = (skip_special && v.add_eos, ids.split_last()) {
            if Some(last) == v.special.eos {
                ids = rest;
            }
        }
        let mut out = Vec::new();
        for &id in ids {
            let piece = self.piece(id, skip_special);
            let piece = if strip_space {
                piece.strip_prefix(b" ").unwrap_or(piece)
            } else {
                piece
            };
            strip_space = false;
            out.extend_from_slice(piece);
        }
        if v.clean_spaces {
            detok::clean_spaces(&mut out);
        }
        out
    }

    /// One token's bytes; control and unknown tokens are empty when `skip_special`.
    pub(crate) fn piece(&self, id: u32, skip_special: bool) -> &[u8] {
        if skip_special
            && self
                .vocab
                .attr(id)
                .has(TokenAttr::CONTROL | TokenAttr::UNKNOWN)
        {
            return &[];
        }
        self.pieces.get(id)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn byte_tokens_parse() {
        assert_eq!(super::parse_byte_token("<0x0A>"), Some(10));
        assert_eq!(super::parse_byte_token("<0xff>"), Some(255));
        assert_eq!(super::parse_byte_token("<0x1>"), None);
        assert_eq!(super::parse_byte_token("hello"), None);
    }
}
