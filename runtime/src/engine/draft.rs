//! Draft-model speculation: a smaller model with the same tokenizer proposes the next k tokens of
//! every decoding sequence; the target model verifies them in its ordinary batched step
//! ([`super::spec::verify_drafts`]).
//!
//! The draft model keeps its own paged KV cache (same block size and token capacity as the
//! target's, sized by the draft's own width) with its own block tables. Per sequence it remembers
//! which tokens its cache holds; each step it rolls that back to the longest prefix the sequence
//! still agrees with (rejected drafts are dropped), feeds what is missing (the whole prompt the
//! first time, afterwards the accepted tokens), then extends greedily one token per forward.
//! Every forward is batched over all drafting sequences, like the target's.
//!
//! Drafts are the draft model's argmax, a point-mass proposal: the target's verification (exact
//! match for greedy, accept with probability p(d) else resample from p without d when sampling)
//! then keeps the target's distribution exactly, as with prompt lookup.

use std::collections::HashMap;

use cinder_backends::InferenceBackend;
use cinder_backends::attention::SeqSlice;

use crate::error::{Result, RuntimeError};
use crate::kv::{BlockManager, PagedKvCache, SeqId};
use crate::model::CausalLm;
use crate::sampler::argmax;

/// Checks that a draft model can propose tokens for a target: the same vocabulary (ids mean the
/// same text) and the same special tokens. `probe` is encoded by both as a last check.
pub fn check_draft_tokenizer(
    target: &crate::tokenizer::Tokenizer,
    draft: &crate::tokenizer::Tokenizer,
) -> Result<()> {
    let bad = |m: String| Err(RuntimeError::InvalidRequest(format!("draft model: {m}")));
    if target.bos_id != draft.bos_id || target.eot_ids != draft.eot_ids {
        return bad(format!(
            "special tokens differ (BOS {:?} vs {:?}, end-of-generation {:?} vs {:?})",
            target.bos_id, draft.bos_id, target.eot_ids, draft.eot_ids
        ));
    }
    let common = target.vocab_size.min(draft.vocab_size);
    if let Some(id) = (0..common as u32).find(|&i| target.token_text(i) != draft.token_text(i)) {
        return bad(format!(
            "token {id} is {:?} for the target but {:?} for the draft: the tokenizers differ",
            target.token_text(id),
            draft.token_text(id)
        ));
    }
    let probe = "Speculative drafts: ñ, 東京, 12345 fn main() { let x = vec![1, 2]; }\n";
    if target.encode(probe, true)? != draft.encode(probe, true)? {
        return bad("the tokenizers split the same text differently".into());
    }
    Ok(())
}

struct Drafting {
    /// Tokens whose K/V the draft cache holds for this sequence, in order.
    fed: Vec<u32>,
}

/// The draft model and its cache, owned by an engine core.
pub(super) struct DraftModel<'m, B: InferenceBackend> {
    model: &'m (dyn CausalLm<B> + Sync),
    cache: PagedKvCache<B>,
    bm: BlockManager,
    seqs: HashMap<SeqId, Drafting>,
    /// Most tokens fed in one forward (prompt catch-up is chunked by it).
    max_batched_tokens: usize,
    /// The target's vocabulary: drafts outside it are never proposed.
    target_vocab: usize,
}

/// One sequence's work this step.
struct Job {
    id: SeqId,
    /// tokens still to feed (catch-up, then the previous draft)
    feed: Vec<u32>,
    /// drafts proposed so far
    drafts: Vec<u32>,
    /// how many to propose
    want: usize,
}

impl<'m, B: InferenceBackend> DraftModel<'m, B> {
    /// A draft cache of `blocks` blocks of `block_size` tokens.
    pub(super) fn new(
        model: &'m (dyn CausalLm<B> + Sync),
        blocks: usize,
        block_size: usize,
        max_batched_tokens: usize,
        target_vocab: usize,
    ) -> Result<Self> {
        let (kvh, hd) = model.kv_dims();
        let mut cache = PagedKvCache::<B>::new(
            model.n_layers(),
            kvh,
            hd,
            blocks,
            block_size,
            &model.device(),
        )?;
        model.prepare_cache(&mut cache)?;
        tracing::info!(
            blocks,
            block_size,
            mib = cache.bytes() >> 20,
            "draft-model KV cache allocated"
        );
        Ok(Self {
            model,
            cache,
            bm: BlockManager::new(blocks, block_size, false),
            seqs: HashMap::new(),
            max_batched_tokens: max_batched_tokens.max(1),
            target_vocab,
        })
    }

    /// Drops a finished sequence's draft state and blocks.
    pub(super) fn forget(&mut self, id: SeqId) {
        self.seqs.remove(&id);
        self.bm.free(id);
    }

    /// Proposes up to `want` tokens for each `(sequence, its tokens so far, want)`. A sequence
    /// whose draft cache is out of room gets no drafts (it decodes normally) and loses its draft
    /// state, which is rebuilt later.
    pub(super) fn propose(
        &mut self,
        work: &[(SeqId, &[u32], usize)],
    ) -> Result<Vec<(SeqId, Vec<u32>)>> {
        let mut jobs = Vec::with_capacity(work.len());
        for &(id, tokens, want) in work {
            // The draft writes positions up to tokens + want - 1: stay inside its context.
            if want == 0 || tokens.is_empty() || tokens.len() + want > self.model.context_length() {
                continue;
            }
            let st = self.seqs.entry(id).or_insert(Drafting { fed: Vec::new() });
            // Keep the agreeing prefix, and always leave the last token to feed: its logits
            // give the first draft.
            let agree = st
                .fed
                .iter()
                .zip(tokens)
                .take_while(|(a, b)| a == b)
                .count()
                .min(tokens.len() - 1);
            st.fed.truncate(agree);
            self.bm.truncate(id, agree);
            jobs.push(Job {
                id,
                feed: tokens[agree..].to_vec(),
                drafts: Vec::new(),
                want,
            });
        }
        while jobs.iter().any(|j| !j.feed.is_empty()) {
            self.round(&mut jobs)?;
        }
        Ok(jobs
            .into_iter()
            .filter(|j| !j.drafts.is_empty())
            .map(|j| (j.id, j.drafts))
            .collect())
    }

    /// One batched forward: each job feeds its next chunk; a job whose feed runs out gets its next
    /// draft from the last row (and feeds that draft next round, until it has `want`).
    fn round(&mut self, jobs: &mut [Job]) -> Result<()> {
        let mut budget = self.max_batched_tokens;
        let mut seqs = Vec::new();
        let mut ids: Vec<i32> = Vec::new();
        let mut rows = Vec::new();
        let mut asked = Vec::new(); // job index per logits row
        for (ji, job) in jobs.iter_mut().enumerate() {
            if job.feed.is_empty() || budget == 0 {
                continue;
            }
            let n = job.feed.len().min(budget);
            let past = self.seqs.get(&job.id).map_or(0, |s| s.fed.len());
            match self.bm.allocate(job.id, past + n, &[]) {
                Ok(copies) => self.cache.copy_blocks(&copies),
                Err(e) => {
                    tracing::debug!(id = job.id, "draft cache full ({e:?}): no drafts this step");
                    self.forget(job.id);
                    job.feed.clear();
                    job.drafts.clear();
                    continue;
                }
            }
            budget -= n;
            let chunk: Vec<u32> = job.feed.drain(..n).collect();
            seqs.push(SeqSlice {
                q_start: ids.len(),
                q_len: n,
                past,
                blocks: self.bm.table(job.id).to_vec(),
            });
            ids.extend(chunk.iter().map(|&t| t as i32));
            if let Some(st) = self.seqs.get_mut(&job.id) {
                st.fed.extend_from_slice(&chunk);
            }
            if job.feed.is_empty() {
                rows.push(ids.len() - 1);
                asked.push(ji);
            }
        }
        if ids.is_empty() {
            return Ok(());
        }
        // Drafts are the draft model's argmax over the tokens the target knows: taken on the
        // device when the draft's vocabulary is no larger.
        let on_device = self.model.vocab_size() <= self.target_vocab;
        let Some(rows_out) =
            super::forward_ragged(self.model, &mut self.cache, seqs, ids, rows, on_device)?
        else {
            return Ok(());
        };
        let best: Vec<u32> = match rows_out {
            super::StepRows::Argmax(best) => best,
            super::StepRows::Logits(host, vocab) => {
                let usable = vocab.min(self.target_vocab);
                (0..asked.len())
                    .map(|r| argmax(&host[r * vocab..r * vocab + usable]))
                    .collect()
            }
        };
        for (&ji, &d) in asked.iter().zip(&best) {
            let job = &mut jobs[ji];
            job.drafts.push(d);
            if job.drafts.len() < job.want {
                job.feed.push(d);
            }
        }
        Ok(())
    }
}
