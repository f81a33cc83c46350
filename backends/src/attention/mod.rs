//! Op group: paged attention ([`KvOps`]) and the attention every backend can run in Burn ops.
//!
//! Paged attention (Kwon et al., 2023, "Efficient Memory Management for Large Language Model Serving
//! with PagedAttention"): K/V live in fixed-size blocks of a per-layer store allocated once; a sequence
//! reaches its tokens through a block table. A forward runs a *ragged* batch: the new tokens of every
//! scheduled sequence are concatenated along the time axis (`[1, heads, T, head_dim]`, no padding) and
//! [`PagedBatch`] says which rows belong to which sequence and where its cached tokens are.
//!
//! - CPU backends (flex, ndarray; [`host`]) keep the store in host memory and run a direct kernel:
//!   one query row at a time, keys in position order, a fixed summation order. The result for a query
//!   therefore does not depend on what else is in the batch, how the prompt was chunked, or whether
//!   the sequence was recomputed after preemption — the property batched serving needs to give each
//!   request exactly the tokens it would get alone.
//! - The CubeCL backends (wgpu, cuda; `cube`) keep the store on the device and read the block
//!   tables there: one kernel writes a step's new K/V, one attends (GQA-aware, split over long
//!   contexts).
//! - Other backends use the generic fallback ([`dense`]): the store is a Burn tensor `[slots, kvh·hd]`,
//!   writes are `slice_assign`s of contiguous runs, reads gather a sequence's slots and run
//!   [`attention`].

#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub mod cube;
pub mod dense;
#[cfg(any(feature = "flex", feature = "ndarray"))]
pub mod host;

use burn::tensor::{Tensor, TensorData, activation::softmax, backend::Backend};

use crate::BackendError;
use crate::act::round_to_f16;

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
pub(crate) fn attention_with<B: Backend>(
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

/// The additive mask `[b, kvh, group·t, t]` of bidirectional attention over one sequence of `t`
/// tokens with a symmetric window: keys more than `window / 2` positions away from the query, on
/// either side, are hidden (llama.cpp's symmetric window; Hugging Face's bidirectional Gemma 3 sets
/// its exclusive window to `window / 2 + 1`, the same set). `None` when no window bites.
pub fn symmetric_window_mask<B: Backend>(
    [b, kvh, rows, t]: [usize; 4],
    window: Option<usize>,
    device: &B::Device,
) -> Option<Tensor<B, 4>> {
    let half = window.map(|w| w / 2).filter(|&h| t > h + 1)?;
    // finite, as in `causal_mask`
    const HIDDEN: f32 = -1.0e30;
    let one: Vec<f32> = (0..t)
        .flat_map(|i| (0..t).map(move |j| if i.abs_diff(j) <= half { 0.0 } else { HIDDEN }))
        .collect();
    let copies = b * kvh * (rows / t);
    let mut full = Vec::with_capacity(copies * one.len());
    for _ in 0..copies {
        full.extend_from_slice(&one);
    }
    Some(Tensor::from_data(
        TensorData::new(full, [b, kvh, rows, t]),
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
    /// how K and V rows are stored
    pub dtype: KvType,
}

impl KvShape {
    /// Values in one of K or V.
    pub fn values(&self) -> usize {
        self.blocks * self.block_size * self.kv_heads * self.head_dim
    }

    /// Bytes of K and V together; `elem` is the backend's bytes per value of an f16 store (2 on
    /// the CPU kernels, 4 in the fallback and on the GPU backends).
    pub fn bytes(&self, elem: usize) -> usize {
        2 * self.blocks
            * self.block_size
            * self.kv_heads
            * self.dtype.row_bytes(self.head_dim, elem)
    }
}

/// How the K/V cache stores its rows (`--kv-type`, llama.cpp's `-ctk`/`-ctv`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum KvType {
    /// f16 values (the default, as llama.cpp's)
    #[default]
    F16,
    /// Q8_0 blocks: 32 values as int8 with an f16 scale (0.53× of f16); CPU backends
    Q8_0,
    /// Q4_0 blocks: 32 values as 4-bit nibbles with an f16 scale (0.28× of f16); CPU backends
    Q4_0,
}

impl KvType {
    /// Every type, in the order `--kv-type` lists them.
    pub const ALL: [KvType; 3] = [KvType::F16, KvType::Q8_0, KvType::Q4_0];

    /// Its name (`f16`, `q8_0`, `q4_0`).
    pub fn name(self) -> &'static str {
        match self {
            KvType::F16 => "f16",
            KvType::Q8_0 => "q8_0",
            KvType::Q4_0 => "q4_0",
        }
    }

    /// The block format of a quantized type.
    pub fn quant(self) -> Option<cinder_kernels::attn_q::KvQuant> {
        match self {
            KvType::F16 => None,
            KvType::Q8_0 => Some(cinder_kernels::attn_q::KvQuant::Q8_0),
            KvType::Q4_0 => Some(cinder_kernels::attn_q::KvQuant::Q4_0),
        }
    }

    /// Bytes of one row of `head_dim` values; `elem` is the bytes per value of an f16 row on the
    /// backend at hand.
    pub fn row_bytes(self, head_dim: usize, elem: usize) -> usize {
        match self.quant() {
            None => head_dim * elem,
            Some(q) => q.row_bytes(head_dim),
        }
    }

    /// Refuses a quantized type for rows that are not whole 32-value blocks.
    pub fn check_head_dim(self, head_dim: usize) -> Result<(), BackendError> {
        if self != KvType::F16 && !head_dim.is_multiple_of(32) {
            return Err(BackendError::Layout(format!(
                "a {} KV cache stores rows in blocks of 32 values; this model's heads are {head_dim} \
                 wide (use --kv-type f16)",
                self.name()
            )));
        }
        Ok(())
    }
}

impl std::fmt::Display for KvType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for KvType {
    type Err = BackendError;

    /// Parses `f16`, `q8_0` or `q4_0` (case-insensitive).
    ///
    /// # Examples
    /// ```
    /// use cinder_backends::attention::KvType;
    /// assert_eq!("q8_0".parse::<KvType>().unwrap(), KvType::Q8_0);
    /// assert!("q3".parse::<KvType>().unwrap_err().to_string().contains("f16, q8_0, q4_0"));
    /// ```
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        KvType::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| BackendError::UnknownKvType(s.to_string()))
    }
}

/// Refuses a quantized KV type on a backend whose store holds f16 values only.
#[allow(dead_code)] // unused when only the CPU backends are compiled in
pub(crate) fn f16_only(shape: &KvShape) -> Result<(), BackendError> {
    if shape.dtype != KvType::F16 {
        return Err(BackendError::Layout(format!(
            "a {} KV cache runs on the CPU backends (flex, ndarray); this backend stores f16 \
             (use --kv-type f16)",
            shape.dtype
        )));
    }
    Ok(())
}

pub(crate) fn check_alloc(shape: &KvShape) -> Result<(), BackendError> {
    if shape.blocks == 0 || shape.block_size == 0 || shape.kv_heads == 0 || shape.head_dim == 0 {
        return Err(BackendError::Layout(format!("empty KV store {shape:?}")));
    }
    Ok(())
}

/// One layer's paged K/V store and attention over it. One of the op groups that make up
/// [`crate::InferenceBackend`].
pub trait KvOps: Backend {
    /// One layer's paged K/V store.
    type KvLayer: std::fmt::Debug + Send + 'static;

    /// Bytes the store takes per K or V value (sizes the cache from a memory budget).
    const KV_BYTES_PER_VALUE: usize;

    /// A forward's batch layout as this backend's attention reads it: made once per forward by
    /// [`KvOps::kv_step`] and shared by every layer (on a device, one upload per step of the
    /// positions, slot mapping and block tables).
    type Step: std::fmt::Debug + Send + Sync + 'static;

    /// The step layout of `batch`, on `device`.
    fn kv_step(batch: &PagedBatch, device: &Self::Device) -> Self::Step;

    /// Allocates one layer's store, all of it, once.
    fn kv_alloc(shape: KvShape, device: &Self::Device) -> Result<Self::KvLayer, BackendError>;

    /// Copies block `src` to block `dst` (copy-on-write of a shared, partly filled block).
    fn kv_copy_block(kv: &mut Self::KvLayer, src: u32, dst: u32);

    /// Writes the batch's new K/V into the store and attends every new query to its sequence's
    /// cached tokens. `q` `[1, h, T, hd]`, `k`/`v` `[1, kvh, T, hd]` with `T = batch.rows()`; returns
    /// `[1, h, T, hd]`. `step` is [`KvOps::kv_step`] of `batch`.
    fn paged_attention(
        kv: &mut Self::KvLayer,
        q: Tensor<Self, 4>,
        k: Tensor<Self, 4>,
        v: Tensor<Self, 4>,
        batch: &PagedBatch,
        step: &Self::Step,
        params: &AttentionParams,
    ) -> Tensor<Self, 4>;
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
