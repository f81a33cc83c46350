//! Fused projections seen as separate ones: Phi-3 stores Q, K and V as one `attn_qkv` tensor and
//! the MLP's gate and up projections as one `ffn_up` of twice the hidden width. The rows of a GGUF
//! tensor are contiguous, so each part is a zero-copy byte range of the fused tensor, and the Llama
//! block loads `attn_q`, `attn_k`, `attn_v`, `ffn_gate` and `ffn_up` as if they had been stored
//! apart: one graph for every Llama-family member. Mixture-of-experts files store each layer's
//! experts as one 3-D tensor; expert `e` (`blk.N.ffn_gate_exps.e`) is its `e`-th slab of rows.

use cinder_models::llama::LlamaConfig;

use crate::gguf_weights::{StoredTensor, TensorStore};

/// A [`TensorStore`] that answers the separate names from fused tensors when only those exist.
pub struct FusedSplit<'a, S: TensorStore + ?Sized> {
    inner: &'a S,
    /// rows of Q, K and V in `attn_qkv` (`[in, q + k + v]` in GGUF dims)
    qkv_rows: [usize; 3],
    /// MLP hidden width: `ffn_up` fused holds the gate's rows, then the up projection's
    ffn_dim: usize,
}

impl<'a, S: TensorStore + ?Sized> FusedSplit<'a, S> {
    /// A view of `inner` for a model of `config`'s shapes.
    pub fn new(inner: &'a S, config: &LlamaConfig) -> Self {
        let kv = config.n_kv_heads * config.head_dim;
        Self {
            inner,
            qkv_rows: [config.n_heads * config.head_dim, kv, kv],
            ffn_dim: config.ffn_dim,
        }
    }
}

/// Rows `start..start + n` of a 2-D tensor (`[in, rows]`), or `None` when it does not have
/// `total` rows that split evenly into bytes.
fn rows(t: &StoredTensor, start: usize, n: usize, total: usize) -> Option<StoredTensor> {
    let [cols, r] = t.dims.as_slice() else {
        return None;
    };
    if *r as usize != total || total == 0 || !t.data.len().is_multiple_of(total) {
        return None;
    }
    let row_bytes = t.data.len() / total;
    Some(StoredTensor {
        ty: t.ty,
        dims: vec![*cols, n as u64],
        data: t.data.slice(start * row_bytes, n * row_bytes)?,
    })
}

impl<S: TensorStore + ?Sized> TensorStore for FusedSplit<'_, S> {
    fn stored(&self, name: &str) -> Option<StoredTensor> {
        if let Some(t) = self.inner.stored(name) {
            // A fused `ffn_up` (gate rows, then up rows) answers `ffn_up` with its second half.
            if name.ends_with(".ffn_up.weight")
                && self
                    .inner
                    .stored(&name.replace(".ffn_up.", ".ffn_gate."))
                    .is_none()
                && t.dims.get(1) == Some(&(2 * self.ffn_dim as u64))
            {
                return rows(&t, self.ffn_dim, self.ffn_dim, 2 * self.ffn_dim);
            }
            return Some(t);
        }
        let (base, part) = name.strip_suffix(".weight")?.rsplit_once('.')?;
        // Expert `e` of a 3-D expert tensor (`[in, out, n_experts]`): its `out` rows.
        if let Ok(e) = part.parse::<usize>() {
            let t = self.inner.stored(&format!("{base}.weight"))?;
            let [cols, out, n_experts] = t.dims.as_slice() else {
                return None;
            };
            let (out, n_experts) = (*out as usize, *n_experts as usize);
            if e >= n_experts {
                return None;
            }
            let flat = StoredTensor {
                dims: vec![*cols, (out * n_experts) as u64],
                ..t
            };
            return rows(&flat, e * out, out, out * n_experts);
        }
        let [q, k, v] = self.qkv_rows;
        let total = q + k + v;
        match part {
            "attn_q" | "attn_k" | "attn_v" => {
                let fused = self.inner.stored(&format!("{base}.attn_qkv.weight"))?;
                let (start, n) = match part {
                    "attn_q" => (0, q),
                    "attn_k" => (q, k),
                    _ => (q + k, v),
                };
                rows(&fused, start, n, total)
            }
            "ffn_gate" => {
                let fused = self.inner.stored(&format!("{base}.ffn_up.weight"))?;
                rows(&fused, 0, self.ffn_dim, 2 * self.ffn_dim)
            }
            _ => None,
        }
    }
}
