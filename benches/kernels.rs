//! Criterion benchmarks, on every compiled backend: quantized products per weight type against
//! Burn's f32 matmul of the same shape, attention over the paged KV cache, and one full SmolLM2
//! decode step.
//!
//! `cargo bench --bench kernels` (add `--features ndarray,candle,wgpu` for more backends;
//! `benches/cross_backend.sh` runs every bench on every backend and writes the table in
//! docs/perf.md). Product shapes are SmolLM2-135M's FFN down-projection (576 × 1536): m = 1 is
//! decode, m = 64 a prefill chunk. Attention has SmolLM2's heads (9 query, 3 KV, 64 wide).

use burn::tensor::{Tensor, TensorData};
use cinder::backends::BackendKind;
use cinder::backends::attention::{AttentionParams, KvShape, PagedBatch, SeqSlice};
use cinder::gguf::GgmlType;
use cinder::prelude::*;
use cinder::runtime::attention::ContiguousKvCache;
use cinder::runtime::generate::prefill;
use cinder::runtime::model::token_tensor;
use cinder::runtime::quant::{QLinear, SharedBytes};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

// SmolLM2-135M's FFN down-projection: 1536 inputs are whole 256-wide super-blocks for the K-quants
// too (its 576-wide projections are not, which is why llama-quantize stores them as Q5_0/Q8_0).
const N: usize = 576;
const K: usize = 1536;
const TYPES: [GgmlType; 7] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q6_K,
    GgmlType::F16,
];

/// Pseudo-random blocks with sane f16 scales (the first two bytes of each block; Q6_K's d is last).
fn weight(ty: GgmlType) -> Vec<u8> {
    let rb = cinder::backends::kernels::row_bytes(ty, K).expect("whole blocks");
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let mut data: Vec<u8> = (0..rb * N)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1);
            (s >> 56) as u8
        })
        .collect();
    let d = half::f16::from_f32(0.01).to_bits().to_le_bytes();
    if ty == GgmlType::F16 {
        for c in data.chunks_exact_mut(2) {
            c.copy_from_slice(&d);
        }
        return data;
    }
    let bs = ty.type_size() as usize;
    for b in data.chunks_exact_mut(bs) {
        let at = if ty == GgmlType::Q6_K { 208 } else { 0 };
        b[at..at + 2].copy_from_slice(&d);
    }
    data
}

struct Products<'a>(&'a mut Criterion, BackendKind);

impl BackendTask for Products<'_> {
    type Output = ();
    fn run<B: InferenceBackend>(self, device: B::Device) {
        let (c, kind) = (self.0, self.1);
        for m in [1usize, 64] {
            let mut g = c.benchmark_group(format!("matmul_{kind}_m{m}_{N}x{K}"));
            g.throughput(Throughput::Elements((m * N * K) as u64));
            g.sample_size(20);
            let x: Vec<f32> = (0..m * K).map(|i| (i as f32 * 0.37).sin()).collect();
            let xt = Tensor::<B, 2>::from_data(TensorData::new(x, [m, K]), &device);
            // Baseline: Burn's own f32 matmul with the weight expanded.
            let wf =
                Tensor::<B, 2>::from_data(TensorData::new(vec![0.01f32; K * N], [K, N]), &device);
            g.bench_function("burn_f32", |b| {
                b.iter(|| {
                    let y = xt.clone().matmul(wf.clone());
                    B::sync(&device).ok();
                    y
                })
            });
            for ty in TYPES {
                let layer = QLinear::<B>::from_ggml(
                    "w",
                    ty,
                    SharedBytes::from_vec(weight(ty)),
                    N,
                    K,
                    None,
                    &device,
                )
                .expect("layer");
                g.bench_with_input(BenchmarkId::new("qlinear", ty.name()), &ty, |b, _| {
                    b.iter(|| {
                        let y = layer.forward(xt.clone());
                        B::sync(&device).ok();
                        y
                    })
                });
            }
            g.finish();
        }
    }
}

struct Attention<'a>(&'a mut Criterion, BackendKind);

impl BackendTask for Attention<'_> {
    type Output = ();
    fn run<B: InferenceBackend>(self, device: B::Device) {
        let (c, kind) = (self.0, self.1);
        let (heads, kv_heads, hd, block) = (9usize, 3usize, 64usize, 16usize);
        let mut g = c.benchmark_group(format!("paged_attention_{kind}"));
        g.sample_size(20);
        // `seqs` sequences, each decoding one token after `past` cached ones.
        for (seqs, past) in [(1usize, 255usize), (8, 255)] {
            let per_seq = (past + 1).div_ceil(block);
            let shape = KvShape {
                blocks: seqs * per_seq,
                block_size: block,
                kv_heads,
                head_dim: hd,
                dtype: Default::default(),
            };
            let mut kv = B::kv_alloc(shape, &device).expect("KV store");
            let batch = PagedBatch {
                block_size: block,
                seqs: (0..seqs)
                    .map(|s| SeqSlice {
                        q_start: s,
                        q_len: 1,
                        past,
                        blocks: (0..per_seq).map(|b| (s * per_seq + b) as u32).collect(),
                    })
                    .collect(),
            };
            let params = AttentionParams {
                scale: 1.0 / (hd as f32).sqrt(),
                sliding_window: None,
                softcap: None,
            };
            let t4 = |h: usize, seed: f32| {
                let v: Vec<f32> = (0..h * seqs * hd)
                    .map(|i| (i as f32 * seed).sin())
                    .collect();
                Tensor::<B, 4>::from_data(TensorData::new(v, [1, h, seqs, hd]), &device)
            };
            let (q, k, v) = (t4(heads, 0.37), t4(kv_heads, 0.53), t4(kv_heads, 0.71));
            let step = B::kv_step(&batch, &device);
            g.throughput(Throughput::Elements(seqs as u64));
            g.bench_function(format!("{seqs}x_decode_after_{past}"), |b| {
                b.iter(|| {
                    // Writes the new K/V (the same slot every time) and attends over past + 1 keys.
                    let y = B::paged_attention(
                        &mut kv,
                        q.clone(),
                        k.clone(),
                        v.clone(),
                        &batch,
                        &step,
                        &params,
                    );
                    B::sync(&device).ok();
                    y
                })
            });
        }
        g.finish();
    }
}

struct DecodeStep<'a>(&'a mut Criterion, BackendKind);

impl BackendTask for DecodeStep<'_> {
    type Output = ();
    fn run<B: InferenceBackend>(self, device: B::Device) {
        let (c, kind) = (self.0, self.1);
        let Ok(r) = cinder::catalog::resolve("smollm2-135m") else {
            eprintln!("smollm2-135m not available: decode-step bench skipped");
            return;
        };
        let m = cinder::importer::load_model::<B>(&r.path, &device).expect("model loads");
        let mut g = c.benchmark_group(format!("decode_step_{kind}"));
        g.sample_size(20);
        // One token at position 64 (a short prompt already cached), cache trimmed back each time.
        let prompt: Vec<u32> = (0..64).map(|i| 100 + i * 37).collect();
        g.bench_function("smollm2_135m_q4_1", |b| {
            b.iter_batched(
                || {
                    let mut cache = ContiguousKvCache::<B>::new(m.model.n_layers(), 80);
                    prefill(&m.model, &mut cache, &prompt).expect("prefill");
                    cache
                },
                |mut cache| {
                    let l = m.model.forward(
                        token_tensor::<B>(&[42], &device),
                        &mut cache,
                        Logits::Last,
                    );
                    B::sync(&device).ok();
                    l
                },
                criterion::BatchSize::PerIteration,
            )
        });
        g.finish();
    }
}

fn benches(c: &mut Criterion) {
    let _ = cinder::backends::set_threads(2);
    for kind in cinder::backends::compiled() {
        cinder::backends::dispatch(kind, Products(c, kind)).expect("backend");
        cinder::backends::dispatch(kind, Attention(c, kind)).expect("backend");
        cinder::backends::dispatch(kind, DecodeStep(c, kind)).expect("backend");
    }
}

criterion_group! {
    name = kernel_benches;
    config = Criterion::default()
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2));
    targets = benches
}
criterion_main!(kernel_benches);
