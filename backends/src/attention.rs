//! Attention: the generic Burn-ops version every backend runs, and the paged-KV extension of
//! [`crate::InferenceBackend`].
//!
//! Paged attention (Kwon et al., 2023, "Efficient Memory Management for Large Language Model Serving
//! with PagedAttention"): K/V live in fixed-size blocks of a per-layer store allocated once; a sequence
//! reaches its tokens through a block table. A forward runs a *ragged* batch: the new tokens of every
//! scheduled sequence are concatenated along the time axis (`[1, heads, T, head_dim]`, no padding) and
//! [`PagedBatch`] says which rows belong to which sequence and where its cached tokens are.
//!
//! - CPU backends (flex, ndarray) keep the store in host memory ([`HostKv`]) and run a direct kernel:
//!   one query row at a time, keys in position order, a fixed summation order. The result for a query
//!   therefore does not depend on what else is in the batch, how the prompt was chunked, or whether
//!   the sequence was recomputed after preemption — the property batched serving needs to give each
//!   request exactly the tokens it would get alone.
//! - Other backends use the generic fallback ([`DenseKv`]): the store is a Burn tensor `[slots, kvh·hd]`,
//!   writes are `slice_assign`s of contiguous runs, reads gather a sequence's slots and run
//!   [`attention`].

use burn::tensor::{Int, Tensor, TensorData, activation::softmax, backend::Backend};
use half::f16;
use half::slice::HalfFloatSliceExt;
use half::vec::HalfBitsVecExt;
use rayon::prelude::*;

use crate::BackendError;
use crate::act::round_to_f16;
use crate::encoder::host_values;
use cinder_kernels::attn::{KvRun, ScoreParams, attend_f16};

/// Per-layer attention settings a model passes with each call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionParams {
    /// Multiplier on `q·k` (usually `1/sqrt(head_dim)`).
    pub scale: f32,
    /// Sliding window: a query at position `p` sees keys at positions `> p - window` only.
    pub sliding_window: Option<usize>,
    /// Soft-capping of attention logits (`cap * tanh(x / cap)`), as Gemma 2 uses.
    pub softcap: Option<f32>,
}

impl AttentionParams {
    /// The first key position a query at `pos` sees.
    pub fn first_visible(&self, pos: usize) -> usize {
        self.sliding_window
            .map_or(0, |w| (pos + 1).saturating_sub(w))
    }
}

/// One sequence's part of a ragged batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeqSlice {
    /// Its first row in the batch's time axis.
    pub q_start: usize,
    /// How many new tokens it has in this forward.
    pub q_len: usize,
    /// Tokens already in the cache: the new ones sit at positions `past .. past + q_len`.
    pub past: usize,
    /// Its block table: position `p` lives in block `blocks[p / block_size]`, slot `p % block_size`.
    /// Must cover `past + q_len` positions.
    pub blocks: Vec<u32>,
}

/// The layout of one forward over several sequences.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PagedBatch {
    /// Tokens per block.
    pub block_size: usize,
    /// The sequences, in row order.
    pub seqs: Vec<SeqSlice>,
}

impl PagedBatch {
    /// Total new tokens (rows of the time axis).
    pub fn rows(&self) -> usize {
        self.seqs.iter().map(|s| s.q_len).sum()
    }

    /// The position of every row, in row order.
    pub fn positions(&self) -> Vec<usize> {
        self.seqs
            .iter()
            .flat_map(|s| s.past..s.past + s.q_len)
            .collect()
    }

    /// The store slot (`block · block_size + offset`) holding position `pos` of sequence `s`.
    pub fn slot(&self, s: &SeqSlice, pos: usize) -> usize {
        s.blocks[pos / self.block_size] as usize * self.block_size + pos % self.block_size
    }

    /// Checks the rows are consecutive and every table covers its positions and stays inside a store
    /// of `num_blocks` blocks. Called before any write: a bad layout is a scheduler bug.
    pub fn validate(&self, t: usize, num_blocks: usize) -> Result<(), BackendError> {
        let bad = |reason: String| Err(BackendError::Layout(reason));
        if self.block_size == 0 {
            return bad("block size 0".into());
        }
        let mut row = 0;
        for (i, s) in self.seqs.iter().enumerate() {
            if s.q_start != row {
                return bad(format!(
                    "sequence {i} starts at row {} not {row}",
                    s.q_start
                ));
            }
            row += s.q_len;
            let need = (s.past + s.q_len).div_ceil(self.block_size);
            if s.blocks.len() < need {
                return bad(format!(
                    "sequence {i}: {} blocks for {} positions",
                    s.blocks.len(),
                    s.past + s.q_len
                ));
            }
            if let Some(b) = s.blocks.iter().find(|&&b| b as usize >= num_blocks) {
                return bad(format!(
                    "sequence {i}: block {b} of a {num_blocks}-block store"
                ));
            }
        }
        if row != t {
            return bad(format!("layout covers {row} rows, the batch has {t}"));
        }
        Ok(())
    }
}

/// Causal grouped-query attention in plain Burn ops (the generic fallback every backend can run).
///
/// `q` `[b, h, t, d]`; `k`, `v` `[b, kvh, past + t, d]`; the `t` queries sit at positions
/// `past .. past + t`. Returns `[b, h, t, d]`.
pub fn attention<B: Backend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    past: usize,
    params: &AttentionParams,
) -> Tensor<B, 4> {
    attention_with(q, k, v, past, params, false)
}

/// [`attention`], optionally with the softmax probabilities rounded to f16 (`f16_probs`).
fn attention_with<B: Backend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    past: usize,
    params: &AttentionParams,
    f16_probs: bool,
) -> Tensor<B, 4> {
    let [b, h, t, _] = q.dims();
    let [_, kvh, total, _] = k.dims();
    let mask = causal_mask::<B>(
        ([b, kvh, (h / kvh) * t, total], past, params.sliding_window),
        &q.device(),
    );
    attend(q, k, v, mask, params, f16_probs)
}

/// [`attention`] with its additive mask already built (see [`causal_mask`]).
pub fn attention_masked<B: Backend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    mask: Option<Tensor<B, 4>>,
    params: &AttentionParams,
) -> Tensor<B, 4> {
    attend(q, k, v, mask, params, false)
}

/// The masked GQA attention both variants share; `f16_probs` rounds the probabilities to f16.
fn attend<B: Backend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    mask: Option<Tensor<B, 4>>,
    params: &AttentionParams,
    f16_probs: bool,
) -> Tensor<B, 4> {
    let [b, h, t, d] = q.dims();
    let [_, kvh, _, _] = k.dims();
    let group = h / kvh;
    // Grouped-query attention without copying K/V: the `group` query heads that share a KV head are
    // stacked along the query axis, [b, h, t, d] -> [b, kvh, group·t, d] (heads are ordered
    // kv_head·group + g, so this is a plain reshape), and each KV head is used as it is stored.
    let q = q.reshape([b, kvh, group * t, d]);
    // scores: [b, kvh, group·t, T]
    let mut scores = q.matmul(k.swap_dims(2, 3)).mul_scalar(params.scale);
    if let Some(cap) = params.softcap {
        scores = scores.div_scalar(cap).tanh().mul_scalar(cap);
    }
    if let Some(mask) = mask {
        // Same shape as the scores: a broadcasting add would take the backends' slow strided path.
        scores = scores + mask;
    }
    let probs = softmax(scores, 3);
    let probs = if f16_probs {
        round_to_f16(probs)
    } else {
        probs
    };
    // [b, kvh, group·t, d] -> [b, h, t, d]
    probs.matmul(v).reshape([b, h, t, d])
}

/// What a mask depends on: `[b, kvh, group·t, total]` shape, the first query's position, the window.
pub type MaskKey = ([usize; 4], usize, Option<usize>);

/// The additive causal (and sliding-window) mask `[b, kvh, group·t, total]` for queries at
/// `past .. past + t`: 0 where visible, a large negative where not; `None` when every query sees every
/// key (single-token decode without a window in reach).
pub fn causal_mask<B: Backend>(key: MaskKey, device: &B::Device) -> Option<Tensor<B, 4>> {
    let ([b, kvh, rows, total], past, window) = key;
    let t = total - past;
    let window_bites = window.is_some_and(|w| past + t > w);
    if t == 1 && !window_bites {
        return None;
    }
    // A finite value rather than -inf: some GPU softmax kernels turn (-inf) - (-inf) into NaN.
    const HIDDEN: f32 = -1.0e30;
    let mut one = vec![0.0f32; t * total];
    for i in 0..t {
        let pos = past + i;
        for (j, slot) in one[i * total..(i + 1) * total].iter_mut().enumerate() {
            let future = j > pos;
            let outside = window.is_some_and(|w| pos >= w && j <= pos - w);
            if future || outside {
                *slot = HIDDEN;
            }
        }
    }
    // Repeated over batch, KV heads and the query heads of a group (rows = group·t).
    let copies = b * kvh * (rows / t);
    let mut full = Vec::with_capacity(copies * one.len());
    for _ in 0..copies {
        full.extend_from_slice(&one);
    }
    Some(Tensor::from_data(
        TensorData::new(full, [b, kvh, rows, total]),
        device,
    ))
}

/// Shape of one layer's paged store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvShape {
    /// blocks in the store
    pub blocks: usize,
    /// tokens per block
    pub block_size: usize,
    /// key/value heads
    pub kv_heads: usize,
    /// per-head width
    pub head_dim: usize,
}

impl KvShape {
    /// f32 values in one of K or V.
    pub fn values(&self) -> usize {
        self.blocks * self.block_size * self.kv_heads * self.head_dim
    }

    /// Bytes of K and V together, at `elem` bytes per value (2 on the CPU kernels, 4 in the
    /// fallback).
    pub fn bytes(&self, elem: usize) -> usize {
        2 * elem * self.values()
    }
}

/// One layer's paged K/V in host memory, in f16 as llama.cpp keeps its KV cache (half the memory of
/// f32, and the rounding its reference outputs were made with), layout `[block, kv_head, slot,
/// head_dim]` so that a head's keys inside a block are contiguous.
#[derive(Debug)]
pub struct HostKv<D> {
    shape: KvShape,
    k: Vec<f16>,
    v: Vec<f16>,
    device: D,
}

impl<D> HostKv<D> {
    fn offset(&self, block: usize, head: usize, slot: usize) -> usize {
        let s = &self.shape;
        ((block * s.kv_heads + head) * s.block_size + slot) * s.head_dim
    }
}

/// One layer's paged K/V as Burn tensors `[blocks · block_size, kv_heads · head_dim]` (the fallback).
#[derive(Debug)]
pub struct DenseKv<B: Backend> {
    shape: KvShape,
    /// K and V; held in an `Option` so an update can take them by value (a uniquely owned tensor
    /// lets the backend assign in place instead of copying the store).
    kv: Option<(Tensor<B, 2>, Tensor<B, 2>)>,
}

impl<B: Backend> DenseKv<B> {
    fn update(&mut self, f: impl Fn(Tensor<B, 2>, usize) -> Tensor<B, 2>) {
        if let Some((k, v)) = self.kv.take() {
            self.kv = Some((f(k, 0), f(v, 1)));
        }
    }
}

fn check_alloc(shape: &KvShape) -> Result<(), BackendError> {
    if shape.blocks == 0 || shape.block_size == 0 || shape.kv_heads == 0 || shape.head_dim == 0 {
        return Err(BackendError::Layout(format!("empty KV store {shape:?}")));
    }
    Ok(())
}

/// Allocates a host store, all of it, up front (refused if it exceeds the memory available).
pub(crate) fn host_kv_alloc<D: Clone>(
    shape: KvShape,
    device: &D,
) -> Result<HostKv<D>, BackendError> {
    check_alloc(&shape)?;
    let n = shape.values();
    let bytes = shape.bytes(2) as u64;
    if let Some(avail) = crate::host_available_memory()
        && bytes > avail
    {
        return Err(BackendError::Layout(format!(
            "a KV store of {} MiB does not fit the {} MiB of memory available",
            bytes >> 20,
            avail >> 20
        )));
    }
    // Zeroed u16 pages come from the OS as needed (calloc): the store is sized once, never grows,
    // and resident memory follows what sequences actually wrote, up to the budget.
    let alloc =
        |_: &str| -> Result<Vec<f16>, BackendError> { Ok(vec![0u16; n].reinterpret_into()) };
    Ok(HostKv {
        shape,
        k: alloc("K")?,
        v: alloc("V")?,
        device: device.clone(),
    })
}

pub(crate) fn host_kv_copy_block<D>(kv: &mut HostKv<D>, src: u32, dst: u32) {
    let len = kv.shape.kv_heads * kv.shape.block_size * kv.shape.head_dim;
    let (s, d) = (src as usize * len, dst as usize * len);
    kv.k.copy_within(s..s + len, d);
    kv.v.copy_within(s..s + len, d);
}

/// Rounds to f16 and back (what ggml's f16 matmuls do to their f32 operand).
#[inline]
fn r16(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

/// The CPU paged-attention kernel. `q` `[1, h, T, hd]`, `k`/`v` `[1, kvh, T, hd]` (the batch's new
/// tokens, written into the store first); returns `[1, h, T, hd]`.
///
/// Arithmetic as llama.cpp's CPU graph does it (no flash attention): K/V stored in f16, the query
/// rounded to f16 for `q·k` (f32 sums), softmax in f32 with the exponential sum in f64, the
/// probabilities rounded to f16 for the product with V (f32 sums). One task per (sequence, KV head):
/// its K/V rows are widened to f32 once and serve every query head of the group.
pub(crate) fn host_paged_attention<B: Backend>(
    kv: &mut HostKv<B::Device>,
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    batch: &PagedBatch,
    params: &AttentionParams,
) -> Tensor<B, 4> {
    let [_, h, t, hd] = q.dims();
    let kvh = kv.shape.kv_heads;
    assert_eq!(hd, kv.shape.head_dim, "paged attention: head_dim");
    assert_eq!(k.dims()[1], kvh, "paged attention: kv heads");
    if let Err(e) = batch.validate(t, kv.shape.blocks) {
        panic!("paged attention: {e}");
    }
    // Time-major copies [T, heads, hd]. The models build Q/K/V as [1, T, heads, hd] and swap the
    // middle axes lazily, so swapping them back reads the projections' own buffers in order (a
    // plain copy, where a head-major read would gather them element by element).
    let time_major = |x: Tensor<B, 4>| host_values(x.swap_dims(1, 2));
    let (qs, ks, vs) = (time_major(q), time_major(k), time_major(v));
    // 1. Store the new K/V rows: new row r of head g is at [r][g][..] in ks/vs.
    for s in &batch.seqs {
        for i in 0..s.q_len {
            let pos = s.past + i;
            let (blk, slot) = (
                s.blocks[pos / batch.block_size] as usize,
                pos % batch.block_size,
            );
            for g in 0..kvh {
                let src = ((s.q_start + i) * kvh + g) * hd;
                let dst = kv.offset(blk, g, slot);
                kv.k[dst..dst + hd].convert_from_f32_slice(&ks[src..src + hd]);
                kv.v[dst..dst + hd].convert_from_f32_slice(&vs[src..src + hd]);
            }
        }
    }
    // 2. Attend, one task per (sequence, KV head, run of its queries); each returns its queries'
    // rows of every head in its group. A sequence's queries are split only when there are fewer
    // (sequence, KV head) pairs than ~4 per thread (a speculative verify, a prefill chunk), so the
    // threads share the work evenly; every query is computed the same way in any split.
    let group = h / kvh;
    let kv = &*kv;
    let pairs = batch.seqs.len() * kvh;
    let want = 4 * rayon::current_num_threads().max(1);
    let splits = want.div_ceil(pairs.max(1));
    let tasks: Vec<(usize, usize, std::ops::Range<usize>)> = (0..batch.seqs.len())
        .flat_map(|si| {
            let q_len = batch.seqs[si].q_len;
            let per = q_len.div_ceil(splits.min(q_len).max(1)).max(1);
            (0..kvh).flat_map(move |g| {
                (0..q_len)
                    .step_by(per)
                    .map(move |i0| (si, g, i0..(i0 + per).min(q_len)))
            })
        })
        .collect();
    let run = |(si, g, qr): &(usize, usize, std::ops::Range<usize>)| {
        attend_group(
            kv,
            batch,
            &batch.seqs[*si],
            *g,
            group,
            qr.clone(),
            &qs,
            h,
            params,
        )
    };
    // Query-key pairs × heads: below ~2k per head dim a parallel section costs more than it saves
    // (the engine runs a step from a pool worker, so a section only wakes the other workers).
    let work: usize = batch
        .seqs
        .iter()
        .map(|s| s.q_len * (s.past + s.q_len))
        .sum::<usize>()
        * h;
    let results: Vec<Vec<f32>> = if work < 1 << 11 {
        tasks.iter().map(run).collect()
    } else {
        tasks.par_iter().map(run).collect()
    };
    // 3. Scatter the task outputs into [T, h, hd]: a task's rows are its group's heads, adjacent.
    let mut out = vec![0.0f32; t * h * hd];
    let w = group * hd;
    for ((si, g, qr), res) in tasks.iter().zip(&results) {
        let s = &batch.seqs[*si];
        for (i, src) in qr.clone().zip(res.chunks_exact(w)) {
            let dst = ((s.q_start + i) * h + g * group) * hd;
            out[dst..dst + w].copy_from_slice(src);
        }
    }
    // Returned head-major as the op promises, as a lazy view of the time-major buffer (merging the
    // heads swaps back, so the model's next projection reads it in order).
    Tensor::<B, 4>::from_data(TensorData::new(out, [1, t, h, hd]), &kv.device).swap_dims(1, 2)
}

/// Queries `queries` (of `0..q_len`) of one sequence, for the `group` query heads sharing KV head
/// `g`: `[queries.len(), group, hd]` (`qs` is `[T, h, hd]`).
/// The math is [`cinder_kernels::attn::attend_f16`]; this walks the block table into runs of
/// contiguous rows (a head's slots inside a block are adjacent) and rounds the queries to f16.
#[allow(clippy::too_many_arguments)]
fn attend_group<D>(
    kv: &HostKv<D>,
    batch: &PagedBatch,
    s: &SeqSlice,
    g: usize,
    group: usize,
    queries: std::ops::Range<usize>,
    qs: &[f32],
    h: usize,
    params: &AttentionParams,
) -> Vec<f32> {
    let hd = kv.shape.head_dim;
    let bs = batch.block_size;
    let isa = cinder_kernels::Isa::detect();
    let sp = ScoreParams {
        scale: params.scale,
        softcap: params.softcap,
    };
    let i0 = queries.start;
    let mut out = vec![0.0f32; group * queries.len() * hd];
    let mut qr = vec![0.0f32; group * hd];
    let mut scores = Vec::new();
    let mut runs: Vec<KvRun<'_>> = Vec::new();
    for i in queries {
        let row = s.q_start + i;
        let pos = s.past + i;
        // Visible positions lo..hi as runs of slots inside blocks.
        let (lo, hi) = (params.first_visible(pos), pos + 1);
        runs.clear();
        let mut j = lo;
        while j < hi {
            let end = ((j / bs + 1) * bs).min(hi);
            let at = kv.offset(s.blocks[j / bs] as usize, g, j % bs);
            let len = (end - j) * hd;
            runs.push(KvRun {
                k: &kv.k[at..at + len],
                v: &kv.v[at..at + len],
            });
            j = end;
        }
        for (gi, q) in qr.chunks_exact_mut(hd).enumerate() {
            let head = g * group + gi;
            let src = &qs[(row * h + head) * hd..(row * h + head + 1) * hd];
            for (d, &x) in q.iter_mut().zip(src) {
                *d = r16(x);
            }
        }
        attend_f16(
            isa,
            &qr,
            hd,
            &runs,
            sp,
            &mut scores,
            &mut out[(i - i0) * group * hd..(i - i0 + 1) * group * hd],
        );
    }
    out
}

/// Allocates a fallback store (zeros, on the device).
pub fn dense_kv_alloc<B: Backend>(
    shape: KvShape,
    device: &B::Device,
) -> Result<DenseKv<B>, BackendError> {
    check_alloc(&shape)?;
    let dims = [
        shape.blocks * shape.block_size,
        shape.kv_heads * shape.head_dim,
    ];
    Ok(DenseKv {
        shape,
        kv: Some((Tensor::zeros(dims, device), Tensor::zeros(dims, device))),
    })
}

/// Copies one block of a fallback store.
pub fn dense_kv_copy_block<B: Backend>(kv: &mut DenseKv<B>, src: u32, dst: u32) {
    let bs = kv.shape.block_size;
    let (s, d) = (src as usize * bs, dst as usize * bs);
    let w = kv.shape.kv_heads * kv.shape.head_dim;
    kv.update(|t, _| {
        let rows = t.clone().slice([s..s + bs, 0..w]);
        t.slice_assign([d..d + bs, 0..w], rows)
    });
}

/// The generic paged attention (any backend): scatter the new rows by contiguous runs, gather each sequence's
/// slots, run [`attention`] per sequence.
pub fn dense_paged_attention<B: Backend>(
    kv: &mut DenseKv<B>,
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    batch: &PagedBatch,
    params: &AttentionParams,
) -> Tensor<B, 4> {
    let [_, _, t, hd] = q.dims();
    let kvh = kv.shape.kv_heads;
    if let Err(e) = batch.validate(t, kv.shape.blocks) {
        panic!("paged attention: {e}");
    }
    let w = kvh * hd;
    let device = q.device();
    // [1, kvh, T, hd] -> [T, kvh·hd]: one row per token, as the store holds them.
    // Stored rounded to f16, as the CPU kernel stores them (and llama.cpp).
    let k_rows: Tensor<B, 2> = round_to_f16(k.swap_dims(1, 2).reshape([t, w]));
    let v_rows: Tensor<B, 2> = round_to_f16(v.swap_dims(1, 2).reshape([t, w]));
    for s in &batch.seqs {
        let mut i = 0;
        while i < s.q_len {
            // A run of positions inside one block maps to consecutive slots.
            let pos = s.past + i;
            let run = (batch.block_size - pos % batch.block_size).min(s.q_len - i);
            let slot = batch.slot(s, pos);
            let rows = s.q_start + i..s.q_start + i + run;
            kv.update(|store, which| {
                let src = if which == 0 { &k_rows } else { &v_rows };
                store.slice_assign(
                    [slot..slot + run, 0..w],
                    src.clone().slice([rows.clone(), 0..w]),
                )
            });
            i += run;
        }
    }
    let Some((ks, vs)) = &kv.kv else {
        panic!("paged attention: the KV store was lost in an earlier update");
    };
    let mut outs = Vec::with_capacity(batch.seqs.len());
    for s in &batch.seqs {
        let total = s.past + s.q_len;
        let slots: Vec<i32> = (0..total).map(|p| batch.slot(s, p) as i32).collect();
        let idx = Tensor::<B, 1, Int>::from_data(TensorData::new(slots, [total]), &device);
        let gather = |store: &Tensor<B, 2>| -> Tensor<B, 4> {
            store
                .clone()
                .select(0, idx.clone())
                .reshape([1, total, kvh, hd])
                .swap_dims(1, 2)
        };
        let qs = round_to_f16(q.clone().narrow(2, s.q_start, s.q_len));
        // Probabilities rounded to f16 before the product with V, as the CPU kernel does.
        outs.push(attention_with(
            qs,
            gather(ks),
            gather(vs),
            s.past,
            params,
            true,
        ));
    }
    Tensor::cat(outs, 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_errors_are_named() {
        let b = PagedBatch {
            block_size: 4,
            seqs: vec![SeqSlice {
                q_start: 0,
                q_len: 3,
                past: 2,
                blocks: vec![0],
            }],
        };
        let e = b.validate(3, 8).unwrap_err().to_string();
        assert!(e.contains("1 blocks for 5 positions"), "{e}");
        let b2 = PagedBatch {
            block_size: 4,
            seqs: vec![SeqSlice {
                q_start: 0,
                q_len: 3,
                past: 2,
                blocks: vec![0, 9],
            }],
        };
        assert!(
            b2.validate(3, 8)
                .unwrap_err()
                .to_string()
                .contains("block 9")
        );
        assert!(
            b2.validate(4, 16)
                .unwrap_err()
                .to_string()
                .contains("3 rows")
        );
        assert_eq!(b2.positions(), vec![2, 3, 4]);
    }

    /// The CPU kernel and the generic fallback agree on a ragged batch (decode rows, a prefill chunk
    /// continuing a cached prefix, a sliding window, GQA), and both equal plain causal attention on
    /// each sequence's contiguous K/V.
    #[cfg(feature = "flex")]
    #[test]
    fn host_kernel_and_fallback_agree_with_contiguous_attention() {
        type B = crate::types::Flex;
        let dev: burn::tensor::Device<B> = Default::default();
        let (h, kvh, hd, bs) = (4usize, 2usize, 16usize, 4usize);
        // (past, new) per sequence; block tables deliberately out of order.
        let shape = KvShape {
            blocks: 16,
            block_size: bs,
            kv_heads: kvh,
            head_dim: hd,
        };
        let tables: Vec<Vec<u32>> = vec![vec![3, 0, 7], vec![5, 1], vec![2, 9, 4, 6]];
        let lens = [(0usize, 9usize), (0, 5), (0, 14)];
        let val = |i: usize| ((i * 7919 % 1000) as f32 / 500.0) - 1.0;
        for window in [None, Some(5)] {
            let params = AttentionParams {
                scale: 0.25,
                sliding_window: window,
                softcap: None,
            };
            let mut host = host_kv_alloc(shape, &dev).unwrap();
            let mut dense = dense_kv_alloc::<B>(shape, &dev).unwrap();
            // Two steps: the full prompts minus their last 2 tokens, then those 2 (a continuation).
            let mut outs_host = Vec::new();
            let mut outs_dense = Vec::new();
            let mut full: Vec<(Tensor<B, 4>, Tensor<B, 4>, Tensor<B, 4>)> = Vec::new();
            for (si, &(_, n)) in lens.iter().enumerate() {
                let mk = |heads: usize, salt: usize| {
                    let v: Vec<f32> = (0..heads * n * hd)
                        .map(|i| val(i + salt + 1000 * si))
                        .collect();
                    Tensor::<B, 4>::from_data(TensorData::new(v, [1, heads, n, hd]), &dev)
                };
                full.push((mk(h, 1), mk(kvh, 2), mk(kvh, 3)));
            }
            for (lo, hi) in [(0usize, 2usize), (2, 0)] {
                let mut seqs = Vec::new();
                let (mut qs, mut ks, mut vs) = (Vec::new(), Vec::new(), Vec::new());
                let mut row = 0;
                for (si, &(_, n)) in lens.iter().enumerate() {
                    let (past, len) = if hi == 2 { (0, n - 2) } else { (n - 2, 2) };
                    let _ = lo;
                    seqs.push(SeqSlice {
                        q_start: row,
                        q_len: len,
                        past,
                        blocks: tables[si].clone(),
                    });
                    row += len;
                    qs.push(full[si].0.clone().narrow(2, past, len));
                    ks.push(full[si].1.clone().narrow(2, past, len));
                    vs.push(full[si].2.clone().narrow(2, past, len));
                }
                let batch = PagedBatch {
                    block_size: bs,
                    seqs,
                };
                let (q, k, v) = (Tensor::cat(qs, 2), Tensor::cat(ks, 2), Tensor::cat(vs, 2));
                outs_host.push(host_paged_attention::<B>(
                    &mut host,
                    q.clone(),
                    k.clone(),
                    v.clone(),
                    &batch,
                    &params,
                ));
                outs_dense.push(dense_paged_attention::<B>(
                    &mut dense, q, k, v, &batch, &params,
                ));
            }
            // Reference: each sequence alone, contiguous.
            let mut row = [0usize; 2];
            for (si, &(_, n)) in lens.iter().enumerate() {
                let (q, k, v) = full[si].clone();
                let want = attention(q, k, v, 0, &params);
                for (step, (past, len)) in [(0, n - 2), (n - 2, 2)].into_iter().enumerate() {
                    let want = want
                        .clone()
                        .narrow(2, past, len)
                        .into_data()
                        .to_vec::<f32>()
                        .unwrap();
                    let rows = |o: &Tensor<B, 4>| {
                        o.clone()
                            .narrow(2, row[step], len)
                            .into_data()
                            .to_vec::<f32>()
                            .unwrap()
                    };
                    let (host, dense) = (rows(&outs_host[step]), rows(&outs_dense[step]));
                    // f16 rounding of K, V, q and the probabilities: ~1e-3 from exact f32; the two
                    // implementations round the same values, so they agree far more closely.
                    for ((a, b), w) in host.iter().zip(&dense).zip(&want) {
                        let ctx = format!("window {window:?} seq {si} step {step}");
                        assert!((a - w).abs() < 5e-3, "{ctx}: host {a} vs f32 {w}");
                        assert!((a - b).abs() < 1e-3, "{ctx}: host {a} vs fallback {b}");
                    }
                    row[step] += len;
                }
            }
        }
    }

    #[test]
    fn window_start() {
        let p = AttentionParams {
            scale: 1.0,
            sliding_window: Some(4),
            softcap: None,
        };
        assert_eq!(p.first_visible(2), 0);
        assert_eq!(p.first_visible(3), 0);
        assert_eq!(p.first_visible(4), 1);
        assert_eq!(p.first_visible(10), 7);
    }
}
