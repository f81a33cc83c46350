//! Paged attention on the CPU backends (flex, ndarray): an f16 (or Q8_0 / Q4_0) store in host
//! memory and a direct kernel (`cinder_kernels::attn`, `attn_q` for the quantized rows) with
//! llama.cpp's CPU arithmetic.

use burn::tensor::{Tensor, TensorData, backend::Backend};
use half::f16;
use half::slice::HalfFloatSliceExt;
use half::vec::HalfBitsVecExt;
use rayon::prelude::*;

use super::{AttentionParams, KvOps, KvShape, PagedBatch, SeqSlice, check_alloc};
use crate::BackendError;
use crate::host::host_values;
use cinder_kernels::attn::{KvRun, ScoreParams, attend_f16_lse, round_f16};
use cinder_kernels::attn_q::{KvQuant, QKvRun, attend_q_lse, attend_q_rows, hadamard};
use cinder_kernels::attn_rows::{RowsScratch, attend_f16_rows};

/// One layer's paged K/V in host memory, in f16 as llama.cpp keeps its KV cache (half the memory of
/// f32, and the rounding its reference outputs were made with) or in Q8_0 / Q4_0 blocks, layout
/// `[block, kv_head, slot, head_dim]` so that a head's rows inside a block are contiguous.
#[derive(Debug)]
pub struct HostKv<D> {
    shape: KvShape,
    store: Store,
    /// Hadamard blocks `(K and Q, V and the output)` a quantized store rotates by
    rotation: Option<(usize, usize)>,
    device: D,
}

/// The rows of a store: `head_dim` f16 values, or one row of quantized blocks, each.
#[derive(Debug)]
enum Store {
    F16 {
        k: Vec<f16>,
        v: Vec<f16>,
    },
    Quant {
        kind: KvQuant,
        k: Vec<u8>,
        v: Vec<u8>,
    },
}

impl<D> HostKv<D> {
    /// The row index of (block, head, slot).
    fn row(&self, block: usize, head: usize, slot: usize) -> usize {
        let s = &self.shape;
        (block * s.kv_heads + head) * s.block_size + slot
    }
}

/// A task's K/V rows as runs of adjacent slots, in the store's format.
enum Runs<'a> {
    F16(Vec<KvRun<'a>>),
    Quant(KvQuant, Vec<QKvRun<'a>>),
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
    // Zeroed pages come from the OS as needed (calloc): the store is sized once, never grows,
    // and resident memory follows what sequences actually wrote, up to the budget.
    shape.dtype.check_head_dim(shape.head_dim)?;
    let store = match shape.dtype.quant() {
        None => Store::F16 {
            k: vec![0u16; n].reinterpret_into(),
            v: vec![0u16; n].reinterpret_into(),
        },
        Some(kind) => {
            let bytes = n / shape.head_dim * kind.row_bytes(shape.head_dim);
            Store::Quant {
                kind,
                k: vec![0u8; bytes],
                v: vec![0u8; bytes],
            }
        }
    };
    let rotation = shape
        .dtype
        .quant()
        .and_then(|_| cinder_kernels::attn_q::rotation_blocks(shape.head_dim));
    Ok(HostKv {
        shape,
        store,
        rotation,
        device: device.clone(),
    })
}

pub(crate) fn host_kv_copy_block<D>(kv: &mut HostKv<D>, src: u32, dst: u32) {
    let rows = kv.shape.kv_heads * kv.shape.block_size;
    let hd = kv.shape.head_dim;
    match &mut kv.store {
        Store::F16 { k, v } => {
            let len = rows * hd;
            let (s, d) = (src as usize * len, dst as usize * len);
            k.copy_within(s..s + len, d);
            v.copy_within(s..s + len, d);
        }
        Store::Quant { kind, k, v } => {
            let len = rows * kind.row_bytes(hd);
            let (s, d) = (src as usize * len, dst as usize * len);
            k.copy_within(s..s + len, d);
            v.copy_within(s..s + len, d);
        }
    }
}

/// The CPU paged-attention kernel. `q` `[1, h, T, hd]`, `k`/`v` `[1, kvh, T, hd]` (the batch's new
/// tokens, written into the store first); returns `[1, h, T, hd]`.
///
/// Arithmetic as llama.cpp's CPU graph does it (no flash attention): K/V stored in f16, the query
/// rounded to f16 for `q·k` (f32 sums), softmax in f32 (a vectorized exponential, as ggml's) with
/// the exponential sum in f64, the probabilities rounded to f16 for the product with V (f32 sums).
/// One task per (sequence, KV head), or per run of its queries when there are few such tasks: in a
/// decode step each K/V row is widened to f32 once for every query head of the group; in a prefill
/// chunk or a verify, once per block of [`BLOCK_POSITIONS`] positions, into f32 tiles. A decode
/// query with at least 2 × [`SPLIT_MIN_KEYS`] visible keys is split over its keys instead
/// ([`attend_part`], merged by [`combine_parts`]), by its key count alone so that it computes the
/// same alone or batched: each part's probabilities are normalized within the part, so the result
/// differs from the whole softmax in rounding only.
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
    let (mut qs, ks, vs) = (time_major(q), time_major(k), time_major(v));
    // A quantized store keeps K and V rotated (`attn_q::hadamard`): Q turns with K, so the scores
    // are unchanged, and the output turns back below.
    if let Some((kb, _)) = kv.rotation {
        qs.chunks_exact_mut(hd).for_each(|r| hadamard(r, kb));
    }
    let mut row = vec![0.0f32; hd];
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
                let r = kv.row(blk, g, slot);
                match &mut kv.store {
                    Store::F16 { k, v } => {
                        let dst = r * hd;
                        k[dst..dst + hd].convert_from_f32_slice(&ks[src..src + hd]);
                        v[dst..dst + hd].convert_from_f32_slice(&vs[src..src + hd]);
                    }
                    Store::Quant { kind, k, v } => {
                        let rb = kind.row_bytes(hd);
                        for (x, store, block) in [
                            (&ks[src..src + hd], &mut *k, kv.rotation.map(|r| r.0)),
                            (&vs[src..src + hd], &mut *v, kv.rotation.map(|r| r.1)),
                        ] {
                            row.copy_from_slice(x);
                            if let Some(b) = block {
                                hadamard(&mut row, b);
                            }
                            kind.quantize_row(&row, &mut store[r * rb..(r + 1) * rb]);
                        }
                    }
                }
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
    let mut tasks: Vec<Task> = Vec::with_capacity(pairs);
    for (si, s) in batch.seqs.iter().enumerate() {
        let q_len = s.q_len;
        // A decode query's visible keys split into parts (flash-decoding), by its own key count
        // only — the same alone or batched, on any thread count — so one sequence at depth reads
        // its cache on every core, whatever its KV head count.
        let keys = if q_len == 1 {
            s.past + 1 - params.first_visible(s.past)
        } else {
            0
        };
        let parts = (keys / SPLIT_MIN_KEYS).clamp(1, SPLIT_MAX_PARTS);
        let per = q_len.div_ceil(splits.min(q_len).max(1)).max(1);
        for g in 0..kvh {
            if parts > 1 {
                tasks.extend((0..parts).map(|p| Task {
                    si,
                    g,
                    queries: 0..1,
                    part: Some((p, parts)),
                }));
            } else {
                tasks.extend((0..q_len).step_by(per).map(|i0| Task {
                    si,
                    g,
                    queries: i0..(i0 + per).min(q_len),
                    part: None,
                }));
            }
        }
    }
    let run = |t: &Task| match t.part {
        None => (
            attend_group(
                kv,
                batch,
                &batch.seqs[t.si],
                t.g,
                group,
                t.queries.clone(),
                &qs,
                h,
                params,
            ),
            Vec::new(),
        ),
        Some(part) => attend_part(
            kv,
            batch,
            &batch.seqs[t.si],
            t.g,
            group,
            &qs,
            h,
            params,
            part,
        ),
    };
    // Query-key pairs × heads: below ~2k per head dim a parallel section costs more than it saves
    // (the engine runs a step from a pool worker, so a section only wakes the other workers).
    let work: usize = batch
        .seqs
        .iter()
        .map(|s| s.q_len * (s.past + s.q_len))
        .sum::<usize>()
        * h;
    let results: Vec<(Vec<f32>, Vec<f32>)> = if work < 1 << 11 {
        tasks.iter().map(run).collect()
    } else {
        tasks.par_iter().map(run).collect()
    };
    // 3. Scatter the task outputs into [T, h, hd]: a task's rows are its group's heads, adjacent;
    // the parts of a split query (consecutive tasks) are combined by their log-sum-exps first.
    let mut out = vec![0.0f32; t * h * hd];
    let w = group * hd;
    let mut k = 0;
    while k < tasks.len() {
        let task = &tasks[k];
        let s = &batch.seqs[task.si];
        match task.part {
            None => {
                for (i, src) in task.queries.clone().zip(results[k].0.chunks_exact(w)) {
                    let dst = ((s.q_start + i) * h + task.g * group) * hd;
                    out[dst..dst + w].copy_from_slice(src);
                }
                k += 1;
            }
            Some((_, parts)) => {
                let dst = (s.q_start * h + task.g * group) * hd;
                combine_parts(&results[k..k + parts], hd, &mut out[dst..dst + w]);
                k += parts;
            }
        }
    }
    // Returned head-major as the op promises, as a lazy view of the time-major buffer (merging the
    // heads swaps back, so the model's next projection reads it in order).
    if let Some((_, vb)) = kv.rotation {
        out.chunks_exact_mut(hd).for_each(|r| hadamard(r, vb));
    }
    Tensor::<B, 4>::from_data(TensorData::new(out, [1, t, h, hd]), &kv.device).swap_dims(1, 2)
}

/// Keys per part below which a decode query's keys are not split further (each part is a task and
/// a share of the combine).
const SPLIT_MIN_KEYS: usize = 256;
/// Most parts a decode query's keys are split into.
const SPLIT_MAX_PARTS: usize = 8;

/// One attention task: queries `queries` of sequence `si` for the query heads of KV head `g`, over
/// all their visible keys, or over part `.0` of `.1` equal parts of them (a decode query split
/// over its keys).
struct Task {
    si: usize,
    g: usize,
    queries: std::ops::Range<usize>,
    part: Option<(usize, usize)>,
}

/// Merges the parts of split attention: each part's `(out [group, hd], lse [group])`, weighted by
/// `exp(lse_part − max lse)` and divided by the weights' sum (the softmax over all keys is the
/// parts' softmaxes weighted by their share of the exponential sum).
fn combine_parts(parts: &[(Vec<f32>, Vec<f32>)], hd: usize, out: &mut [f32]) {
    for (j, o) in out.chunks_exact_mut(hd).enumerate() {
        let max = parts
            .iter()
            .map(|p| p.1[j])
            .fold(f32::NEG_INFINITY, f32::max);
        o.fill(0.0);
        let mut total = 0.0f32;
        for (po, lse) in parts {
            let wgt = (lse[j] - max).exp();
            total += wgt;
            for (x, y) in o.iter_mut().zip(&po[j * hd..(j + 1) * hd]) {
                *x += wgt * y;
            }
        }
        let inv = 1.0 / total;
        o.iter_mut().for_each(|x| *x *= inv);
    }
}

/// The K/V rows of positions `range` of sequence `s`, KV head `g`, as runs of adjacent slots
/// inside its blocks (`bs` positions each), into `out` (made by [`Runs::of`] for this store;
/// reused: its vector is cleared).
fn kv_runs<'a, D>(
    kv: &'a HostKv<D>,
    bs: usize,
    s: &SeqSlice,
    g: usize,
    range: std::ops::Range<usize>,
    out: &mut Runs<'a>,
) {
    let hd = kv.shape.head_dim;
    match out {
        Runs::F16(v) => v.clear(),
        Runs::Quant(_, v) => v.clear(),
    }
    let mut j = range.start;
    while j < range.end {
        let end = ((j / bs + 1) * bs).min(range.end);
        let r = kv.row(s.blocks[j / bs] as usize, g, j % bs);
        match (&kv.store, &mut *out) {
            (Store::F16 { k, v }, Runs::F16(runs)) => {
                let (at, len) = (r * hd, (end - j) * hd);
                runs.push(KvRun {
                    k: &k[at..at + len],
                    v: &v[at..at + len],
                });
            }
            (Store::Quant { kind, k, v }, Runs::Quant(_, runs)) => {
                let rb = kind.row_bytes(hd);
                let (at, len) = (r * rb, (end - j) * rb);
                runs.push(QKvRun {
                    k: &k[at..at + len],
                    v: &v[at..at + len],
                });
            }
            _ => {}
        }
        j = end;
    }
}

impl Runs<'_> {
    /// Empty runs in the format of `store`.
    fn of(store: &Store) -> Self {
        match store {
            Store::F16 { .. } => Runs::F16(Vec::new()),
            Store::Quant { kind, .. } => Runs::Quant(*kind, Vec::new()),
        }
    }
}

/// Part `part.0` of `part.1` of a decode query's visible keys (sequence `s`, its one query), for
/// the `group` query heads of KV head `g`: `([group, hd], log-sum-exp per head)`.
#[allow(clippy::too_many_arguments)]
fn attend_part<D>(
    kv: &HostKv<D>,
    batch: &PagedBatch,
    s: &SeqSlice,
    g: usize,
    group: usize,
    qs: &[f32],
    h: usize,
    params: &AttentionParams,
    part: (usize, usize),
) -> (Vec<f32>, Vec<f32>) {
    let hd = kv.shape.head_dim;
    let bs = batch.block_size;
    let isa = cinder_kernels::Isa::detect();
    let lo = params.first_visible(s.past);
    let n = s.past + 1 - lo;
    let (a, b) = (lo + n * part.0 / part.1, lo + n * (part.0 + 1) / part.1);
    let mut runs = Runs::of(&kv.store);
    kv_runs(kv, bs, s, g, a..b, &mut runs);
    let row = s.q_start;
    let mut q = qs[(row * h + g * group) * hd..(row * h + (g + 1) * group) * hd].to_vec();
    round_f16(isa, &mut q);
    let (mut out, mut lse) = (vec![0.0f32; group * hd], vec![0.0f32; group]);
    let sp = ScoreParams {
        scale: params.scale,
        softcap: params.softcap,
    };
    let scores = &mut Vec::new();
    match &runs {
        Runs::F16(r) => attend_f16_lse(isa, &q, hd, r, sp, scores, &mut out, &mut lse),
        Runs::Quant(kind, r) => attend_q_lse(isa, *kind, &q, hd, r, sp, scores, &mut out, &mut lse),
    }
    (out, lse)
}

/// Positions attended together: their K/V rows are widened to f32 once per block
/// (`cinder_kernels::attn_rows`), and 16 positions of a 2-head group keep 32 query rows on a tile.
const BLOCK_POSITIONS: usize = 16;

/// Queries `queries` (of `0..q_len`) of one sequence, for the `group` query heads sharing KV head
/// `g`: `[queries.len(), group, hd]` (`qs` is `[T, h, hd]`).
/// The math is [`cinder_kernels::attn::attend_f16`] per query; this walks the block table into runs
/// of contiguous rows (a head's slots inside a block are adjacent), rounds the queries to f16, and
/// hands over [`BLOCK_POSITIONS`] positions at a time with each one's visible span.
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
    let mut qr = Vec::new();
    let mut spans = Vec::new();
    let mut scratch = RowsScratch::default();
    let mut runs = Runs::of(&kv.store);
    let mut b0 = queries.start;
    while b0 < queries.end {
        let b1 = (b0 + BLOCK_POSITIONS).min(queries.end);
        // Positions lo..hi that some query of the block sees (the first position sees the
        // earliest: a window's start only moves forward), as runs of slots inside blocks.
        let (lo, hi) = (params.first_visible(s.past + b0), s.past + b1);
        kv_runs(kv, bs, s, g, lo..hi, &mut runs);
        qr.clear();
        spans.clear();
        for i in b0..b1 {
            let (row, pos) = (s.q_start + i, s.past + i);
            let span = params.first_visible(pos) - lo..pos + 1 - lo;
            // the group's heads are adjacent in a row of `qs`
            let heads = (row * h + g * group) * hd..(row * h + (g + 1) * group) * hd;
            qr.extend_from_slice(&qs[heads]);
            spans.extend(std::iter::repeat_n(span, group));
        }
        round_f16(isa, &mut qr);
        let o = &mut out[(b0 - i0) * group * hd..(b1 - i0) * group * hd];
        match &runs {
            Runs::F16(r) => attend_f16_rows(isa, &qr, hd, &spans, r, sp, &mut scratch, o),
            Runs::Quant(kind, r) => {
                attend_q_rows(isa, *kind, &qr, hd, &spans, r, sp, &mut scratch, o)
            }
        }
        b0 = b1;
    }
    out
}

/// `impl KvOps` for a host backend type.
macro_rules! host_kv_ops {
    ($t:ty) => {
        impl KvOps for $t {
            type KvLayer = HostKv<burn::tensor::Device<$t>>;
            const KV_BYTES_PER_VALUE: usize = 2;
            fn kv_alloc(
                shape: KvShape,
                device: &Self::Device,
            ) -> Result<Self::KvLayer, BackendError> {
                host_kv_alloc(shape, device)
            }
            fn kv_copy_block(kv: &mut Self::KvLayer, src: u32, dst: u32) {
                host_kv_copy_block(kv, src, dst)
            }
            type Step = ();
            fn kv_step(_batch: &PagedBatch, _device: &Self::Device) -> Self::Step {}
            fn paged_attention(
                kv: &mut Self::KvLayer,
                q: Tensor<Self, 4>,
                k: Tensor<Self, 4>,
                v: Tensor<Self, 4>,
                batch: &PagedBatch,
                _step: &Self::Step,
                params: &AttentionParams,
            ) -> Tensor<Self, 4> {
                host_paged_attention(kv, q, k, v, batch, params)
            }
        }
    };
}

#[cfg(feature = "flex")]
host_kv_ops!(crate::types::Flex);
#[cfg(feature = "ndarray")]
host_kv_ops!(crate::types::NdArray);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::attention;
    use crate::attention::dense::{dense_kv_alloc, dense_paged_attention};

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
            dtype: super::super::KvType::F16,
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

    /// A decode query at depth with one KV head (split over its keys into parts, combined by their
    /// log-sum-exps) agrees with the generic fallback, which attends to all keys at once, and with
    /// plain f32 attention; with and without a sliding window.
    #[cfg(feature = "flex")]
    #[test]
    fn split_decode_agrees_with_whole_attention() {
        type B = crate::types::Flex;
        let dev: burn::tensor::Device<B> = Default::default();
        let (h, kvh, hd, bs, n) = (4usize, 1usize, 16usize, 16usize, 1500usize);
        assert!(n / SPLIT_MIN_KEYS >= 2, "deep enough to split");
        let shape = KvShape {
            blocks: n.div_ceil(bs) + 1,
            block_size: bs,
            kv_heads: kvh,
            head_dim: hd,
            dtype: super::super::KvType::F16,
        };
        // blocks in reverse order, so parts cross non-adjacent blocks
        let table: Vec<u32> = (0..shape.blocks as u32).rev().collect();
        let val = |i: usize| (((i * 7919) % 1000) as f32 / 500.0) - 1.0;
        let mk = |heads: usize, salt: usize| {
            let v: Vec<f32> = (0..heads * n * hd).map(|i| val(i * 3 + salt)).collect();
            Tensor::<B, 4>::from_data(TensorData::new(v, [1, heads, n, hd]), &dev)
        };
        // keys of some stretches larger, so the parts' exponential sums differ by orders of
        // magnitude and their weights matter
        let loud: Vec<f32> = (0..n)
            .map(|j| {
                if j % 500 < 150 || j > n - 60 {
                    4.0
                } else {
                    1.0
                }
            })
            .collect();
        let k =
            mk(kvh, 2) * Tensor::<B, 1>::from_floats(loud.as_slice(), &dev).reshape([1, 1, n, 1]);
        let (q, v) = (mk(h, 1), mk(kvh, 3));
        for window in [None, Some(700)] {
            let params = AttentionParams {
                scale: 0.5,
                sliding_window: window,
                softcap: None,
            };
            let mut host = host_kv_alloc(shape, &dev).unwrap();
            let mut dense = dense_kv_alloc::<B>(shape, &dev).unwrap();
            let mut last = Vec::new();
            for (past, len) in [(0, n - 1), (n - 1, 1)] {
                let batch = PagedBatch {
                    block_size: bs,
                    seqs: vec![SeqSlice {
                        q_start: 0,
                        q_len: len,
                        past,
                        blocks: table.clone(),
                    }],
                };
                let part = |x: &Tensor<B, 4>| x.clone().narrow(2, past, len);
                let a = host_paged_attention::<B>(
                    &mut host,
                    part(&q),
                    part(&k),
                    part(&v),
                    &batch,
                    &params,
                );
                let b = dense_paged_attention::<B>(
                    &mut dense,
                    part(&q),
                    part(&k),
                    part(&v),
                    &batch,
                    &params,
                );
                last = vec![a, b];
            }
            let want = attention(q.clone(), k.clone(), v.clone(), 0, &params)
                .narrow(2, n - 1, 1)
                .into_data()
                .to_vec::<f32>()
                .unwrap();
            let host = last[0].clone().into_data().to_vec::<f32>().unwrap();
            let dense = last[1].clone().into_data().to_vec::<f32>().unwrap();
            for ((a, b), w) in host.iter().zip(&dense).zip(&want) {
                assert!(
                    (a - w).abs() < 5e-3,
                    "window {window:?}: split {a} vs f32 {w}"
                );
                assert!(
                    (a - b).abs() < 1e-3,
                    "window {window:?}: split {a} vs whole {b}"
                );
            }
        }
    }
}
