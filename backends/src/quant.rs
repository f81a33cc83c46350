//! The quantized-matmul extension every backend implements: [`InferenceBackend`].
//!
//! A model's linear layers hold a [`QWeight`] (the checkpoint's blocks, usually the GGUF file's own
//! mapped pages) prepared by the backend into its [`InferenceBackend::QMatrix`]:
//! - CPU backends (flex, ndarray) keep the blocks as they are and run `cinder-kernels` (Q8 activation
//!   blocks and integer dot products, AVX2 where the CPU has it), so a 4-bit weight is read as 4 bits.
//! - Every other backend gets the generic fallback ([`DenseQMatrix`]): the weight dequantized once to
//!   f32 on the device, activations rounded as the kernels round them ([`crate::act`]), one Burn
//!   matmul. Correct everywhere, but it holds f32 weights.

use std::fmt;
use std::sync::{Arc, OnceLock};

use burn::tensor::{Int, Tensor, TensorData, backend::Backend};
pub use cinder_gguf::{GgmlType, SharedBytes};
use cinder_kernels::Weights;

use crate::BackendError;
use crate::act::ActQuant;
#[allow(unused_imports)] // which of these are used depends on the backends compiled in
use crate::attention::{
    AttentionParams, DenseKv, HostKv, KvShape, PagedBatch, dense_kv_alloc, dense_kv_copy_block,
    dense_paged_attention, host_kv_alloc, host_kv_copy_block, host_paged_attention,
};
use crate::encoder::host_values;

/// A weight matrix as the checkpoint stores it: `n` output rows of `k` inputs in `ty`'s block format
/// (GGUF dims `[k, n]`).
#[derive(Clone)]
pub struct QWeight {
    /// storage type
    pub ty: GgmlType,
    /// output rows
    pub n: usize,
    /// inputs per row
    pub k: usize,
    /// the blocks, `n · row_bytes` bytes
    pub data: SharedBytes,
}

impl fmt::Debug for QWeight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "QWeight({} {}×{})", self.ty.name(), self.n, self.k)
    }
}

impl QWeight {
    /// A row-major f32 weight `[n, k]` (tests, weights computed in memory).
    pub fn from_f32(values: &[f32], n: usize, k: usize) -> Self {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Self {
            ty: GgmlType::F32,
            n,
            k,
            data: SharedBytes::from_vec(bytes),
        }
    }

    #[cfg_attr(not(any(feature = "flex", feature = "ndarray")), allow(dead_code))]
    fn kernel_view(&self) -> Weights<'_> {
        Weights {
            ty: self.ty,
            data: &self.data,
            n: self.n,
            k: self.k,
        }
    }

    /// Checks the byte count against the shape.
    pub fn validate(&self, name: &str) -> Result<(), BackendError> {
        let expected =
            self.ty
                .bytes_for((self.n * self.k) as u64)
                .ok_or_else(|| BackendError::Weight {
                    name: name.to_string(),
                    reason: format!(
                        "{}×{} is not a whole number of {} blocks",
                        self.n,
                        self.k,
                        self.ty.name()
                    ),
                })?;
        if expected != self.data.len() as u64 {
            return Err(BackendError::Weight {
                name: name.to_string(),
                reason: format!(
                    "{} bytes for a {}×{} {} weight (expected {expected})",
                    self.data.len(),
                    self.n,
                    self.k,
                    self.ty.name()
                ),
            });
        }
        Ok(())
    }

    /// The weight in f32, row-major `[n, k]`, through the reference dequantizer.
    pub fn dequantize(&self, name: &str) -> Result<Vec<f32>, BackendError> {
        cinder_gguf::dequant::dequantize(self.ty, &self.data, self.n * self.k).map_err(|e| {
            BackendError::Weight {
                name: name.to_string(),
                reason: e.to_string(),
            }
        })
    }
}

/// Backend operations beyond Burn's that inference needs: products with quantized weights and
/// attention over a paged KV cache. Implemented for every backend type in [`crate::types`].
pub trait InferenceBackend: Backend {
    /// Which of Cinder's backends this is.
    const KIND: crate::BackendKind;

    /// A weight prepared for this backend's kernels.
    type QMatrix: Clone + fmt::Debug + Send + Sync + 'static;

    /// Prepares a weight (validated here: a bad byte count is an error naming `name`).
    fn qw_prepare(
        name: &str,
        w: QWeight,
        device: &Self::Device,
    ) -> Result<Self::QMatrix, BackendError>;

    /// `x` `[m, k]` · `Wᵀ` -> `[m, n]`.
    fn qw_matmul(x: Tensor<Self, 2>, w: &Self::QMatrix) -> Tensor<Self, 2>;

    /// `x` `[m, k]` · `W_iᵀ` for several weights of the same input width (a layer's Q/K/V, its
    /// gate/up): each result equals [`Self::qw_matmul`]'s. The host kernels quantize `x` once and
    /// run the products in one parallel section.
    fn qw_matmul_many(x: Tensor<Self, 2>, ws: &[&Self::QMatrix]) -> Vec<Tensor<Self, 2>> {
        ws.iter().map(|w| Self::qw_matmul(x.clone(), w)).collect()
    }

    /// Rows `ids` of `W` as f32 `[len, k]` (embedding lookups in a table that may double as the tied
    /// output projection).
    fn qw_rows(w: &Self::QMatrix, ids: Tensor<Self, 1, Int>) -> Tensor<Self, 2>;

    /// `(n, k)` of a prepared weight.
    fn qw_shape(w: &Self::QMatrix) -> (usize, usize);

    /// One layer's paged K/V store (see [`crate::attention`]).
    type KvLayer: fmt::Debug + Send + 'static;

    /// Bytes the store takes per K or V value (sizes the cache from a memory budget).
    const KV_BYTES_PER_VALUE: usize;

    /// Total and free memory of the device (see [`crate::memory`]); `None` where the API does not
    /// tell.
    fn device_memory(_device: &Self::Device) -> Option<crate::memory::DeviceMemory> {
        None
    }

    /// Allocates one layer's store, all of it, once.
    fn kv_alloc(shape: KvShape, device: &Self::Device) -> Result<Self::KvLayer, BackendError>;

    /// Copies block `src` to block `dst` (copy-on-write of a shared, partly filled block).
    fn kv_copy_block(kv: &mut Self::KvLayer, src: u32, dst: u32);

    /// Writes the batch's new K/V into the store and attends every new query to its sequence's
    /// cached tokens. `q` `[1, h, T, hd]`, `k`/`v` `[1, kvh, T, hd]` with `T = batch.rows()`; returns
    /// `[1, h, T, hd]`.
    fn paged_attention(
        kv: &mut Self::KvLayer,
        q: Tensor<Self, 4>,
        k: Tensor<Self, 4>,
        v: Tensor<Self, 4>,
        batch: &PagedBatch,
        params: &AttentionParams,
    ) -> Tensor<Self, 4>;

    /// SwiGLU's gate: `silu(g) · u`, `silu(x) = x / (1 + e^-x)` (same shapes). The host backends
    /// fuse it into one parallel pass with the same arithmetic ([`cinder_kernels::elementwise`]).
    fn silu_mul<const D: usize>(g: Tensor<Self, D>, u: Tensor<Self, D>) -> Tensor<Self, D> {
        burn::tensor::activation::silu(g) * u
    }

    /// GEGLU's gate: `gelu(g) · u` with the tanh GELU as ggml's CPU op computes it (input rounded
    /// to f16, result rounded to f16, `x ≤ −10 → 0`, `x ≥ 10 → x`). The host backends read ggml's
    /// f16 table ([`cinder_kernels::elementwise::gelu_mul`]); others run the formula with Burn ops.
    fn gelu_mul<const D: usize>(g: Tensor<Self, D>, u: Tensor<Self, D>) -> Tensor<Self, D> {
        crate::encoder::generic_gelu_tanh_f16(g) * u
    }

    /// RMS norm over the last axis: `x / sqrt(mean(x²) + eps) · w`, `w` `[d]`. The host backends
    /// run ggml's arithmetic ([`cinder_kernels::elementwise::rms_norm`]: a sequential f64 sum, so
    /// the result does not depend on the CPU's vector width), rows in parallel.
    fn rms_norm<const D: usize>(
        x: Tensor<Self, D>,
        w: Tensor<Self, 1>,
        eps: f64,
    ) -> Tensor<Self, D> {
        let ms = x.clone().powi_scalar(2).mean_dim(D - 1);
        let inv = ms.add_scalar(eps).sqrt().recip();
        x * inv * w.unsqueeze::<D>()
    }

    /// Layer norm over the last axis, `w`, `b` `[d]` ([`crate::encoder`]; the host backends
    /// fuse it and run rows in parallel).
    fn encoder_layer_norm<const D: usize>(
        x: Tensor<Self, D>,
        w: Tensor<Self, 1>,
        b: Tensor<Self, 1>,
        eps: f64,
    ) -> Tensor<Self, D> {
        crate::encoder::generic_layer_norm(x, w, b, eps)
    }

    /// Exact (erf) GELU.
    fn encoder_gelu<const D: usize>(x: Tensor<Self, D>) -> Tensor<Self, D> {
        crate::encoder::generic_gelu(x)
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
        crate::encoder::generic_encoder_attention(q, k, v, mask, heads)
    }

    /// [`InferenceBackend::encoder_attention`] on a batch packed without padding: `q`, `k`, `v`
    /// `[n, heads·hd]` hold the sequences' tokens back to back (`lengths` sum to `n`, each ≥ 1);
    /// each token attends to the tokens of its own sequence -> `[n, heads·hd]`.
    fn encoder_attention_packed(
        q: Tensor<Self, 2>,
        k: Tensor<Self, 2>,
        v: Tensor<Self, 2>,
        lengths: &[usize],
        heads: usize,
    ) -> Tensor<Self, 2> {
        crate::encoder::generic_encoder_attention_packed(q, k, v, lengths, heads)
    }
}

/// A prepared weight with its backend type erased, so a Burn `Module` can hold it as a plain
/// (non-parameter) field: Burn's derive maps modules between a backend and its autodiff wrapper, which
/// an associated type of one backend cannot follow. [`PreparedWeight::get`] recovers it.
#[derive(Clone)]
pub struct PreparedWeight {
    inner: std::sync::Arc<dyn std::any::Any + Send + Sync>,
    shape: (usize, usize),
    backend: &'static str,
}

impl fmt::Debug for PreparedWeight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "PreparedWeight({}×{} for {})",
            self.shape.0, self.shape.1, self.backend
        )
    }
}

impl PreparedWeight {
    /// Prepares `w` for backend `B`.
    pub fn new<B: InferenceBackend>(
        name: &str,
        w: QWeight,
        device: &B::Device,
    ) -> Result<Self, BackendError> {
        let m = B::qw_prepare(name, w, device)?;
        Ok(Self {
            shape: B::qw_shape(&m),
            inner: std::sync::Arc::new(m),
            backend: std::any::type_name::<B>(),
        })
    }

    /// `(n, k)`: output rows, inputs per row.
    pub fn shape(&self) -> (usize, usize) {
        self.shape
    }

    /// The weight as backend `B` prepared it. A layer is used only with the backend it was loaded
    /// for; anything else is a bug in the caller, reported with both backend names.
    pub fn get<B: InferenceBackend>(&self) -> &B::QMatrix {
        match self.inner.downcast_ref::<B::QMatrix>() {
            Some(m) => m,
            None => panic!(
                "weight prepared for {} used with {}",
                self.backend,
                std::any::type_name::<B>()
            ),
        }
    }
}

#[cfg_attr(not(any(feature = "flex", feature = "ndarray")), allow(dead_code))]
/// A weight kept in its block format in host memory, for the CPU kernels.
#[derive(Clone, Debug)]
pub struct HostQMatrix<D> {
    w: QWeight,
    device: D,
    /// F32 weights only: `Wᵀ` `[k, n]`, built on the first product of many rows (never for
    /// tables only looked up by row, such as embeddings). In this layout the gemm reads the
    /// weight without repacking it on every call, which dominated small batches.
    transposed: Arc<OnceLock<Vec<f32>>>,
    /// Q4_0/Q4_1/Q8_0: the rows interleaved by 8 for the packed kernels (`cinder_kernels::packed`),
    /// built on the first product (never for tables only looked up by row). Same size as the blocks.
    packed: Arc<OnceLock<Option<cinder_kernels::Packed>>>,
}

/// The generic fallback: f32 weight on the device, stored transposed `[k, n]` for a plain matmul.
#[derive(Clone, Debug)]
pub struct DenseQMatrix<B: Backend> {
    weight: Tensor<B, 2>,
    act: ActQuant,
}

#[cfg_attr(not(any(feature = "flex", feature = "ndarray")), allow(dead_code))]
fn host_prepare<D>(name: &str, w: QWeight, device: &D) -> Result<HostQMatrix<D>, BackendError>
where
    D: Clone,
{
    w.validate(name)?;
    let w = if cinder_kernels::supports(w.ty) {
        w
    } else {
        // Types without a kernel (Q2_K, Q3_K, …) run as f32.
        tracing::debug!(
            name,
            ty = w.ty.name(),
            "no CPU kernel for this type: expanding to f32"
        );
        QWeight::from_f32(&w.dequantize(name)?, w.n, w.k)
    };
    Ok(HostQMatrix {
        w,
        device: device.clone(),
        transposed: Arc::default(),
        packed: Arc::default(),
    })
}

/// Rows from which an F32 weight's product goes through Burn's gemm instead of the dot kernel.
#[cfg_attr(not(any(feature = "flex", feature = "ndarray")), allow(dead_code))]
const F32_GEMM_MIN_ROWS: usize = 8;

/// `Wᵀ` `[k, n]` of a little-endian f32 weight `[n, k]` stored as bytes.
#[cfg_attr(not(any(feature = "flex", feature = "ndarray")), allow(dead_code))]
fn transpose_f32(bytes: &[u8], n: usize, k: usize) -> Vec<f32> {
    let mut t = vec![0.0f32; n * k];
    for (o, row) in bytes.chunks_exact(4 * k).enumerate() {
        for (i, c) in row.chunks_exact(4).enumerate() {
            t[i * n + o] = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        }
    }
    t
}

/// `x` `[m, k]` · `wt` (`Wᵀ` `[k, n]`, row-major) with the `gemm` crate on the rayon pool.
#[cfg_attr(not(any(feature = "flex", feature = "ndarray")), allow(dead_code))]
fn f32_gemm(x: &[f32], m: usize, wt: &[f32], n: usize, k: usize) -> Vec<f32> {
    assert!(
        x.len() == m * k && wt.len() == n * k,
        "f32 gemm: {} activations for [{m}, {k}], {} weights for [{k}, {n}]",
        x.len(),
        wt.len()
    );
    let mut y = vec![0.0f32; m * n];
    // SAFETY: every pointer covers the extent its strides address (checked just above): dst
    // [m, n], lhs [m, k] and rhs [k, n], all row-major. `read_dst` is false: `y` is only written.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            y.as_mut_ptr(),
            1,
            n as isize,
            false,
            x.as_ptr(),
            1,
            k as isize,
            wt.as_ptr(),
            1,
            n as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::Rayon(0),
        );
    }
    y
}

#[cfg_attr(not(any(feature = "flex", feature = "ndarray")), allow(dead_code))]
fn host_matmul<B: Backend>(x: Tensor<B, 2>, w: &HostQMatrix<B::Device>) -> Tensor<B, 2> {
    let [m, k] = x.dims();
    assert_eq!(
        k, w.w.k,
        "qw_matmul: input width {k} for a weight of {} inputs",
        w.w.k
    );
    if w.w.ty == GgmlType::F32 && m >= F32_GEMM_MIN_ROWS {
        // Many rows of an f32 weight (encoder batches, prefill of an F32 checkpoint): a blocked
        // gemm reads each weight tile once for many rows, where the row-by-row dot kernel re-reads
        // the whole weight per row. The stored [n, k] rows are read in place as Wᵀ.
        let wt = w
            .transposed
            .get_or_init(|| transpose_f32(&w.w.data, w.w.n, k));
        let xs = host_values(x);
        let y = f32_gemm(&xs, m, wt, w.w.n, k);
        return Tensor::from_data(TensorData::new(y, [m, w.w.n]), &w.device);
    }
    let xs = host_values(x);
    let mut y = vec![0.0f32; m * w.w.n];
    // Shapes were validated when the weight was prepared and just above.
    let done = match packed_of(w) {
        Some(p) => cinder_kernels::matmul_packed(p, &xs, m, &mut y),
        None => cinder_kernels::matmul(w.w.kernel_view(), &xs, m, &mut y),
    };
    if let Err(e) = done {
        panic!("qw_matmul on validated shapes failed: {e}");
    }
    Tensor::from_data(TensorData::new(y, [m, w.w.n]), &w.device)
}

/// The packed copy of `w`, built on its first product; `None` for types without one. Once packed,
/// the products never read the GGUF blocks again (nor do a tied table's embedding lookups:
/// `host_rows`), so their mapped pages are handed back to the OS: otherwise the model would be
/// resident twice.
fn packed_of<D>(w: &HostQMatrix<D>) -> Option<&cinder_kernels::Packed> {
    w.packed
        .get_or_init(|| {
            // Pages are released as packing passes them (cumulatively from the start, so a page
            // that straddles two steps goes with the second).
            cinder_kernels::Packed::new_releasing(w.w.kernel_view(), |done| {
                w.w.data.release_pages_in(0, done)
            })
            .ok()
            .flatten()
        })
        .as_ref()
}

#[cfg_attr(not(any(feature = "flex", feature = "ndarray")), allow(dead_code))]
fn host_matmul_many<B: Backend>(
    x: Tensor<B, 2>,
    ws: &[&HostQMatrix<B::Device>],
) -> Vec<Tensor<B, 2>> {
    let [m, k] = x.dims();
    let packed: Option<Vec<&cinder_kernels::Packed>> = ws
        .iter()
        .map(|w| if w.w.k == k { packed_of(w) } else { None })
        .collect();
    let (Some(ps), Some(first)) = (packed, ws.first()) else {
        // Mixed or unpackable types (or a width mismatch, reported by `host_matmul`): one by one.
        return ws.iter().map(|w| host_matmul(x.clone(), w)).collect();
    };
    let xs = host_values(x);
    let mut ys: Vec<Vec<f32>> = ps.iter().map(|p| vec![0.0f32; m * p.n()]).collect();
    let mut outs: Vec<&mut [f32]> = ys.iter_mut().map(|y| y.as_mut_slice()).collect();
    // Shapes were validated when the weights were prepared and just above.
    if let Err(e) = cinder_kernels::matmul_packed_many(&ps, &xs, m, &mut outs) {
        panic!("qw_matmul_many on validated shapes failed: {e}");
    }
    ys.into_iter()
        .zip(&ps)
        .map(|(y, p)| Tensor::from_data(TensorData::new(y, [m, p.n()]), &first.device))
        .collect()
}

#[cfg_attr(not(any(feature = "flex", feature = "ndarray")), allow(dead_code))]
fn host_rows<B: Backend>(w: &HostQMatrix<B::Device>, ids: Tensor<B, 1, Int>) -> Tensor<B, 2> {
    // A tied table packed as the output head: its rows come from the packed copy, so the mapped
    // blocks that packing released stay released (each lookup would fault pages back in).
    match w.packed.get() {
        Some(Some(p)) => {
            let ids = row_ids(ids);
            let mut out = vec![0.0f32; ids.len() * p.k()];
            // An out-of-range id is a caller bug (token ids are checked against the vocabulary).
            if let Err(e) = p.dequantize_rows(&ids, &mut out) {
                panic!("qw_rows: {e}");
            }
            Tensor::from_data(TensorData::new(out, [ids.len(), p.k()]), &w.device)
        }
        _ => rows_from_blocks(&w.w, ids, &w.device),
    }
}

/// Row numbers from an id tensor; a negative id becomes an out-of-range index, reported by the
/// lookup rather than clamped to row 0.
fn row_ids<B: Backend>(ids: Tensor<B, 1, Int>) -> Vec<usize> {
    let data = ids.into_data().convert::<i64>();
    data.as_slice::<i64>()
        .map(|s| {
            s.iter()
                .map(|&i| usize::try_from(i).unwrap_or(usize::MAX))
                .collect()
        })
        .unwrap_or_default()
}

/// Rows `ids` of `w` as f32 `[len, k]`, dequantized on the host from its blocks (embedding
/// lookups in a table that may double as the tied output projection).
#[cfg_attr(
    not(any(feature = "flex", feature = "ndarray", feature = "candle")),
    allow(dead_code)
)]
pub(crate) fn rows_from_blocks<B: Backend>(
    w: &QWeight,
    ids: Tensor<B, 1, Int>,
    device: &B::Device,
) -> Tensor<B, 2> {
    let ids = row_ids(ids);
    let mut out = vec![0.0f32; ids.len() * w.k];
    // An out-of-range id is a caller bug (token ids are checked against the vocabulary upstream).
    if let Err(e) = cinder_kernels::dequantize_rows(w.kernel_view(), &ids, &mut out) {
        panic!("qw_rows: {e}");
    }
    Tensor::from_data(TensorData::new(out, [ids.len(), w.k]), device)
}

/// Prepares the generic fallback.
pub fn dense_prepare<B: Backend>(
    name: &str,
    w: QWeight,
    device: &B::Device,
) -> Result<DenseQMatrix<B>, BackendError> {
    w.validate(name)?;
    let v = w.dequantize(name)?;
    // Transpose on the host once, so the hot path never does.
    let (n, k) = (w.n, w.k);
    let mut t = vec![0.0f32; v.len()];
    for (o, row) in v.chunks_exact(k).enumerate() {
        for (i, &x) in row.iter().enumerate() {
            t[i * n + o] = x;
        }
    }
    Ok(DenseQMatrix {
        weight: Tensor::from_data(TensorData::new(t, [k, n]), device),
        act: ActQuant::for_weight(w.ty),
    })
}

/// The generic fallback's product.
pub fn dense_matmul<B: Backend>(x: Tensor<B, 2>, w: &DenseQMatrix<B>) -> Tensor<B, 2> {
    w.act.apply(x).matmul(w.weight.clone())
}

#[allow(unused_macros)] // unused when no host backend is compiled in
macro_rules! host_backend {
    ($t:ty, $kind:expr) => {
        impl InferenceBackend for $t {
            const KIND: crate::BackendKind = $kind;
            type QMatrix = HostQMatrix<burn::tensor::Device<$t>>;
            fn qw_prepare(
                name: &str,
                w: QWeight,
                device: &Self::Device,
            ) -> Result<Self::QMatrix, BackendError> {
                host_prepare(name, w, device)
            }
            fn qw_matmul(x: Tensor<Self, 2>, w: &Self::QMatrix) -> Tensor<Self, 2> {
                host_matmul(x, w)
            }
            fn qw_matmul_many(x: Tensor<Self, 2>, ws: &[&Self::QMatrix]) -> Vec<Tensor<Self, 2>> {
                host_matmul_many(x, ws)
            }
            fn qw_rows(w: &Self::QMatrix, ids: Tensor<Self, 1, Int>) -> Tensor<Self, 2> {
                host_rows(w, ids)
            }
            fn qw_shape(w: &Self::QMatrix) -> (usize, usize) {
                (w.w.n, w.w.k)
            }
            type KvLayer = HostKv<burn::tensor::Device<$t>>;
            const KV_BYTES_PER_VALUE: usize = 2;
            fn device_memory(_device: &Self::Device) -> Option<crate::memory::DeviceMemory> {
                crate::memory::host_memory()
            }
            fn kv_alloc(
                shape: KvShape,
                device: &Self::Device,
            ) -> Result<Self::KvLayer, BackendError> {
                host_kv_alloc(shape, device)
            }
            fn kv_copy_block(kv: &mut Self::KvLayer, src: u32, dst: u32) {
                host_kv_copy_block(kv, src, dst)
            }
            fn paged_attention(
                kv: &mut Self::KvLayer,
                q: Tensor<Self, 4>,
                k: Tensor<Self, 4>,
                v: Tensor<Self, 4>,
                batch: &PagedBatch,
                params: &AttentionParams,
            ) -> Tensor<Self, 4> {
                host_paged_attention(kv, q, k, v, batch, params)
            }
            fn encoder_layer_norm<const D: usize>(
                x: Tensor<Self, D>,
                w: Tensor<Self, 1>,
                b: Tensor<Self, 1>,
                eps: f64,
            ) -> Tensor<Self, D> {
                crate::encoder::host_layer_norm(x, w, b, eps)
            }
            fn encoder_gelu<const D: usize>(x: Tensor<Self, D>) -> Tensor<Self, D> {
                crate::encoder::host_gelu(x)
            }
            fn silu_mul<const D: usize>(g: Tensor<Self, D>, u: Tensor<Self, D>) -> Tensor<Self, D> {
                crate::encoder::host_silu_mul(g, u)
            }
            fn gelu_mul<const D: usize>(g: Tensor<Self, D>, u: Tensor<Self, D>) -> Tensor<Self, D> {
                crate::encoder::host_gelu_mul(g, u)
            }
            fn rms_norm<const D: usize>(
                x: Tensor<Self, D>,
                w: Tensor<Self, 1>,
                eps: f64,
            ) -> Tensor<Self, D> {
                crate::encoder::host_rms_norm(x, w, eps)
            }
            fn encoder_attention(
                q: Tensor<Self, 3>,
                k: Tensor<Self, 3>,
                v: Tensor<Self, 3>,
                mask: Tensor<Self, 2>,
                heads: usize,
            ) -> Tensor<Self, 3> {
                crate::encoder::host_encoder_attention(q, k, v, mask, heads)
            }
            fn encoder_attention_packed(
                q: Tensor<Self, 2>,
                k: Tensor<Self, 2>,
                v: Tensor<Self, 2>,
                lengths: &[usize],
                heads: usize,
            ) -> Tensor<Self, 2> {
                crate::encoder::host_encoder_attention_packed(q, k, v, lengths, heads)
            }
        }
    };
}

/// The generic fallback's row lookup: columns of the stored `Wᵀ`.
pub fn dense_rows<B: Backend>(w: &DenseQMatrix<B>, ids: Tensor<B, 1, Int>) -> Tensor<B, 2> {
    w.weight.clone().select(1, ids).transpose()
}

/// `(n, k)` of a generic-fallback weight.
pub fn dense_shape<B: Backend>(w: &DenseQMatrix<B>) -> (usize, usize) {
    let [k, n] = w.weight.dims();
    (n, k)
}

/// A backend whose quantized products are the generic fallback's (`dense_backend!(T, kind, memory)`) or its
/// own (`dense_backend!(T, kind, memory, QMatrix, prepare, matmul, rows, shape)`), with the generic paged KV
/// store and attention.
#[allow(unused_macros)] // unused when no such backend is compiled in
macro_rules! dense_backend {
    ($t:ty, $kind:expr, $mem:path) => {
        dense_backend!(
            $t,
            $kind,
            $mem,
            DenseQMatrix<$t>,
            dense_prepare,
            dense_matmul,
            dense_rows,
            dense_shape
        );
    };
    ($t:ty, $kind:expr, $mem:path, $qm:ty, $prepare:path, $matmul:path, $rows:path, $shape:path) => {
        impl InferenceBackend for $t {
            const KIND: crate::BackendKind = $kind;
            type QMatrix = $qm;
            fn qw_prepare(
                name: &str,
                w: QWeight,
                device: &Self::Device,
            ) -> Result<Self::QMatrix, BackendError> {
                $prepare(name, w, device)
            }
            fn qw_matmul(x: Tensor<Self, 2>, w: &Self::QMatrix) -> Tensor<Self, 2> {
                $matmul(x, w)
            }
            fn qw_rows(w: &Self::QMatrix, ids: Tensor<Self, 1, Int>) -> Tensor<Self, 2> {
                $rows(w, ids)
            }
            fn qw_shape(w: &Self::QMatrix) -> (usize, usize) {
                $shape(w)
            }
            type KvLayer = DenseKv<$t>;
            const KV_BYTES_PER_VALUE: usize = 4;
            fn device_memory(device: &Self::Device) -> Option<crate::memory::DeviceMemory> {
                $mem(device)
            }
            fn kv_alloc(
                shape: KvShape,
                device: &Self::Device,
            ) -> Result<Self::KvLayer, BackendError> {
                crate::memory::check_fits(
                    shape.bytes(Self::KV_BYTES_PER_VALUE),
                    Self::device_memory(device),
                    Self::KIND,
                )?;
                dense_kv_alloc(shape, device)
            }
            fn kv_copy_block(kv: &mut Self::KvLayer, src: u32, dst: u32) {
                dense_kv_copy_block(kv, src, dst)
            }
            fn paged_attention(
                kv: &mut Self::KvLayer,
                q: Tensor<Self, 4>,
                k: Tensor<Self, 4>,
                v: Tensor<Self, 4>,
                batch: &PagedBatch,
                params: &AttentionParams,
            ) -> Tensor<Self, 4> {
                dense_paged_attention(kv, q, k, v, batch, params)
            }
        }
    };
}

#[cfg(feature = "flex")]
host_backend!(crate::types::Flex, crate::BackendKind::Flex);
#[cfg(feature = "ndarray")]
host_backend!(crate::types::NdArray, crate::BackendKind::Ndarray);
#[cfg(feature = "candle")]
dense_backend!(
    crate::types::Candle,
    crate::BackendKind::Candle,
    crate::memory::candle_memory,
    crate::candle_quant::CandleQMatrix,
    crate::candle_quant::candle_prepare,
    crate::candle_quant::candle_matmul,
    crate::candle_quant::candle_rows,
    crate::candle_quant::candle_shape
);
#[cfg(feature = "wgpu")]
dense_backend!(
    crate::types::Wgpu,
    crate::BackendKind::Wgpu,
    crate::memory::wgpu_memory,
    crate::cube_quant::CubeQMatrix<burn_wgpu::WgpuRuntime, u32>,
    crate::cube_quant::cube_prepare,
    crate::cube_quant::cube_matmul,
    crate::cube_quant::cube_rows,
    crate::cube_quant::cube_shape
);
#[cfg(feature = "cuda")]
dense_backend!(
    crate::types::Cuda,
    crate::BackendKind::Cuda,
    crate::memory::cuda_memory,
    crate::cube_quant::CubeQMatrix<cubecl::cuda::CudaRuntime, u8>,
    crate::cube_quant::cube_prepare,
    crate::cube_quant::cube_matmul,
    crate::cube_quant::cube_rows,
    crate::cube_quant::cube_shape
);
