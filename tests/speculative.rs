//! Speculative decoding on the real SmolLM2, by prompt lookup and with a draft model (SmolLM2
//! requantized to Q4_0 by `cinder quantize`, and SmolLM2 itself): greedy output with speculation
//! is token for token the output without it — alone, batched with other sequences, with chunked
//! prefill and a tight token budget — and drafts that should be right are accepted.
//! (That sampling keeps the target distribution is tested on the sampler itself:
//! `sampler::speculative_tests`.)

mod common;

use cinder::prelude::*;
use cinder::runtime::engine::{
    Engine, EngineConfig, EngineStats, EventStream, Request, SpeculativeConfig,
};
use cinder::runtime::sampler::SamplingParams;
use cinder::runtime::scheduler::SchedulerConfig;
use common::*;

const GEN: usize = 40;

fn prompts() -> Vec<String> {
    reference_prompts(
        "smollm2-135m-q4_1.greedy.jsonl",
        // Text that repeats itself: what prompt lookup is for.
        &[
            "Copy the code exactly.\nfn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n\nCopy:\nfn add(a: i32,",
            "red, green, blue, red, green, blue, red, green, blue, red,",
        ],
    )
}

/// Every prompt submitted at once; each one's tokens, and the engine's figures.
fn run<B: InferenceBackend>(
    m: &cinder::importer::LoadedModel<B>,
    encoded: &[Vec<u32>],
    cfg: EngineConfig,
    sampling: SamplingParams,
) -> (Vec<Vec<u32>>, EngineStats) {
    run_with(m, None, encoded, cfg, sampling)
}

/// As [`run`], with `draft` proposing the speculative tokens.
fn run_with<B: InferenceBackend>(
    m: &cinder::importer::LoadedModel<B>,
    draft: Option<&cinder::importer::LoadedModel<B>>,
    encoded: &[Vec<u32>],
    cfg: EngineConfig,
    sampling: SamplingParams,
) -> (Vec<Vec<u32>>, EngineStats) {
    let draft = draft.map(|d| Box::new(d.model.clone()) as Box<dyn CausalLm<B> + Send + Sync>);
    let engine = Engine::start_with_draft::<B, _>(m.model.clone(), draft, m.tokenizer.clone(), cfg)
        .expect("engine");
    let h = engine.handle();
    let streams: Vec<EventStream> = encoded
        .iter()
        .map(|ids| {
            h.submit(Request {
                stop_on_eos: false,
                sampling: sampling.clone(),
                ..Request::greedy(ids.clone(), GEN)
            })
            .expect("submit")
        })
        .collect();
    let out = streams.into_iter().map(collect_to_length).collect();
    (out, h.stats())
}

fn spec(k: usize) -> EngineConfig {
    EngineConfig {
        speculative: Some(SpeculativeConfig {
            draft_tokens: k,
            ..SpeculativeConfig::default()
        }),
        ..EngineConfig::default()
    }
}

/// Each prompt's greedy tokens, run alone without speculation: what every other run must equal.
fn alone_greedy<B: InferenceBackend>(
    m: &cinder::importer::LoadedModel<B>,
    encoded: &[Vec<u32>],
) -> Vec<Vec<u32>> {
    encoded
        .iter()
        .map(|ids| {
            run(
                m,
                std::slice::from_ref(ids),
                EngineConfig::default(),
                SamplingParams::greedy(),
            )
            .0
            .remove(0)
        })
        .collect()
}

/// SmolLM2 and the prompts, tokenized.
fn load_encoded<B: InferenceBackend>(
    device: &B::Device,
) -> (cinder::importer::LoadedModel<B>, Vec<Vec<u32>>) {
    let m = cinder::importer::load_model::<B>(&model_path("smollm2-135m"), device).expect("load");
    let encoded = prompts()
        .iter()
        .map(|p| m.tokenizer.encode(p, true).expect("encode"))
        .collect();
    (m, encoded)
}

struct GreedyUnchanged;

impl BackendTask for GreedyUnchanged {
    type Output = ();
    fn run<B: InferenceBackend>(self, device: B::Device) {
        let (m, encoded) = load_encoded::<B>(&device);
        let greedy = SamplingParams::greedy;
        let alone = alone_greedy(&m, &encoded);
        // Alone, with speculation.
        let mut drafted = 0;
        for (i, ids) in encoded.iter().enumerate() {
            let (out, st) = run(&m, std::slice::from_ref(ids), spec(5), greedy());
            assert_eq!(
                out[0], alone[i],
                "prompt {i}: speculation changed the output"
            );
            drafted += st.spec_draft_tokens;
        }
        assert!(drafted > 0, "nothing was drafted");
        // All together, with speculation, and again with a 7-token step budget (chunked prefill,
        // drafts cut to what fits).
        let (together, st) = run(&m, &encoded, spec(5), greedy());
        assert_eq!(together, alone, "batched + speculation differs from alone");
        let tight = EngineConfig {
            scheduler: SchedulerConfig {
                max_batched_tokens: 7,
                max_seqs: 16,
            },
            ..spec(5)
        };
        let (chunked, _) = run(&m, &encoded, tight, greedy());
        assert_eq!(chunked, alone, "chunked + speculation differs from alone");
        // On the repetitive prompts most drafts are right.
        let n = encoded.len();
        let (_, rep) = run(&m, &encoded[n - 2..], spec(5), greedy());
        let rate = rep.spec_accepted_tokens as f64 / rep.spec_draft_tokens.max(1) as f64;
        eprintln!(
            "prompt lookup: all prompts {}/{} drafts accepted; repetitive prompts {}/{} ({:.0}%), \
             {} steps for {} tokens",
            st.spec_accepted_tokens,
            st.spec_draft_tokens,
            rep.spec_accepted_tokens,
            rep.spec_draft_tokens,
            100.0 * rate,
            rep.steps,
            rep.generated_tokens
        );
        assert!(
            rate > 0.5,
            "acceptance {rate:.2} on text that repeats itself"
        );
        assert!(
            (rep.steps as usize) < 2 * GEN,
            "speculation should need fewer forwards than tokens ({} steps)",
            rep.steps
        );
    }
}

#[test]
fn greedy_output_is_unchanged_by_prompt_lookup_speculation() {
    dispatch(primary_backend(), GreedyUnchanged).expect("backend");
}

struct SampledRuns;

impl BackendTask for SampledRuns {
    type Output = ();
    fn run<B: InferenceBackend>(self, device: B::Device) {
        let (m, encoded) = load_encoded::<B>(&device);
        let sampling = SamplingParams {
            temperature: 0.7,
            seed: 11,
            ..SamplingParams::default()
        };
        // Sampled runs stay within the length and vocabulary, and accept drafts at all.
        let (out, st) = run(&m, &encoded, spec(4), sampling);
        for o in &out {
            assert_eq!(o.len(), GEN);
            assert!(o.iter().all(|&t| (t as usize) < m.model.vocab_size()));
        }
        assert!(
            st.spec_draft_tokens > 0 && st.spec_accepted_tokens > 0,
            "{st:?}"
        );
    }
}

#[test]
fn sampled_generation_with_speculation_runs_to_length() {
    dispatch(primary_backend(), SampledRuns).expect("backend");
}

struct DraftModelUnchanged;

impl BackendTask for DraftModelUnchanged {
    type Output = ();
    fn run<B: InferenceBackend>(self, device: B::Device) {
        let (m, encoded) = load_encoded::<B>(&device);
        // The draft: SmolLM2 requantized to pure Q4_0 (same tokenizer, different weights, so
        // some drafts are rejected and rolled back).
        let dir = tempfile::tempdir().expect("tmp");
        let q4 = dir.path().join("smol-q4_0.gguf");
        let st = std::process::Command::new(env!("CARGO_BIN_EXE_cinder"))
            .args(["quantize", "smollm2-135m"])
            .arg(&q4)
            .args(["--type", "q4_0", "--allow-requantize"])
            .status()
            .expect("cinder quantize runs");
        assert!(st.success());
        let draft = cinder::importer::load_model::<B>(&q4, &device).expect("draft loads");
        cinder::runtime::engine::check_draft_tokenizer(&m.tokenizer, &draft.tokenizer)
            .expect("same tokenizer");
        let greedy = SamplingParams::greedy;
        let alone = alone_greedy(&m, &encoded);
        for (i, ids) in encoded.iter().enumerate() {
            let (out, _) = run_with(
                &m,
                Some(&draft),
                std::slice::from_ref(ids),
                spec(4),
                greedy(),
            );
            assert_eq!(
                out[0], alone[i],
                "prompt {i}: the draft model changed the output"
            );
        }
        let (together, st) = run_with(&m, Some(&draft), &encoded, spec(4), greedy());
        assert_eq!(together, alone, "batched + draft model differs from alone");
        let rate = st.spec_accepted_tokens as f64 / st.spec_draft_tokens.max(1) as f64;
        let tight = EngineConfig {
            scheduler: SchedulerConfig {
                max_batched_tokens: 7,
                max_seqs: 16,
            },
            ..spec(4)
        };
        let (chunked, _) = run_with(&m, Some(&draft), &encoded, tight, greedy());
        assert_eq!(chunked, alone, "chunked + draft model differs from alone");
        // The target drafting for itself: nearly every draft is the target's own choice.
        let (same, self_st) = run_with(&m, Some(&m), &encoded, spec(4), greedy());
        assert_eq!(same, alone, "self-drafting differs from alone");
        let self_rate =
            self_st.spec_accepted_tokens as f64 / self_st.spec_draft_tokens.max(1) as f64;
        eprintln!(
            "draft model: Q4_0 draft {}/{} accepted ({:.0}%), self-draft {}/{} ({:.0}%)",
            st.spec_accepted_tokens,
            st.spec_draft_tokens,
            100.0 * rate,
            self_st.spec_accepted_tokens,
            self_st.spec_draft_tokens,
            100.0 * self_rate
        );
        assert!(
            st.spec_draft_tokens > 0 && rate > 0.3,
            "Q4_0 draft acceptance {rate:.2}"
        );
        assert!(self_rate > 0.9, "self-draft acceptance {self_rate:.2}");
        // Sampling with drafts: runs to length inside the vocabulary, accepting some.
        let sampling = SamplingParams {
            temperature: 0.7,
            seed: 5,
            ..SamplingParams::default()
        };
        let (out, st) = run_with(&m, Some(&draft), &encoded, spec(4), sampling);
        assert!(out.iter().all(|o| o.len() == GEN));
        assert!(st.spec_accepted_tokens > 0, "{st:?}");
    }
}

#[test]
fn greedy_output_is_unchanged_by_draft_model_speculation() {
    dispatch(primary_backend(), DraftModelUnchanged).expect("backend");
}
