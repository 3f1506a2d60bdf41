//! Row-wise work split over the worker pool, for the encoder ops (a whole batch of
//! packed sequences at once: hundreds to thousands of rows).

use std::sync::Mutex;

use crate::pool::ThreadPool;

/// Rows per pool task below which splitting costs more than it saves.
const MIN_ROWS_PER_TASK: usize = 32;

/// Calls `f(first_row, block)` on blocks of whole rows of `data` (rows `row_len` long),
/// in parallel when there are enough rows. Never call it inside a pool task: the pool
/// runs one job at a time.
pub(crate) fn for_each_row_block<F>(pool: &ThreadPool, data: &mut [f32], row_len: usize, f: F)
where
    F: Fn(usize, &mut [f32]) + Sync,
{
    let rows = data.len() / row_len.max(1);
    let tasks = pool.n_threads().min(rows / MIN_ROWS_PER_TASK).max(1);
    if tasks == 1 {
        f(0, data);
        return;
    }
    let per_task = rows.div_ceil(tasks);
    // Each task owns one block; the mutexes are never contended, they only let a shared
    // closure hand out the disjoint `&mut` blocks.
    let blocks: Vec<Mutex<&mut [f32]>> = data
        .chunks_mut(per_task * row_len)
        .map(Mutex::new)
        .collect();
    pool.run(blocks.len(), |i| {
        let mut block = blocks[i].lock().unwrap_or_else(|e| e.into_inner());
        f(i * per_task, &mut block);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_is_visited_once_with_its_index() {
        let pool = ThreadPool::new(3);
        for rows in [0usize, 1, 31, 64, 100, 257] {
            let mut data = vec![0f32; rows * 4];
            for_each_row_block(&pool, &mut data, 4, |first, block| {
                for (i, row) in block.chunks_exact_mut(4).enumerate() {
                    for v in row.iter_mut() {
                        *v += (first + i) as f32;
                    }
                }
            });
            for (r, row) in data.chunks_exact(4).enumerate() {
                assert!(
                    row.iter().all(|&v| v == r as f32),
                    "rows {rows}, row {r}: {row:?}"
                );
            }
        }
    }
}
