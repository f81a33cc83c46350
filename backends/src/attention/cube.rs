//! Paged attention on the CubeCL backends (wgpu, cuda): the K/V store on the device, read through
//! block tables on the device.
//!
//! - The store: K and V of one layer, `[slot, kv_head, head_dim]` f32 each (values rounded to f16,
//!   as the CPU store and llama.cpp keep them).
//! - The step ([`CubeStep`]): each new row's position, write slot and block-table offset, and the
//!   block tables, uploaded once per forward in one buffer and read by every layer.
//! - [`kv_write_kernel`]: every new K/V row of the step into its slot, one launch.
//! - [`attention_kernel`]: one cube per (row, KV head) — GQA-aware: the query heads that share a KV
//!   head read its keys and values once — over the row's visible keys in tiles of 128, with an
//!   online softmax (Milakov & Gimelshein, 2018; FlashAttention's running max and sum). Long
//!   contexts with few rows split each row's keys among several cubes ("flash-decoding") and
//!   [`combine_kernel`] merges their partial sums. The same kernel runs decode rows, prefill chunks
//!   (causal: a row sees keys up to its own position) and speculative verification rows.
//!
//! Arithmetic: queries rounded to f16 as the CPU kernel rounds them, scores and probabilities in
//! f32 (the CPU kernel rounds the normalized probabilities to f16 before the product with V; an
//! online softmax has no normalized probabilities until the end).
#![allow(unused_assignments)] // kernels assign a default before branches resolved at expansion

use burn::tensor::{DType, Shape, Tensor};
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeRuntime};
use cubecl::prelude::*;

use super::{AttentionParams, KvOps, KvShape, PagedBatch, check_alloc, f16_only};
use crate::BackendError;
use crate::cube::{FloatT, arr, float_in, float_out, float_tensor, grid, round_f16};

/// Units per attention cube, and keys per tile.
const UNITS: u32 = 128;
/// A very negative score (a key not seen; `-inf` does not compile on every target).
const HIDDEN: f32 = -3.0e38;

/// One layer's store on the device.
#[derive(Debug)]
pub struct CubeKv<R: CubeRuntime> {
    shape: KvShape,
    k: CubeTensor<R>,
    v: CubeTensor<R>,
}

/// A forward's layout on the device ([`KvOps::kv_step`]): `meta` holds each row's position, write
/// slot and table offset (`[pos; t] [slot; t] [table; t]`), then the block tables.
#[derive(Debug)]
pub struct CubeStep<R: CubeRuntime> {
    meta: CubeTensor<R>,
    rows: usize,
    block_size: usize,
    /// the longest context a row attends over
    max_keys: usize,
}

fn cube_kv_alloc<R: CubeRuntime>(
    shape: KvShape,
    device: &R::Device,
) -> Result<CubeKv<R>, BackendError> {
    check_alloc(&shape)?;
    f16_only(&shape)?;
    let client = R::client(device);
    let n = shape.values();
    let store = || {
        CubeTensor::new_contiguous(
            client.clone(),
            device.clone(),
            Shape::new([n]),
            client.empty(n * 4),
            DType::F32,
        )
    };
    Ok(CubeKv {
        shape,
        k: store(),
        v: store(),
    })
}

fn cube_step<R: CubeRuntime>(batch: &PagedBatch, device: &R::Device) -> CubeStep<R> {
    let t = batch.rows();
    let mut meta = vec![0u32; 3 * t];
    let mut tables = Vec::new();
    let mut max_keys = 1;
    for s in &batch.seqs {
        let off = (3 * t + tables.len()) as u32;
        tables.extend_from_slice(&s.blocks);
        for i in 0..s.q_len {
            let (row, pos) = (s.q_start + i, s.past + i);
            meta[row] = pos as u32;
            meta[t + row] = batch.slot(s, pos) as u32;
            meta[2 * t + row] = off;
        }
        max_keys = max_keys.max(s.past + s.q_len);
    }
    meta.extend_from_slice(&tables);
    let client = R::client(device);
    let bytes: Vec<u8> = meta.iter().flat_map(|w| w.to_le_bytes()).collect();
    let len = meta.len().max(1);
    CubeStep {
        meta: CubeTensor::new_contiguous(
            client.clone(),
            device.clone(),
            Shape::new([len]),
            client.create_from_slice(&bytes),
            DType::U32,
        ),
        rows: t,
        block_size: batch.block_size,
        max_keys,
    }
}

/// `K[slot(r)] = f16(k[r])`, `V[slot(r)] = f16(v[r])` for every new row (one unit per value).
#[cube(launch_unchecked)]
fn kv_write_kernel(
    k: &Array<f32>,
    v: &Array<f32>,
    meta: &Array<u32>,
    store_k: &mut Array<f32>,
    store_v: &mut Array<f32>,
    t: u32,
    width: u32,
) {
    let pos = ABSOLUTE_POS as u32;
    if pos >= t * width {
        terminate!();
    }
    let r = pos / width;
    let i = pos % width;
    let at = (meta[(t + r) as usize] * width + i) as usize;
    store_k[at] = round_f16(k[pos as usize]);
    store_v[at] = round_f16(v[pos as usize]);
}

/// Copies block `src` of both stores to block `dst` (`len` values each).
#[cube(launch_unchecked)]
fn block_copy_kernel(
    store_k: &mut Array<f32>,
    store_v: &mut Array<f32>,
    src: u32,
    dst: u32,
    len: u32,
) {
    let pos = ABSOLUTE_POS as u32;
    if pos >= len {
        terminate!();
    }
    store_k[(dst * len + pos) as usize] = store_k[(src * len + pos) as usize];
    store_v[(dst * len + pos) as usize] = store_v[(src * len + pos) as usize];
}

/// Attention of one row's `g` query heads sharing KV head `kvh_i` over its keys `lo .. hi` (or
/// this cube's share of them when `split`). See the module docs. Cube index:
/// `(row · kv_heads + kv head) · splits + split`.
#[cube(launch_unchecked)]
// collapsible_if: a comptime branch (`split`) around a runtime one is two kinds of `if`, not one.
#[allow(clippy::too_many_arguments, clippy::collapsible_if)]
fn attention_kernel(
    q: &Array<f32>,
    store_k: &Array<f32>,
    store_v: &Array<f32>,
    meta: &Array<u32>,
    out: &mut Array<f32>,
    part_m: &mut Array<f32>,
    part_l: &mut Array<f32>,
    t: u32,
    kv_heads: u32,
    block_size: u32,
    splits: u32,
    keys_per_split: u32,
    window: u32,
    scale: f32,
    softcap: f32,
    #[comptime] g: u32,
    #[comptime] hd: u32,
    #[comptime] split: bool,
    #[comptime] capped: bool,
) {
    let gh = comptime!(g * hd);
    let mut qs = SharedMemory::<f32>::new(comptime!((g * hd) as usize));
    let mut acc = SharedMemory::<f32>::new(comptime!((g * hd) as usize));
    let mut scores = SharedMemory::<f32>::new(comptime!((g * UNITS) as usize));
    let mut slots = SharedMemory::<u32>::new(comptime!(UNITS as usize));
    let mut run_m = SharedMemory::<f32>::new(comptime!(g as usize));
    let mut run_l = SharedMemory::<f32>::new(comptime!(g as usize));
    let mut alpha = SharedMemory::<f32>::new(comptime!(g as usize));

    let cube = CUBE_POS as u32;
    let sp = cube % splits;
    let pair = cube / splits;
    let kh = pair % kv_heads;
    let r = pair / kv_heads;
    let u = UNIT_POS_X;
    let heads = kv_heads * g;
    let width = kv_heads * hd;
    let pos = meta[r as usize];
    let table = meta[(2 * t + r) as usize];
    let mut lo = 0u32;
    if window > 0 && pos + 1 > window {
        lo = pos + 1 - window;
    }
    let mut hi = pos + 1;
    if comptime!(split) {
        let start = lo + sp * keys_per_split;
        lo = u32::min(start, hi);
        hi = u32::min(start + keys_per_split, hi);
    }
    // The group's queries (rounded to f16) and zeroed sums.
    let mut e = u;
    while e < gh {
        let head = kh * g + e / hd;
        qs[e as usize] = round_f16(q[((r * heads + head) * hd + e % hd) as usize]);
        acc[e as usize] = 0.0;
        e += UNITS;
    }
    if u < g {
        run_m[u as usize] = HIDDEN.runtime();
        run_l[u as usize] = 0.0;
    }
    sync_cube();
    let mut j0 = lo;
    while j0 < hi {
        let j = j0 + u;
        let valid = j < hi;
        let mut slot = 0u32;
        if valid {
            slot = meta[(table + j / block_size) as usize] * block_size + j % block_size;
        }
        slots[u as usize] = slot;
        #[unroll]
        for gq in 0..g {
            let mut s = HIDDEN.runtime();
            if valid {
                let kb = (slot * width + kh * hd) as usize;
                let qb = (gq * hd) as usize;
                let mut dot = 0.0f32;
                for d in 0..hd {
                    dot += qs[qb + d as usize] * store_k[kb + d as usize];
                }
                s = dot * scale;
                if comptime!(capped) {
                    s = softcap * f32::tanh(s / softcap);
                }
            }
            scores[(gq * UNITS + u) as usize] = s;
        }
        sync_cube();
        // Each head's running max, and the factor its earlier sums shrink by.
        if u < g {
            let mut mt = HIDDEN.runtime();
            for jj in 0..UNITS {
                mt = f32::max(mt, scores[(u * UNITS + jj) as usize]);
            }
            let m_old = run_m[u as usize];
            let m_new = f32::max(m_old, mt);
            alpha[u as usize] = f32::exp(m_old - m_new);
            run_m[u as usize] = m_new;
        }
        sync_cube();
        #[unroll]
        for gq in 0..g {
            let at = (gq * UNITS + u) as usize;
            let mut p = 0.0f32;
            if valid {
                p = f32::exp(scores[at] - run_m[gq as usize]);
            }
            scores[at] = p;
        }
        sync_cube();
        if u < g {
            let mut sum = 0.0f32;
            for jj in 0..UNITS {
                sum += scores[(u * UNITS + jj) as usize];
            }
            run_l[u as usize] = run_l[u as usize] * alpha[u as usize] + sum;
        }
        let n_keys = u32::min(UNITS, hi - j0);
        let mut e2 = u;
        while e2 < gh {
            let gq = e2 / hd;
            let d = e2 % hd;
            let mut a = acc[e2 as usize] * alpha[gq as usize];
            for jj in 0..n_keys {
                let vb = slots[jj as usize] * width + kh * hd + d;
                a += scores[(gq * UNITS + jj) as usize] * store_v[vb as usize];
            }
            acc[e2 as usize] = a;
            e2 += UNITS;
        }
        sync_cube();
        j0 += UNITS;
    }
    // Rows `r`, heads `kh·g ..`: the normalized output, or this split's partial sums.
    let mut e3 = u;
    while e3 < gh {
        let gq = e3 / hd;
        if comptime!(split) {
            out[(cube * gh + e3) as usize] = acc[e3 as usize];
        } else {
            let head = kh * g + gq;
            out[((r * heads + head) * hd + e3 % hd) as usize] =
                acc[e3 as usize] / run_l[gq as usize];
        }
        e3 += UNITS;
    }
    if comptime!(split) {
        if u < g {
            part_m[(cube * g + u) as usize] = run_m[u as usize];
            part_l[(cube * g + u) as usize] = run_l[u as usize];
        }
    }
}

/// Merges the splits of each (row, KV head): `out = Σ_s acc_s·e^(m_s − M) / Σ_s l_s·e^(m_s − M)`
/// with `M` the largest split max (one unit per output value).
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn combine_kernel(
    part: &Array<f32>,
    part_m: &Array<f32>,
    part_l: &Array<f32>,
    out: &mut Array<f32>,
    total: u32,
    kv_heads: u32,
    splits: u32,
    #[comptime] g: u32,
    #[comptime] hd: u32,
) {
    let pos = ABSOLUTE_POS as u32;
    if pos >= total {
        terminate!();
    }
    let gh = comptime!(g * hd);
    // pos runs over [row][kv head][g·hd]: the layout of out's heads.
    let pair = pos / gh;
    let e = pos % gh;
    let gq = e / hd;
    let mut big = HIDDEN.runtime();
    for s in 0..splits {
        big = f32::max(big, part_m[((pair * splits + s) * g + gq) as usize]);
    }
    let mut num = 0.0f32;
    let mut den = 0.0f32;
    for s in 0..splits {
        let c = pair * splits + s;
        let w = f32::exp(part_m[(c * g + gq) as usize] - big);
        num += part[(c * gh + e) as usize] * w;
        den += part_l[(c * g + gq) as usize] * w;
    }
    let _ = kv_heads;
    out[pos as usize] = num / den;
}

/// How many cubes share one row's keys: enough to give the device ~256 cubes when there are few
/// (row, KV head) pairs and long contexts, each with at least two tiles of keys.
fn splits_for(pairs: usize, max_keys: usize) -> usize {
    let tile = UNITS as usize;
    if pairs >= 128 || max_keys <= 4 * tile {
        return 1;
    }
    256usize
        .div_ceil(pairs)
        .min(max_keys.div_ceil(2 * tile))
        .max(1)
}

#[allow(clippy::too_many_arguments)]
fn cube_paged_attention<R: CubeRuntime, BT: BoolElement>(
    kv: &mut CubeKv<R>,
    q: FloatT<R, BT, 4>,
    k: FloatT<R, BT, 4>,
    v: FloatT<R, BT, 4>,
    batch: &PagedBatch,
    step: &CubeStep<R>,
    params: &AttentionParams,
) -> FloatT<R, BT, 4> {
    let [_, h, t, hd] = q.dims();
    let kvh = kv.shape.kv_heads;
    assert_eq!(hd, kv.shape.head_dim, "paged attention: head_dim");
    assert_eq!(k.dims()[1], kvh, "paged attention: kv heads");
    assert_eq!(
        step.rows, t,
        "paged attention: the step was made for another batch"
    );
    assert_eq!(
        step.block_size, kv.shape.block_size,
        "paged attention: block size"
    );
    if let Err(e) = batch.validate(t, kv.shape.blocks) {
        panic!("paged attention: {e}");
    }
    let g = h / kvh;
    let width = kvh * hd;
    // [1, heads, T, hd] views of [1, T, heads, hd] buffers: swapped back, they are contiguous.
    let q = float_in(q.swap_dims(1, 2));
    let k = float_in(k.swap_dims(1, 2));
    let v = float_in(v.swap_dims(1, 2));
    let client = q.client.clone();
    // SAFETY: k, v [T, width]; meta holds T slots, each < blocks·block_size (validated), and the
    // stores [blocks·block_size·width]; units past T·width return at once.
    unsafe {
        kv_write_kernel::launch_unchecked::<R>(
            &client,
            grid((t * width).div_ceil(256)),
            CubeDim::new_1d(256),
            arr(&k),
            arr(&v),
            arr(&step.meta),
            arr(&kv.k),
            arr(&kv.v),
            t as u32,
            width as u32,
        );
    }
    let out = float_out(&q, &[1, t, h, hd]);
    let pairs = t * kvh;
    let splits = splits_for(pairs, step.max_keys);
    let keys_per_split = step.max_keys.div_ceil(splits).div_ceil(UNITS as usize) * UNITS as usize;
    let cubes = pairs * splits;
    let (part, part_m, part_l) = if splits > 1 {
        (
            float_out(&q, &[cubes, g * hd]),
            float_out(&q, &[cubes, g]),
            float_out(&q, &[cubes, g]),
        )
    } else {
        (out.clone(), out.clone(), out.clone())
    };
    let window = params.sliding_window.unwrap_or(0) as u32;
    let softcap = params.softcap.unwrap_or(0.0);
    // SAFETY: q and out are [T, h, hd]; every key slot read comes from the validated block tables
    // in meta (positions below past + q_len of the row's sequence); with splits, the partial
    // buffers hold `cubes` entries of g·hd (acc) and g (max, sum).
    unsafe {
        attention_kernel::launch_unchecked::<R>(
            &client,
            grid(cubes),
            CubeDim::new_1d(UNITS),
            arr(&q),
            arr(&kv.k),
            arr(&kv.v),
            arr(&step.meta),
            arr(if splits > 1 { &part } else { &out }),
            arr(&part_m),
            arr(&part_l),
            t as u32,
            kvh as u32,
            kv.shape.block_size as u32,
            splits as u32,
            keys_per_split as u32,
            window,
            params.scale,
            softcap,
            g as u32,
            hd as u32,
            splits > 1,
            params.softcap.is_some(),
        );
    }
    if splits > 1 {
        let total = t * h * hd;
        // SAFETY: reads the partial buffers of `cubes` entries, writes out [T, h, hd]; units past
        // `total` return at once.
        unsafe {
            combine_kernel::launch_unchecked::<R>(
                &client,
                grid(total.div_ceil(256)),
                CubeDim::new_1d(256),
                arr(&part),
                arr(&part_m),
                arr(&part_l),
                arr(&out),
                total as u32,
                kvh as u32,
                splits as u32,
                g as u32,
                hd as u32,
            );
        }
    }
    float_tensor::<R, BT, 4>(out).swap_dims(1, 2)
}

fn cube_kv_copy_block<R: CubeRuntime>(kv: &mut CubeKv<R>, src: u32, dst: u32) {
    let len = kv.shape.block_size * kv.shape.kv_heads * kv.shape.head_dim;
    // SAFETY: src and dst are blocks of the store (the block manager's ids); units past `len`
    // return at once.
    unsafe {
        block_copy_kernel::launch_unchecked::<R>(
            &kv.k.client,
            grid(len.div_ceil(256)),
            CubeDim::new_1d(256),
            arr(&kv.k),
            arr(&kv.v),
            src,
            dst,
            len as u32,
        );
    }
}

/// `impl KvOps` for a CubeCL backend type.
macro_rules! cube_kv_ops {
    ($t:ty, $r:ty, $kind:expr) => {
        impl KvOps for $t {
            type KvLayer = CubeKv<$r>;
            const KV_BYTES_PER_VALUE: usize = 4;
            type Step = CubeStep<$r>;
            fn kv_step(batch: &PagedBatch, device: &Self::Device) -> Self::Step {
                cube_step(batch, device)
            }
            fn kv_alloc(
                shape: KvShape,
                device: &Self::Device,
            ) -> Result<Self::KvLayer, BackendError> {
                crate::memory::check_fits(
                    shape.bytes(Self::KV_BYTES_PER_VALUE),
                    <Self as crate::memory::MemoryOps>::device_memory(device),
                    $kind,
                )?;
                cube_kv_alloc(shape, device)
            }
            fn kv_copy_block(kv: &mut Self::KvLayer, src: u32, dst: u32) {
                cube_kv_copy_block(kv, src, dst)
            }
            fn paged_attention(
                kv: &mut Self::KvLayer,
                q: Tensor<Self, 4>,
                k: Tensor<Self, 4>,
                v: Tensor<Self, 4>,
                batch: &PagedBatch,
                step: &Self::Step,
                params: &AttentionParams,
            ) -> Tensor<Self, 4> {
                cube_paged_attention(kv, q, k, v, batch, step, params)
            }
        }
    };
}

#[cfg(feature = "wgpu")]
cube_kv_ops!(
    crate::types::Wgpu,
    burn_wgpu::WgpuRuntime,
    crate::BackendKind::Wgpu
);
#[cfg(feature = "cuda")]
cube_kv_ops!(
    crate::types::Cuda,
    cubecl::cuda::CudaRuntime,
    crate::BackendKind::Cuda
);
