//! A stable 64-bit hash for ring points, model keys and session keys.
//!
//! Placement must agree between router replicas and across restarts and Rust releases,
//! so neither `std`'s `DefaultHasher` (unspecified algorithm) nor a randomly keyed
//! hasher will do: this is FNV-1a, whose low bits are weak on short keys, followed by
//! the MurmurHash3 64-bit finalizer, which spreads every input bit over the output.

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// The hash of the concatenation of `parts`, each followed by a 0xff separator byte
/// (which never occurs in UTF-8), so `("ab", "c")` and `("a", "bc")` differ.
pub fn hash_parts(parts: &[&[u8]]) -> u64 {
    let mut h = FNV_OFFSET;
    for part in parts {
        for &b in part.iter().chain(std::iter::once(&0xff)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(FNV_PRIME);
        }
    }
    fmix64(h)
}

/// The hash of one string.
pub fn hash_str(s: &str) -> u64 {
    hash_parts(&[s.as_bytes()])
}

fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_pinned_so_placement_never_changes_silently() {
        // Router replicas of different versions must place models alike; a change here
        // moves every model and needs a release note. (Values checked against an
        // independent Python implementation of the same two steps.)
        assert_eq!(hash_str(""), 0x1bbd_5c81_3c69_a8d7);
        assert_eq!(hash_str("smollm2-135m-instruct"), 0xd8f8_7b61_03e5_2317);
    }

    #[test]
    fn separators_keep_parts_apart() {
        assert_ne!(hash_parts(&[b"ab", b"c"]), hash_parts(&[b"a", b"bc"]));
    }
}
