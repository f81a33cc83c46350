//! The block manager: which KV blocks each sequence owns, which are free, which hold a reusable
//! prefix. Integers only — no tensors — so every rule here is unit- and property-tested without a
//! device (vLLM's `KVCacheManager` / `BlockPool` split is the model).
//!
//! - A block holds `block_size` consecutive token positions of one sequence. A sequence's *block
//!   table* maps position `p` to block `table[p / block_size]`.
//! - Every block is in exactly one state: **owned** (reference count > 0, in one or more tables) or
//!   **free** (count 0, in the free list). A free block may still be **cached**: it is full, its chain
//!   hash is registered, and a new request whose prompt starts with the same tokens takes it back
//!   instead of recomputing it. Allocation takes the least recently freed block first (LRU), evicting
//!   its cache entry.
//! - Full blocks are immutable, so sharing them needs no copy. A partly filled block shared by a
//!   [`BlockManager::fork`] is copied before the first write into it (copy-on-write): the allocation
//!   returns the `(src, dst)` pair for the KV store to copy.

use std::collections::{BTreeMap, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};

/// A sequence's id.
pub type SeqId = u64;
/// A block's index in the KV store.
pub type BlockId = u32;

#[derive(Debug, Clone, Default)]
struct Block {
    refs: u32,
    /// Chain hash and tokens, while the block is registered in the prefix cache.
    cached: Option<(u64, Box<[u32]>)>,
    /// Key in the free list while free.
    free_tick: Option<u64>,
}

#[derive(Debug, Clone, Default)]
struct Table {
    blocks: Vec<BlockId>,
    /// Token slots reserved (positions `0 .. slots` have a block).
    slots: usize,
    /// Leading blocks already registered in (or taken from) the prefix cache, and the chain hash of
    /// the last of them.
    hashed: usize,
    chain: u64,
}

/// Counters of the prefix cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrefixStats {
    /// Prompt tokens looked up.
    pub queried_tokens: u64,
    /// Of those, tokens found cached.
    pub hit_tokens: u64,
    /// Blocks looked up / found.
    pub queried_blocks: u64,
    /// Blocks found cached.
    pub hit_blocks: u64,
}

/// Why an allocation did not happen (state unchanged).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoSpace {
    /// blocks needed
    pub needed: usize,
    /// blocks free (including evictable cached ones)
    pub free: usize,
}

/// Owns the block pool, the block tables and the prefix cache.
#[derive(Debug, Clone)]
pub struct BlockManager {
    block_size: usize,
    blocks: Vec<Block>,
    /// Free blocks by the tick they were freed at: the first entry is evicted first.
    free: BTreeMap<u64, BlockId>,
    tick: u64,
    cache: HashMap<u64, BlockId>,
    tables: HashMap<SeqId, Table>,
    stats: PrefixStats,
    prefix_caching: bool,
}

/// The hash of a full block given the hash of the blocks before it.
fn chain_hash(parent: u64, tokens: &[u32]) -> u64 {
    // SipHash with fixed keys: stable within and across runs. A collision is harmless: a hit is only
    // taken after comparing the stored tokens.
    let mut h = DefaultHasher::new();
    parent.hash(&mut h);
    tokens.hash(&mut h);
    h.finish()
}

impl BlockManager {
    /// A pool of `num_blocks` blocks of `block_size` tokens.
    pub fn new(num_blocks: usize, block_size: usize, prefix_caching: bool) -> Self {
        let mut free = BTreeMap::new();
        let mut blocks = vec![Block::default(); num_blocks];
        for (i, b) in blocks.iter_mut().enumerate() {
            b.free_tick = Some(i as u64);
            free.insert(i as u64, i as BlockId);
        }
        Self {
            block_size,
            blocks,
            free,
            tick: num_blocks as u64,
            cache: HashMap::new(),
            tables: HashMap::new(),
            stats: PrefixStats::default(),
            prefix_caching,
        }
    }

    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Blocks in the pool.
    pub fn num_blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Blocks not owned by any sequence (cached ones included: they can be evicted).
    pub fn num_free(&self) -> usize {
        self.free.len()
    }

    /// Blocks owned by sequences.
    pub fn num_used(&self) -> usize {
        self.blocks.len() - self.free.len()
    }

    /// Blocks registered in the prefix cache (owned or free).
    pub fn num_cached(&self) -> usize {
        self.cache.len()
    }

    /// Prefix-cache counters.
    pub fn prefix_stats(&self) -> PrefixStats {
        self.stats
    }

    /// The block table of `seq` (empty if unknown).
    pub fn table(&self, seq: SeqId) -> &[BlockId] {
        self.tables.get(&seq).map_or(&[], |t| &t.blocks)
    }

    /// Token slots reserved for `seq`.
    pub fn slots(&self, seq: SeqId) -> usize {
        self.tables.get(&seq).map_or(0, |t| t.slots)
    }

    /// Whether `seq` has a table.
    pub fn has(&self, seq: SeqId) -> bool {
        self.tables.contains_key(&seq)
    }

    /// Blocks needed to hold `tokens` token slots.
    pub fn blocks_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.block_size)
    }

    /// For a sequence without a table: the cached blocks that hold a prefix of `tokens`, at most
    /// `max_blocks` of them (leave the last token uncomputed so a forward produces its logits). The
    /// blocks are not taken yet: pass them to [`BlockManager::allocate`].
    pub fn lookup(&mut self, tokens: &[u32], max_blocks: usize) -> Vec<BlockId> {
        let mut hits = Vec::new();
        if !self.prefix_caching {
            return hits;
        }
        let full = (tokens.len() / self.block_size).min(max_blocks);
        let mut parent = 0u64;
        for chunk in tokens.chunks_exact(self.block_size).take(full) {
            let h = chain_hash(parent, chunk);
            match self.cache.get(&h) {
                Some(&b)
                    if self.blocks[b as usize]
                        .cached
                        .as_ref()
                        .is_some_and(|(_, t)| **t == *chunk) =>
                {
                    hits.push(b);
                }
                _ => break,
            }
            parent = h;
        }
        hits
    }

    /// Counts one admitted lookup: `tokens` prompt tokens, `hits` blocks of them found cached.
    pub fn record_lookup(&mut self, tokens: usize, hits: usize) {
        self.stats.queried_tokens += tokens as u64;
        self.stats.queried_blocks += (tokens / self.block_size) as u64;
        self.stats.hit_tokens += (hits * self.block_size) as u64;
        self.stats.hit_blocks += hits as u64;
    }

    /// Makes `seq`'s table cover `total` token slots. A new sequence first takes `prefix` (from
    /// [`BlockManager::lookup`]; they count as computed). Returns the blocks to copy before writing
    /// (copy-on-write of a shared, partly filled last block). On [`NoSpace`] nothing changed.
    pub fn allocate(
        &mut self,
        seq: SeqId,
        total: usize,
        prefix: &[BlockId],
    ) -> Result<Vec<(BlockId, BlockId)>, NoSpace> {
        let table = self.tables.get(&seq).cloned().unwrap_or_default();
        let prefix = if table.blocks.is_empty() { prefix } else { &[] };
        let have = table.blocks.len().max(prefix.len());
        let new_blocks = self.blocks_for(total).saturating_sub(have);
        // A write into a shared, partly filled last block needs a private copy first.
        let cow = table.slots % self.block_size != 0
            && total > table.slots
            && table
                .blocks
                .last()
                .is_some_and(|&b| self.blocks[b as usize].refs > 1);
        // Prefix blocks that are free now stop being free when taken.
        let revived = prefix
            .iter()
            .filter(|&&b| self.blocks[b as usize].refs == 0)
            .count();
        let needed = new_blocks + usize::from(cow);
        if needed + revived > self.free.len() {
            return Err(NoSpace {
                needed: needed + revived,
                free: self.free.len(),
            });
        }
        let mut table = table;
        let mut copies = Vec::new();
        if table.blocks.is_empty() && !prefix.is_empty() {
            for &b in prefix {
                self.take(b);
            }
            table.blocks = prefix.to_vec();
            table.slots = prefix.len() * self.block_size;
            table.hashed = prefix.len();
            table.chain = prefix
                .last()
                .and_then(|&b| self.blocks[b as usize].cached.as_ref().map(|c| c.0))
                .unwrap_or(0);
        }
        if cow && let Some(last) = table.blocks.last_mut() {
            let fresh = self.pop_free();
            copies.push((*last, fresh));
            self.release(*last);
            *last = fresh;
        }
        for _ in 0..new_blocks {
            let b = self.pop_free();
            table.blocks.push(b);
        }
        table.slots = table.slots.max(total);
        self.tables.insert(seq, table);
        Ok(copies)
    }

    /// Registers the full blocks of `seq` whose tokens are all computed (`computed` of `tokens`) in
    /// the prefix cache.
    pub fn cache_full_blocks(&mut self, seq: SeqId, tokens: &[u32], computed: usize) {
        if !self.prefix_caching {
            return;
        }
        let Some(mut table) = self.tables.remove(&seq) else {
            return;
        };
        let full = (computed.min(tokens.len()) / self.block_size).min(table.blocks.len());
        while table.hashed < full {
            let i = table.hashed;
            let chunk = &tokens[i * self.block_size..(i + 1) * self.block_size];
            let h = chain_hash(table.chain, chunk);
            let b = table.blocks[i];
            // The first block registered under a hash keeps it; an identical later block (two
            // requests with the same prompt prefilled in one step) simply stays uncached.
            if !self.cache.contains_key(&h) && self.blocks[b as usize].cached.is_none() {
                self.cache.insert(h, b);
                self.blocks[b as usize].cached = Some((h, chunk.into()));
            }
            table.chain = h;
            table.hashed += 1;
        }
        self.tables.insert(seq, table);
    }

    /// Shares every block of `parent` with a new sequence `child` (e.g. several samples of one
    /// prompt). Later writes into a shared partial block copy it first.
    pub fn fork(&mut self, parent: SeqId, child: SeqId) -> bool {
        if self.tables.contains_key(&child) {
            return false;
        }
        let Some(t) = self.tables.get(&parent).cloned() else {
            return false;
        };
        for &b in &t.blocks {
            self.blocks[b as usize].refs += 1;
        }
        self.tables.insert(child, t);
        true
    }

    /// Releases every block of `seq`. Its full blocks stay cached until evicted; the tail blocks are
    /// freed first so they are evicted before the shared beginnings of prompts.
    pub fn free(&mut self, seq: SeqId) {
        if let Some(t) = self.tables.remove(&seq) {
            for &b in t.blocks.iter().rev() {
                self.release(b);
            }
        }
    }

    /// Shrinks `seq`'s reservation to `slots` token slots, releasing the blocks wholly past them:
    /// the roll-back of rejected speculative tokens. Blocks registered in the prefix cache are never
    /// released here (they lie before the computed tokens).
    pub fn truncate(&mut self, seq: SeqId, slots: usize) {
        let bs = self.block_size;
        let Some(t) = self.tables.get_mut(&seq) else {
            return;
        };
        if slots >= t.slots {
            return;
        }
        let slots = slots.max(t.hashed * bs);
        let keep = slots.div_ceil(bs);
        let dropped: Vec<BlockId> = t.blocks.drain(keep.min(t.blocks.len())..).collect();
        t.slots = slots;
        for b in dropped.into_iter().rev() {
            self.release(b);
        }
    }

    fn release(&mut self, b: BlockId) {
        let blk = &mut self.blocks[b as usize];
        debug_assert!(blk.refs > 0, "double free of block {b}");
        blk.refs = blk.refs.saturating_sub(1);
        if blk.refs == 0 {
            blk.free_tick = Some(self.tick);
            self.free.insert(self.tick, b);
            self.tick += 1;
        }
    }

    /// Takes a (possibly free) cached block for a sequence.
    fn take(&mut self, b: BlockId) {
        let blk = &mut self.blocks[b as usize];
        if let Some(t) = blk.free_tick.take() {
            self.free.remove(&t);
        }
        blk.refs += 1;
    }

    /// A fresh block: the least recently freed one, its cache entry evicted.
    fn pop_free(&mut self) -> BlockId {
        // Callers checked `free.len()` first.
        let (_, b) = self.free.pop_first().unwrap_or((0, 0));
        let blk = &mut self.blocks[b as usize];
        blk.free_tick = None;
        blk.refs = 1;
        if let Some((h, _)) = blk.cached.take() {
            self.cache.remove(&h);
        }
        b
    }

    /// Checks every invariant; returns the first violation. For tests.
    pub fn check(&self) -> Result<(), String> {
        let mut refs = vec![0u32; self.blocks.len()];
        for (seq, t) in &self.tables {
            if t.blocks.len() != self.blocks_for(t.slots) {
                return Err(format!(
                    "seq {seq}: {} blocks for {} slots",
                    t.blocks.len(),
                    t.slots
                ));
            }
            for &b in &t.blocks {
                refs[b as usize] += 1;
            }
        }
        for (i, blk) in self.blocks.iter().enumerate() {
            if blk.refs != refs[i] {
                return Err(format!(
                    "block {i}: refs {} but in {} tables",
                    blk.refs, refs[i]
                ));
            }
            let in_free = blk
                .free_tick
                .is_some_and(|t| self.free.get(&t) == Some(&(i as BlockId)));
            if (blk.refs == 0) != in_free {
                return Err(format!(
                    "block {i}: refs {} but free-listed {in_free}",
                    blk.refs
                ));
            }
            if let Some((h, _)) = &blk.cached
                && self.cache.get(h) != Some(&(i as BlockId))
            {
                return Err(format!(
                    "block {i}: cached under {h:x} but the map disagrees"
                ));
            }
        }
        if self.free.len() != self.blocks.iter().filter(|b| b.refs == 0).count() {
            return Err("free list has stale entries".into());
        }
        for (h, &b) in &self.cache {
            if self.blocks[b as usize].cached.as_ref().map(|c| c.0) != Some(*h) {
                return Err(format!("cache entry {h:x} -> {b} is stale"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng, rngs::StdRng};

    #[test]
    fn allocate_free_and_reuse_a_prefix() {
        let mut m = BlockManager::new(8, 4, true);
        let prompt: Vec<u32> = (0..10).collect();
        assert!(m.lookup(&prompt, 2).is_empty());
        assert_eq!(m.allocate(1, 10, &[]), Ok(vec![]));
        assert_eq!(m.table(1).len(), 3);
        m.cache_full_blocks(1, &prompt, 10);
        assert_eq!(m.num_cached(), 2);
        m.free(1);
        assert_eq!(m.num_free(), 8);
        // Same first 8 tokens: both full blocks come back.
        let hits = m.lookup(&prompt, (prompt.len() - 1) / 4);
        assert_eq!(hits.len(), 2);
        assert_eq!(m.allocate(2, 10, &hits), Ok(vec![]));
        assert_eq!(&m.table(2)[..2], &hits[..]);
        m.record_lookup(prompt.len(), hits.len());
        assert_eq!(m.prefix_stats().hit_tokens, 8);
        // A different second block stops the chain after the first.
        let mut other = prompt.clone();
        other[5] = 99;
        assert_eq!(m.lookup(&other, 2).len(), 1);
        m.check().unwrap();
    }

    #[test]
    fn no_space_changes_nothing() {
        let mut m = BlockManager::new(2, 4, true);
        assert!(m.allocate(1, 8, &[]).is_ok());
        let before = format!("{:?}", m.tables);
        assert_eq!(m.allocate(2, 1, &[]), Err(NoSpace { needed: 1, free: 0 }));
        assert_eq!(format!("{:?}", m.tables), before);
        m.check().unwrap();
    }

    #[test]
    fn fork_copies_a_shared_partial_block_on_write() {
        let mut m = BlockManager::new(6, 4, false);
        m.allocate(1, 6, &[]).unwrap();
        assert!(m.fork(1, 2));
        let shared_last = m.table(1)[1];
        // Seq 2 appends into the shared half-full block: it gets its own copy.
        let copies = m.allocate(2, 7, &[]).unwrap();
        assert_eq!(copies.len(), 1);
        assert_eq!(copies[0].0, shared_last);
        assert_ne!(m.table(2)[1], shared_last);
        assert_eq!(m.table(2)[0], m.table(1)[0]);
        // Seq 1 is now the only owner of its block: no copy.
        assert_eq!(m.allocate(1, 8, &[]).unwrap(), vec![]);
        m.check().unwrap();
        m.free(1);
        m.free(2);
        assert_eq!(m.num_free(), 6);
        m.check().unwrap();
    }

    #[test]
    fn lru_evicts_the_oldest_free_cached_block() {
        let mut m = BlockManager::new(2, 2, true);
        let a = [1u32, 2];
        let b = [3u32, 4];
        m.allocate(1, 2, &[]).unwrap();
        m.cache_full_blocks(1, &a, 2);
        m.free(1);
        m.allocate(2, 2, &[]).unwrap();
        m.cache_full_blocks(2, &b, 2);
        m.free(2);
        // Both cached and free; a fresh allocation evicts `a` (freed first).
        m.allocate(3, 2, &[]).unwrap();
        assert_eq!(m.lookup(&[1, 2, 0], 1).len(), 0);
        assert_eq!(m.lookup(&[3, 4, 0], 1).len(), 1);
        m.check().unwrap();
    }

    /// Random interleavings of allocate / append / cache / fork / free never leak, double free, or
    /// break a reference count; every block is free or owned, and cached entries are consistent.
    #[test]
    fn property_random_interleavings_keep_every_invariant() {
        use std::collections::BTreeMap;
        for seed in 0..200u64 {
            let mut rng = StdRng::seed_from_u64(seed);
            let bs = rng.random_range(1..6usize);
            let n = rng.random_range(1..24usize);
            let mut m = BlockManager::new(n, bs, rng.random_bool(0.8));
            // Each live sequence and its tokens (three prompt families, so the cache gets hits).
            let mut live: BTreeMap<SeqId, Vec<u32>> = BTreeMap::new();
            let mut next: SeqId = 0;
            for step in 0..400 {
                let pick = |rng: &mut StdRng, live: &BTreeMap<SeqId, Vec<u32>>| {
                    let keys: Vec<SeqId> = live.keys().copied().collect();
                    (!keys.is_empty()).then(|| keys[rng.random_range(0..keys.len())])
                };
                match rng.random_range(0..11) {
                    0..=2 => {
                        let len = rng.random_range(1..4 * bs + 2);
                        let family = rng.random_range(0..3u32);
                        let toks: Vec<u32> = (0..len as u32)
                            .map(|i| {
                                if i < 2 * bs as u32 {
                                    family * 100 + i
                                } else {
                                    rng.random_range(0..50)
                                }
                            })
                            .collect();
                        let hits = m.lookup(&toks, (toks.len() - 1) / bs);
                        if let Ok(c) = m.allocate(next, toks.len(), &hits) {
                            assert!(c.is_empty());
                            m.cache_full_blocks(next, &toks, toks.len());
                            live.insert(next, toks);
                        } else {
                            assert!(!m.has(next), "failed allocation left a table");
                        }
                        next += 1;
                    }
                    3..=5 => {
                        if let Some(s) = pick(&mut rng, &live) {
                            let add = rng.random_range(1..bs + 2);
                            let total = live[&s].len() + add;
                            if m.allocate(s, total, &[]).is_ok() {
                                let toks = live.get_mut(&s).expect("live");
                                toks.extend((0..add).map(|_| rng.random_range(0..50)));
                                m.cache_full_blocks(s, toks, total);
                            }
                        }
                    }
                    6 => {
                        if let Some(s) = pick(&mut rng, &live) {
                            if m.fork(s, next) {
                                let t = live[&s].clone();
                                live.insert(next, t);
                            }
                            next += 1;
                        }
                    }
                    10 => {
                        // A speculative step: room for k drafts, some accepted, the rest rolled
                        // back.
                        if let Some(s) = pick(&mut rng, &live) {
                            let len = live[&s].len();
                            let k = rng.random_range(1..2 * bs + 2);
                            if m.allocate(s, len + k, &[]).is_ok() {
                                let kept = rng.random_range(1..=k);
                                let toks = live.get_mut(&s).expect("live");
                                toks.extend((0..kept).map(|_| rng.random_range(0..50)));
                                m.cache_full_blocks(s, toks, len + kept - 1);
                                m.truncate(s, len + kept);
                                assert!(m.slots(s) >= len + kept, "truncated below the tokens");
                                assert_eq!(m.table(s).len(), m.blocks_for(m.slots(s)));
                            }
                        }
                    }
                    _ => {
                        if let Some(s) = pick(&mut rng, &live) {
                            m.free(s);
                            live.remove(&s);
                        }
                    }
                }
                if let Err(e) = m.check() {
                    panic!("seed {seed} step {step}: {e}");
                }
                for (s, t) in &live {
                    assert_eq!(m.slots(*s), t.len(), "seed {seed} step {step} seq {s}");
                }
            }
            for s in live.keys().copied().collect::<Vec<_>>() {
                m.free(s);
            }
            m.check().unwrap();
            assert_eq!(m.num_free(), n, "seed {seed}: leaked blocks");
        }
    }
}
