//! Each architecture against llama.cpp's logits, on tiny random-weight files.
//!
//! `tests/data/tiny/*.gguf` are written by `benches/reference/tiny_models.py` (the SmolLM2 tokenizer,
//! two layers, random weights in F32/F16/Q8_0/Q5_0/Q5_1/Q4_0/Q4_1/Q4_K/Q6_K); the `*.logits.jsonl`
//! beside them by `benches/reference/llamacpp_logits.sh` (llama.cpp's CPU backend, 1 thread): for
//! each prompt, the 10 most likely next tokens and their log-probabilities at every prompt position
//! and at each of 16 greedy steps.
//!
//! Cinder runs the same tokens teacher-forced (the prompt in one forward with logits at every
//! position, then llama.cpp's greedy tokens one at a time) on every backend — every prompt on both
//! attention caches on the primary backend, the first prompt on the paged cache elsewhere — and is
//! held to the Llama family's bar in `tests/greedy.rs`: the top-5 probabilities within 0.015 on
//! average, and at every position an argmax that is llama.cpp's or within 0.02 of it. The
//! log-probabilities of llama.cpp's top 10 are also compared (`MEAN_LOGPROB_TOL`), which a model run
//! with the wrong RoPE frequencies fails by far: `llama3-tiny` without its `rope_freqs` moves
//! llama.cpp's own top-5 probabilities by 0.02–0.05 and its top-5 log-probabilities by 1.6–6.8 on
//! average, and forks its greedy text at the first step for two of the three prompts. `phi3-tiny`
//! (fused projections, LongRoPE, RoPE on 3/4 of each head) run with the short factors instead of the
//! long ones moves llama.cpp's top-10 log-probabilities by 5.8–6.6 on average, without its attention
//! factor by 2.9–3.7.
//!
//! Checkpoints saved by `transformers` itself (`tests/data/hf-tiny`) are held to the logits
//! transformers computes for them, so the SafeTensors reader's names, layouts and config keys meet
//! another program's, not Cinder's own test writer's.

mod common;

use std::path::PathBuf;

use cinder::prelude::*;
use cinder::runtime::attention::{AttentionCache, ContiguousKvCache};
use cinder::runtime::kv::SeqPagedCache;
use cinder::runtime::model::{logits_to_vec, token_tensor};
use common::*;
use serde::Deserialize;

/// Largest allowed mean difference of llama.cpp's top-5 probabilities over a prompt's positions.
const MEAN_PROB_TOL: f32 = 0.015;
/// A different argmax is allowed when either side rates the other's pick within this.
const NEAR_TIE: f32 = 0.02;
/// Largest allowed mean difference of llama.cpp's top-10 log-probabilities over a prompt's positions
/// (measured 0.047–0.080 on flex, ndarray, candle and wgpu; the same file without `rope_freqs` is
/// 1.6–6.8 off in llama.cpp).
const MEAN_LOGPROB_TOL: f32 = 0.15;
/// Largest allowed difference of one top-10 log-probability (measured up to 0.60: these random
/// two-layer models amplify rounding; storing V in f16 alone moves a first-position log-probability by
/// 0.08).
const MAX_LOGPROB_TOL: f32 = 1.0;
/// The same for a mixture of experts, whose routing is discrete: where two experts score almost
/// alike for a token, a rounding difference picks the other one and that position's distribution
/// jumps (measured up to 1.44 at one position, a different position on each attention cache — the
/// caches differ only in f16 rounding — while every prompt's mean stays within 0.05–0.08). With 4
/// random routers such near-ties are common: margins between the 2nd and 3rd expert's probability
/// down to 0.0002 were measured on `mixtral-tiny`.
const MAX_LOGPROB_TOL_MOE: f32 = 2.5;
/// Positions per prompt where a mixture of experts may pick another argmax than llama.cpp (a routing
/// near-tie; the greedy tests allow the same one miss per prompt for their noise).
const ARGMAX_MISSES_MOE: usize = 1;
/// [`MEAN_LOGPROB_TOL`] for a mixture of experts: a prompt with several routing flips averages
/// higher (measured 0.05–0.08, and 0.16 once: `mixtral-tiny`'s longest prompt on candle). Running
/// `qwen3moe-tiny` without renormalizing its experts' weights gives 0.52.
const MEAN_LOGPROB_TOL_MOE: f32 = 0.3;

/// One line of a `*.logits.jsonl` file.
#[derive(Debug, Deserialize)]
struct LogitsRef {
    prompt: String,
    prompt_tokens: Vec<u32>,
    greedy: Vec<u32>,
    /// per position: the 10 most likely next tokens, `(id, log-probability)`, best first
    positions: Vec<Vec<(u32, f32)>>,
}

fn tiny_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/tiny")
}

fn hf_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/hf-tiny")
}

/// The references beside a model: `<dir>/<model>.logits.jsonl`.
fn refs_in(dir: &std::path::Path, model: &str) -> Vec<LogitsRef> {
    let path = dir.join(format!("{model}.logits.jsonl"));
    let text = std::fs::read_to_string(&path).expect("reference file");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("reference line"))
        .collect()
}

/// Log-softmax of one row of logits.
fn log_softmax(row: &[f32]) -> Vec<f32> {
    let mx = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    let lse = mx
        + row
            .iter()
            .map(|&x| ((x - mx) as f64).exp())
            .sum::<f64>()
            .ln() as f32;
    row.iter().map(|&x| x - lse).collect()
}

/// Worst differences over one prompt.
#[derive(Debug, Default)]
struct Agreement {
    mean_prob_diff: f32,
    mean_logprob_diff: f32,
    max_logprob_diff: f32,
    argmax_misses: Vec<String>,
}

/// Compares Cinder's logit rows (one per reference position) with the reference.
fn compare(rows: &[Vec<f32>], r: &LogitsRef) -> Agreement {
    assert_eq!(rows.len(), r.positions.len(), "positions");
    let (mut sum, mut count, mut worst, mut lp_sum) = (0.0f32, 0usize, 0.0f32, 0.0f32);
    let mut misses = Vec::new();
    for (pos, (row, top)) in rows.iter().zip(&r.positions).enumerate() {
        let lp = log_softmax(row);
        for (k, &(tok, lp_ref)) in top.iter().enumerate() {
            let ours = lp[tok as usize];
            worst = worst.max((ours - lp_ref).abs());
            lp_sum += (ours - lp_ref).abs();
            if k < 5 {
                sum += (ours.exp() - lp_ref.exp()).abs();
                count += 1;
            }
        }
        let ours_top = (0..lp.len())
            .max_by(|&a, &b| lp[a].total_cmp(&lp[b]))
            .unwrap_or(0) as u32;
        let (ref_top, p_ref_top) = (top[0].0, top[0].1.exp());
        if ours_top != ref_top {
            let p_ref_ours = top
                .iter()
                .find(|(t, _)| *t == ours_top)
                .map_or(0.0, |x| x.1.exp());
            let (p_ours_top, p_ours_ref) =
                (lp[ours_top as usize].exp(), lp[ref_top as usize].exp());
            if p_ref_top - p_ref_ours > NEAR_TIE && p_ours_top - p_ours_ref > NEAR_TIE {
                misses.push(format!(
                    "position {pos}: we pick {ours_top} (p {p_ours_top}), llama.cpp {ref_top} (p {p_ref_top})"
                ));
            }
        }
    }
    Agreement {
        mean_prob_diff: sum / count as f32,
        mean_logprob_diff: lp_sum / (2 * count) as f32,
        max_logprob_diff: worst,
        argmax_misses: misses,
    }
}

/// Logit rows for the prompt (one forward, every position) and then each greedy token fed alone.
fn teacher_forced<B: InferenceBackend>(
    m: &cinder::importer::LoadedModel<B>,
    r: &LogitsRef,
    cache: &mut dyn AttentionCache<B>,
    device: &B::Device,
) -> Vec<Vec<f32>> {
    let vocab = m.model.vocab_size();
    let all = logits_to_vec(m.model.forward(
        token_tensor::<B>(&r.prompt_tokens, device),
        cache,
        Logits::All,
    ))
    .expect("prompt logits");
    let mut rows: Vec<Vec<f32>> = all.chunks(vocab).map(<[f32]>::to_vec).collect();
    for &tok in &r.greedy {
        let row = logits_to_vec(m.model.forward(
            token_tensor::<B>(&[tok], device),
            cache,
            Logits::Last,
        ))
        .expect("step logits");
        rows.push(row);
    }
    rows
}

#[derive(Clone)]
struct Tiny {
    model: &'static str,
    /// the model file or folder, and the folder of its `<model>.logits.jsonl`
    path: PathBuf,
    refs_dir: PathBuf,
    mean_prob_tol: f32,
    mean_logprob_tol: f32,
    max_logprob_tol: f32,
    allowed_misses: usize,
}

impl BackendTask for Tiny {
    type Output = ();
    fn run<B: InferenceBackend>(self, device: B::Device) {
        let m = cinder::importer::load_model::<B>(&self.path, &device).expect("model loads");
        let (kvh, hd) = m.model.kv_dims();
        // Every prompt on the primary backend; elsewhere the first (lavapipe is slow, and CI's
        // other-backend pass has a time budget).
        let primary = B::KIND == primary_backend();
        let refs = refs_in(&self.refs_dir, self.model);
        let take = if primary { refs.len() } else { 1 };
        for r in refs.into_iter().take(take) {
            let ids = m.tokenizer.encode(&r.prompt, true).expect("encode");
            assert_eq!(ids, r.prompt_tokens, "prompt tokens for {:?}", r.prompt);
            // Both caches on the primary backend; elsewhere the paged one the engine runs (each
            // backend's attention kernels are checked against the CPU path in tests/gpu_kernels.rs).
            let mut caches: Vec<(&str, Box<dyn AttentionCache<B>>)> = vec![(
                "paged",
                Box::new(
                    SeqPagedCache::<B>::new(m.model.n_layers(), kvh, hd, 512, &device)
                        .expect("paged cache"),
                ),
            )];
            if primary {
                caches.push((
                    "contiguous",
                    Box::new(ContiguousKvCache::<B>::new(m.model.n_layers(), 512)),
                ));
            }
            for (name, mut cache) in caches {
                let rows = teacher_forced(&m, &r, cache.as_mut(), &device);
                let a = compare(&rows, &r);
                eprintln!(
                    "{} on {} ({name}), {:?}: mean top-5 probability difference {:.4}, \
                     top-10 log-probability difference mean {:.4} largest {:.4}",
                    self.model,
                    B::KIND,
                    r.prompt,
                    a.mean_prob_diff,
                    a.mean_logprob_diff,
                    a.max_logprob_diff
                );
                assert!(
                    a.argmax_misses.len() <= self.allowed_misses,
                    "{} ({name}) {:?}: {:?}",
                    self.model,
                    r.prompt,
                    a.argmax_misses
                );
                assert!(
                    a.mean_prob_diff <= self.mean_prob_tol,
                    "{} ({name}) {:?}: mean top-5 probability difference {}",
                    self.model,
                    r.prompt,
                    a.mean_prob_diff
                );
                assert!(
                    a.mean_logprob_diff <= self.mean_logprob_tol,
                    "{} ({name}) {:?}: top-10 log-probabilities off by {} on average",
                    self.model,
                    r.prompt,
                    a.mean_logprob_diff
                );
                assert!(
                    a.max_logprob_diff <= self.max_logprob_tol,
                    "{} ({name}) {:?}: a top-10 log-probability off by {}",
                    self.model,
                    r.prompt,
                    a.max_logprob_diff
                );
            }
        }
    }
}

/// A tiny GGUF file of `tests/data/tiny` against llama.cpp.
fn tiny(model: &'static str) -> Tiny {
    Tiny {
        model,
        path: tiny_dir().join(format!("{model}.gguf")),
        refs_dir: tiny_dir(),
        mean_prob_tol: MEAN_PROB_TOL,
        mean_logprob_tol: MEAN_LOGPROB_TOL,
        max_logprob_tol: MAX_LOGPROB_TOL,
        allowed_misses: 0,
    }
}

fn check(model: &'static str) {
    check_with(tiny(model))
}

fn check_moe(model: &'static str) {
    check_with(Tiny {
        mean_logprob_tol: MEAN_LOGPROB_TOL_MOE,
        max_logprob_tol: MAX_LOGPROB_TOL_MOE,
        allowed_misses: ARGMAX_MISSES_MOE,
        ..tiny(model)
    })
}

fn check_with(t: Tiny) {
    for kind in test_backends() {
        eprintln!("{} on {kind}", t.model);
        cinder::backends::dispatch(kind, t.clone()).expect("backend");
    }
}
#[test]
fn llama3_rope_freqs_match_llama_cpp() {
    check("llama3-tiny");
}

#[test]
fn qwen3_matches_llama_cpp() {
    check("qwen3-tiny");
}

#[test]
fn phi3_fused_projections_and_longrope_match_llama_cpp() {
    check("phi3-tiny");
}

#[test]
fn qwen3_moe_matches_llama_cpp() {
    check_moe("qwen3moe-tiny");
}

#[test]
fn olmoe_matches_llama_cpp() {
    check_moe("olmoe-tiny");
}

#[test]
fn mixtral_style_llama_moe_matches_llama_cpp() {
    check_moe("mixtral-tiny");
}

/// Qwen2 with biases on Q, K and V and an untied head; the same with the head tied to the
/// embedding (the small Qwen2.5 sizes). Without its biases `qwen2-tiny` is far from llama.cpp.
#[test]
fn qwen2_biases_and_tied_head_match_llama_cpp() {
    check("qwen2-tiny");
    check("qwen2-tied-tiny");
}

/// Qwen3 with YaRN scaling (a 4x extension of an original context of 16 tokens, which every
/// prompt passes): the ramp between kept and interpolated rotation pairs and the attention factor
/// against llama.cpp's.
#[test]
fn qwen3_yarn_matches_llama_cpp() {
    check("qwen3-yarn-tiny");
}

// ---- checkpoints saved by transformers ---------------------------------------------------------

/// Bars for a checkpoint read from SafeTensors against the transformers forward of the same
/// weights in float32. Float32 weights: through the contiguous cache the log-probabilities agree to
/// 4 decimals (measured 0.0000 on flex); the paged cache stores K/V in f16 (measured mean 0.0008–0.0027,
/// largest 0.023). A checkpoint misread is far off: `qwen2-f32` with its `rope_parameters` ignored
/// (RoPE base 10,000 instead of 1,000,000) measured mean 1.0, largest 6.9.
const HF_F32: (f32, f32) = (0.01, 0.05);
/// Bfloat16 weights multiply activations rounded to bfloat16, as llama.cpp does (transformers'
/// float32 reference keeps them float32): measured mean 0.011–0.016, largest 0.097 on flex.
const HF_BF16: (f32, f32) = (0.03, 0.2);
/// Mean top-5 probability difference for both (measured up to 0.0015).
const HF_MEAN_PROB_TOL: f32 = 0.005;

/// A folder of `tests/data/hf-tiny` (written by `transformers`' `save_pretrained`, made by
/// `benches/reference/hf_tiny_checkpoints.py`) against the logits transformers computed.
fn check_hf(model: &'static str) {
    let (mean, max) = if model.ends_with("bf16") {
        HF_BF16
    } else {
        HF_F32
    };
    check_with(Tiny {
        model,
        path: hf_dir().join(model),
        refs_dir: hf_dir(),
        mean_prob_tol: HF_MEAN_PROB_TOL,
        mean_logprob_tol: mean,
        max_logprob_tol: max,
        allowed_misses: 0,
    })
}

/// Llama, Qwen2 (biases, tied head), Qwen3 (Q/K norms, a head width apart from hidden/heads),
/// Phi-3 (fused `qkv_proj` and `gate_up_proj`), Mixtral (`block_sparse_moe` experts) and Qwen3
/// with YaRN (`rope_type` yarn past an original context of 16) as transformers saves them, in float32 and bfloat16, with its config keys (`rope_parameters`)
/// and tokenizer files.
#[test]
fn transformers_checkpoints_match_transformers() {
    for model in [
        "llama-f32",
        "llama-bf16",
        "qwen2-f32",
        "qwen2-bf16",
        "qwen3-f32",
        "phi3-f32",
        "mixtral-f32",
        "qwen3-yarn-f32",
    ] {
        check_hf(model);
    }
}

/// One line of a `*.embeddings.jsonl` file: llama.cpp's tokens and pooled, L2-normalized vector.
#[derive(Debug, Deserialize)]
struct EmbeddingRef {
    tokens: Vec<u32>,
    embedding: Vec<f32>,
}

/// The prompts file's texts (`\n` in a line is a newline), as the reference tools read them.
fn prompts() -> Vec<String> {
    std::fs::read_to_string(tiny_dir().join("prompts.txt"))
        .expect("prompts")
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| l.replace("\\n", "\n"))
        .collect()
}

/// Least cosine similarity to llama.cpp's vectors accepted. llama.cpp's reference runs its
/// flash-attention path; its own non-flash path gives 0.999904, 0.999700 and 0.999712 against it on
/// these three texts (measured), and Cinder 0.999904, 0.999700 and 0.999732: this random two-layer
/// model amplifies rounding. The bar leaves room for the other backends' summation orders.
const MIN_COSINE: f32 = 0.999;

struct Embeddings;

impl BackendTask for Embeddings {
    type Output = ();
    fn run<B: InferenceBackend>(self, device: B::Device) {
        let path = tiny_dir().join("qwen3-tiny.gguf");
        let e = cinder::importer::load_text_embedder::<B>("qwen3-tiny", &path, &device)
            .expect("a GGUF with a pooling type loads as an embedder");
        let text = std::fs::read_to_string(tiny_dir().join("qwen3-tiny.embeddings.jsonl"))
            .expect("reference");
        let refs: Vec<EmbeddingRef> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("reference line"))
            .collect();
        let texts = prompts();
        assert_eq!(refs.len(), texts.len());
        let strs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let vectors = e.embed(&strs, true).expect("embed");
        let mut cosines = Vec::new();
        for ((t, r), v) in texts.iter().zip(&refs).zip(&vectors) {
            assert_eq!(e.token_ids(t).expect("tokens"), r.tokens, "{t:?}");
            assert_eq!(v.len(), r.embedding.len(), "dim");
            let cos: f32 = v.iter().zip(&r.embedding).map(|(a, b)| a * b).sum();
            eprintln!(
                "qwen3-tiny embedding on {}, {t:?}: cosine {cos:.6}",
                B::KIND
            );
            cosines.push(cos);
        }
        for (t, cos) in texts.iter().zip(&cosines) {
            assert!(*cos >= MIN_COSINE, "{t:?}: cosine {cos} to llama.cpp's");
        }
        // A generative GGUF (no pooling type) is not an embedding model.
        let generative = tiny_dir().join("llama3-tiny.gguf");
        let err = cinder::importer::load_text_embedder::<B>("llama3-tiny", &generative, &device)
            .expect_err("a generative model loaded as an embedder");
        assert!(err.to_string().contains("pooling_type"), "{err}");
    }
}

#[test]
fn last_token_embeddings_match_llama_cpp() {
    for kind in test_backends() {
        cinder::backends::dispatch(kind, Embeddings).expect("backend");
    }
}
