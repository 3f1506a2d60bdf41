//! The prefix cache's disk tier without a model: blocks written through the KV manager
//! come back after a "restart" (a new manager and tier over the same directory) with
//! the same bytes, within the byte budget, and bad files are dropped, never imported.

use std::path::Path;
use std::time::{Duration, Instant};

use kiln_engine::kv::{DiskTier, DiskTierConfig, KvManager};
use kiln_engine::EngineStats;

const BLOCK: usize = 4;

fn tier(root: &Path, budget: u64, fp: u8) -> (DiskTier, EngineStats) {
    let stats = EngineStats::new(16);
    let cfg = DiskTierConfig {
        root: root.to_path_buf(),
        budget_bytes: budget,
        fingerprint: [fp; 32],
    };
    (DiskTier::open(&cfg, stats.clone()).expect("open"), stats)
}

/// A manager with 16 blocks of 4 tokens over a tier in `root`.
fn manager(root: &Path, budget: u64, fp: u8) -> (KvManager, EngineStats) {
    let (t, stats) = tier(root, budget, fp);
    let mut m = KvManager::new(16, BLOCK, true);
    m.set_disk_tier(t);
    (m, stats)
}

/// The bytes a block "holds" in these tests: derived from its id, so an import can be
/// checked against what was exported.
fn content(block: u32) -> Vec<u8> {
    (0..64)
        .map(|i| (block as u8).wrapping_mul(31) ^ i)
        .collect()
}

/// Computes `tokens` into a sequence and writes its full blocks to disk; returns the
/// exported contents by block position.
fn compute_and_write(m: &mut KvManager, tokens: &[u32]) -> Vec<Vec<u8>> {
    let mut seq = m.new_seq(64);
    assert!(m.allocate(&mut seq, tokens.len()));
    m.commit(&mut seq, tokens, tokens.len(), b"");
    let table = seq.block_table().to_vec();
    m.write_to_disk(|b, out| out.extend(content(b)));
    table.iter().map(|&b| content(b)).collect()
}

fn wait_for(stats: &EngineStats, bytes: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while stats.snapshot().kv_disk.written_bytes < bytes {
        assert!(Instant::now() < deadline, "writer stalled");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The block files of a tier directory.
fn blocks(dir: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .expect("tier")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "kvb"))
        .collect()
}

/// Each block file: its header (100 bytes) and 64 bytes of content.
const FILE: u64 = 164;

#[test]
fn blocks_written_before_a_restart_are_imported_after_it_bit_for_bit() {
    let dir = tempfile::tempdir().expect("dir");
    let tokens: Vec<u32> = (0..13).collect(); // three full blocks
    let want = {
        let (mut m, stats) = manager(dir.path(), 1 << 20, 1);
        let want = compute_and_write(&mut m, &tokens);
        wait_for(&stats, 3 * FILE);
        want
    };
    // Another process: nothing in RAM.
    let (mut m, stats) = manager(dir.path(), 1 << 20, 1);
    let mut seq = m.new_seq(64);
    let mut imported = Vec::new();
    let n = m.promote_from_disk(&mut seq, &tokens, b"", |b, bytes| {
        imported.push((b, bytes.to_vec()));
        true
    });
    assert_eq!(n, 3 * BLOCK);
    assert_eq!(
        imported.iter().map(|(_, b)| b.clone()).collect::<Vec<_>>(),
        want[..3]
    );
    // Admission finds them in RAM, in the blocks they were imported into.
    assert_eq!(m.attach_cached_prefix(&mut seq, &tokens, b""), 3 * BLOCK);
    let blocks: Vec<u32> = imported.iter().map(|(b, _)| *b).collect();
    assert_eq!(seq.block_table(), &blocks[..]);
    let s = stats.snapshot().kv_disk;
    assert_eq!((s.hit_tokens, s.miss_tokens), (12, 0));
    assert_eq!(s.read_bytes, 3 * 64);

    // A sequence is looked up once; another key (an adapter's) finds nothing.
    assert_eq!(m.promote_from_disk(&mut seq, &tokens, b"", |_, _| true), 0);
    let mut other = m.new_seq(64);
    assert_eq!(
        m.promote_from_disk(&mut other, &tokens, b"lora", |_, _| true),
        0
    );
}

#[test]
fn another_fingerprint_a_refused_import_and_a_corrupt_file_bring_nothing() {
    let dir = tempfile::tempdir().expect("dir");
    let tokens: Vec<u32> = (100..109).collect(); // two full blocks
    {
        let (mut m, stats) = manager(dir.path(), 1 << 20, 1);
        compute_and_write(&mut m, &tokens);
        wait_for(&stats, 2 * FILE);
    }
    let (mut other, _) = manager(dir.path(), 1 << 20, 2);
    let mut seq = other.new_seq(64);
    assert_eq!(
        other.promote_from_disk(&mut seq, &tokens, b"", |_, _| true),
        0
    );

    // An import the backend refuses stops there, and nothing is cached.
    let (mut m, _) = manager(dir.path(), 1 << 20, 1);
    let mut seq = m.new_seq(64);
    assert_eq!(m.promote_from_disk(&mut seq, &tokens, b"", |_, _| false), 0);
    assert_eq!(m.attach_cached_prefix(&mut seq, &tokens, b""), 0);
    drop((seq, m));

    // Corrupt every file's last byte: dropped, counted and deleted.
    let tier_dir = std::fs::read_dir(dir.path())
        .expect("root")
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("0101"))
        })
        .expect("the first tier");
    for f in blocks(&tier_dir) {
        let mut b = std::fs::read(&f).expect("read");
        let last = b.len() - 1;
        b[last] ^= 1;
        std::fs::write(&f, b).expect("write");
    }
    let (mut m, stats) = manager(dir.path(), 1 << 20, 1);
    let mut seq = m.new_seq(64);
    assert_eq!(m.promote_from_disk(&mut seq, &tokens, b"", |_, _| true), 0);
    assert_eq!(
        stats.snapshot().kv_disk.bad_blocks,
        1,
        "the chain stops at the first"
    );
    assert_eq!(blocks(&tier_dir).len(), 1);
}

#[test]
fn the_budget_keeps_the_most_recently_used_blocks() {
    let dir = tempfile::tempdir().expect("dir");
    let (mut m, stats) = manager(dir.path(), 3 * FILE, 1);
    let a: Vec<u32> = (0..9).collect();
    let b: Vec<u32> = (50..59).collect();
    compute_and_write(&mut m, &a);
    wait_for(&stats, 2 * FILE);
    compute_and_write(&mut m, &b);
    wait_for(&stats, 4 * FILE);
    assert_eq!(stats.snapshot().kv_disk.stored_bytes, 3 * FILE);
    drop(m);
    // After a restart: `b` whole, `a`'s first block evicted (so none of `a` is usable).
    let (mut m, _) = manager(dir.path(), 3 * FILE, 1);
    let mut sb = m.new_seq(64);
    assert_eq!(
        m.promote_from_disk(&mut sb, &b, b"", |_, _| true),
        2 * BLOCK
    );
    let mut sa = m.new_seq(64);
    assert_eq!(m.promote_from_disk(&mut sa, &a, b"", |_, _| true), 0);
    // Leftovers of a crash mid-write are removed at start.
    let tier_dir = std::fs::read_dir(dir.path())
        .expect("root")
        .flatten()
        .next()
        .expect("tier")
        .path();
    std::fs::write(tier_dir.join("0000.tmp"), b"torn").expect("tmp");
    drop(m);
    let _reopened = tier(dir.path(), 3 * FILE, 1);
    assert!(!tier_dir.join("0000.tmp").exists());
}

#[test]
fn promotion_never_evicts_the_prefix_already_in_ram() {
    let dir = tempfile::tempdir().expect("dir");
    let tokens: Vec<u32> = (0..17).collect(); // four full blocks
    {
        let (mut m, stats) = manager(dir.path(), 1 << 20, 1);
        compute_and_write(&mut m, &tokens);
        wait_for(&stats, 4 * FILE);
    }
    // 5 blocks: the first two of the prompt computed again (in RAM, and the least
    // recently used), three free for the disk's other two.
    let (t, _) = tier(dir.path(), 1 << 20, 1);
    let mut m = KvManager::new(5, BLOCK, true);
    m.set_disk_tier(t);
    let (mut first, mut filler) = (m.new_seq(64), m.new_seq(64));
    assert!(m.allocate(&mut first, 8) && m.allocate(&mut filler, 12));
    m.commit(&mut first, &tokens, 8, b"");
    drop(first);
    drop(filler); // released after: the prompt's blocks are next to be taken
    let mut seq = m.new_seq(64);
    assert_eq!(
        m.promote_from_disk(&mut seq, &tokens, b"", |_, _| true),
        2 * BLOCK
    );
    assert_eq!(
        m.attach_cached_prefix(&mut seq, &tokens, b""),
        4 * BLOCK,
        "the whole chain"
    );
}
