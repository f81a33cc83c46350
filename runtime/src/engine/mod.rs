//! The engine: continuous batching over a paged KV cache.
//!
//! [`EngineCore`] owns the cache, the [`Scheduler`] and the per-request state and runs one step at a
//! time: schedule → one forward over every scheduled token of every sequence (a ragged batch) →
//! sample each sequence that finished its tokens → stream its text. [`Engine`] runs a core on a
//! dedicated thread; [`EngineHandle::submit`] queues a request (refused at once with
//! [`RuntimeError::QueueFull`] when the waiting queue is full) and returns an [`EventStream`].
//! Dropping the stream cancels the request: its blocks are freed at the start of the next step.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use burn::tensor::{Int, Tensor, TensorData};
use cinder_backends::InferenceBackend;
use cinder_backends::attention::{PagedBatch, SeqSlice};
use serde::Serialize;
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

use crate::constraint::{GrammarCost, TokenMatcher};
use crate::error::{Result, RuntimeError};
use crate::kv::{BlockManager, KvBudget, PagedKvCache, SeqId};
use crate::model::{CausalLm, Logits, logits_to_vec};
use crate::sampler::Sampler;
use crate::scheduler::{Scheduler, SchedulerConfig, StepPlan};
use crate::tokenizer::{Detokenizer, Tokenizer};

mod draft;
mod finish;
mod pick;
mod request;
pub mod spec;
mod thread;
pub use draft::check_draft_tokenizer;
pub use finish::FinishReason;
use finish::StopMatcher;
pub use pick::{MAX_TOP_LOGPROBS, TokenLogprob};
use request::validate_request;
pub use request::{Event, EventStream, Request, Usage};
pub use spec::SpeculativeConfig;
pub use thread::{Engine, EngineHandle};

/// Engine settings.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Step limits (tokens per forward, running sequences).
    pub scheduler: SchedulerConfig,
    /// Tokens per KV block.
    pub block_size: usize,
    /// KV memory; `None` derives it from the model and the free memory ([`default_kv_budget`]).
    pub kv_budget: Option<KvBudget>,
    /// Requests that may wait for admission; one more is refused with `QueueFull`.
    pub max_waiting: usize,
    /// Deadline for requests that set none.
    pub default_timeout: Option<Duration>,
    /// Reuse cached KV blocks of identical prompt prefixes.
    pub prefix_caching: bool,
    /// Speculative decoding by prompt lookup (`None`: off).
    pub speculative: Option<SpeculativeConfig>,
    /// How the KV cache stores its rows: f16, or Q8_0 / Q4_0 blocks on the CPU backends.
    pub kv_type: crate::kv::KvType,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            scheduler: SchedulerConfig::default(),
            block_size: 16,
            kv_budget: None,
            max_waiting: 64,
            default_timeout: Some(Duration::from_secs(600)),
            prefix_caching: true,
            speculative: None,
            kv_type: crate::kv::KvType::F16,
        }
    }
}

/// The default KV budget: room for `max_seqs` contexts of up to 4096 tokens, but at most an eighth
/// of the memory available now and at most 512 MiB; at least 1024 tokens.
pub fn default_kv_budget(
    bytes_per_token: u64,
    context: usize,
    max_seqs: usize,
    available: Option<u64>,
) -> KvBudget {
    let want = bytes_per_token * (context.min(4096) * max_seqs) as u64;
    let cap = available.map_or(512 << 20, |a| (a / 8).min(512 << 20));
    KvBudget::Bytes(want.min(cap).max(bytes_per_token * 1024))
}

/// What the engine is doing (cheap to read; updated every step).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EngineStats {
    /// requests waiting for admission (new and preempted)
    pub waiting: usize,
    /// sequences running
    pub running: usize,
    /// KV blocks in the pool
    pub kv_blocks_total: usize,
    /// KV blocks owned by sequences
    pub kv_blocks_used: usize,
    /// KV blocks holding a cached prefix (owned or free)
    pub kv_blocks_cached: usize,
    /// tokens per block
    pub block_size: usize,
    /// bytes the KV store holds
    pub kv_bytes: usize,
    /// prompt tokens looked up in the prefix cache
    pub prefix_queried_tokens: u64,
    /// of those, found cached
    pub prefix_hit_tokens: u64,
    /// full prompt blocks looked up in the prefix cache
    pub prefix_queried_blocks: u64,
    /// of those, found cached
    pub prefix_hit_blocks: u64,
    /// preemptions so far
    pub preemptions: u64,
    /// forwards run
    pub steps: u64,
    /// prompt tokens computed (cached ones excluded, recomputation included)
    pub prompt_tokens_computed: u64,
    /// tokens generated
    pub generated_tokens: u64,
    /// requests finished, by any reason
    pub finished: u64,
    /// speculative tokens proposed and verified
    pub spec_draft_tokens: u64,
    /// of those, accepted
    pub spec_accepted_tokens: u64,
    /// grammar work of the constrained requests finished so far
    pub grammar: GrammarCost,
}

struct Live {
    tx: UnboundedSender<Event>,
    sampler: Sampler,
    detok: Detokenizer,
    stops: StopMatcher,
    history: Vec<u32>,
    generated: usize,
    max_tokens: usize,
    stop_on_eos: bool,
    deadline: Option<Instant>,
    prompt_len: usize,
    admitted: bool,
    /// the grammar a constrained request follows
    matcher: Option<TokenMatcher>,
    /// alternatives per token when log-probabilities were asked for
    logprobs: Option<usize>,
    /// log-probabilities of the tokens the last forward picked, in order, for `emit`
    pending_lp: std::collections::VecDeque<TokenLogprob>,
}

impl Live {
    /// Whether this sequence's pick is the plain argmax of its logits (taken on the device).
    fn argmax_ok(&self) -> bool {
        self.sampler.is_plain_greedy() && self.matcher.is_none() && self.logprobs.is_none()
    }
}

/// Hooks the threaded engine gives a core: counts of not-yet-admitted requests.
#[derive(Debug, Default)]
struct Counters {
    waiting: AtomicUsize,
}

/// One engine's state, stepped by its owner (a thread, or a caller that wants one request
/// synchronously, like [`crate::generate::generate`]).
pub struct EngineCore<'m, B: InferenceBackend, M: CausalLm<B> + ?Sized> {
    model: &'m M,
    tok: &'m Tokenizer,
    cache: PagedKvCache<B>,
    sched: Scheduler,
    live: HashMap<SeqId, Live>,
    cfg: EngineConfig,
    counters: Arc<Counters>,
    stats: EngineStats,
    next_id: SeqId,
    /// The draft model when speculation drafts with one (else prompt lookup, if speculating).
    draft: Option<draft::DraftModel<'m, B>>,
}

impl<'m, B: InferenceBackend, M: CausalLm<B> + ?Sized> EngineCore<'m, B, M> {
    /// Allocates the KV cache for `model` and an empty scheduler.
    pub fn new(model: &'m M, tok: &'m Tokenizer, cfg: EngineConfig) -> Result<Self> {
        Self::with_counters(model, tok, cfg, Arc::default(), None)
    }

    /// As [`EngineCore::new`], with `draft` proposing the speculative tokens (draft-model
    /// speculation; `cfg.speculative` gives their number). The caller has checked the tokenizers
    /// ([`check_draft_tokenizer`]).
    pub fn with_draft(
        model: &'m M,
        draft: &'m (dyn CausalLm<B> + Sync),
        tok: &'m Tokenizer,
        cfg: EngineConfig,
    ) -> Result<Self> {
        Self::with_counters(model, tok, cfg, Arc::default(), Some(draft))
    }

    fn with_counters(
        model: &'m M,
        tok: &'m Tokenizer,
        cfg: EngineConfig,
        counters: Arc<Counters>,
        draft_model: Option<&'m (dyn CausalLm<B> + Sync)>,
    ) -> Result<Self> {
        let blocks = kv_blocks(model, &cfg)?;
        let (kvh, hd) = model.kv_dims();
        let layers = model.n_layers();
        let mut cache = PagedKvCache::<B>::with_type(
            layers,
            kvh,
            hd,
            blocks,
            cfg.block_size,
            cfg.kv_type,
            &model.device(),
        )?;
        model.prepare_cache(&mut cache)?;
        tracing::info!(
            blocks,
            block_size = cfg.block_size,
            tokens = blocks * cfg.block_size,
            mib = cache.bytes() >> 20,
            kv_type = %cfg.kv_type,
            "KV cache allocated"
        );
        let draft = match (draft_model, cfg.speculative) {
            (Some(d), Some(_)) => Some(draft::DraftModel::new(
                d,
                blocks,
                cfg.block_size,
                cfg.scheduler.max_batched_tokens,
                model.vocab_size(),
            )?),
            (Some(_), None) => {
                return Err(RuntimeError::InvalidRequest(
                    "a draft model was given but speculative decoding is off".into(),
                ));
            }
            (None, _) => None,
        };
        let sched = Scheduler::new(
            cfg.scheduler,
            BlockManager::new(blocks, cfg.block_size, cfg.prefix_caching),
        );
        let mut core = Self {
            model,
            tok,
            cache,
            sched,
            live: HashMap::new(),
            cfg,
            counters,
            stats: EngineStats::default(),
            next_id: 0,
            draft,
        };
        core.refresh_stats();
        Ok(core)
    }

    /// Most tokens (prompt + generated) one request can have.
    pub fn max_request_tokens(&self) -> usize {
        self.sched
            .capacity_tokens()
            .min(self.model.context_length())
    }

    /// Checks a request against the model and the cache; the reason names the field.
    pub fn validate(&self, r: &Request) -> Result<()> {
        validate_request(r, self.model.vocab_size(), self.max_request_tokens())
    }

    /// Queues a request (validated) and returns its event stream.
    pub fn add(&mut self, r: Request) -> Result<EventStream> {
        self.validate(&r)?;
        let id = self.next_id;
        self.next_id += 1;
        let (tx, rx) = unbounded_channel();
        self.counters.waiting.fetch_add(1, Ordering::SeqCst);
        self.insert(id, r, tx, Instant::now())?;
        Ok(EventStream {
            id,
            rx,
            peeked: None,
        })
    }

    fn insert(
        &mut self,
        id: SeqId,
        r: Request,
        tx: UnboundedSender<Event>,
        submitted: Instant,
    ) -> Result<()> {
        let sampler = Sampler::new(r.sampling)?;
        let timeout = r.timeout.or(self.cfg.default_timeout);
        self.live.insert(
            id,
            Live {
                tx,
                sampler,
                detok: Detokenizer::new(&r.prompt),
                stops: StopMatcher::new(&r.stop_strings),
                history: r.prompt.clone(),
                generated: 0,
                max_tokens: r.max_tokens,
                stop_on_eos: r.stop_on_eos,
                deadline: timeout.map(|t| submitted + t),
                prompt_len: r.prompt.len(),
                admitted: false,
                matcher: r.constraint,
                logprobs: r.logprobs,
                pending_lp: Default::default(),
            },
        );
        self.sched.add(id, r.prompt);
        Ok(())
    }

    /// Requests not finished yet.
    pub fn num_live(&self) -> usize {
        self.live.len()
    }

    /// The current figures.
    pub fn stats(&self) -> &EngineStats {
        &self.stats
    }

    /// Ends requests whose stream was dropped or whose deadline passed.
    fn reap(&mut self) {
        let now = Instant::now();
        let ended: Vec<(SeqId, FinishReason)> = self
            .live
            .iter()
            .filter_map(|(&id, l)| {
                if l.tx.is_closed() {
                    Some((id, FinishReason::Cancelled))
                } else if l.deadline.is_some_and(|d| now >= d) {
                    Some((id, FinishReason::Timeout))
                } else {
                    None
                }
            })
            .collect();
        for (id, reason) in ended {
            self.finish(id, reason);
        }
    }

    /// Ends a request: final event, blocks freed.
    fn finish(&mut self, id: SeqId, reason: FinishReason) {
        let Some(mut l) = self.live.remove(&id) else {
            return;
        };
        if !l.admitted {
            self.counters.waiting.fetch_sub(1, Ordering::SeqCst);
        }
        let cached = self.sched.cached_tokens(id);
        self.sched.finish(id);
        if let Some(d) = &mut self.draft {
            d.forget(id);
        }
        let mut text = String::new();
        if reason != FinishReason::Cancelled {
            // Flush held-back text (a partial stop-string prefix that never completed).
            let tail = l.detok.flush(self.tok).unwrap_or_default();
            let (emit, _) = l.stops.feed(&tail);
            text = emit;
            if reason != FinishReason::Stop {
                text.push_str(&l.stops.finish());
            }
        }
        self.stats.finished += 1;
        if let Some(m) = &l.matcher {
            self.stats.grammar += m.cost();
        }
        let _ = l.tx.send(Event::Finished {
            reason,
            text,
            usage: Usage {
                prompt_tokens: l.prompt_len,
                completion_tokens: l.generated,
                cached_tokens: cached,
            },
            stop: l.stops.matched().map(str::to_string),
        });
    }

    /// Ends every request with `reason` (shutdown, or a failed step).
    pub fn end_all(&mut self, reason: FinishReason) {
        let ids: Vec<SeqId> = self.live.keys().copied().collect();
        for id in ids {
            self.finish(id, reason);
        }
    }

    /// Runs one step; returns the number of tokens in its forward (0: nothing to do).
    pub fn step(&mut self) -> Result<usize> {
        let plan = self.plan_step();
        self.run_plan(&plan)
    }

    /// The first half of [`EngineCore::step`]: ends dropped or late requests, proposes drafts and
    /// decides what the next forward runs (nothing runs yet).
    pub fn plan_step(&mut self) -> StepPlan {
        self.reap();
        self.propose_drafts();
        let plan = self.sched.schedule();
        for id in &plan.admitted {
            if let Some(l) = self.live.get_mut(id)
                && !l.admitted
            {
                l.admitted = true;
                self.counters.waiting.fetch_sub(1, Ordering::SeqCst);
            }
        }
        plan
    }

    /// The second half of [`EngineCore::step`]: runs `plan`'s forward, samples, streams the
    /// tokens. Returns the number of tokens in the forward (0: nothing to do).
    pub fn run_plan(&mut self, plan: &StepPlan) -> Result<usize> {
        if plan.is_empty() {
            self.refresh_stats();
            return Ok(0);
        }
        let sampled = self.forward(plan)?;
        self.sched.update_many(plan, &sampled);
        for s in &plan.seqs {
            let l = self.live.get(&s.id);
            if l.is_some_and(|l| l.generated == 0) {
                self.stats.prompt_tokens_computed += s.tokens.len() as u64;
            }
            if s.drafts > 0 {
                self.stats.spec_draft_tokens += s.drafts as u64;
                let n = sampled
                    .iter()
                    .find(|(id, _)| *id == s.id)
                    .map_or(0, |t| t.1.len());
                self.stats.spec_accepted_tokens += n.saturating_sub(1) as u64;
            }
        }
        for (id, toks) in sampled {
            let n = toks.len();
            for (i, tok) in toks.into_iter().enumerate() {
                // A token may end the request (EOS, stop string, length): drop the rest.
                if !self.live.contains_key(&id) {
                    break;
                }
                self.emit(id, tok, i + 1 == n);
            }
        }
        self.stats.steps += 1;
        self.refresh_stats();
        Ok(plan.tokens())
    }

    /// Proposes drafts for the decoding sequences (speculative decoding on): from the draft model
    /// when there is one, else by prompt lookup. A failed draft forward only costs the drafts.
    fn propose_drafts(&mut self) {
        let Some(cfg) = self.cfg.speculative else {
            return;
        };
        // After the first token, and never past the request's length: a step emits at most
        // drafts + 1 tokens.
        let room: Vec<(SeqId, usize)> = self
            .sched
            .running()
            .iter()
            .filter_map(|&id| {
                let l = self.live.get(&id)?;
                let room = l.max_tokens.saturating_sub(l.generated + 1);
                (l.generated > 0 && room > 0).then_some((id, room.min(cfg.draft_tokens)))
            })
            .collect();
        let min = cfg.min_draft_tokens.min(cfg.draft_tokens);
        let proposals: Vec<(SeqId, Vec<u32>)> = match &mut self.draft {
            Some(d) => {
                let work: Vec<(SeqId, &[u32], usize)> = room
                    .iter()
                    .filter(|&&(_, want)| want >= min)
                    .map(|&(id, want)| (id, self.sched.tokens(id), want))
                    .collect();
                match d.propose(&work) {
                    Ok(p) => p,
                    Err(e) => {
                        tracing::warn!("draft model failed: {e}; decoding without drafts");
                        Vec::new()
                    }
                }
            }
            None => room
                .iter()
                .map(|&(id, want)| {
                    let mut d = spec::ngram_draft(self.sched.tokens(id), &cfg);
                    d.truncate(want);
                    (id, d)
                })
                .collect(),
        };
        for (id, mut d) in proposals {
            // A constrained sequence verifies only the drafts its grammar accepts.
            if let Some(m) = self.live.get_mut(&id).and_then(|l| l.matcher.as_mut()) {
                match m.valid_prefix(&d) {
                    Ok(n) => d.truncate(n),
                    Err(e) => {
                        tracing::warn!(id, "checking drafts against the grammar: {e}");
                        d.clear();
                    }
                }
            }
            if !d.is_empty() && d.len() >= min {
                self.sched.set_drafts(id, d);
            }
        }
    }

    /// One forward over the plan; samples the sequences that asked (a speculative sequence gets
    /// its accepted drafts and the token after them).
    fn forward(&mut self, plan: &StepPlan) -> Result<Vec<(SeqId, Vec<u32>)>> {
        self.cache.copy_blocks(&plan.copies);
        let mut seqs = Vec::with_capacity(plan.seqs.len());
        let mut ids: Vec<i32> = Vec::with_capacity(plan.tokens());
        let mut rows = Vec::new();
        for s in &plan.seqs {
            seqs.push(SeqSlice {
                q_start: ids.len(),
                q_len: s.tokens.len(),
                past: s.past,
                blocks: s.blocks.clone(),
            });
            ids.extend(s.tokens.iter().map(|&t| t as i32));
            if s.sample {
                // The last token's row, and one row per draft before it.
                rows.extend(ids.len() - 1 - s.drafts..ids.len());
            }
        }
        // Every sampled sequence greedy without penalties, grammar or log-probabilities: the
        // argmax is taken on the device and only token ids come back.
        let greedy = plan
            .seqs
            .iter()
            .filter(|s| s.sample)
            .all(|s| self.live.get(&s.id).is_some_and(Live::argmax_ok));
        let Some(rows_out) = forward_ragged(self.model, &mut self.cache, seqs, ids, rows, greedy)?
        else {
            return Ok(Vec::new());
        };
        let (host, vocab) = match rows_out {
            StepRows::Logits(host, vocab) => (host, vocab),
            StepRows::Argmax(best) => return Ok(greedy_picks(plan, &best)),
        };
        let mut out = Vec::with_capacity(plan.seqs.len());
        let mut failed = Vec::new();
        let mut row = 0usize;
        for s in plan.seqs.iter().filter(|s| s.sample) {
            let first = row;
            row += 1 + s.drafts;
            let Some(l) = self.live.get_mut(&s.id) else {
                continue;
            };
            let rows: Vec<&[f32]> = (first..row)
                .map(|r| &host[r * vocab..(r + 1) * vocab])
                .collect();
            let picked = if s.drafts == 0 {
                pick::pick(&mut l.sampler, l.matcher.as_mut(), rows[0], &l.history).map(|t| vec![t])
            } else {
                let drafts = &s.tokens[1..];
                let m = l.matcher.as_mut();
                spec::verify_drafts(&mut l.sampler, m, &l.history, &rows, drafts)
            };
            let toks = match picked {
                Ok(t) => t,
                // A grammar that cannot go on ends its own request, not the step.
                Err(e @ RuntimeError::Constraint(_)) => {
                    tracing::warn!(id = s.id, "{e}");
                    failed.push(s.id);
                    continue;
                }
                Err(e) => return Err(e),
            };
            if let Some(k) = l.logprobs {
                l.pending_lp = toks
                    .iter()
                    .zip(&rows)
                    .map(|(&t, r)| TokenLogprob::of(r, t, k))
                    .collect();
            }
            out.push((s.id, toks));
        }
        for id in failed {
            self.finish(id, FinishReason::Error);
        }
        Ok(out)
    }

    /// Streams a sampled token; finishes the request on EOS, a stop string or the length limit,
    /// and, at the `last` token of the step, when its grammar is complete (the matcher has taken
    /// every token of the step already: accepted drafts advance it before they are emitted).
    fn emit(&mut self, id: SeqId, tok: u32, last: bool) {
        let Some(l) = self.live.get_mut(&id) else {
            return;
        };
        let lp = l.pending_lp.pop_front();
        // A constrained sequence ends at an end-of-generation token its grammar let through.
        if (l.stop_on_eos || l.matcher.is_some()) && self.tok.eot_ids.contains(&tok) {
            self.finish(id, FinishReason::Eos);
            return;
        }
        l.generated += 1;
        l.history.push(tok);
        self.stats.generated_tokens += 1;
        let piece = match l.detok.push(self.tok, tok) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(id, "detokenizing token {tok}: {e}");
                String::new()
            }
        };
        let (text, hit) = l.stops.feed(&piece);
        let done = last && l.matcher.as_ref().is_some_and(TokenMatcher::is_done);
        let event = Event::Token {
            id: tok,
            text,
            logprob: lp,
        };
        let closed = l.tx.send(event).is_err();
        if closed {
            self.finish(id, FinishReason::Cancelled);
        } else if hit || done {
            self.finish(id, FinishReason::Stop);
        } else if l.generated >= l.max_tokens {
            self.finish(id, FinishReason::Length);
        }
    }

    fn refresh_stats(&mut self) {
        let bm = self.sched.blocks();
        let p = bm.prefix_stats();
        let s = &mut self.stats;
        s.waiting = self.sched.num_waiting();
        s.running = self.sched.num_running();
        s.kv_blocks_total = bm.num_blocks();
        s.kv_blocks_used = bm.num_used();
        s.kv_blocks_cached = bm.num_cached();
        s.block_size = bm.block_size();
        s.kv_bytes = self.cache.bytes();
        s.prefix_queried_tokens = p.queried_tokens;
        s.prefix_hit_tokens = p.hit_tokens;
        s.prefix_queried_blocks = p.queried_blocks;
        s.prefix_hit_blocks = p.hit_blocks;
        s.preemptions = self.sched.preemptions();
    }
}

/// What a step reads back of the rows it samples.
enum StepRows {
    /// `rows × vocab` logits and the vocabulary size.
    Logits(Vec<f32>, usize),
    /// Each row's argmax (every sampled sequence is plain greedy).
    Argmax(Vec<u32>),
}

/// The tokens of a greedy step from each sampled row's argmax `best`: per sequence, its drafts
/// while each equals the argmax before it, then the argmax where they part (or after the last),
/// exactly as [`spec::verify_drafts`] and the greedy sampler pick them.
fn greedy_picks(plan: &StepPlan, best: &[u32]) -> Vec<(SeqId, Vec<u32>)> {
    let mut out = Vec::with_capacity(plan.seqs.len());
    let mut row = 0usize;
    for s in plan.seqs.iter().filter(|s| s.sample) {
        let rows = &best[row..row + 1 + s.drafts];
        row += 1 + s.drafts;
        let drafts = &s.tokens[s.tokens.len() - s.drafts..];
        let mut toks = Vec::with_capacity(rows.len());
        for (j, &b) in rows.iter().enumerate() {
            toks.push(b);
            if drafts.get(j) != Some(&b) {
                break;
            }
        }
        out.push((s.id, toks));
    }
    out
}

/// One forward of a ragged batch: `seqs` lay out the new tokens `ids` (all sequences one after the
/// other) over the paged `cache`. Returns the logits of `rows` (time steps, in order) as one host
/// buffer of `rows.len() × vocab` values and the vocabulary size, or with `greedy` only each row's
/// argmax; `None` when no row was asked for (a step of prefill chunks only).
fn forward_ragged<B: InferenceBackend, M: CausalLm<B> + ?Sized>(
    model: &M,
    cache: &mut PagedKvCache<B>,
    seqs: Vec<SeqSlice>,
    ids: Vec<i32>,
    rows: Vec<usize>,
    greedy: bool,
) -> Result<Option<StepRows>> {
    let t = ids.len();
    cache.set_batch(PagedBatch {
        block_size: cache.block_size(),
        seqs,
    });
    let tokens = Tensor::<B, 2, Int>::from_data(TensorData::new(ids, [1, t]), &model.device());
    let n = rows.len();
    // A forward returns at least one row: ask for the last one and drop it.
    let ask = if n == 0 { vec![t - 1] } else { rows };
    let logits = model.forward(tokens, cache, Logits::Rows(ask));
    if n == 0 {
        return Ok(None);
    }
    if greedy {
        let [_, rows, vocab] = logits.dims();
        let best = B::argmax_rows(logits.reshape([rows, vocab]))
            .map_err(|e| RuntimeError::Readback(e.to_string()))?;
        return Ok(Some(StepRows::Argmax(best)));
    }
    let host = logits_to_vec(logits)?;
    let vocab = host.len() / n;
    Ok(Some(StepRows::Logits(host, vocab)))
}

/// KV blocks the engine allocates for `model` under `cfg`.
fn kv_blocks<B: InferenceBackend, M: CausalLm<B> + ?Sized>(
    model: &M,
    cfg: &EngineConfig,
) -> Result<usize> {
    if cfg.block_size == 0 || cfg.scheduler.max_batched_tokens == 0 || cfg.scheduler.max_seqs == 0 {
        return Err(RuntimeError::KvCache(
            "block_size, max_batched_tokens and max_seqs must be at least 1".into(),
        ));
    }
    // Every store the model writes counts (a split model's other device holds the same blocks).
    let per_token = model.kv_bytes_per_token_as(cfg.kv_type) as u64;
    let budget = cfg.kv_budget.unwrap_or_else(|| {
        default_kv_budget(
            per_token,
            model.context_length(),
            cfg.scheduler.max_seqs,
            // the free memory of the device the model's cache lives on
            B::device_memory(&model.device()).map(|m| m.free),
        )
    });
    let blocks = budget.blocks(per_token, cfg.block_size);
    if blocks == 0 {
        return Err(RuntimeError::KvCache(format!(
            "a KV budget of {budget:?} holds no block of {} tokens ({per_token} bytes per token)",
            cfg.block_size
        )));
    }
    Ok(blocks)
}
