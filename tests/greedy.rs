//! Greedy generation against llama.cpp's reference tokens and top-5 probabilities, on the real models.
//!
//! Both models are checked teacher-forced, with the noise llama.cpp itself has; SmolLM2 also keeps the
//! first-step bar (top-5 probabilities within 0.03) on the contiguous cache.
//!
//! The reference was made with llama.cpp's flash-attention CPU path (node-llama-cpp's default; run on
//! a machine of this kind, 2026-12-04, it reproduces the file exactly with flash attention and gives
//! "Paris" 0.768 instead of 0.780 without) and with the CPU variant ggml picks for the machine (zen4
//! there; its haswell build differs by up to 0.02, below). The paged cache stores K/V in f16 and
//! rounds q and the probabilities to f16 as llama.cpp's non-flash path does; measured there, that
//! path gives "Paris" 0.740, and leaving out only the q rounding gives 0.772, only the probability
//! rounding 0.774, both 0.793: single f16 roundings move first-step probabilities by ~0.03, the
//! width of the bar. So the paged cache is held to the noise bar, and the first-step bar to the
//! contiguous cache (f32 attention: 0.771 there).
//!
//! Why not free-running equality: llama.cpp rounds every matmul input to 8-bit blocks, which makes the
//! network a step function of its inputs, and the reference file encodes one CPU's rounding. Measured on this machine, the
//! same llama.cpp build (node-llama-cpp 3.22.1) that made the reference disagrees with the reference file
//! by up to 0.02 in first-step probabilities and forks at a reference near-tie (0.0929 vs 0.0924, prompt
//! 3, step 3): the reference encodes one CPU's rounding. So for Gemma: at each of the first 16 steps our
//! argmax is the reference token or one the reference rates within 0.02 of it; the top-5 probabilities
//! over those steps average within 0.015. (Single probabilities move by up to ~0.1 here when one
//! activation scale changes by an ulp: Gemma 3 270M at Q4_K_M is that sensitive, so only the average is a
//! stable measure.)

mod common;

use cinder::backends::BackendKind;
use cinder::prelude::*;
use cinder::runtime::attention::{AttentionCache, ContiguousKvCache};
use cinder::runtime::generate::prefill;
use cinder::runtime::kv::SeqPagedCache;
use cinder::runtime::model::{logits_to_vec, token_tensor};
use cinder::runtime::sampler::top_k_probs;
use common::*;

/// Tokens compared, per prompt.
const MATCH_TOKENS: usize = 16;
/// Largest allowed difference of a top-5 probability at the first step (SmolLM2).
const PROB_TOL: f32 = 0.03;

#[derive(Clone, Copy)]
enum Bar {
    /// [`Bar::WithinNoise`] plus first-step top-5 within `PROB_TOL`.
    FirstStep,
    /// Teacher-forced agreement within llama.cpp's own run-to-run noise (see the module docs).
    WithinNoise,
}

struct Check {
    model: &'static str,
    reference: &'static str,
    bar: Bar,
}

/// Probability of `tok` in a reference top-5 (0 if absent).
fn ref_prob(top5: &[(u32, f32)], tok: u32) -> f32 {
    top5.iter().find(|(t, _)| *t == tok).map_or(0.0, |x| x.1)
}

impl BackendTask for Check {
    type Output = ();
    fn run<B: InferenceBackend>(self, device: B::Device) {
        let path = model_path(self.model);
        let m = cinder::importer::load_model::<B>(&path, &device).expect("model loads");
        for r in greedy_refs(self.reference) {
            // Tokenizer agrees with llama.cpp on the prompt (BOS included when the model adds it).
            let ids = m.tokenizer.encode(&r.prompt, true).expect("encode");
            assert_eq!(ids, r.prompt_tokens, "prompt tokens for {:?}", r.prompt);
            let n = MATCH_TOKENS.min(r.greedy.len());
            check_within_noise::<B>(&m, &ids, &r, n, &device, self.bar);
        }
    }
}

fn check_within_noise<B: InferenceBackend>(
    m: &cinder::importer::LoadedModel<B>,
    ids: &[u32],
    r: &GreedyRef,
    n: usize,
    device: &B::Device,
    bar: Bar,
) {
    // Both attention paths: the contiguous cache (Burn ops) and the paged kernel the engine runs.
    let (kvh, hd) = m.model.kv_dims();
    let caches: Vec<(&str, Box<dyn AttentionCache<B>>)> = vec![
        (
            "contiguous",
            Box::new(ContiguousKvCache::<B>::new(m.model.n_layers(), 512)),
        ),
        (
            "paged",
            Box::new(
                SeqPagedCache::<B>::new(m.model.n_layers(), kvh, hd, 512, device)
                    .expect("paged cache"),
            ),
        ),
    ];
    for (name, mut cache) in caches {
        eprintln!("{:?} on the {name} cache", r.prompt);
        // The first-step bar on the contiguous cache (f32 attention); the paged cache rounds K, V, q
        // and the probabilities to f16, and each of those roundings alone moves SmolLM2's first-step
        // probabilities by ~0.03 (module docs), so it keeps the noise bar.
        let bar = if name == "paged" {
            Bar::WithinNoise
        } else {
            bar
        };
        check_steps(m, ids, r, n, device, bar, cache.as_mut());
    }
}

fn check_steps<B: InferenceBackend>(
    m: &cinder::importer::LoadedModel<B>,
    ids: &[u32],
    r: &GreedyRef,
    n: usize,
    device: &B::Device,
    bar: Bar,
    cache: &mut dyn AttentionCache<B>,
) {
    const NEAR_TIE: f32 = 0.02;
    const MEAN_TOL: f32 = 0.015;
    let mut logits = prefill(&m.model, cache, ids).expect("prefill");
    let (mut sum, mut count) = (0.0f32, 0usize);
    // Steps allowed outside the near-tie bar: none on flex (`FirstStep`); one per prompt elsewhere.
    // Measured: SmolLM2's "Once upon a time" step 10 flips on flex too when the activation rounding
    // changes by one ulp (266 0.2761 vs 486 0.2802), and ndarray's float ops land on the other side.
    let allowed_misses = usize::from(matches!(bar, Bar::WithinNoise));
    let mut misses = 0usize;
    for (i, step) in r.steps.iter().take(n).enumerate() {
        let probs = top_k_probs(&logits, m.model.vocab_size());
        if i == 0 && matches!(bar, Bar::FirstStep) {
            for &(tok, p_ref) in &step.top5 {
                let p = probs.iter().find(|(t, _)| *t == tok).map_or(0.0, |x| x.1);
                assert!(
                    (p - p_ref).abs() <= PROB_TOL,
                    "{:?}: first step, token {tok} p={p} vs llama.cpp {p_ref}",
                    r.prompt
                );
            }
        }
        let ours_top = probs[0].0;
        let p_ref_top = ref_prob(&step.top5, step.token);
        let p_ref_ours = ref_prob(&step.top5, ours_top);
        // A near-tie on either side: the reference rates our pick within NEAR_TIE of its own, or we
        // rate the reference's pick within NEAR_TIE of ours.
        let p_ours_top = probs[0].1;
        let p_ours_ref = probs
            .iter()
            .find(|(t, _)| *t == step.token)
            .map_or(0.0, |x| x.1);
        let agree = ours_top == step.token
            || p_ref_top - p_ref_ours <= NEAR_TIE
            || p_ours_top - p_ours_ref <= NEAR_TIE;
        let allowed = !agree && misses < allowed_misses;
        if allowed {
            misses += 1;
            eprintln!(
                "{:?} step {i}: allowed miss, we pick {ours_top} (p {p_ours_top}), llama.cpp {} (p {p_ref_top})",
                r.prompt, step.token
            );
        }
        assert!(
            agree || allowed,
            "{:?} step {i}: we pick {ours_top} (p {p_ours_top}; reference p {p_ref_ours}), llama.cpp {} \
             (p {p_ref_top}; ours {p_ours_ref})",
            r.prompt,
            step.token
        );
        for &(tok, p_ref) in &step.top5 {
            let p = probs.iter().find(|(t, _)| *t == tok).map_or(0.0, |x| x.1);
            sum += (p - p_ref).abs();
            count += 1;
        }
        // Teacher forcing: continue with the reference's token.
        logits = logits_to_vec(m.model.forward(
            token_tensor::<B>(&[step.token], device),
            cache,
            Logits::Last,
        ))
        .expect("logits");
    }
    let mean = sum / count as f32;
    eprintln!("{:?}: mean top-5 difference {mean:.4}", r.prompt);
    assert!(
        mean <= MEAN_TOL,
        "{:?}: mean top-5 difference {mean}",
        r.prompt
    );
}

fn check_all(model: &'static str, reference: &'static str, bar: Bar) {
    for kind in test_backends() {
        // The first-step bar holds on flex; the other backends sum their float ops in other orders,
        // which moves single probabilities by up to ~0.04 here (measured), so they keep the noise bar.
        let bar = match (bar, kind) {
            (Bar::FirstStep, BackendKind::Flex) => Bar::FirstStep,
            _ => Bar::WithinNoise,
        };
        eprintln!("{model} greedy on {kind}");
        cinder::backends::dispatch(
            kind,
            Check {
                model,
                reference,
                bar,
            },
        )
        .expect("backend");
    }
}

#[test]
fn smollm2_greedy_matches_llama_cpp() {
    check_all(
        "smollm2-135m",
        "smollm2-135m-q4_1.greedy.jsonl",
        Bar::FirstStep,
    );
}

#[test]
fn gemma3_agrees_with_llama_cpp_within_its_noise() {
    // On the primary backend only: the other backends' fallback expands Gemma's 262k-row embedding
    // to f32 on the device (GiBs on lavapipe, minutes per run); SmolLM2 covers their code paths.
    let kind = primary_backend();
    eprintln!("gemma3-270m greedy on {kind}");
    cinder::backends::dispatch(
        kind,
        Check {
            model: "gemma3-270m",
            reference: "gemma-3-270m-q4_k_m.greedy.jsonl",
            bar: Bar::WithinNoise,
        },
    )
    .expect("backend");
}
