//! Layer offload (`--gpu-layers N`): the first N layers on an accelerator backend (wgpu; Mesa
//! lavapipe on machines without a GPU), the rest with the embedding and head on the CPU backend.
//! The split model must give the whole CPU model's greedy tokens through the engine (ragged
//! batches over the paged cache, prefix reuse, chunked prefill). Where it does not, the whole model
//! or the split model must rate the two tokens within [`NEAR_TIE`] of each other: the offloaded layers compute
//! with the accelerator's arithmetic, and any two backends fork at such near-ties (tests/greedy.rs).
//! Through a contiguous cache (the offloaded layers then run paged attention laid out like it), a
//! model with every layer offloaded must give the logits of the whole model on the accelerator
//! through a single-sequence paged cache. Runs where wgpu is compiled in (CI's backend pass); the
//! refusals run always.

mod common;

use cinder::backends::default_kind;
use cinder::importer::Offload;
use cinder::prelude::*;
use cinder::runtime::attention::ContiguousKvCache;
use cinder::runtime::engine::{Engine, EngineConfig, EventStream, Request};
use cinder::runtime::kv::SeqPagedCache;
use cinder::runtime::model::{logits_to_vec, token_tensor};
use cinder::runtime::scheduler::SchedulerConfig;
use common::*;

const GEN: usize = 16;

/// Runs every prompt together through one engine, `rounds` times in a row (the later rounds take
/// their prompts from the prefix cache); returns each round's tokens per prompt.
fn run<B: InferenceBackend>(
    m: &cinder::importer::LoadedModel<B>,
    encoded: &[Vec<u32>],
    cfg: EngineConfig,
    rounds: usize,
) -> Vec<Vec<Vec<u32>>> {
    let engine =
        Engine::start::<B, _>(m.model.clone(), m.tokenizer.clone(), cfg).expect("engine starts");
    let h = engine.handle();
    (0..rounds)
        .map(|_| {
            let streams: Vec<EventStream> = encoded
                .iter()
                .map(|ids| {
                    let r = Request {
                        stop_on_eos: false,
                        ..Request::greedy(ids.clone(), GEN)
                    };
                    h.submit(r).expect("submit")
                })
                .collect();
            streams.into_iter().map(collect_to_length).collect()
        })
        .collect()
}

/// Logits of every position of `ids`, fed as a prefill of all but the last 3 tokens and then 3
/// single-token steps, over a contiguous cache (`paged`: a single-sequence paged cache).
fn cached_logits<B: InferenceBackend>(
    m: &cinder::importer::LoadedModel<B>,
    ids: &[u32],
    paged: bool,
) -> Vec<Vec<f32>> {
    let device = m.model.device();
    let (kvh, hd) = m.model.kv_dims();
    let mut cache: Box<dyn cinder::runtime::attention::AttentionCache<B>> = if paged {
        Box::new(SeqPagedCache::<B>::new(m.model.n_layers(), kvh, hd, 256, &device).expect("cache"))
    } else {
        Box::new(ContiguousKvCache::<B>::new(m.model.n_layers(), 256))
    };
    let split = ids.len() - 3;
    let mut pieces = vec![&ids[..split]];
    pieces.extend(ids[split..].chunks(1));
    let mut rows = Vec::new();
    for p in pieces {
        let t = token_tensor::<B>(p, &device);
        let logits = m.model.forward(t, cache.as_mut(), Logits::All);
        let host = logits_to_vec(logits).expect("logits");
        let vocab = m.model.vocab_size();
        rows.extend(host.chunks(vocab).map(<[f32]>::to_vec));
    }
    rows
}

/// The single-sequence paged-cache logits of the whole model on the backend it is dispatched to.
struct WholeLogits(std::path::PathBuf, Vec<u32>);

impl BackendTask for WholeLogits {
    type Output = Vec<Vec<f32>>;
    fn run<B: InferenceBackend>(self, device: B::Device) -> Self::Output {
        let m = cinder::importer::load_model::<B>(&self.0, &device).expect("load");
        cached_logits(&m, &self.1, true)
    }
}

/// Largest probability gap at which two backends' arithmetic may pick different tokens. Scored
/// against flex on 2,048 tokens of the Lee corpus (`cinder perplexity smollm2-135m --file
/// lee-corpus --ctx 512 --chunks 4 --kl-divergence`), ndarray, candle and wgpu each move the
/// reference token's probability by 1.2–1.3% RMS and by 8–13% at their worst position; a greedy
/// path through 16 generated tokens meets such positions. A fork where either model rates the two
/// tokens within 0.05 is that noise; a wrong model forks where neither is close.
const NEAR_TIE: f32 = 0.05;

/// The next-token probabilities of `m` after `ids`, through a single-sequence paged cache (the
/// engine's arithmetic: f16 K/V on the host backends).
fn next_probs<B: InferenceBackend>(m: &cinder::importer::LoadedModel<B>, ids: &[u32]) -> Vec<f32> {
    let device = m.model.device();
    let (kvh, hd) = m.model.kv_dims();
    let mut cache = SeqPagedCache::<B>::new(m.model.n_layers(), kvh, hd, ids.len() + 1, &device)
        .expect("cache");
    let logits = m
        .model
        .forward(token_tensor::<B>(ids, &device), &mut cache, Logits::Last);
    let row = logits_to_vec(logits).expect("logits");
    let max = row.iter().copied().fold(f32::MIN, f32::max);
    let sum: f32 = row.iter().map(|l| (l - max).exp()).sum();
    row.iter().map(|l| (l - max).exp() / sum).collect()
}

/// Where `got` (the split model's greedy tokens) leaves `want` (the whole model's), the fork must
/// be a near-tie on either side, as in the greedy conformance test: the whole model rates the
/// split's token within [`NEAR_TIE`] of its own choice, or the split model rates the whole
/// model's token within [`NEAR_TIE`] of its own. A wrong model forks where neither side is close.
fn forks_at_near_ties<B: InferenceBackend>(
    whole: &cinder::importer::LoadedModel<B>,
    split: &cinder::importer::LoadedModel<B>,
    prompts: &[Vec<u32>],
    want: &[Vec<u32>],
    got: &[Vec<u32>],
) {
    for (i, ((p, w), g)) in prompts.iter().zip(want).zip(got).enumerate() {
        let Some(step) = w.iter().zip(g).position(|(a, b)| a != b) else {
            continue;
        };
        let mut ids = p.clone();
        ids.extend_from_slice(&w[..step]);
        let (tw, tg) = (w[step] as usize, g[step] as usize);
        let pw = next_probs(whole, &ids);
        let ps = next_probs(split, &ids);
        eprintln!(
            "prompt {i}: forks at step {step}: whole model {tw} (p {:.4}) over {tg} (p {:.4}); \
             split model {tg} (p {:.4}) over {tw} (p {:.4})",
            pw[tw], pw[tg], ps[tg], ps[tw]
        );
        assert!(
            pw[tw] - pw[tg] <= NEAR_TIE || ps[tg] - ps[tw] <= NEAR_TIE,
            "prompt {i}, step {step}: the whole model rates {tw} {:.4} and {tg} {:.4}, the split \
             model {tg} {:.4} and {tw} {:.4}: no near-tie on either side",
            pw[tw],
            pw[tg],
            ps[tg],
            ps[tw]
        );
    }
}

fn argmax(v: &[f32]) -> usize {
    v.iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or(0, |(i, _)| i)
}

/// Loads `model` whole and split at each of `splits` on the CPU backend `C` with wgpu for the
/// offloaded layers, and compares.
struct SplitEqualsWhole {
    model: &'static str,
    reference: &'static str,
    splits: &'static [usize],
    /// also check prefix reuse and chunked prefill at the first split, and the contiguous cache
    /// with every layer offloaded
    thorough: bool,
}

impl BackendTask for SplitEqualsWhole {
    type Output = ();
    fn run<C: InferenceBackend>(self, device: C::Device) {
        let path = model_path(self.model);
        let whole = cinder::importer::load_model::<C>(&path, &device).expect("load");
        let extra = [
            "Rust is a systems programming language that",
            "Die Hauptstadt von Deutschland ist",
        ];
        let encoded: Vec<Vec<u32>> = reference_prompts(self.reference, &extra)
            .iter()
            .map(|p| whole.tokenizer.encode(p, true).expect("encode"))
            .collect();
        let rounds = if self.thorough { 2 } else { 1 };
        let base = run(&whole, &encoded, EngineConfig::default(), 1).remove(0);
        for &n in self.splits {
            let split = cinder::importer::load_model_offloaded::<C>(&path, &device, wgpu(n))
                .expect("split model loads");
            let placement = split.model.placement().expect("the model is split");
            eprintln!("{}: {placement}", self.model);
            let all = whole.model.n_layers();
            let front = n.min(all);
            assert!(placement.starts_with(&format!("layers 0..{front} on wgpu")));
            assert_eq!(split.model.n_layers(), all - front);
            // The KV budget counts both devices' stores: f32 on wgpu's, the CPU backend's own.
            let (kvh, hd) = whole.model.kv_dims();
            assert_eq!(
                split.model.kv_bytes_per_token(),
                2 * kvh * hd * ((all - front) * C::KV_BYTES_PER_VALUE + front * 4)
            );
            // Together in one batch; a second round from the prefix cache.
            for (r, out) in run(&split, &encoded, EngineConfig::default(), rounds)
                .into_iter()
                .enumerate()
            {
                let same = out.iter().zip(&base).filter(|(a, b)| a == b).count();
                eprintln!(
                    "{} ({placement}), round {r}: {same} of {} prompts give the same {GEN} tokens",
                    self.model,
                    base.len()
                );
                forks_at_near_ties(&whole, &split, &encoded, &base, &out);
            }
            if !self.thorough || n != self.splits[0] {
                continue;
            }
            // Chunked prefill: 7 tokens per step, mixed with decodes.
            let chunked = EngineConfig {
                scheduler: SchedulerConfig {
                    max_batched_tokens: 7,
                    max_seqs: 16,
                },
                prefix_caching: false,
                ..EngineConfig::default()
            };
            let out = run(&split, &encoded, chunked, 1).remove(0);
            forks_at_near_ties(&whole, &split, &encoded, &base, &out);
            // A contiguous cache (the offloaded layers run paged attention laid out like it):
            // every layer offloaded is, but for the embedding and head, the whole model on wgpu.
            let ids = &encoded[0];
            let b = cached_logits(
                &cinder::importer::load_model_offloaded::<C>(&path, &device, wgpu(all))
                    .expect("split model loads"),
                ids,
                false,
            );
            let a =
                dispatch(BackendKind::Wgpu, WholeLogits(path.clone(), ids.clone())).expect("wgpu");
            assert_eq!(a.len(), b.len());
            let mut worst = 0f32;
            for (i, (x, y)) in a.iter().zip(&b).enumerate() {
                assert_eq!(argmax(x), argmax(y), "contiguous cache, position {i}");
                let d = x
                    .iter()
                    .zip(y)
                    .map(|(p, q)| (p - q).abs())
                    .fold(0f32, f32::max);
                worst = worst.max(d);
            }
            eprintln!(
                "{}: contiguous cache, every layer offloaded vs the whole model on wgpu: largest \
                 logit difference {worst}",
                self.model
            );
            assert!(worst < 0.02, "logits differ by {worst}");
        }
    }
}

/// The first `layers` layers on wgpu.
fn wgpu(layers: usize) -> Offload {
    Offload {
        accel: BackendKind::Wgpu,
        layers,
    }
}

fn wgpu_or_skip() -> bool {
    if !BackendKind::Wgpu.is_compiled() {
        eprintln!("wgpu is not compiled in: build with --features wgpu to run the offload tests");
        return false;
    }
    true
}

#[test]
fn smollm2_offloaded_layers_give_the_cpu_tokens() {
    if !wgpu_or_skip() {
        return;
    }
    let cpu = default_kind().expect("a CPU backend");
    dispatch(
        cpu,
        SplitEqualsWhole {
            model: "smollm2-135m",
            reference: "smollm2-135m-q4_1.greedy.jsonl",
            // (With all 30 layers on wgpu the tokens are the whole wgpu model's: lavapipe's
            // products depend on the batch's row count, and batched runs fork from the CPU's at
            // gaps up to 0.08; the contiguous check below covers that split.)
            splits: &[10],
            thorough: true,
        },
    )
    .expect("dispatch");
}

#[test]
fn gemma3_offloaded_layers_give_the_cpu_tokens() {
    if !wgpu_or_skip() {
        return;
    }
    let cpu = default_kind().expect("a CPU backend");
    // 6 splits just after global layer 5: the CPU share's local layer 0 is absolute layer 6.
    dispatch(
        cpu,
        SplitEqualsWhole {
            model: "gemma3-270m",
            reference: "gemma-3-270m-q4_k_m.greedy.jsonl",
            splits: &[6],
            thorough: false,
        },
    )
    .expect("dispatch");
}

struct Refusals;

impl BackendTask for Refusals {
    type Output = ();
    fn run<C: InferenceBackend>(self, device: C::Device) {
        let path = model_path("smollm2-135m");
        // The "accelerator" is a CPU backend.
        let refused = |accel| {
            let offload = Offload { accel, layers: 4 };
            match cinder::importer::load_model_offloaded::<C>(&path, &device, offload) {
                Ok(_) => panic!("offload to {accel} was not refused"),
                Err(e) => e.to_string(),
            }
        };
        let err = refused(C::KIND);
        assert!(err.contains("accelerator"), "{err}");
        // An accelerator that is not compiled in is named with its feature.
        if !BackendKind::Cuda.is_compiled() {
            let err = refused(BackendKind::Cuda);
            assert!(err.contains("--features cuda"), "{err}");
        }
        // 0 layers: the whole model on the CPU, not split.
        let none = Offload {
            accel: BackendKind::Cuda,
            layers: 0,
        };
        let m =
            cinder::importer::load_model_offloaded::<C>(&path, &device, none).expect("loads whole");
        assert!(m.model.placement().is_none());
        assert_eq!(m.model.n_layers(), 30);
    }
}

#[test]
fn offload_refuses_what_cannot_work() {
    dispatch(default_kind().expect("a CPU backend"), Refusals).expect("dispatch");
}

/// Each backend's device memory, as the KV budget sees it.
struct Memory;

impl BackendTask for Memory {
    type Output = Option<cinder::backends::memory::DeviceMemory>;
    fn run<B: InferenceBackend>(self, device: B::Device) -> Self::Output {
        B::device_memory(&device)
    }
}

#[test]
fn device_memory_is_known_on_every_backend_here() {
    let host = cinder::backends::memory::host_memory().expect("/proc/meminfo");
    for kind in test_backends() {
        if kind == BackendKind::Cuda {
            continue; // no GPU here; compiled, and run where a device machine is lent
        }
        let m = dispatch(kind, Memory)
            .expect("dispatch")
            .unwrap_or_else(|| panic!("{kind}: no memory figure"));
        eprintln!(
            "{kind}: {} MiB total, {} MiB free (host: {} MiB, {} MiB)",
            m.total >> 20,
            m.free >> 20,
            host.total >> 20,
            host.free >> 20
        );
        assert!(m.total > 0 && m.free <= m.total, "{kind}: {m:?}");
    }
}
