//! The fused decoder ops on the CPU backends (flex, ndarray): one parallel pass each, with ggml's
//! arithmetic (`cinder_kernels::elementwise`).

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};

use super::FusedOps;
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
        }
    };
}

#[cfg(feature = "flex")]
host_fused_ops!(crate::types::Flex);
#[cfg(feature = "ndarray")]
host_fused_ops!(crate::types::NdArray);
