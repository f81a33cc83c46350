//! The paged KV cache: the block manager (integers) and the per-layer stores it indexes (tensors).

pub mod block;
mod paged;

pub use block::{BlockId, BlockManager, NoSpace, PrefixStats, SeqId};
pub use cinder_backends::attention::KvType;
pub use paged::{KvBudget, PagedKvCache, SeqPagedCache};
