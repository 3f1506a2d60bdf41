//! KV-cache bookkeeping: which blocks each sequence holds, and the prefix cache. Holds no
//! tensors (the storage is the backend's), so it is tested without a model.

pub mod block_pool;
pub mod disk;
mod disk_file;
mod disk_index;
mod disk_others;
pub mod manager;
pub mod prefix_hash;

pub use disk::{DiskTier, DiskTierConfig};
pub use manager::{KvManager, PrefixCacheStats, SeqBlocks};
pub use prefix_hash::{hash_block, BlockHash, ROOT};
