//! Op group: encoder operations (BERT-style sentence embedding, [`EncoderOps`]): layer norm, exact
//! GELU and bidirectional attention with a key-padding mask.
//!
//! The generic versions here are plain Burn ops and serve every backend. The host backends (flex,
//! ndarray; [`host`]) replace them with fused loops run in parallel over rows (rayon): in Burn's
//! generic form these element-wise and reduction ops run on one thread, and on a 2-core machine that
//! left a sentence-embedding batch keeping only ~1.2 cores busy. The fused attention also skips the
//! head split/merge copies and the padded keys.
//!
//! The packed form ([`generic_encoder_attention_packed`]) takes a batch with its padding removed: the
//! sequences' tokens back to back, `[n, width]`, and their lengths. Every per-token layer then runs on
//! the `n` real tokens only (a batch of 32 sentences padded to its longest is about half padding).

#[cfg(any(feature = "flex", feature = "ndarray"))]
pub mod host;

use burn::tensor::activation::{gelu, softmax};
use burn::tensor::backend::Backend;
use burn::tensor::{IndexingUpdateOp, Int, Tensor, TensorData};

/// Encoder operations. One of the op groups that make up [`crate::InferenceBackend`]; every method
/// has the generic Burn-ops form as its default.
pub trait EncoderOps: Backend {
    /// Layer norm over the last axis, `w`, `b` `[d]`.
    fn encoder_layer_norm<const D: usize>(
        x: Tensor<Self, D>,
        w: Tensor<Self, 1>,
        b: Tensor<Self, 1>,
        eps: f64,
    ) -> Tensor<Self, D> {
        generic_layer_norm(x, w, b, eps)
    }

    /// Exact (erf) GELU.
    fn encoder_gelu<const D: usize>(x: Tensor<Self, D>) -> Tensor<Self, D> {
        generic_gelu(x)
    }

    /// Bidirectional attention with a key-padding mask: `q`, `k`, `v` `[b, t, heads·hd]`, `mask`
    /// `[b, t]` (1 token, 0 padding) -> `[b, t, heads·hd]`.
    fn encoder_attention(
        q: Tensor<Self, 3>,
        k: Tensor<Self, 3>,
        v: Tensor<Self, 3>,
        mask: Tensor<Self, 2>,
        heads: usize,
    ) -> Tensor<Self, 3> {
        generic_encoder_attention(q, k, v, mask, heads)
    }

    /// [`EncoderOps::encoder_attention`] on a batch packed without padding: `q`, `k`, `v`
    /// `[n, heads·hd]` hold the sequences' tokens back to back (`lengths` sum to `n`, each ≥ 1);
    /// each token attends to the tokens of its own sequence -> `[n, heads·hd]`.
    fn encoder_attention_packed(
        q: Tensor<Self, 2>,
        k: Tensor<Self, 2>,
        v: Tensor<Self, 2>,
        lengths: &[usize],
        heads: usize,
    ) -> Tensor<Self, 2> {
        generic_encoder_attention_packed(q, k, v, lengths, heads)
    }

    /// Bidirectional grouped-query attention on a packed batch, with its own scale and a symmetric
    /// window (a decoder stack run as an encoder: EmbeddingGemma). `q` `[n, heads·hd]`, `k`, `v`
    /// `[n, kv_heads·hd]` hold the sequences' tokens back to back (`lengths` sum to `n`); each
    /// token attends to the tokens of its own sequence at most `window / 2` positions away ->
    /// `[n, heads·hd]`.
    fn encoder_attention_windowed(
        q: Tensor<Self, 2>,
        k: Tensor<Self, 2>,
        v: Tensor<Self, 2>,
        lengths: &[usize],
        p: &EncoderAttention,
    ) -> Tensor<Self, 2> {
        generic_encoder_attention_windowed(q, k, v, lengths, p)
    }
}

/// Settings of [`EncoderOps::encoder_attention_windowed`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EncoderAttention {
    /// query heads
    pub heads: usize,
    /// key/value heads (divides `heads`: query head `h` reads KV head `h / (heads / kv_heads)`)
    pub kv_heads: usize,
    /// multiplier on `q·k`
    pub scale: f32,
    /// symmetric window: a token sees the tokens at most `window / 2` positions away (`None`: its
    /// whole sequence)
    pub window: Option<usize>,
}

/// [`EncoderOps::encoder_attention_windowed`] in Burn ops: each sequence sliced out, attended with
/// its window's mask ([`crate::attention::symmetric_window_mask`]), and the results concatenated.
pub fn generic_encoder_attention_windowed<B: Backend>(
    q: Tensor<B, 2>,
    k: Tensor<B, 2>,
    v: Tensor<B, 2>,
    lengths: &[usize],
    p: &EncoderAttention,
) -> Tensor<B, 2> {
    let [n, width] = q.dims();
    assert_eq!(
        lengths.iter().sum::<usize>(),
        n,
        "encoder_attention_windowed: lengths do not sum to the rows"
    );
    let device = q.device();
    let hd = width / p.heads;
    let params = crate::attention::AttentionParams {
        scale: p.scale,
        sliding_window: None,
        softcap: None,
    };
    let mut outs = Vec::with_capacity(lengths.len());
    let mut at = 0;
    for &len in lengths {
        // [len, heads·hd] -> [1, heads, len, hd]
        let seq = |x: &Tensor<B, 2>, heads: usize| {
            let w = x.dims()[1];
            x.clone()
                .slice([at..at + len, 0..w])
                .reshape([1, len, heads, hd])
                .swap_dims(1, 2)
        };
        let rows = (p.heads / p.kv_heads) * len;
        let mask = crate::attention::symmetric_window_mask::<B>(
            [1, p.kv_heads, rows, len],
            p.window,
            &device,
        );
        let o = crate::attention::attention_masked(
            seq(&q, p.heads),
            seq(&k, p.kv_heads),
            seq(&v, p.kv_heads),
            mask,
            &params,
        );
        outs.push(o.swap_dims(1, 2).reshape([len, width]));
        at += len;
    }
    Tensor::cat(outs, 0)
}

/// Layer norm over the last axis: `(x - mean) / sqrt(var + eps) * w + b`; `w`, `b` `[d]`.
pub fn generic_layer_norm<B: Backend, const D: usize>(
    x: Tensor<B, D>,
    w: Tensor<B, 1>,
    b: Tensor<B, 1>,
    eps: f64,
) -> Tensor<B, D> {
    let mean = x.clone().mean_dim(D - 1);
    let centered = x - mean;
    let var = centered.clone().powi_scalar(2).mean_dim(D - 1);
    let inv = var.add_scalar(eps).sqrt().recip();
    centered * inv * w.unsqueeze::<D>() + b.unsqueeze::<D>()
}

/// Exact GELU, `x·Φ(x)` with the error function.
pub fn generic_gelu<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    gelu(x)
}

/// Bidirectional multi-head attention. `q`, `k`, `v` `[b, t, heads·hd]` (heads side by side, as
/// the projections produce them), `mask` `[b, t]` (1 token, 0 padding: padded keys get no
/// weight) -> `[b, t, heads·hd]`, scores scaled by `1/sqrt(hd)`.
pub fn generic_encoder_attention<B: Backend>(
    q: Tensor<B, 3>,
    k: Tensor<B, 3>,
    v: Tensor<B, 3>,
    mask: Tensor<B, 2>,
    heads: usize,
) -> Tensor<B, 3> {
    let [b, t, width] = q.dims();
    let hd = width / heads;
    let split = |x: Tensor<B, 3>| x.reshape([b, t, heads, hd]).swap_dims(1, 2);
    // [b, 1, 1, t]: 0 for tokens, -1e9 for padding (exp() of it underflows to 0 after the max shift).
    let bias = mask
        .neg()
        .add_scalar(1.0)
        .mul_scalar(-1.0e9)
        .reshape([b, 1, 1, t]);
    let scale = 1.0 / (hd as f64).sqrt();
    let scores = split(q).matmul(split(k).swap_dims(2, 3)).mul_scalar(scale) + bias;
    softmax(scores, 3)
        .matmul(split(v))
        .swap_dims(1, 2)
        .reshape([b, t, width])
}

/// Row `s·t + i` of the padded `[b·t, ..]` layout for each real token `i < lengths[s]`, in order,
/// and the `[b·t]` key mask (1 token, 0 padding), with `t` the longest length.
pub fn packed_index(lengths: &[usize]) -> (Vec<i64>, Vec<f32>, usize) {
    let t = lengths.iter().copied().max().unwrap_or(0);
    let mut idx = Vec::with_capacity(lengths.iter().sum());
    let mut mask = vec![0.0f32; lengths.len() * t];
    for (s, &len) in lengths.iter().enumerate() {
        for i in 0..len {
            idx.push((s * t + i) as i64);
            mask[s * t + i] = 1.0;
        }
    }
    (idx, mask, t)
}

/// [`generic_encoder_attention`] on a packed batch: `q`, `k`, `v` `[n, heads·hd]` hold the
/// sequences' tokens back to back (`lengths` sum to `n`); each token attends to its own sequence.
/// Scatters to the padded layout, attends with the mask, gathers back -> `[n, heads·hd]`.
pub fn generic_encoder_attention_packed<B: Backend>(
    q: Tensor<B, 2>,
    k: Tensor<B, 2>,
    v: Tensor<B, 2>,
    lengths: &[usize],
    heads: usize,
) -> Tensor<B, 2> {
    let [n, width] = q.dims();
    let device = q.device();
    let (idx, mask, t) = packed_index(lengths);
    assert_eq!(
        idx.len(),
        n,
        "encoder_attention_packed: lengths do not sum to the rows"
    );
    let b = lengths.len();
    let idx = Tensor::<B, 1, Int>::from_data(TensorData::new(idx, [n]), &device);
    let mask = Tensor::<B, 2>::from_data(TensorData::new(mask, [b, t]), &device);
    let pad = |x: Tensor<B, 2>| {
        Tensor::<B, 2>::zeros([b * t, width], &device)
            .select_assign(0, idx.clone(), x, IndexingUpdateOp::Add)
            .reshape([b, t, width])
    };
    generic_encoder_attention(pad(q), pad(k), pad(v), mask, heads)
        .reshape([b * t, width])
        .select(0, idx)
}

#[cfg(feature = "candle")]
impl EncoderOps for crate::types::Candle {}
#[cfg(feature = "wgpu")]
impl EncoderOps for crate::types::Wgpu {}
#[cfg(feature = "cuda")]
impl EncoderOps for crate::types::Cuda {}
