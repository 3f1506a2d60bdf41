//! One KV block on disk: a header that says whose block it is and checks its bytes,
//! then the block as the backend exported it.
//!
//! Format (little endian): `KILNKVB\0`, format version (u32), the tier's fingerprint
//! (32 bytes), the block's prefix hash (16), payload length (u64), BLAKE3 of the payload
//! (32), the payload. A file whose header names another fingerprint or hash, or whose
//! payload does not hash to the header's, is never used.

use super::prefix_hash::BlockHash;

const MAGIC: &[u8; 8] = b"KILNKVB\0";
const VERSION: u32 = 1;
pub(super) const HEADER_LEN: usize = 8 + 4 + 32 + 16 + 8 + 32;

/// Why a block file was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BadBlock {
    #[error("shorter than its header")]
    Short,
    #[error("not a Kiln KV block file, or another format version")]
    Format,
    #[error("written for another model or KV layout")]
    Fingerprint,
    #[error("holds another block than its name says")]
    Hash,
    #[error("its length does not match its header (torn)")]
    Length,
    #[error("its checksum does not match (corrupt)")]
    Checksum,
}

/// The header for `payload`, to write before it.
pub(super) fn header(fingerprint: &[u8; 32], hash: &BlockHash, payload: &[u8]) -> Vec<u8> {
    let mut h = Vec::with_capacity(HEADER_LEN);
    h.extend_from_slice(MAGIC);
    h.extend_from_slice(&VERSION.to_le_bytes());
    h.extend_from_slice(fingerprint);
    h.extend_from_slice(hash);
    h.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    h.extend_from_slice(blake3::hash(payload).as_bytes());
    h
}

/// The payload of `file` (a whole file's bytes), if it is `hash`'s block for
/// `fingerprint` and checks out.
pub(super) fn payload<'a>(
    file: &'a [u8],
    fingerprint: &[u8; 32],
    hash: &BlockHash,
) -> Result<&'a [u8], BadBlock> {
    if file.len() < HEADER_LEN {
        return Err(BadBlock::Short);
    }
    let (head, body) = file.split_at(HEADER_LEN);
    if &head[..8] != MAGIC || head[8..12] != VERSION.to_le_bytes() {
        return Err(BadBlock::Format);
    }
    if &head[12..44] != fingerprint {
        return Err(BadBlock::Fingerprint);
    }
    if &head[44..60] != hash {
        return Err(BadBlock::Hash);
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(&head[60..68]);
    if u64::from_le_bytes(len) != body.len() as u64 {
        return Err(BadBlock::Length);
    }
    if head[68..100] != *blake3::hash(body).as_bytes() {
        return Err(BadBlock::Checksum);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_block_reads_back_and_any_change_is_refused() {
        let (fp, hash, body) = ([7u8; 32], [3u8; 16], vec![1u8, 2, 3, 4, 5]);
        let mut file = header(&fp, &hash, &body);
        file.extend_from_slice(&body);
        assert_eq!(payload(&file, &fp, &hash), Ok(&body[..]));
        assert_eq!(payload(&file, &[8; 32], &hash), Err(BadBlock::Fingerprint));
        assert_eq!(payload(&file, &fp, &[4; 16]), Err(BadBlock::Hash));
        assert_eq!(
            payload(&file[..file.len() - 1], &fp, &hash),
            Err(BadBlock::Length)
        );
        assert_eq!(payload(&file[..20], &fp, &hash), Err(BadBlock::Short));
        let mut flipped = file.clone();
        *flipped.last_mut().expect("bytes") ^= 1;
        assert_eq!(payload(&flipped, &fp, &hash), Err(BadBlock::Checksum));
        let mut other = file;
        other[8] = 9;
        assert_eq!(payload(&other, &fp, &hash), Err(BadBlock::Format));
    }
}
