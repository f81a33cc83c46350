//! Quantized products on the CubeCL backends (wgpu, cuda): the weight stays quantized on the device
//! in [`pack`]'s layout (4-bit lanes take 6 bits per value with their scales, 8-bit ones 10) and
//! CubeCL kernels ([`kernels`]) read the quants directly, rounding the activations in the kernel
//! as llama.cpp's CPU path rounds them. Every type runs on these kernels: types without a layout
//! (F32, F16, BF16, Q2_K, Q3_K) are kept as f32 words.
//!
//! - A product of up to [`MATVEC_MAX_ROWS`] activation rows (decode) is one [`kernels::matvec_kernel`]
//!   launch; a layer's Q/K/V (same layout, same input) share it ([`cube_matmul_many`]).
//! - More rows (prefill) round the activations once and run the tiled kernel.
//! - Weights whose quants would exceed [`MAX_CHUNK_BYTES`] are split by rows into chunks, one
//!   launch each (wgpu binds at most 128 MiB per buffer by default).

mod kernels;
mod pack;

use std::sync::Arc;

use burn::tensor::{DType, Int, Shape, Tensor};
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeRuntime};
use cubecl::prelude::*;

use super::{QWeight, QuantOps};
use crate::BackendError;
use crate::act::ActQuant;
use crate::cube::{
    Caps, Cube, FloatT, act_code, arr, float_in, float_out, float_tensor, grid, int_in,
};
use kernels::{MV_ROWS, TILE};

pub(crate) use kernels::glu_value;

/// Activation rows up to which a product runs as a matvec (the rest: the tiled kernel).
pub const MATVEC_MAX_ROWS: usize = 8;

/// Largest buffer of one chunk of a weight's quants.
const MAX_CHUNK_BYTES: usize = 64 << 20;

/// Rows `row0 .. row0 + rows` of a weight, on the device.
#[derive(Clone, Debug)]
struct Chunk<R: CubeRuntime> {
    row0: usize,
    rows: usize,
    /// the quants as 32-bit words (f32 values' bits when `bits == 32`)
    qs: CubeTensor<R>,
    /// per-group scales and offsets (one unread value each when `bits == 32`)
    scales: CubeTensor<R>,
    offsets: CubeTensor<R>,
}

/// A weight on a CubeCL device.
#[derive(Clone, Debug)]
pub struct CubeQMatrix<R: CubeRuntime> {
    n: usize,
    k: usize,
    /// bits per quant: 4, 8, or 32 (f32 values)
    bits: u32,
    /// values per scale
    group: u32,
    /// integer subtracted from every quant
    zero: u32,
    /// activation rounding ([`act_code`])
    act: u32,
    chunks: Arc<Vec<Chunk<R>>>,
    caps: Caps,
}

impl<R: CubeRuntime> CubeQMatrix<R> {
    /// Whether two weights can share one launch: same layout and input width, one chunk each.
    fn same_layout(&self, o: &Self) -> bool {
        (self.bits, self.group, self.zero, self.act, self.k)
            == (o.bits, o.group, o.zero, o.act, o.k)
            && self.chunks.len() == 1
            && o.chunks.len() == 1
    }
}

/// The activation rounding code of a weight type.
fn act_of(ty: cinder_gguf::GgmlType) -> u32 {
    use cinder_gguf::GgmlType;
    if matches!(ty, GgmlType::Q4_1 | GgmlType::Q5_1) {
        return act_code::Q8_1;
    }
    match ActQuant::for_weight(ty) {
        ActQuant::None => act_code::NONE,
        ActQuant::F16 => act_code::F16,
        ActQuant::BF16 => act_code::BF16,
        ActQuant::Q8 => act_code::Q8,
        ActQuant::Q8K => act_code::Q8K,
    }
}

/// A host buffer uploaded as a 1-D device tensor of `dtype`.
fn upload<R: CubeRuntime>(
    client: &ComputeClient<R>,
    device: &R::Device,
    bytes: &[u8],
    len: usize,
    dtype: DType,
) -> CubeTensor<R> {
    let handle = client.create_from_slice(bytes);
    CubeTensor::new_contiguous(
        client.clone(),
        device.clone(),
        Shape::new([len]),
        handle,
        dtype,
    )
}

fn bytes_u32(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn bytes_f32(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// Prepares a weight for the CubeCL kernels.
pub fn cube_prepare<R: CubeRuntime>(
    name: &str,
    w: QWeight,
    device: &R::Device,
) -> Result<CubeQMatrix<R>, BackendError> {
    w.validate(name)?;
    if !w.k.is_multiple_of(32) {
        return Err(BackendError::Weight {
            name: name.to_string(),
            reason: format!(
                "{} inputs per row: the GPU kernels take multiples of 32",
                w.k
            ),
        });
    }
    let act = act_of(w.ty);
    if act == act_code::Q8K && !w.k.is_multiple_of(256) {
        return Err(BackendError::Weight {
            name: name.to_string(),
            reason: format!("{} inputs per row of a K-quant (256-value blocks)", w.k),
        });
    }
    let (bits, group, zero, words, scales, offsets) = match pack::repack(&w, name)? {
        Some((words, scales, offsets)) => {
            let (bits, group, zero) = pack::layout(w.ty).unwrap_or((8, 32, 0));
            (bits, group, zero, words, scales, offsets)
        }
        None => {
            tracing::debug!(name, ty = w.ty.name(), "kept as f32 on the device");
            let v = w.dequantize(name)?;
            let words = v.iter().map(|x| x.to_bits()).collect();
            (32, 32, 0, words, vec![1.0], vec![0.0])
        }
    };
    let client = R::client(device);
    let row_words = w.k * bits as usize / 32;
    let rows_per_chunk = (MAX_CHUNK_BYTES / (4 * row_words)).max(1);
    let groups_per_row = w.k / group as usize;
    let mut chunks = Vec::new();
    let mut row0 = 0;
    while row0 < w.n {
        let rows = rows_per_chunk.min(w.n - row0);
        let qs = &words[row0 * row_words..(row0 + rows) * row_words];
        let (sc, of) = if bits == 32 {
            (&scales[..], &offsets[..])
        } else {
            let r = row0 * groups_per_row..(row0 + rows) * groups_per_row;
            (&scales[r.clone()], &offsets[r])
        };
        chunks.push(Chunk {
            row0,
            rows,
            qs: upload(&client, device, &bytes_u32(qs), qs.len(), DType::U32),
            scales: upload(&client, device, &bytes_f32(sc), sc.len(), DType::F32),
            offsets: upload(&client, device, &bytes_f32(of), of.len(), DType::F32),
        });
        row0 += rows;
    }
    Ok(CubeQMatrix {
        n: w.n,
        k: w.k,
        bits,
        group,
        zero,
        act,
        chunks: Arc::new(chunks),
        caps: Caps::of(&client),
    })
}

/// One matvec launch over up to three weights (`ws`, same layout) of `x` `[m, k]` (`m` ≤
/// [`MATVEC_MAX_ROWS`]); weight 0 may be one chunk of a larger weight (`col0`, `stride0`).
#[allow(clippy::too_many_arguments)]
fn launch_matvec<R: CubeRuntime>(
    x: &CubeTensor<R>,
    m: usize,
    w: &CubeQMatrix<R>,
    parts: &[(&Chunk<R>, &CubeTensor<R>)],
    stride0: usize,
) {
    let client = &x.client;
    let first = parts[0];
    let slot = |i: usize| parts.get(i).copied();
    let rows = |i: usize| slot(i).map_or(0, |(c, _)| c.rows);
    let cubes: usize = (0..3).map(|i| rows(i).div_ceil(MV_ROWS as usize)).sum();
    let (c0, o0) = first;
    let (c1, o1) = slot(1).unwrap_or(first);
    let (c2, o2) = slot(2).unwrap_or(first);
    // SAFETY: every array covers what the kernel indexes: x [m·k]; each weight's words, scales
    // and offsets cover its rows (a weight of 0 rows is never read); each output [m, n_i] (weight
    // 0: columns col0 .. col0 + rows of a [m, stride0] output). Units past a weight's rows write
    // nothing.
    unsafe {
        kernels::matvec_kernel::launch_unchecked::<R>(
            client,
            grid(cubes),
            CubeDim::new_2d(32, MV_ROWS),
            arr(x),
            arr(&c0.qs),
            arr(&c0.scales),
            arr(&c0.offsets),
            arr(o0),
            arr(&c1.qs),
            arr(&c1.scales),
            arr(&c1.offsets),
            arr(o1),
            arr(&c2.qs),
            arr(&c2.scales),
            arr(&c2.offsets),
            arr(o2),
            w.k as u32,
            rows(0) as u32,
            rows(1) as u32,
            rows(2) as u32,
            stride0 as u32,
            c0.row0 as u32,
            m as u32,
            w.bits,
            w.group,
            w.zero,
            w.act,
            w.caps.plane32,
        );
    }
}

/// `x` `[m, k]` rounded as `w`'s products round their input (one unit per activation block), and
/// for Q8_1 the blocks' stored sums.
fn round_activations<R: CubeRuntime>(
    x: &CubeTensor<R>,
    m: usize,
    w: &CubeQMatrix<R>,
) -> (CubeTensor<R>, CubeTensor<R>) {
    let out = float_out(x, &[m, w.k]);
    let blocks = m * w.k / crate::cube::act_block(w.act) as usize;
    let sums = if w.act == act_code::Q8_1 {
        float_out(x, &[blocks])
    } else {
        out.clone()
    };
    // SAFETY: `blocks` whole activation blocks cover x and out ([m, k] each, k a multiple of the
    // block); units past them return at once.
    unsafe {
        kernels::act_kernel::launch_unchecked::<R>(
            &x.client,
            grid(blocks.div_ceil(256)),
            CubeDim::new_1d(256),
            arr(x),
            arr(&out),
            arr(&sums),
            w.k as u32,
            blocks as u32,
            w.act,
        );
    }
    (out, sums)
}

/// The tiled product of already rounded activations `xq` `[m, k]` with one chunk, into columns
/// `chunk.row0 ..` of `out` `[m, n]`.
fn launch_tiled<R: CubeRuntime>(
    (xq, xsum): &(CubeTensor<R>, CubeTensor<R>),
    m: usize,
    w: &CubeQMatrix<R>,
    chunk: &Chunk<R>,
    out: &CubeTensor<R>,
) {
    let tiles_n = chunk.rows.div_ceil(TILE as usize) as u32;
    let tiles_m = m.div_ceil(TILE as usize) as u32;
    // SAFETY: the kernel reads xq [m·k] and the chunk's words/scales/offsets for rows < rows, and
    // writes out [m, n] at columns row0 + j < row0 + rows ≤ n, guarding r < m and j < rows.
    unsafe {
        kernels::tiled_kernel::launch_unchecked::<R>(
            &xq.client,
            CubeCount::Static(tiles_n, tiles_m, 1),
            CubeDim::new_2d(16, 16),
            arr(xq),
            arr(xsum),
            arr(&chunk.qs),
            arr(&chunk.scales),
            arr(&chunk.offsets),
            arr(out),
            m as u32,
            w.k as u32,
            chunk.rows as u32,
            w.n as u32,
            chunk.row0 as u32,
            w.bits,
            w.group,
            w.zero,
            w.act == act_code::Q8_1,
        );
    }
}

/// `x` `[m, k]` · `Wᵀ` -> `[m, n]`.
pub fn cube_matmul<R: CubeRuntime, BT: BoolElement>(
    x: FloatT<R, BT, 2>,
    w: &CubeQMatrix<R>,
) -> FloatT<R, BT, 2> {
    let [m, k] = x.dims();
    assert_eq!(
        k, w.k,
        "qw_matmul: input width {k} for a weight of {} inputs",
        w.k
    );
    let x = float_in(x);
    let out = float_out(&x, &[m, w.n]);
    if m <= MATVEC_MAX_ROWS {
        for c in w.chunks.iter() {
            launch_matvec(&x, m, w, &[(c, &out)], w.n);
        }
    } else {
        let xq = round_activations(&x, m, w);
        for c in w.chunks.iter() {
            launch_tiled(&xq, m, w, c, &out);
        }
    }
    float_tensor(out)
}

/// [`QuantOps::qw_matmul_many`]: weights of one layout share a matvec launch, three at a time.
pub fn cube_matmul_many<R: CubeRuntime, BT: BoolElement>(
    x: FloatT<R, BT, 2>,
    ws: &[&CubeQMatrix<R>],
) -> Vec<FloatT<R, BT, 2>> {
    let [m, k] = x.dims();
    let shared = m <= MATVEC_MAX_ROWS
        && ws.len() <= 3
        && ws.iter().all(|w| w.k == k && w.same_layout(ws[0]));
    if !shared || ws.is_empty() {
        return ws.iter().map(|w| cube_matmul(x.clone(), w)).collect();
    }
    let x = float_in(x);
    let outs: Vec<CubeTensor<R>> = ws.iter().map(|w| float_out(&x, &[m, w.n])).collect();
    let parts: Vec<(&Chunk<R>, &CubeTensor<R>)> = ws
        .iter()
        .zip(&outs)
        .map(|(w, o)| (&w.chunks[0], o))
        .collect();
    launch_matvec(&x, m, ws[0], &parts, ws[0].n);
    outs.into_iter().map(float_tensor).collect()
}

/// The GLU of two products, `glu(x·Gᵀ, x·Uᵀ)` (`gelu`: GEGLU's gate, else SwiGLU's), in one
/// launch for matvec-sized `x` of same-layout weights; `None` where that does not apply (the
/// caller composes it from the products).
pub fn cube_glu_matvec<R: CubeRuntime, BT: BoolElement>(
    x: FloatT<R, BT, 2>,
    gate: &CubeQMatrix<R>,
    up: &CubeQMatrix<R>,
    gelu: bool,
) -> Result<FloatT<R, BT, 2>, FloatT<R, BT, 2>> {
    let [m, k] = x.dims();
    if m > MATVEC_MAX_ROWS || k != gate.k || !gate.same_layout(up) || gate.n != up.n {
        return Err(x);
    }
    let x = float_in(x);
    let out = float_out(&x, &[m, gate.n]);
    let (g, u) = (&gate.chunks[0], &up.chunks[0]);
    // SAFETY: as in `launch_matvec`, for two weights of n rows and one [m, n] output.
    unsafe {
        kernels::glu_kernel::launch_unchecked::<R>(
            &x.client,
            grid(gate.n.div_ceil(MV_ROWS as usize)),
            CubeDim::new_2d(32, MV_ROWS),
            arr(&x),
            arr(&g.qs),
            arr(&g.scales),
            arr(&g.offsets),
            arr(&u.qs),
            arr(&u.scales),
            arr(&u.offsets),
            arr(&out),
            k as u32,
            gate.n as u32,
            m as u32,
            gate.bits,
            gate.group,
            gate.zero,
            gate.act,
            gate.caps.plane32,
            gelu,
        );
    }
    Ok(float_tensor(out))
}

/// Rows `ids` of `W` as f32 `[len, k]`.
pub fn cube_rows<R: CubeRuntime, BT: BoolElement>(
    w: &CubeQMatrix<R>,
    ids: Tensor<Cube<R, BT>, 1, Int>,
) -> FloatT<R, BT, 2> {
    let [len] = ids.dims();
    let ids = int_in(ids);
    let out = float_out(&ids, &[len, w.k]);
    let total = len * w.k;
    for c in w.chunks.iter() {
        // SAFETY: ids [len]; the chunk's arrays cover its rows, and only ids inside them are
        // read; out [len, k]; units past `total` return at once. Ids are token ids below n (the
        // embedding checks them).
        unsafe {
            kernels::rows_kernel::launch_unchecked::<R>(
                &ids.client,
                grid(total.div_ceil(256)),
                CubeDim::new_1d(256),
                arr(&ids),
                arr(&c.qs),
                arr(&c.scales),
                arr(&c.offsets),
                arr(&out),
                w.k as u32,
                total as u32,
                c.row0 as u32,
                c.rows as u32,
                w.bits,
                w.group,
                w.zero,
            );
        }
    }
    float_tensor(out)
}

/// `impl QuantOps` for a CubeCL backend type.
macro_rules! cube_quant_ops {
    ($t:ty, $r:ty) => {
        impl QuantOps for $t {
            type QMatrix = CubeQMatrix<$r>;
            fn qw_prepare(
                name: &str,
                w: QWeight,
                device: &Self::Device,
            ) -> Result<Self::QMatrix, BackendError> {
                cube_prepare(name, w, device)
            }
            fn qw_matmul(x: Tensor<Self, 2>, w: &Self::QMatrix) -> Tensor<Self, 2> {
                cube_matmul(x, w)
            }
            fn qw_matmul_many(x: Tensor<Self, 2>, ws: &[&Self::QMatrix]) -> Vec<Tensor<Self, 2>> {
                cube_matmul_many(x, ws)
            }
            fn qw_rows(w: &Self::QMatrix, ids: Tensor<Self, 1, Int>) -> Tensor<Self, 2> {
                cube_rows(w, ids)
            }
            fn qw_shape(w: &Self::QMatrix) -> (usize, usize) {
                (w.n, w.k)
            }
        }
    };
}

#[cfg(feature = "wgpu")]
cube_quant_ops!(crate::types::Wgpu, burn_wgpu::WgpuRuntime);
#[cfg(feature = "cuda")]
cube_quant_ops!(crate::types::Cuda, cubecl::cuda::CudaRuntime);
