//! The prefix-cache key of a full KV block, chained from its parent block.
//!
//! Specified so that it is stable across processes and versions (a router can compute
//! it too): `hash = SHA-256(parent || n_tokens || tokens || n_extra || extra)[..16]`,
//! where `parent` is the previous block's 16-byte hash or, for the first block, the
//! 16 bytes of `ROOT`; integers are little-endian u32; `extra` carries anything else that
//! changes the KV for the same tokens (an adapter id, a cache salt).

use sha2::{Digest, Sha256};

/// A 128-bit block hash: collisions are negligible at any realistic cache size.
pub type BlockHash = [u8; 16];

/// The parent of a sequence's first block.
pub const ROOT: BlockHash = *b"kiln-prefix-v1\0\0";

/// Hash of one full block of `tokens` following `parent`.
pub fn hash_block(parent: &BlockHash, tokens: &[u32], extra: &[u8]) -> BlockHash {
    let mut h = Sha256::new();
    h.update(parent);
    h.update((tokens.len() as u32).to_le_bytes());
    for t in tokens {
        h.update(t.to_le_bytes());
    }
    h.update((extra.len() as u32).to_le_bytes());
    h.update(extra);
    let digest = h.finalize();
    let mut out = [0u8; 16];
    out.copy_from_slice(&digest[..16]);
    out
}

/// Hashes of every full block of `tokens`, chained from [`ROOT`].
pub fn hash_blocks(tokens: &[u32], block_size: usize, extra: &[u8], out: &mut Vec<BlockHash>) {
    let mut parent = out.last().copied().unwrap_or(ROOT);
    for chunk in tokens.chunks_exact(block_size).skip(out.len()) {
        parent = hash_block(&parent, chunk, extra);
        out.push(parent);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chained_and_keyed() {
        let a = hash_block(&ROOT, &[1, 2, 3], b"");
        assert_eq!(a, hash_block(&ROOT, &[1, 2, 3], b""), "deterministic");
        assert_ne!(a, hash_block(&ROOT, &[1, 2, 4], b""));
        assert_ne!(a, hash_block(&ROOT, &[1, 2, 3], b"adapter-x"));
        let b = hash_block(&a, &[4, 5, 6], b"");
        assert_ne!(
            b,
            hash_block(&ROOT, &[4, 5, 6], b""),
            "depends on the parent"
        );
    }

    #[test]
    fn incremental_hashing_extends() {
        let toks: Vec<u32> = (0..50).collect();
        let mut all = Vec::new();
        hash_blocks(&toks, 16, b"", &mut all);
        assert_eq!(all.len(), 3);
        let mut inc = Vec::new();
        hash_blocks(&toks[..20], 16, b"", &mut inc);
        hash_blocks(&toks, 16, b"", &mut inc);
        assert_eq!(all, inc);
    }

    /// The specified algorithm, pinned (value computed independently with Python's
    /// hashlib): changing it silently would invalidate caches and routers.
    #[test]
    fn pinned_value() {
        let h = hash_block(&ROOT, &[1, 2, 3, 4], b"");
        let hex: String = h.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "a2e4ab5ecfdd0b5abc1794ff94f77b82");
    }
}
