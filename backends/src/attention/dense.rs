//! The generic paged attention every backend can run: the store is a Burn tensor
//! `[blocks · block_size, kv_heads · head_dim]`, writes are `slice_assign`s of contiguous runs, and
//! each sequence's slots are gathered for `attention_with`. K, V, queries and probabilities are
//! rounded to f16 as the CPU kernel (and llama.cpp) rounds them.

use burn::tensor::{Int, Tensor, TensorData, backend::Backend};

#[allow(unused_imports)] // KvOps: used where a backend on this store is compiled in
use super::{AttentionParams, KvOps, KvShape, PagedBatch, attention_with, check_alloc, f16_only};
use crate::BackendError;
use crate::act::round_to_f16;

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

/// Allocates a fallback store (zeros, on the device).
pub fn dense_kv_alloc<B: Backend>(
    shape: KvShape,
    device: &B::Device,
) -> Result<DenseKv<B>, BackendError> {
    check_alloc(&shape)?;
    f16_only(&shape)?;
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
/// slots, run `attention` per sequence.
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

/// `impl KvOps` for a backend on the generic store; `$mem` is its device-memory query, against which
/// each layer's allocation is checked.
#[allow(unused_macros)] // unused when no such backend is compiled in
macro_rules! dense_kv_ops {
    ($t:ty, $kind:expr) => {
        impl KvOps for $t {
            type KvLayer = DenseKv<$t>;
            const KV_BYTES_PER_VALUE: usize = 4;
            fn kv_alloc(
                shape: KvShape,
                device: &Self::Device,
            ) -> Result<Self::KvLayer, BackendError> {
                crate::memory::check_fits(
                    shape.bytes(Self::KV_BYTES_PER_VALUE),
                    <Self as crate::memory::MemoryOps>::device_memory(device),
                    $kind,
                )?;
                dense_kv_alloc(shape, device)
            }
            fn kv_copy_block(kv: &mut Self::KvLayer, src: u32, dst: u32) {
                dense_kv_copy_block(kv, src, dst)
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
                dense_paged_attention(kv, q, k, v, batch, params)
            }
        }
    };
}

#[cfg(feature = "candle")]
dense_kv_ops!(crate::types::Candle, crate::BackendKind::Candle);
