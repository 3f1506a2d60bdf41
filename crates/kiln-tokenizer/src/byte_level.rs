//! GPT-2's reversible mapping between bytes and printable characters.
//!
//! Byte-level BPE vocabularies store tokens with every byte replaced by a visible
//! character: printable Latin-1 bytes map to themselves, the remaining 68 bytes to
//! U+0100.. in byte order.

use std::sync::OnceLock;

struct Tables {
    to_char: [char; 256],
    /// Indexed by code point (all mapped characters are below U+0200).
    to_byte: [Option<u8>; 512],
}

fn is_self_mapped(b: u8) -> bool {
    matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF)
}

fn tables() -> &'static Tables {
    static TABLES: OnceLock<Tables> = OnceLock::new();
    TABLES.get_or_init(|| {
        let mut to_char = ['\0'; 256];
        let mut to_byte = [None; 512];
        let mut next_extra = 256u32;
        for b in 0..=255u8 {
            let cp = if is_self_mapped(b) {
                u32::from(b)
            } else {
                next_extra += 1;
                next_extra - 1
            };
            // Every value is below U+0200, hence a valid scalar value.
            let c = char::from_u32(cp).unwrap_or('\0');
            to_char[usize::from(b)] = c;
            to_byte[cp as usize] = Some(b);
        }
        Tables { to_char, to_byte }
    })
}

/// Replaces every byte of `text` with its byte-level character.
pub(crate) fn encode(text: &str) -> String {
    let t = tables();
    text.bytes().map(|b| t.to_char[usize::from(b)]).collect()
}

/// The bytes a byte-level token string stands for. Characters outside the mapping are
/// kept as llama.cpp renders them (`[UNK_BYTE_0x..<token>]`).
pub(crate) fn decode(token: &str) -> Vec<u8> {
    let t = tables();
    let mut out = Vec::with_capacity(token.len());
    for c in token.chars() {
        match t.to_byte.get(c as usize).copied().flatten() {
            Some(b) => out.push(b),
            None => {
                out.extend_from_slice(b"[UNK_BYTE_0x");
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(token.as_bytes());
                out.push(b']');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trips_every_byte() {
        let all: Vec<u8> = (0..=255).collect();
        let text = String::from_utf8_lossy(&all).into_owned();
        assert_eq!(super::decode(&super::encode(&text)), text.as_bytes());
        assert_eq!(super::encode(" \n"), "ĠĊ");
        assert_eq!(super::decode("Ġhello"), b" hello");
    }
}
