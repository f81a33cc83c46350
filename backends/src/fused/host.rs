//! The fused decoder ops on the CPU backends (flex, ndarray): one parallel pass each, with ggml's
//! arithmetic (`cinder_kernels::elementwise`).

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};

use rayon::prelude::*;

use super::{FusedOps, RopeStyle};
use crate::host::host_values;

/// A gated product `f(g, u)` of two same-shape tensors on the host, with a fused kernel.
fn host_gate<B: Backend, const D: usize>(
    g: Tensor<B, D>,
    u: Tensor<B, D>,
    what: &str,
    kernel: fn(&mut [f32], &[f32]),
) -> Tensor<B, D> {
    let shape = g.dims();
    assert_eq!(shape, u.dims(), "{what}: gate and up shapes differ");
    let device = g.device();
    let mut v = host_values(g);
    let u = host_values(u);
    kernel(&mut v, &u);
    Tensor::from_data(TensorData::new(v, shape), &device)
}

/// [`FusedOps::gelu_mul`] on the host: ggml's f16 GELU table, one fused pass.
pub fn host_gelu_mul<B: Backend, const D: usize>(g: Tensor<B, D>, u: Tensor<B, D>) -> Tensor<B, D> {
    host_gate(g, u, "gelu_mul", cinder_kernels::elementwise::gelu_mul)
}

/// [`FusedOps::silu_mul`] on the host: one fused pass, parallel over chunks.
pub fn host_silu_mul<B: Backend, const D: usize>(g: Tensor<B, D>, u: Tensor<B, D>) -> Tensor<B, D> {
    host_gate(g, u, "silu_mul", cinder_kernels::elementwise::silu_mul)
}

/// [`FusedOps::rms_norm`] on the host (ggml's arithmetic), rows in parallel.
pub fn host_rms_norm<B: Backend, const D: usize>(
    x: Tensor<B, D>,
    w: Tensor<B, 1>,
    eps: f64,
) -> Tensor<B, D> {
    let shape = x.dims();
    assert_eq!(
        shape[D - 1],
        w.dims()[0],
        "rms_norm: weight length differs from the last axis"
    );
    let device = x.device();
    let mut v = host_values(x);
    let w = host_values(w);
    cinder_kernels::elementwise::rms_norm(&mut v, &w, eps as f32);
    Tensor::from_data(TensorData::new(v, shape), &device)
}

/// [`FusedOps::add_rms_norm`] on the host: the add, then ggml's RMSNorm on a copy of the sum.
pub fn host_add_rms_norm<B: Backend, const D: usize>(
    x: Tensor<B, D>,
    r: Option<Tensor<B, D>>,
    w: Tensor<B, 1>,
    eps: f64,
) -> (Tensor<B, D>, Tensor<B, D>) {
    let shape = x.dims();
    assert_eq!(
        shape[D - 1],
        w.dims()[0],
        "rms_norm: weight length differs from the last axis"
    );
    let device = x.device();
    let mut s = host_values(x);
    if let Some(r) = r {
        assert_eq!(r.dims(), shape, "add_rms_norm: residual shape differs");
        for (a, b) in s.iter_mut().zip(host_values(r)) {
            *a += b;
        }
    }
    let mut n = s.clone();
    cinder_kernels::elementwise::rms_norm(&mut n, &host_values(w), eps as f32);
    (
        Tensor::from_data(TensorData::new(s, shape), &device),
        Tensor::from_data(TensorData::new(n, shape), &device),
    )
}

/// [`FusedOps::rope`] on the host: one pass over the rows, `x[j]·cos + x[p(j)]·sin` per value
/// (the same two products and add as the generic form).
pub fn host_rope<B: Backend>(
    x: Tensor<B, 4>,
    cos: Tensor<B, 2>,
    sin: Tensor<B, 2>,
    style: RopeStyle,
    n_rot: usize,
) -> Tensor<B, 4> {
    let shape = x.dims();
    let [_, t, h, hd] = shape;
    assert_eq!(cos.dims(), [t, hd], "rope: cos table shape");
    assert_eq!(sin.dims(), [t, hd], "rope: sin table shape");
    let device = x.device();
    let xs = host_values(x);
    let (c, s) = (host_values(cos), host_values(sin));
    let partner: Vec<usize> = (0..hd).map(|j| style.partner(j, n_rot)).collect();
    let mut out = vec![0.0f32; xs.len()];
    let rows_per_task = (16_384 / hd.max(1)).max(1);
    out.par_chunks_mut(rows_per_task * hd)
        .enumerate()
        .for_each(|(ci, chunk)| {
            for (ri, o) in chunk.chunks_exact_mut(hd).enumerate() {
                let row = ci * rows_per_task + ri;
                let x = &xs[row * hd..(row + 1) * hd];
                let ti = (row / h) % t;
                let (c, s) = (&c[ti * hd..(ti + 1) * hd], &s[ti * hd..(ti + 1) * hd]);
                for j in 0..hd {
                    o[j] = x[j] * c[j] + x[partner[j]] * s[j];
                }
            }
        });
    Tensor::from_data(TensorData::new(out, shape), &device)
}

/// `impl FusedOps` for a host backend type.
macro_rules! host_fused_ops {
    ($t:ty) => {
        impl FusedOps for $t {
            fn silu_mul<const D: usize>(g: Tensor<Self, D>, u: Tensor<Self, D>) -> Tensor<Self, D> {
                host_silu_mul(g, u)
            }
            fn gelu_mul<const D: usize>(g: Tensor<Self, D>, u: Tensor<Self, D>) -> Tensor<Self, D> {
                host_gelu_mul(g, u)
            }
            fn rms_norm<const D: usize>(
                x: Tensor<Self, D>,
                w: Tensor<Self, 1>,
                eps: f64,
            ) -> Tensor<Self, D> {
                host_rms_norm(x, w, eps)
            }
            fn add_rms_norm<const D: usize>(
                x: Tensor<Self, D>,
                r: Option<Tensor<Self, D>>,
                w: Tensor<Self, 1>,
                eps: f64,
            ) -> (Tensor<Self, D>, Tensor<Self, D>) {
                host_add_rms_norm(x, r, w, eps)
            }
            fn rope(
                x: Tensor<Self, 4>,
                cos: Tensor<Self, 2>,
                sin: Tensor<Self, 2>,
                style: RopeStyle,
                n_rot: usize,
            ) -> Tensor<Self, 4> {
                host_rope(x, cos, sin, style, n_rot)
            }
        }
    };
}

#[cfg(feature = "flex")]
host_fused_ops!(crate::types::Flex);
#[cfg(feature = "ndarray")]
host_fused_ops!(crate::types::NdArray);
