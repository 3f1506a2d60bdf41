//! The pack cache on a real model: the second load maps what the first one packed, and
//! both compute what a load without the cache does, bit for bit; a copy of the model
//! file with one tensor byte changed never reads the first file's packs.

mod common;

use kiln_model::{LoadOptions, Model, PackCache, Workspace};

fn load(path: &std::path::Path, cache: Option<&std::path::Path>) -> Model {
    let opts = LoadOptions {
        pack_cache: cache.map(PackCache::new),
        ..LoadOptions::detect()
    };
    Model::load(path, &opts).expect("model loads")
}

/// The pack files in `cache` (beside them, `digests/` remembers the model files' digests).
fn packs(cache: &std::path::Path) -> usize {
    std::fs::read_dir(cache)
        .expect("cache dir")
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "kpack"))
        .count()
}

fn logits(model: &Model) -> Vec<u32> {
    let mut kv = common::kv_for(model, 8);
    let mut ws = Workspace::new();
    let mut seq = common::Seq::new(0, 32);
    let tokens: Vec<u32> = (1..20).map(|t| t * 37).collect();
    let out = common::step(model, &mut kv, &mut ws, &mut [&mut seq], &[&tokens], false);
    out[0].iter().map(|x| x.to_bits()).collect()
}

#[test]
fn the_second_load_maps_the_first_ones_packs_and_computes_the_same() {
    // Qwen2.5-Coder-0.5B: q5_0, q8_0 and q6_K matrices, all packed.
    let path = kiln_testkit::gguf("qwen2.5-coder-0.5b-instruct");
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("packed");

    let plain = load(&path, None);
    assert!(plain.packed_bytes() > 0, "this CPU packs these weights");
    let want = logits(&plain);
    drop(plain);

    let first = load(&path, Some(&cache));
    assert!(!first.prepared_from_cache(), "nothing to map yet");
    assert_eq!(logits(&first), want, "serves while the cache is written");
    assert!(matches!(first.finish_pack_cache(), Some(Ok(()))));
    let files: Vec<_> = std::fs::read_dir(&cache).expect("cache dir").collect();
    assert_eq!(files.len(), 2, "one pack and the digests, no temporaries");
    assert_eq!(packs(&cache), 1);

    let second = load(&path, Some(&cache));
    assert!(second.prepared_from_cache(), "mapped, not repacked");
    assert_eq!(second.packed_bytes(), first.packed_bytes());
    assert_eq!(logits(&second), want);
    drop((first, second));

    // One byte of one packed tensor changed: another fingerprint, so a fresh pack.
    let copy = dir.path().join("changed.gguf");
    let mut bytes = std::fs::read(&path).expect("read model");
    let gguf = kiln_formats::GgufFile::open(&path).expect("gguf");
    let info = gguf.tensor_info("blk.3.ffn_up.weight").expect("tensor");
    bytes[info.offset as usize + 1000] ^= 0x01;
    std::fs::write(&copy, &bytes).expect("write copy");
    let changed = load(&copy, Some(&cache));
    assert!(
        !changed.prepared_from_cache(),
        "a changed tensor never reads old packs"
    );
    drop(changed); // waits for its writer
    assert_eq!(packs(&cache), 2);
    // The catalogue's file is long settled, so its digest is remembered; the copy was
    // written just now, so its is not (see `digest_memo.rs`).
    let memos = std::fs::read_dir(cache.join("digests"))
        .expect("digests")
        .count();
    assert_eq!(memos, 1);
}
