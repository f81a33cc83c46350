//! The continuous-batching scheduler: which tokens of which sequences go into the next forward.
//! Integers only (token ids, counts, block ids), so it is tested without a device. The model is
//! vLLM's v1 scheduler: no separate prefill and decode phases, just "each sequence has `computed` of
//! its `tokens` in the KV cache; bring it closer to all of them".
//!
//! Each step, within `max_batched_tokens` and `max_seqs`:
//! 1. running sequences first, oldest first: one token each when decoding, or the next chunk of a
//!    prompt (chunked prefill);
//! 2. then waiting sequences in arrival order (FCFS; the head of the queue blocks the rest, so a long
//!    prompt is not starved by short ones), each starting from its longest cached prefix.
//!
//! When the block pool runs dry the newest running sequence is preempted: its blocks are freed and it
//! goes back to the front of the queue, to be recomputed (its prompt and the tokens it already
//! generated) later. Nothing fails for lack of memory once a request is admitted.

use std::collections::{HashMap, VecDeque};

use crate::kv::{BlockId, BlockManager, PrefixStats, SeqId};

/// Limits of one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Most tokens in one forward (decode tokens + prefill chunks).
    pub max_batched_tokens: usize,
    /// Most sequences running at once.
    pub max_seqs: usize,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            max_batched_tokens: 512,
            max_seqs: 16,
        }
    }
}

/// One sequence's part of a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scheduled {
    /// the sequence
    pub id: SeqId,
    /// tokens already in the cache (the first new token's position)
    pub past: usize,
    /// the tokens to run now
    pub tokens: Vec<u32>,
    /// its block table, covering `past + tokens.len()` positions
    pub blocks: Vec<BlockId>,
    /// after this step every token is computed: sample its next token
    pub sample: bool,
    /// the last `drafts` of `tokens` are speculative (proposed, not yet verified): the forward
    /// gives logits for each, and [`Scheduler::update`] keeps only the accepted ones
    pub drafts: usize,
}

/// What [`Scheduler::schedule`] decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepPlan {
    /// sequences in the forward, in row order
    pub seqs: Vec<Scheduled>,
    /// KV blocks to copy before the forward (copy-on-write)
    pub copies: Vec<(BlockId, BlockId)>,
    /// sequences that left the waiting queue for the first time
    pub admitted: Vec<SeqId>,
    /// sequences preempted in this step (blocks freed; they will be recomputed)
    pub preempted: Vec<SeqId>,
}

impl StepPlan {
    /// Total tokens in the forward.
    pub fn tokens(&self) -> usize {
        self.seqs.iter().map(|s| s.tokens.len()).sum()
    }

    /// Nothing to run.
    pub fn is_empty(&self) -> bool {
        self.seqs.is_empty()
    }
}

#[derive(Debug, Clone)]
struct Seq {
    tokens: Vec<u32>,
    /// proposed continuation for the next decode step (speculative decoding)
    drafts: Vec<u32>,
    computed: usize,
    admitted: bool,
    cached_tokens: usize,
}

/// Queue, running set and block manager.
#[derive(Debug, Clone)]
pub struct Scheduler {
    cfg: SchedulerConfig,
    bm: BlockManager,
    seqs: HashMap<SeqId, Seq>,
    waiting: VecDeque<SeqId>,
    running: Vec<SeqId>,
    preemptions: u64,
}

impl Scheduler {
    /// A scheduler over `blocks` (see [`BlockManager::new`]).
    pub fn new(cfg: SchedulerConfig, blocks: BlockManager) -> Self {
        Self {
            cfg,
            bm: blocks,
            seqs: HashMap::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            preemptions: 0,
        }
    }

    /// The block manager (read-only: usage figures).
    pub fn blocks(&self) -> &BlockManager {
        &self.bm
    }

    /// Most tokens one sequence can ever hold.
    pub fn capacity_tokens(&self) -> usize {
        self.bm.num_blocks() * self.bm.block_size()
    }

    /// Queues a new sequence with its prompt. The caller has checked it fits the capacity.
    pub fn add(&mut self, id: SeqId, prompt: Vec<u32>) {
        self.seqs.insert(
            id,
            Seq {
                tokens: prompt,
                drafts: Vec::new(),
                computed: 0,
                admitted: false,
                cached_tokens: 0,
            },
        );
        self.waiting.push_back(id);
    }

    /// Proposes `drafts` to follow `id`'s tokens in its next decode step (used once; ignored while
    /// the sequence is still in prefill or waiting).
    pub fn set_drafts(&mut self, id: SeqId, drafts: Vec<u32>) {
        if let Some(s) = self.seqs.get_mut(&id) {
            s.drafts = drafts;
        }
    }

    /// The sequences running now, oldest first.
    pub fn running(&self) -> &[SeqId] {
        &self.running
    }

    /// `id`'s tokens (prompt and generated so far).
    pub fn tokens(&self, id: SeqId) -> &[u32] {
        self.seqs.get(&id).map_or(&[], |s| &s.tokens)
    }

    /// Sequences waiting (new or preempted).
    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Sequences running.
    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    /// Preemptions so far.
    pub fn preemptions(&self) -> u64 {
        self.preemptions
    }

    /// Prefix-cache counters.
    pub fn prefix_stats(&self) -> PrefixStats {
        self.bm.prefix_stats()
    }

    /// Prompt tokens of `id` that came from the prefix cache at its (last) admission.
    pub fn cached_tokens(&self, id: SeqId) -> usize {
        self.seqs.get(&id).map_or(0, |s| s.cached_tokens)
    }

    /// Every sequence the scheduler holds.
    pub fn ids(&self) -> Vec<SeqId> {
        self.running
            .iter()
            .chain(self.waiting.iter())
            .copied()
            .collect()
    }

    fn preempt(&mut self, id: SeqId, plan: &mut StepPlan) {
        self.bm.free(id);
        if let Some(s) = self.seqs.get_mut(&id) {
            s.computed = 0;
        }
        self.running.retain(|&r| r != id);
        self.waiting.push_front(id);
        self.preemptions += 1;
        plan.preempted.push(id);
    }

    /// Decides the next step.
    pub fn schedule(&mut self) -> StepPlan {
        let mut plan = StepPlan::default();
        let mut budget = self.cfg.max_batched_tokens;
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let id = self.running[i];
            let Some(s) = self.seqs.get(&id) else {
                self.running.remove(i);
                continue;
            };
            let n = (s.tokens.len() - s.computed).min(budget);
            if n == 0 {
                i += 1;
                continue;
            }
            // A decoding sequence may carry drafts: verify them in this forward if they fit.
            let mut drafts = if n == 1 {
                s.drafts.len().min(budget - 1)
            } else {
                0
            };
            if drafts > 0 {
                match self.bm.allocate(id, s.computed + 1 + drafts, &[]) {
                    Ok(c) => plan.copies.extend(c),
                    // No room for speculation: decode one token as usual.
                    Err(_) => drafts = 0,
                }
            }
            if drafts > 0 {
                self.push_spec(&mut plan, id, drafts);
                budget -= 1 + drafts;
                i += 1;
                continue;
            }
            let total = s.computed + n;
            let scheduled = loop {
                match self.bm.allocate(id, total, &[]) {
                    Ok(c) => {
                        plan.copies.extend(c);
                        break true;
                    }
                    Err(_) => {
                        // Free the newest running sequence (possibly this one) and retry.
                        let Some(&victim) = self.running.last() else {
                            break false;
                        };
                        self.preempt(victim, &mut plan);
                        if victim == id {
                            break false;
                        }
                    }
                }
            };
            if !scheduled {
                break;
            }
            self.push(&mut plan, id, n);
            budget -= n;
            i += 1;
        }
        // New work only when nothing had to be preempted (it would be evicted again at once).
        while plan.preempted.is_empty()
            && budget > 0
            && self.running.len() < self.cfg.max_seqs
            && let Some(&id) = self.waiting.front()
        {
            let Some(s) = self.seqs.get(&id) else {
                self.waiting.pop_front();
                continue;
            };
            let bs = self.bm.block_size();
            // Keep at least one token to compute: its logits give the next token.
            let hits = self.bm.lookup(&s.tokens, (s.tokens.len() - 1) / bs);
            let computed = hits.len() * bs;
            let n = (s.tokens.len() - computed).min(budget);
            match self.bm.allocate(id, computed + n, &hits) {
                Ok(c) => plan.copies.extend(c),
                Err(_) => break,
            }
            let len = s.tokens.len();
            self.bm.record_lookup(len, hits.len());
            self.waiting.pop_front();
            self.running.push(id);
            if let Some(s) = self.seqs.get_mut(&id) {
                s.computed = computed;
                s.cached_tokens = computed;
                if !s.admitted {
                    s.admitted = true;
                    plan.admitted.push(id);
                }
            }
            self.push(&mut plan, id, n);
            budget -= n;
        }
        plan
    }

    fn push(&self, plan: &mut StepPlan, id: SeqId, n: usize) {
        if let Some(s) = self.seqs.get(&id) {
            plan.seqs.push(Scheduled {
                id,
                past: s.computed,
                tokens: s.tokens[s.computed..s.computed + n].to_vec(),
                blocks: self.bm.table(id).to_vec(),
                sample: s.computed + n == s.tokens.len(),
                drafts: 0,
            });
        }
    }

    fn push_spec(&mut self, plan: &mut StepPlan, id: SeqId, drafts: usize) {
        if let Some(s) = self.seqs.get_mut(&id) {
            let mut tokens = vec![s.tokens[s.computed]];
            tokens.extend_from_slice(&s.drafts[..drafts]);
            s.drafts.clear();
            plan.seqs.push(Scheduled {
                id,
                past: s.computed,
                tokens,
                blocks: self.bm.table(id).to_vec(),
                sample: true,
                drafts,
            });
        }
    }

    /// Closes a step: the scheduled tokens are now computed, and `sampled` tokens (one per sequence
    /// that sampled) join their sequences. Full blocks enter the prefix cache.
    pub fn update(&mut self, plan: &StepPlan, sampled: &[(SeqId, u32)]) {
        let many: Vec<(SeqId, Vec<u32>)> = sampled.iter().map(|&(id, t)| (id, vec![t])).collect();
        self.update_many(plan, &many);
    }

    /// [`Scheduler::update`] for speculative steps: each sampling sequence appends its accepted
    /// drafts and then the token sampled after them (the first `len - 1` of its tokens are its
    /// accepted drafts, in order). Rejected drafts leave the cache: the sequence's computed count
    /// stops after the accepted ones and its blocks past its tokens are released.
    pub fn update_many(&mut self, plan: &StepPlan, sampled: &[(SeqId, Vec<u32>)]) {
        for s in &plan.seqs {
            let Some(q) = self.seqs.get_mut(&s.id) else {
                continue;
            };
            let new = sampled.iter().find(|(id, _)| *id == s.id).map(|(_, t)| t);
            let accepted = match new {
                Some(t) if s.drafts > 0 => t.len().saturating_sub(1).min(s.drafts),
                _ => 0,
            };
            if let Some(t) = new {
                q.tokens.extend_from_slice(t);
            }
            q.computed = (s.past + s.tokens.len() - s.drafts + accepted).min(q.tokens.len());
            self.bm.cache_full_blocks(s.id, &q.tokens, q.computed);
            if s.drafts > 0 {
                self.bm.truncate(s.id, q.tokens.len());
            }
        }
    }

    /// Removes a sequence (finished, cancelled, timed out) and frees its blocks.
    pub fn finish(&mut self, id: SeqId) {
        self.bm.free(id);
        self.seqs.remove(&id);
        self.running.retain(|&r| r != id);
        self.waiting.retain(|&r| r != id);
    }

    /// Whether `id` was ever admitted (left the waiting queue).
    pub fn was_admitted(&self, id: SeqId) -> bool {
        self.seqs.get(&id).is_some_and(|s| s.admitted)
    }
}

#[cfg(test)]
mod tests;
