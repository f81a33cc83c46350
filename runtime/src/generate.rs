//! The generation loop for one sequence: prefill the prompt, then decode token by token until EOS, a stop
//! string, the token limit, or the caller says stop.

use cinder_backends::InferenceBackend;
use std::time::{Duration, Instant};

use crate::attention::AttentionCache;
use crate::engine::{EngineConfig, EngineCore, Event, FinishReason, Request};
use crate::error::{Result, RuntimeError};
use crate::kv::KvBudget;
use crate::model::{CausalLm, Logits, logits_to_vec, token_tensor};
use crate::sampler::SamplingParams;
use crate::scheduler::SchedulerConfig;
use crate::tokenizer::Tokenizer;

/// The largest number of prompt tokens fed in one forward: bounds the `[t, T]` attention scores.
pub const PREFILL_CHUNK: usize = 512;

/// What to generate.
#[derive(Debug, Clone)]
pub struct GenerateOptions {
    /// Most new tokens.
    pub max_tokens: usize,
    /// Sampling settings.
    pub sampling: SamplingParams,
    /// Generation ends when the text contains one of these (the stop string itself is not emitted).
    pub stop_strings: Vec<String>,
    /// End at the model's end-of-generation tokens (EOS, EOT, `<|im_end|>`, …).
    pub stop_on_eos: bool,
    /// Context size to allocate (prompt + new tokens must fit).
    pub context: usize,
    /// Speculative decoding by prompt lookup (`None`: off). The output is the same either way.
    pub speculative: Option<crate::engine::SpeculativeConfig>,
    /// The grammar the text must follow (see [`crate::constraint`]); generation ends when it is
    /// complete.
    pub constraint: Option<crate::constraint::TokenMatcher>,
    /// How the KV cache of this generation stores its rows ([`generate`] allocates one per call).
    pub kv_type: crate::kv::KvType,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        Self {
            max_tokens: 128,
            sampling: SamplingParams::default(),
            stop_strings: Vec::new(),
            stop_on_eos: true,
            context: 4096,
            speculative: None,
            constraint: None,
            kv_type: crate::kv::KvType::F16,
        }
    }
}

/// The result of one generation.
#[derive(Debug, Clone)]
pub struct Generation {
    /// Generated token ids (an EOS token that ended generation is not included).
    pub tokens: Vec<u32>,
    /// Generated text (without a matched stop string).
    pub text: String,
    /// Why it ended.
    pub finish: FinishReason,
    /// Prompt length in tokens.
    pub prompt_tokens: usize,
    /// Prompt tokens whose KV came from the prefix cache (a [`Session`]'s earlier generations).
    pub cached_tokens: usize,
    /// Time spent on the prompt (including sampling the first token).
    pub prefill_time: Duration,
    /// Time spent on each later token.
    pub decode_times: Vec<Duration>,
}

/// Feeds `ids` into `cache` in chunks of [`PREFILL_CHUNK`]; returns the last position's logits.
pub fn prefill<B: InferenceBackend, M: CausalLm<B> + ?Sized>(
    model: &M,
    cache: &mut dyn AttentionCache<B>,
    ids: &[u32],
) -> Result<Vec<f32>> {
    if ids.is_empty() {
        return Err(RuntimeError::EmptyPrompt);
    }
    let device = model.device();
    let mut last = None;
    for chunk in ids.chunks(PREFILL_CHUNK) {
        last = Some(model.forward(token_tensor::<B>(chunk, &device), cache, Logits::Last));
    }
    match last {
        Some(l) => logits_to_vec(l),
        None => Err(RuntimeError::EmptyPrompt),
    }
}

/// Generates from `prompt_ids`, calling `on_text` with each new piece of text; `on_text` returns
/// `false` to stop early. Runs one request through an [`EngineCore`] of its own (paged KV cache
/// sized for this request), stepped on the caller's thread: the same code path as batched serving.
pub fn generate<B: InferenceBackend, M: CausalLm<B> + ?Sized>(
    model: &M,
    tok: &Tokenizer,
    prompt_ids: &[u32],
    opts: &GenerateOptions,
    on_text: &mut dyn FnMut(&str) -> bool,
) -> Result<Generation> {
    generate_with_draft(model, None, tok, prompt_ids, opts, on_text)
}

/// As [`generate`], with `draft` proposing the speculative tokens when `opts.speculative` is on
/// (draft-model speculation instead of prompt lookup).
pub fn generate_with_draft<B: InferenceBackend, M: CausalLm<B> + ?Sized>(
    model: &M,
    draft: Option<&(dyn CausalLm<B> + Sync)>,
    tok: &Tokenizer,
    prompt_ids: &[u32],
    opts: &GenerateOptions,
    on_text: &mut dyn FnMut(&str) -> bool,
) -> Result<Generation> {
    let mut s = Session::with_kv_type(
        model,
        draft,
        tok,
        prompt_ids.len() + opts.max_tokens,
        opts.speculative,
        false,
        opts.kv_type,
    )?;
    s.generate(prompt_ids, opts, on_text)
}

/// Generations one after another through one engine core and one KV pool (`cinder chat`'s
/// conversation): with prefix caching on, each one finds the KV blocks of the earlier ones'
/// common prefix in the cache, so turn N of a chat prefills only what turn N−1 did not hold (its
/// answer's last partial block and the new message). Stepped on the caller's thread, as
/// [`generate`].
///
/// ```no_run
/// # use cinder_runtime::{InferenceBackend, model::CausalLm, tokenizer::Tokenizer};
/// # fn f<B: InferenceBackend, M: CausalLm<B>>(model: &M, tok: &Tokenizer) -> cinder_runtime::Result<()> {
/// use cinder_runtime::generate::{GenerateOptions, Session};
/// let mut chat = Session::new(model, None, tok, 4096, None, true)?;
/// let opts = GenerateOptions::default();
/// let turn1 = tok.tokenize("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", false, true)?;
/// let answer = chat.generate(&turn1, &opts, &mut |piece| { print!("{piece}"); true })?;
/// // the next turn's prompt repeats this one and `answer.text`: their full KV blocks are cached
/// # Ok(()) }
/// ```
pub struct Session<'m, B: InferenceBackend, M: CausalLm<B> + ?Sized> {
    core: EngineCore<'m, B, M>,
    /// most positions one generation may use: the pool's, capped by the model's context
    tokens: usize,
}

impl<'m, B: InferenceBackend, M: CausalLm<B> + ?Sized> Session<'m, B, M> {
    /// A session whose KV pool holds `tokens` positions (one generation's prompt and answer at
    /// most), with `draft` and `speculative` as for [`generate_with_draft`].
    pub fn new(
        model: &'m M,
        draft: Option<&'m (dyn CausalLm<B> + Sync)>,
        tok: &'m Tokenizer,
        tokens: usize,
        speculative: Option<crate::engine::SpeculativeConfig>,
        prefix_caching: bool,
    ) -> Result<Self> {
        Self::with_kv_type(
            model,
            draft,
            tok,
            tokens,
            speculative,
            prefix_caching,
            crate::kv::KvType::F16,
        )
    }

    /// [`Session::new`] with its KV pool's rows stored as `kv_type`.
    pub fn with_kv_type(
        model: &'m M,
        draft: Option<&'m (dyn CausalLm<B> + Sync)>,
        tok: &'m Tokenizer,
        tokens: usize,
        speculative: Option<crate::engine::SpeculativeConfig>,
        prefix_caching: bool,
        kv_type: crate::kv::KvType,
    ) -> Result<Self> {
        let cfg = EngineConfig {
            scheduler: SchedulerConfig {
                max_batched_tokens: PREFILL_CHUNK,
                max_seqs: 1,
            },
            // never more than the model can attend to: a request past it is refused, not allocated
            kv_budget: Some(KvBudget::Tokens(
                tokens.clamp(1, model.context_length().max(1)),
            )),
            max_waiting: 1,
            default_timeout: None,
            prefix_caching,
            speculative,
            kv_type,
            ..EngineConfig::default()
        };
        let core = match draft {
            Some(d) => EngineCore::<B, M>::with_draft(model, d, tok, cfg)?,
            None => EngineCore::<B, M>::new(model, tok, cfg)?,
        };
        Ok(Self {
            core,
            tokens: tokens.min(model.context_length()),
        })
    }

    /// Generates from `prompt_ids` as [`generate`] does; `Generation::cached_tokens` says how many
    /// of the prompt's tokens came from earlier generations' KV.
    pub fn generate(
        &mut self,
        prompt_ids: &[u32],
        opts: &GenerateOptions,
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<Generation> {
        if prompt_ids.is_empty() {
            return Err(RuntimeError::EmptyPrompt);
        }
        let ctx = opts.context.min(self.tokens);
        if prompt_ids.len() + opts.max_tokens > ctx {
            return Err(RuntimeError::ContextOverflow {
                prompt: prompt_ids.len(),
                max_new: opts.max_tokens,
                ctx,
            });
        }
        let mut out = Generation {
            tokens: Vec::new(),
            text: String::new(),
            finish: FinishReason::Length,
            prompt_tokens: prompt_ids.len(),
            cached_tokens: 0,
            prefill_time: Duration::ZERO,
            decode_times: Vec::new(),
        };
        if opts.max_tokens == 0 {
            return Ok(out);
        }
        let core = &mut self.core;
        // A generation the caller stopped early leaves its sequence until a step finds its
        // stream gone: let it go first.
        while core.num_live() > 0 {
            core.step()?;
        }
        let mut stream = core.add(Request {
            prompt: prompt_ids.to_vec(),
            max_tokens: opts.max_tokens,
            sampling: opts.sampling.clone(),
            stop_strings: opts.stop_strings.clone(),
            stop_on_eos: opts.stop_on_eos,
            timeout: None,
            constraint: opts.constraint.clone(),
            logprobs: None,
        })?;
        let t0 = Instant::now();
        let mut last = t0;
        loop {
            core.step()?;
            while let Some(ev) = stream.try_next() {
                let (text, done) = match ev {
                    Event::Token { id, text, .. } => {
                        let now = Instant::now();
                        if out.tokens.is_empty() {
                            out.prefill_time = now - t0;
                        } else {
                            out.decode_times.push(now - last);
                        }
                        last = now;
                        out.tokens.push(id);
                        (text, None)
                    }
                    Event::Finished {
                        reason,
                        text,
                        usage,
                        ..
                    } => {
                        out.cached_tokens = usage.cached_tokens;
                        (text, Some(reason))
                    }
                };
                if !text.is_empty() {
                    out.text.push_str(&text);
                    if !on_text(&text) && done.is_none() {
                        out.finish = FinishReason::Cancelled;
                        return Ok(out);
                    }
                }
                if let Some(reason) = done {
                    out.finish = reason;
                    return Ok(out);
                }
            }
            if core.num_live() == 0 {
                // Finished without a final event cannot happen; do not loop forever if it did.
                return Ok(out);
            }
        }
    }
}
