//! The generation loop for one sequence: prefill the prompt, then decode token by token until EOS, a stop
//! string, the token limit, or the caller says stop.

use cinder_backends::InferenceBackend;
use std::time::{Duration, Instant};

use burn::tensor::{Int, Tensor, TensorData};

use crate::attention::{AttentionCache, ContiguousKvCache};
use crate::error::{Result, RuntimeError};
use crate::model::{CausalLm, Logits};
use crate::sampler::{Sampler, SamplingParams};
use crate::tokenizer::{Detokenizer, Tokenizer};

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
}

impl Default for GenerateOptions {
    fn default() -> Self {
        Self {
            max_tokens: 128,
            sampling: SamplingParams::default(),
            stop_strings: Vec::new(),
            stop_on_eos: true,
            context: 4096,
        }
    }
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// `max_tokens` reached.
    Length,
    /// The model produced an end-of-generation token.
    Eos,
    /// A stop string appeared.
    Stop,
    /// The caller's callback asked to stop.
    Cancelled,
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
    /// Time spent on the prompt (including sampling the first token).
    pub prefill_time: Duration,
    /// Time spent on each later token.
    pub decode_times: Vec<Duration>,
}

/// Reads one row of logits back to the host.
pub fn logits_to_vec<B: InferenceBackend>(logits: Tensor<B, 3>) -> Result<Vec<f32>> {
    logits
        .into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .map_err(|e| RuntimeError::Readback(format!("{e:?}")))
}

/// Token ids as a `[1, t]` tensor.
pub fn token_tensor<B: InferenceBackend>(ids: &[u32], device: &B::Device) -> Tensor<B, 2, Int> {
    let v: Vec<i32> = ids.iter().map(|&i| i as i32).collect();
    Tensor::from_data(TensorData::new(v, [1, ids.len()]), device)
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
/// `false` to stop early.
pub fn generate<B: InferenceBackend, M: CausalLm<B> + ?Sized>(
    model: &M,
    tok: &Tokenizer,
    prompt_ids: &[u32],
    opts: &GenerateOptions,
    on_text: &mut dyn FnMut(&str) -> bool,
) -> Result<Generation> {
    if prompt_ids.is_empty() {
        return Err(RuntimeError::EmptyPrompt);
    }
    let ctx = opts.context.min(model.context_length());
    if prompt_ids.len() + opts.max_tokens > ctx {
        return Err(RuntimeError::ContextOverflow {
            prompt: prompt_ids.len(),
            max_new: opts.max_tokens,
            ctx,
        });
    }
    let mut sampler = Sampler::new(opts.sampling.clone())?;
    let mut cache = ContiguousKvCache::<B>::new(model.n_layers(), ctx);
    let device = model.device();
    let mut history = prompt_ids.to_vec();
    let mut detok = Detokenizer::new(prompt_ids);
    let mut stops = StopMatcher::new(&opts.stop_strings);
    let mut out = Generation {
        tokens: Vec::new(),
        text: String::new(),
        finish: FinishReason::Length,
        prompt_tokens: prompt_ids.len(),
        prefill_time: Duration::ZERO,
        decode_times: Vec::new(),
    };

    let t0 = Instant::now();
    let mut logits = prefill(model, &mut cache, prompt_ids)?;
    let mut step_start = t0;
    for i in 0..opts.max_tokens {
        let next = sampler.sample(&logits, &history)?;
        if i == 0 {
            out.prefill_time = t0.elapsed();
        } else {
            out.decode_times.push(step_start.elapsed());
        }
        if opts.stop_on_eos && tok.eot_ids.contains(&next) {
            out.finish = FinishReason::Eos;
            break;
        }
        history.push(next);
        out.tokens.push(next);
        let piece = detok.push(tok, next)?;
        let (emit, hit) = stops.feed(&piece);
        if !emit.is_empty() {
            out.text.push_str(&emit);
            if !on_text(&emit) {
                out.finish = FinishReason::Cancelled;
                return Ok(out);
            }
        }
        if hit {
            out.finish = FinishReason::Stop;
            return Ok(out);
        }
        if i + 1 == opts.max_tokens {
            break;
        }
        step_start = Instant::now();
        let l = model.forward(
            token_tensor::<B>(&[next], &device),
            &mut cache,
            Logits::Last,
        );
        logits = logits_to_vec(l)?;
    }
    // Flush held-back text (a partial stop-string prefix that never completed, a trailing byte).
    let tail = detok.flush(tok)?;
    let (mut emit, hit) = stops.feed(&tail);
    if !hit {
        emit.push_str(&stops.finish());
    } else {
        out.finish = FinishReason::Stop;
    }
    if !emit.is_empty() {
        out.text.push_str(&emit);
        on_text(&emit);
    }
    Ok(out)
}

/// Finds stop strings across piece boundaries, holding back text that could be the start of one.
#[derive(Debug)]
struct StopMatcher {
    stops: Vec<String>,
    pending: String,
    done: bool,
}

impl StopMatcher {
    fn new(stops: &[String]) -> Self {
        Self {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            pending: String::new(),
            done: false,
        }
    }

    /// Adds `piece`; returns the text safe to emit and whether a stop string was found.
    fn feed(&mut self, piece: &str) -> (String, bool) {
        if self.done {
            return (String::new(), true);
        }
        self.pending.push_str(piece);
        if let Some(pos) = self
            .stops
            .iter()
            .filter_map(|s| self.pending.find(s.as_str()))
            .min()
        {
            let emit = self.pending[..pos].to_string();
            self.pending.clear();
            self.done = true;
            return (emit, true);
        }
        // Hold back the longest suffix that is a prefix of some stop string.
        let mut hold = 0;
        for s in &self.stops {
            for k in (1..s.len()).filter(|&k| s.is_char_boundary(k)) {
                if k > hold && self.pending.ends_with(&s[..k]) {
                    hold = k;
                }
            }
        }
        let cut = self.pending.len() - hold;
        let emit = self.pending[..cut].to_string();
        self.pending.drain(..cut);
        (emit, false)
    }

    fn finish(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }
}

#[cfg(test)]
mod tests {
    use super::StopMatcher;

    #[test]
    fn stop_strings_across_pieces() {
        let mut m = StopMatcher::new(&["</s>".to_string(), "\n\n".to_string()]);
        assert_eq!(m.feed("Hello <"), ("Hello ".to_string(), false));
        assert_eq!(m.feed("/"), (String::new(), false));
        assert_eq!(m.feed("s> world"), (String::new(), true));
        let mut m = StopMatcher::new(&["\n\n".to_string()]);
        assert_eq!(m.feed("a\n"), ("a".to_string(), false));
        assert_eq!(m.feed("b"), ("\nb".to_string(), false));
        assert_eq!(m.feed("\n\nc"), (String::new(), true));
        let mut m = StopMatcher::new(&["xyz".to_string()]);
        assert_eq!(m.feed("abx"), ("ab".to_string(), false));
        assert_eq!(m.finish(), "x");
    }
}
