//! Continuous batching on the real models: N different prompts generated together give exactly the
//! tokens each gives alone (greedy), also when prefill is chunked, when sequences are preempted and
//! recomputed, and when the prompt comes from the prefix cache.

mod common;

use cinder::prelude::*;
use cinder::runtime::engine::{Engine, EngineConfig, Event, EventStream, Request};
use cinder::runtime::kv::{KvBudget, KvType};
use cinder::runtime::scheduler::SchedulerConfig;
use common::*;

const GEN: usize = 20;

/// The reference prompts plus a few of other lengths and languages.
fn prompts(reference: &str) -> Vec<String> {
    reference_prompts(
        reference,
        &[
            "Rust is a systems programming language that",
            "1, 2, 3, 4, 5,",
            "Die Hauptstadt von Deutschland ist",
        ],
    )
}

fn request(ids: Vec<u32>) -> Request {
    Request {
        stop_on_eos: false,
        ..Request::greedy(ids, GEN)
    }
}

/// Submits every prompt at once; returns each one's tokens (in prompt order) and the engine's
/// preemption count.
fn run_together<B: InferenceBackend>(
    m: &cinder::importer::LoadedModel<B>,
    encoded: &[Vec<u32>],
    cfg: EngineConfig,
) -> (Vec<Vec<u32>>, u64) {
    let engine =
        Engine::start::<B, _>(m.model.clone(), m.tokenizer.clone(), cfg).expect("engine starts");
    let h = engine.handle();
    let streams: Vec<EventStream> = encoded
        .iter()
        .map(|ids| h.submit(request(ids.clone())).expect("submit"))
        .collect();
    let out: Vec<Vec<u32>> = streams
        .into_iter()
        .map(|s| {
            let (toks, reason, _) = collect_stream(s);
            assert_eq!(reason, FinishReason::Length);
            toks
        })
        .collect();
    let preemptions = h.stats().preemptions;
    (out, preemptions)
}

struct BatchedEqualsAlone {
    model: &'static str,
    reference: &'static str,
    kv_type: KvType,
}

impl BackendTask for BatchedEqualsAlone {
    type Output = ();
    fn run<B: InferenceBackend>(self, device: B::Device) {
        let m = cinder::importer::load_model::<B>(&model_file(self.model), &device).expect("load");
        let encoded: Vec<Vec<u32>> = prompts(self.reference)
            .iter()
            .map(|p| m.tokenizer.encode(p, true).expect("encode"))
            .collect();
        let base = EngineConfig {
            kv_type: self.kv_type,
            ..EngineConfig::default()
        };
        // Alone: one request at a time through the engine.
        let alone: Vec<Vec<u32>> = encoded
            .iter()
            .map(|ids| {
                run_together(&m, std::slice::from_ref(ids), base.clone())
                    .0
                    .remove(0)
            })
            .collect();
        for (i, a) in alone.iter().enumerate() {
            assert_eq!(a.len(), GEN, "prompt {i}");
        }
        // Together, default limits: every sequence in one batch.
        let (together, _) = run_together(&m, &encoded, base.clone());
        assert_eq!(
            together, alone,
            "{}: batched differs from alone",
            self.model
        );
        // Chunked prefill: 7 tokens per step, so prompts are split and mixed with decodes.
        let chunked = EngineConfig {
            scheduler: SchedulerConfig {
                max_batched_tokens: 7,
                max_seqs: 16,
            },
            ..base.clone()
        };
        let (out, _) = run_together(&m, &encoded, chunked);
        assert_eq!(out, alone, "{}: chunked prefill differs", self.model);
        // A KV budget too small for all at once: the newest sequences are preempted and recomputed.
        let longest = encoded.iter().map(Vec::len).max().unwrap_or(0) + GEN;
        let tight = EngineConfig {
            kv_budget: Some(KvBudget::Tokens(2 * longest + 16)),
            block_size: 4,
            ..base
        };
        let (out, preemptions) = run_together(&m, &encoded, tight);
        assert!(
            preemptions > 0,
            "{}: the tight budget never preempted",
            self.model
        );
        eprintln!("{}: {preemptions} preemptions", self.model);
        assert_eq!(out, alone, "{}: preempted + recomputed differs", self.model);
    }
}

#[test]
fn smollm2_batched_chunked_and_preempted_equal_alone() {
    for kind in test_backends() {
        dispatch(
            kind,
            BatchedEqualsAlone {
                model: "smollm2-135m",
                reference: "smollm2-135m-q4_1.greedy.jsonl",
                kv_type: KvType::F16,
            },
        )
        .expect("backend");
    }
}

#[test]
fn gemma3_batched_chunked_and_preempted_equal_alone() {
    dispatch(
        primary_backend(),
        BatchedEqualsAlone {
            model: "gemma3-270m",
            reference: "gemma-3-270m-q4_k_m.greedy.jsonl",
            kv_type: KvType::F16,
        },
    )
    .expect("backend");
}

/// A quantized KV cache keeps the property: its rows are dequantized to the same f16 values
/// whichever kernel path reads them (a decode step, a 7-token prefill chunk's shared tiles).
#[test]
fn quantized_kv_batched_chunked_and_preempted_equal_alone() {
    for (model, reference, kv_type) in [
        (
            "smollm2-135m",
            "smollm2-135m-q4_1.greedy.jsonl",
            KvType::Q8_0,
        ),
        (
            "gemma3-270m",
            "gemma-3-270m-q4_k_m.greedy.jsonl",
            KvType::Q4_0,
        ),
    ] {
        dispatch(
            primary_backend(),
            BatchedEqualsAlone {
                model,
                reference,
                kv_type,
            },
        )
        .expect("backend");
    }
}

/// A mixture of experts routes each token on its own and groups a step's tokens by expert, so a
/// sequence's tokens must not depend on what else shares its steps (the tiny Qwen3-MoE file has the
/// SmolLM2 tokenizer, so SmolLM2's prompts serve).
#[test]
fn moe_batched_chunked_and_preempted_equal_alone() {
    dispatch(
        primary_backend(),
        BatchedEqualsAlone {
            model: "qwen3moe-tiny",
            reference: "smollm2-135m-q4_1.greedy.jsonl",
            kv_type: KvType::F16,
        },
    )
    .expect("backend");
}

struct PrefixHits;

impl BackendTask for PrefixHits {
    type Output = ();
    fn run<B: InferenceBackend>(self, device: B::Device) {
        let m =
            cinder::importer::load_model::<B>(&model_path("smollm2-135m"), &device).expect("load");
        let engine = Engine::start::<B, _>(
            m.model.clone(),
            m.tokenizer.clone(),
            EngineConfig::default(),
        )
        .expect("engine");
        let h = engine.handle();
        let system = "You are a careful assistant. Answer briefly and cite the rule you used. \
                      Rules: be kind; be exact; never guess a number you cannot compute.";
        let a = m
            .tokenizer
            .encode(&format!("{system}\nQ: What is 12 times 12?\nA:"), true)
            .expect("encode");
        let b = m
            .tokenizer
            .encode(&format!("{system}\nQ: Name a prime above 90.\nA:"), true)
            .expect("encode");
        let (cold, _, cached0) = collect_stream(h.submit(request(a.clone())).expect("submit"));
        assert_eq!(cached0, 0, "first request cannot hit");
        // The same prompt again: every full block but the one holding the last token is reused.
        let (warm, _, cached1) = collect_stream(h.submit(request(a.clone())).expect("submit"));
        assert_eq!(warm, cold, "prefix-cache hit changed the tokens");
        assert_eq!(cached1, (a.len() - 1) / 16 * 16);
        // A different question after the same system prompt reuses the shared full blocks.
        let (_, _, cached2) = collect_stream(h.submit(request(b.clone())).expect("submit"));
        let shared = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
        assert_eq!(cached2, shared / 16 * 16);
        assert!(
            cached2 >= 16,
            "shared prefix of {shared} tokens gave no hit"
        );
        // Stats are published at the end of each step, just after the last event went out.
        let t0 = std::time::Instant::now();
        let mut st = h.stats();
        while st.kv_blocks_used != 0 && t0.elapsed().as_secs() < 5 {
            std::thread::sleep(std::time::Duration::from_millis(5));
            st = h.stats();
        }
        assert!(st.prefix_hit_tokens >= (cached1 + cached2) as u64);
        assert_eq!(st.kv_blocks_used, 0, "finished requests still own blocks");
    }
}

#[test]
fn prefix_cache_hits_give_the_same_tokens() {
    dispatch(primary_backend(), PrefixHits).expect("backend");
}

struct CancelAndTimeout;

impl BackendTask for CancelAndTimeout {
    type Output = ();
    fn run<B: InferenceBackend>(self, device: B::Device) {
        let m =
            cinder::importer::load_model::<B>(&model_path("smollm2-135m"), &device).expect("load");
        let engine = Engine::start::<B, _>(
            m.model.clone(),
            m.tokenizer.clone(),
            EngineConfig::default(),
        )
        .expect("engine");
        let h = engine.handle();
        let ids = m
            .tokenizer
            .encode("Write a long story about a dragon.", true)
            .expect("encode");
        let wait_for = |what: &str, f: &dyn Fn() -> bool| {
            let t0 = std::time::Instant::now();
            while !f() {
                assert!(t0.elapsed().as_secs() < 10, "timed out waiting for {what}");
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        };
        // A request dropped mid-generation frees its blocks within a step or two.
        let mut s = h
            .submit(Request {
                max_tokens: 500,
                ..request(ids.clone())
            })
            .expect("submit");
        for _ in 0..3 {
            assert!(matches!(s.blocking_next(), Some(Event::Token { .. })));
        }
        assert!(h.stats().kv_blocks_used > 0);
        drop(s);
        wait_for("blocks to return", &|| {
            let st = h.stats();
            st.kv_blocks_used == 0 && st.running == 0
        });
        // A deadline ends the request with Timeout, and the engine serves the next one.
        let s = h
            .submit(Request {
                max_tokens: 500,
                timeout: Some(std::time::Duration::from_millis(150)),
                ..request(ids.clone())
            })
            .expect("submit");
        let (toks, reason, _) = collect_stream(s);
        assert_eq!(reason, FinishReason::Timeout);
        assert!(toks.len() < 500);
        let (toks, reason, _) = collect_stream(h.submit(request(ids)).expect("submit"));
        assert_eq!((toks.len(), reason), (GEN, FinishReason::Length));
        wait_for("blocks to return", &|| h.stats().kv_blocks_used == 0);
    }
}

#[test]
fn dropping_the_stream_frees_blocks_and_deadlines_end_requests() {
    dispatch(primary_backend(), CancelAndTimeout).expect("backend");
}

struct BadRequests;

impl BackendTask for BadRequests {
    type Output = ();
    fn run<B: InferenceBackend>(self, device: B::Device) {
        let m =
            cinder::importer::load_model::<B>(&model_path("smollm2-135m"), &device).expect("load");
        let cfg = EngineConfig {
            kv_budget: Some(KvBudget::Tokens(256)),
            ..EngineConfig::default()
        };
        let engine =
            Engine::start::<B, _>(m.model.clone(), m.tokenizer.clone(), cfg).expect("engine");
        let h = engine.handle();
        let err = |r: Request| h.submit(r).expect_err("must be refused").to_string();
        assert!(err(Request::greedy(vec![], 4)).contains("empty prompt"));
        assert!(err(Request::greedy(vec![1, 2], 0)).contains("max_tokens"));
        assert!(err(Request::greedy(vec![1, 999_999], 4)).contains("outside the vocabulary"));
        // Longer than the whole KV budget: refused up front, never admitted to stall the queue.
        assert!(err(Request::greedy(vec![1; 250], 10)).contains("exceeds the context length 256"));
        let mut bad = Request::greedy(vec![1, 2], 4);
        bad.sampling.temperature = -1.0;
        assert!(err(bad).contains("temperature"));
        assert_eq!(
            h.stats().waiting,
            0,
            "refused requests must not hold queue slots"
        );
        // Liveness follows the engine thread: /health reports a stopped engine.
        assert!(h.is_alive());
        engine.shutdown();
        assert!(!h.is_alive(), "a stopped engine must not report alive");
        assert!(err(Request::greedy(vec![1, 2], 4)).contains("shut down"));
    }
}

#[test]
fn invalid_requests_are_refused_with_the_reason() {
    dispatch(primary_backend(), BadRequests).expect("backend");
}
