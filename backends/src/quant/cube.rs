//! Quantized weights on the CubeCL backends (wgpu, cuda), dequantized on the fly by a kernel.
//!
//! At load, a GGUF weight's blocks are repacked into a layout a GPU kernel reads with 32-bit
//! loads: the integer quants in 4-bit lanes (Q4_0, Q4_1, Q4_K) or 8-bit lanes (Q8_0, Q5_0, Q5_1,
//! Q5_K, Q6_K), eight or four to a `u32`, and per group of 32 (16 for Q6_K) values an f32 scale
//! and an f32 offset: `w = scale · (q − zero) + offset`, the same single rounding ggml's own
//! dequantization makes (K-quants' sub-block scales `d·sc` and mins `dmin·m` are exact in f32).
//! The repacking is verified value by value at load; a weight it cannot reproduce exactly, and
//! the types without a layout here (F32/F16/BF16, Q2_K, Q3_K), use the generic fallback
//! ([`DenseQMatrix`]: an f32 copy). A 4-bit weight takes 5 bits per value on the device and an
//! 8-bit one 9–10, against 32 for the f32 copy.
//!
//! Products: activations are rounded as llama.cpp's CPU path rounds them ([`ActQuant`]), then one
//! kernel unit computes one output `y[i, j] = Σ_k x[i, k] · w[j, k]`, expanding `w` as it reads it.

use burn::tensor::{DType, Int, Shape, Tensor, TensorData, TensorPrimitive};
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime};
use cinder_gguf::GgmlType;
use cubecl::prelude::*;

use super::dense::{DenseQMatrix, dense_matmul, dense_prepare, dense_rows, dense_shape};
use super::{QWeight, QuantOps};
use crate::BackendError;
use crate::act::ActQuant;

type B<R, BT> = CubeBackend<R, f32, i32, BT>;

/// A weight on a CubeCL device: repacked quants, or the f32 fallback.
#[derive(Clone, Debug)]
pub enum CubeQMatrix<R: CubeRuntime, BT: BoolElement> {
    /// Quants in 4- or 8-bit lanes with per-group scales and offsets.
    Packed(Packed<R, BT>),
    /// An f32 copy (types without a layout here).
    Dense(DenseQMatrix<B<R, BT>>),
}

/// The repacked form (see the module docs).
#[derive(Clone, Debug)]
pub struct Packed<R: CubeRuntime, BT: BoolElement> {
    n: usize,
    k: usize,
    /// lanes per `u32` word (8 for 4-bit lanes, 4 for 8-bit)
    bits: u32,
    /// values per scale
    group: u32,
    /// integer subtracted from every quant
    zero: u32,
    /// `[n · k · bits / 32]` words (as i32: the device's integer type)
    qs: Tensor<B<R, BT>, 1, Int>,
    /// `[n · k / group]`
    scales: Tensor<B<R, BT>, 1>,
    /// `[n · k / group]`
    offsets: Tensor<B<R, BT>, 1>,
    act: ActQuant,
}

/// Largest packed-quant buffer: wgpu's default storage-buffer binding limit is 128 MiB, and a
/// 262144 × 640 embedding in 8-bit lanes (160 MiB) fails to allocate on Mesa lavapipe. Larger
/// weights (vocabulary tables of big-vocabulary models) use the f32 fallback, which Burn's ops
/// allocate and bind in pieces. Splitting such weights by rows is left to do.
const MAX_PACKED_BYTES: usize = 64 << 20;

/// A type's layout: (bits per lane, group, zero).
fn layout(ty: GgmlType) -> Option<(u32, u32, u32)> {
    Some(match ty {
        GgmlType::Q4_0 => (4, 32, 8),
        GgmlType::Q4_1 | GgmlType::Q4_K => (4, 32, 0),
        GgmlType::Q8_0 => (8, 32, 128),
        GgmlType::Q5_0 => (8, 32, 16),
        GgmlType::Q5_1 | GgmlType::Q5_K => (8, 32, 0),
        GgmlType::Q6_K => (8, 16, 32),
        _ => return None,
    })
}

fn f16_at(b: &[u8], at: usize) -> f32 {
    cinder_gguf::dequant::f16_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// Scale and offset of every group of one block, from its header.
fn group_params(ty: GgmlType, b: &[u8], out: &mut Vec<(f32, f32)>) {
    use cinder_gguf::dequant::scale_min_k4;
    match ty {
        GgmlType::Q4_0 | GgmlType::Q8_0 | GgmlType::Q5_0 => out.push((f16_at(b, 0), 0.0)),
        GgmlType::Q4_1 | GgmlType::Q5_1 => out.push((f16_at(b, 0), f16_at(b, 2))),
        GgmlType::Q4_K | GgmlType::Q5_K => {
            let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
            let mut s = [0u8; 12];
            s.copy_from_slice(&b[4..16]);
            for g in 0..8 {
                let (sc, m) = scale_min_k4(g, &s);
                out.push((d * f32::from(sc), -(dmin * f32::from(m))));
            }
        }
        GgmlType::Q6_K => {
            // ql[128], qh[64], scales[16] (i8), d
            let d = f16_at(b, 208);
            for g in 0..16 {
                out.push((d * f32::from(b[192 + g] as i8), 0.0));
            }
        }
        _ => unreachable!("no layout for {ty:?}"),
    }
}

/// A repacked weight on the host: quant words, scales, offsets.
type Repacked = (Vec<i32>, Vec<f32>, Vec<f32>);

/// Repacks `w` (validated); `None` if a value cannot be reproduced exactly.
fn repack(w: &QWeight, name: &str) -> Result<Option<Repacked>, BackendError> {
    let Some((bits, group, zero)) = layout(w.ty) else {
        return Ok(None);
    };
    if w.n * w.k * bits as usize / 8 > MAX_PACKED_BYTES {
        tracing::debug!(
            name,
            n = w.n,
            k = w.k,
            "too large for one packed buffer: f32 fallback"
        );
        return Ok(None);
    }
    let values = w.dequantize(name)?;
    let (block_vals, block_bytes) = (w.ty.block_size() as usize, w.ty.type_size() as usize);
    let mut params = Vec::with_capacity(values.len() / group as usize);
    for b in w.data.chunks_exact(block_bytes) {
        group_params(w.ty, b, &mut params);
    }
    debug_assert_eq!(params.len() * group as usize, values.len());
    debug_assert_eq!(block_vals % group as usize, 0);
    let lanes = 32 / bits;
    let qmax = (1u32 << bits) - 1;
    let mut words = vec![0u32; values.len() / lanes as usize];
    for (g, (vals, &(s, o))) in values.chunks_exact(group as usize).zip(&params).enumerate() {
        for (j, &y) in vals.iter().enumerate() {
            let q = if s == 0.0 {
                zero
            } else {
                (((y - o) / s).round() + zero as f32).clamp(0.0, qmax as f32) as u32
            };
            // The kernel's arithmetic, which must give back ggml's value.
            if s * (q as f32 - zero as f32) + o != y {
                tracing::debug!(
                    name,
                    ty = w.ty.name(),
                    "repacking is not exact: f32 fallback"
                );
                return Ok(None);
            }
            let i = g * group as usize + j;
            words[i / lanes as usize] |= q << ((i % lanes as usize) as u32 * bits);
        }
    }
    let (scales, offsets) = params.into_iter().unzip();
    Ok(Some((
        words.into_iter().map(|w| w as i32).collect(),
        scales,
        offsets,
    )))
}

/// Prepares a weight for a CubeCL backend.
pub fn cube_prepare<R: CubeRuntime, BT: BoolElement>(
    name: &str,
    w: QWeight,
    device: &R::Device,
) -> Result<CubeQMatrix<R, BT>, BackendError> {
    w.validate(name)?;
    match repack(&w, name)? {
        Some((qs, scales, offsets)) => {
            let (bits, group, zero) = layout(w.ty).unwrap_or((8, 32, 0));
            let (nq, ns) = (qs.len(), scales.len());
            Ok(CubeQMatrix::Packed(Packed {
                n: w.n,
                k: w.k,
                bits,
                group,
                zero,
                qs: Tensor::from_data(TensorData::new(qs, [nq]), device),
                scales: Tensor::from_data(TensorData::new(scales, [ns]), device),
                offsets: Tensor::from_data(TensorData::new(offsets, [ns]), device),
                act: ActQuant::for_weight(w.ty),
            }))
        }
        None => Ok(CubeQMatrix::Dense(dense_prepare(name, w, device)?)),
    }
}

/// `y[i, j] = Σ_k x[i, k] · (scale · (q[j, k] − zero) + offset)` for one output per unit.
#[cube(launch_unchecked)]
fn qmatmul_kernel(
    x: &Array<f32>,
    qs: &Array<u32>,
    scales: &Array<f32>,
    offsets: &Array<f32>,
    out: &mut Array<f32>,
    n: u32,
    k: u32,
    total: u32,
    #[comptime] bits: u32,
    #[comptime] group: u32,
    #[comptime] zero: u32,
) {
    let pos = ABSOLUTE_POS as u32;
    if pos >= total {
        terminate!();
    }
    let row = pos / n;
    let col = pos % n;
    let lanes = comptime!(32 / bits);
    let mask = comptime!((1u32 << bits) - 1);
    let words_per_group = comptime!(group / (32 / bits));
    let groups = k / group;
    let mut acc = 0.0f32;
    let x0 = row * k;
    for g in 0..groups {
        let p = col * groups + g;
        let s = scales[p as usize];
        let o = offsets[p as usize];
        let w0 = p * words_per_group;
        for wi in 0..words_per_group {
            let word = qs[(w0 + wi) as usize];
            let base = x0 + g * group + wi * lanes;
            #[unroll]
            for l in 0..lanes {
                let q = (word >> (l * bits)) & mask;
                let v = s * (f32::cast_from(q) - f32::cast_from(zero)) + o;
                acc += x[(base + l) as usize] * v;
            }
        }
    }
    out[pos as usize] = acc;
}

/// Rows `ids` of the weight, expanded: `out[i, c] = scale · (q[ids[i], c] − zero) + offset`.
#[cube(launch_unchecked)]
fn qrows_kernel(
    ids: &Array<u32>,
    qs: &Array<u32>,
    scales: &Array<f32>,
    offsets: &Array<f32>,
    out: &mut Array<f32>,
    k: u32,
    total: u32,
    #[comptime] bits: u32,
    #[comptime] group: u32,
    #[comptime] zero: u32,
) {
    let pos = ABSOLUTE_POS as u32;
    if pos >= total {
        terminate!();
    }
    let lanes = comptime!(32 / bits);
    let mask = comptime!((1u32 << bits) - 1);
    let i = pos / k;
    let c = pos % k;
    let row = ids[i as usize];
    let e = row * k + c;
    let p = e / group;
    let word = qs[(e / lanes) as usize];
    let q = (word >> ((e % lanes) * bits)) & mask;
    out[pos as usize] =
        scales[p as usize] * (f32::cast_from(q) - f32::cast_from(zero)) + offsets[p as usize];
}

fn cube<R: CubeRuntime, BT: BoolElement, const D: usize>(t: Tensor<B<R, BT>, D>) -> CubeTensor<R> {
    burn_cubecl::kernel::into_contiguous(t.into_primitive().tensor())
}

fn cube_int<R: CubeRuntime, BT: BoolElement>(t: Tensor<B<R, BT>, 1, Int>) -> CubeTensor<R> {
    burn_cubecl::kernel::into_contiguous(t.into_primitive())
}

fn launch_dims<R: CubeRuntime>(client: &ComputeClient<R>, total: usize) -> (CubeCount, CubeDim) {
    let dim = CubeDim::new_1d(256);
    let cubes = total.div_ceil(256) as u32;
    // Wide grids go 2-D: one dimension of a dispatch is capped (65535 on many devices).
    let _ = client;
    let (x, y) = if cubes <= 65535 {
        (cubes, 1)
    } else {
        (65535, cubes.div_ceil(65535))
    };
    (CubeCount::Static(x, y, 1), dim)
}

/// `x` `[m, k]` · `Wᵀ` -> `[m, n]`.
pub fn cube_matmul<R: CubeRuntime, BT: BoolElement>(
    x: Tensor<B<R, BT>, 2>,
    w: &CubeQMatrix<R, BT>,
) -> Tensor<B<R, BT>, 2> {
    let p = match w {
        CubeQMatrix::Dense(d) => return dense_matmul(x, d),
        CubeQMatrix::Packed(p) => p,
    };
    let [m, _] = x.dims();
    let x = cube(p.act.apply(x));
    let (qs, scales, offsets) = (
        cube_int(p.qs.clone()),
        cube(p.scales.clone()),
        cube(p.offsets.clone()),
    );
    let total = m * p.n;
    let client = x.client.clone();
    let out = client.empty(total * 4);
    let (count, dim) = launch_dims(&client, total);
    // SAFETY: every array covers what the kernel indexes: x [m·k], qs [n·k·bits/32], scales and
    // offsets [n·k/group], out [m·n]; units past `total` return at once.
    unsafe {
        qmatmul_kernel::launch_unchecked::<R>(
            &client,
            count,
            dim,
            ArrayArg::from_raw_parts(x.handle.clone(), m * p.k),
            ArrayArg::from_raw_parts(qs.handle.clone(), p.n * p.k * p.bits as usize / 32),
            ArrayArg::from_raw_parts(scales.handle.clone(), p.n * p.k / p.group as usize),
            ArrayArg::from_raw_parts(offsets.handle.clone(), p.n * p.k / p.group as usize),
            ArrayArg::from_raw_parts(out.clone(), total),
            p.n as u32,
            p.k as u32,
            total as u32,
            p.bits,
            p.group,
            p.zero,
        );
    }
    let t = CubeTensor::new_contiguous(
        client,
        x.device.clone(),
        Shape::new([m, p.n]),
        out,
        DType::F32,
    );
    Tensor::from_primitive(TensorPrimitive::Float(t))
}

/// Rows `ids` of `W` as f32 `[len, k]`.
pub fn cube_rows<R: CubeRuntime, BT: BoolElement>(
    w: &CubeQMatrix<R, BT>,
    ids: Tensor<B<R, BT>, 1, Int>,
) -> Tensor<B<R, BT>, 2> {
    let p = match w {
        CubeQMatrix::Dense(d) => return dense_rows(d, ids),
        CubeQMatrix::Packed(p) => p,
    };
    let [len] = ids.dims();
    let ids = cube_int(ids);
    let (qs, scales, offsets) = (
        cube_int(p.qs.clone()),
        cube(p.scales.clone()),
        cube(p.offsets.clone()),
    );
    let total = len * p.k;
    let client = ids.client.clone();
    let out = client.empty(total * 4);
    let (count, dim) = launch_dims(&client, total);
    // SAFETY: as in `cube_matmul`; ids are row numbers below n (the embedding checks them).
    unsafe {
        qrows_kernel::launch_unchecked::<R>(
            &client,
            count,
            dim,
            ArrayArg::from_raw_parts(ids.handle.clone(), len),
            ArrayArg::from_raw_parts(qs.handle.clone(), p.n * p.k * p.bits as usize / 32),
            ArrayArg::from_raw_parts(scales.handle.clone(), p.n * p.k / p.group as usize),
            ArrayArg::from_raw_parts(offsets.handle.clone(), p.n * p.k / p.group as usize),
            ArrayArg::from_raw_parts(out.clone(), total),
            p.k as u32,
            total as u32,
            p.bits,
            p.group,
            p.zero,
        );
    }
    let t = CubeTensor::new_contiguous(
        client,
        ids.device.clone(),
        Shape::new([len, p.k]),
        out,
        DType::F32,
    );
    Tensor::from_primitive(TensorPrimitive::Float(t))
}

/// `(n, k)`.
pub fn cube_shape<R: CubeRuntime, BT: BoolElement>(w: &CubeQMatrix<R, BT>) -> (usize, usize) {
    match w {
        CubeQMatrix::Dense(d) => dense_shape(d),
        CubeQMatrix::Packed(p) => (p.n, p.k),
    }
}

/// `impl QuantOps` for a CubeCL backend type.
macro_rules! cube_quant_ops {
    ($t:ty, $r:ty, $bt:ty) => {
        impl QuantOps for $t {
            type QMatrix = CubeQMatrix<$r, $bt>;
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
            fn qw_rows(w: &Self::QMatrix, ids: Tensor<Self, 1, Int>) -> Tensor<Self, 2> {
                cube_rows(w, ids)
            }
            fn qw_shape(w: &Self::QMatrix) -> (usize, usize) {
                cube_shape(w)
            }
        }
    };
}

#[cfg(feature = "wgpu")]
cube_quant_ops!(crate::types::Wgpu, burn_wgpu::WgpuRuntime, u32);
#[cfg(feature = "cuda")]
cube_quant_ops!(crate::types::Cuda, cubecl::cuda::CudaRuntime, u8);

#[cfg(test)]
mod tests {
    use super::*;
    use cinder_gguf::SharedBytes;

    /// Every type with a layout repacks exactly: the kernel's `scale · (q − zero) + offset`
    /// gives back ggml's dequantized value for every weight.
    #[test]
    fn repacking_reproduces_every_value() {
        let (n, k) = (6, 512);
        // Values of several magnitudes and signs, and a row of zeros (scale 0).
        let x: Vec<f32> = (0..n * k)
            .map(|i| {
                let r = i / k;
                if r == 5 {
                    0.0
                } else {
                    ((i * 7919 % 1000) as f32 / 500.0 - 1.0) * 10f32.powi(r as i32 - 2)
                }
            })
            .collect();
        for ty in [
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q8_0,
            GgmlType::Q5_0,
            GgmlType::Q5_1,
            GgmlType::Q4_K,
            GgmlType::Q5_K,
            GgmlType::Q6_K,
        ] {
            let data = cinder_gguf::quantize::quantize(ty, &x, k).expect("quantize");
            let w = QWeight {
                ty,
                n,
                k,
                data: SharedBytes::from_vec(data),
            };
            let (qs, scales, offsets) = repack(&w, "t").expect("valid").expect("exact");
            let (bits, group, zero) = layout(ty).expect("layout");
            let want = w.dequantize("t").expect("dequantize");
            let lanes = (32 / bits) as usize;
            for (e, &y) in want.iter().enumerate() {
                let q = ((qs[e / lanes] as u32) >> ((e % lanes) as u32 * bits)) & ((1 << bits) - 1);
                let p = e / group as usize;
                let v = scales[p] * (q as f32 - zero as f32) + offsets[p];
                assert_eq!(v, y, "{ty:?} value {e}");
            }
        }
    }
}
