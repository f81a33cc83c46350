//! The attention op and the KV cache behind it.
//!
//! Models hand each layer's freshly projected (and RoPE'd) Q, K, V to an [`AttentionCache`]; the cache
//! stores K/V however it likes (contiguous per sequence here; paged block tables later) and returns the
//! attention output. A model never sees how the cache is laid out, so the paged cache replaces
//! [`ContiguousKvCache`] without a change to any model.

use burn::tensor::{Tensor, TensorData, activation::softmax, backend::Backend};

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

/// Stores K/V across steps and computes causal attention for new tokens.
pub trait AttentionCache<B: Backend> {
    /// Number of tokens already in the cache (the position of the first new token).
    fn position(&self) -> usize;

    /// Appends `k`, `v` for `layer` and attends the new queries to everything cached so far.
    ///
    /// Shapes: `q` `[batch, n_heads, t, head_dim]`, `k`/`v` `[batch, n_kv_heads, t, head_dim]` with
    /// `n_heads % n_kv_heads == 0` (grouped-query attention); returns `[batch, n_heads, t, head_dim]`.
    fn attend(
        &mut self,
        layer: usize,
        q: Tensor<B, 4>,
        k: Tensor<B, 4>,
        v: Tensor<B, 4>,
        params: &AttentionParams,
    ) -> Tensor<B, 4>;

    /// Marks the `t` tokens just attended (all layers) as part of the cache. Models call this once per
    /// forward, after the last layer.
    fn advance(&mut self, t: usize);
}

/// A contiguous K/V cache for one sequence: per layer, K and V grow along the time axis.
#[derive(Debug)]
pub struct ContiguousKvCache<B: Backend> {
    layers: Vec<Option<(Tensor<B, 4>, Tensor<B, 4>)>>,
    position: usize,
    capacity: usize,
    /// Masks built during the current forward, shared by the layers that need the same one.
    masks: Vec<(MaskKey, Option<Tensor<B, 4>>)>,
}

/// What a mask depends on: `[b, kvh, group·t, total]` shape, the first query's position, the window.
type MaskKey = ([usize; 4], usize, Option<usize>);

impl<B: Backend> ContiguousKvCache<B> {
    /// An empty cache for `n_layers` layers holding at most `capacity` tokens.
    pub fn new(n_layers: usize, capacity: usize) -> Self {
        Self {
            layers: (0..n_layers).map(|_| None).collect(),
            position: 0,
            capacity,
            masks: Vec::new(),
        }
    }

    /// Maximum number of tokens.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Drops everything (the next forward starts at position 0).
    pub fn clear(&mut self) {
        self.layers.iter_mut().for_each(|l| *l = None);
        self.position = 0;
        self.masks.clear();
    }
}

impl<B: Backend> AttentionCache<B> for ContiguousKvCache<B> {
    fn position(&self) -> usize {
        self.position
    }

    fn attend(
        &mut self,
        layer: usize,
        q: Tensor<B, 4>,
        k: Tensor<B, 4>,
        v: Tensor<B, 4>,
        params: &AttentionParams,
    ) -> Tensor<B, 4> {
        let slot = &mut self.layers[layer];
        let (k_all, v_all) = match slot.take() {
            None => (k, v),
            Some((pk, pv)) => (Tensor::cat(vec![pk, k], 2), Tensor::cat(vec![pv, v], 2)),
        };
        let [b, h, t, _] = q.dims();
        let [_, kvh, total, _] = k_all.dims();
        let key = (
            [b, kvh, (h / kvh) * t, total],
            self.position,
            params.sliding_window,
        );
        let mask = match self.masks.iter().find(|(k, _)| *k == key) {
            Some((_, m)) => m.clone(),
            None => {
                let m = causal_mask::<B>(key, &q.device());
                self.masks.push((key, m.clone()));
                m
            }
        };
        let out = attention_masked(q, k_all.clone(), v_all.clone(), mask, params);
        *slot = Some((k_all, v_all));
        out
    }

    fn advance(&mut self, t: usize) {
        self.position += t;
        self.masks.clear();
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
    let [b, h, t, _] = q.dims();
    let [_, kvh, total, _] = k.dims();
    let mask = causal_mask::<B>(
        ([b, kvh, (h / kvh) * t, total], past, params.sliding_window),
        &q.device(),
    );
    attention_masked(q, k, v, mask, params)
}

/// [`attention`] with its additive mask already built (see [`causal_mask`]).
pub fn attention_masked<B: Backend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    mask: Option<Tensor<B, 4>>,
    params: &AttentionParams,
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
    // [b, kvh, group·t, d] -> [b, h, t, d]
    softmax(scores, 3).matmul(v).reshape([b, h, t, d])
}

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
