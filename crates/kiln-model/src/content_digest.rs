//! A digest of a model file's content: every byte of its metadata (tokenizer, chat
//! template, RoPE settings, architecture) and tensor data, never its path or mtime.
//! Caches of anything computed from the model (the KV disk tier) are keyed by it, so a
//! changed byte anywhere in the file is another key and stale data is never found.

use kiln_formats::GgufFile;

use crate::digest_memo::DigestMemo;

/// Bytes hashed per task: large enough that the per-chunk overhead vanishes, small
/// enough that two threads finish together.
const CHUNK: usize = 16 << 20;

/// BLAKE3 over the whole file, in chunks hashed on `threads` threads and then combined
/// with their lengths; the file is read once.
pub fn content_digest(file: &GgufFile, threads: usize) -> [u8; 32] {
    let started = std::time::Instant::now();
    let bytes: &[u8] = file.as_ref();
    let chunks: Vec<&[u8]> = bytes.chunks(CHUNK).collect();
    let mut hashes = vec![[0u8; 32]; chunks.len()];
    let per_thread = chunks.len().div_ceil(threads.max(1)).max(1);
    std::thread::scope(|scope| {
        for (cs, hs) in chunks.chunks(per_thread).zip(hashes.chunks_mut(per_thread)) {
            scope.spawn(move || {
                for (c, h) in cs.iter().zip(hs) {
                    *h = *blake3::hash(c).as_bytes();
                }
            });
        }
    });
    let mut all = blake3::Hasher::new();
    all.update(b"kiln-model-content-v1");
    all.update(&(bytes.len() as u64).to_le_bytes());
    for h in &hashes {
        all.update(h);
    }
    tracing::debug!(
        mib = bytes.len() >> 20,
        ms = started.elapsed().as_millis() as u64,
        "hashed the model file's content"
    );
    *all.finalize().as_bytes()
}

/// [`content_digest`], through `memo` where there is one (see [`DigestMemo`]).
pub(crate) fn remembered(file: &GgufFile, threads: usize, memo: Option<&DigestMemo>) -> [u8; 32] {
    match memo {
        Some(memo) => memo.get_or_compute(file.path(), || content_digest(file, threads)),
        None => content_digest(file, threads),
    }
}
