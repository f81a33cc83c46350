//! Quantized products on the CPU backends (flex, ndarray): the weight stays in its block format in
//! host memory and `cinder-kernels` multiplies it directly (Q8 activation blocks and integer dot
//! products; Q4_0/Q4_1/Q5_0/Q8_0 repacked 8 rows at a time on their first product).

use std::sync::{Arc, OnceLock};

use burn::tensor::{Int, Tensor, TensorData, backend::Backend};

use super::{GgmlType, QWeight, QuantOps, row_ids, rows_from_blocks};
use crate::BackendError;
use crate::host::host_values;

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
const F32_GEMM_MIN_ROWS: usize = 8;

/// `Wᵀ` `[k, n]` of a little-endian f32 weight `[n, k]` stored as bytes.
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

/// `impl QuantOps` for a host backend type.
macro_rules! host_quant_ops {
    ($t:ty) => {
        impl QuantOps for $t {
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
        }
    };
}

#[cfg(feature = "flex")]
host_quant_ops!(crate::types::Flex);
#[cfg(feature = "ndarray")]
host_quant_ops!(crate::types::NdArray);
