//! The fused decoder ops on the CubeCL backends (wgpu, cuda), one kernel launch each: RMSNorm
//! (with the residual add before it, and a post-norm of the residual), RoPE on Q and K together
//! (with their per-head norm), the GLU gates, and the gate and up
//! products with their gate ([`FusedOps::glu_matmul`], through the quantized kernels).
//!
//! Arithmetic: ggml's formulas in f32. RMSNorm sums the squares in a tree (f32) where the CPU sums
//! them in order in f64, so a norm can differ from the CPU's in its last bits.
#![allow(unused_assignments)] // kernels assign a default before branches resolved at expansion

use burn::tensor::Tensor;
use burn_cubecl::{BoolElement, CubeRuntime};
use cubecl::prelude::*;

use super::{FusedOps, Glu, RopeStyle};
use crate::cube::{FloatT, arr, float_in, float_out, float_tensor, grid};
use crate::quant::cube::{CubeQMatrix, cube_glu_matvec, cube_matmul_many, glu_value};

/// Units per row of the norm kernel.
const NORM_UNITS: u32 = 256;
/// Units per head of the QK-norm + RoPE kernel.
const HEAD_UNITS: u32 = 64;

/// The sum of every unit's `v` over the cube (`units` units, a power of two), a tree in shared
/// memory `sh` of `units` values; every unit gets the sum, and `sh` may be reused after.
#[cube]
fn cube_sum(sh: &mut SharedMemory<f32>, v: f32, #[comptime] units: u32) -> f32 {
    let u = UNIT_POS_X;
    sh[u as usize] = v;
    sync_cube();
    let mut stride = comptime!(units / 2).runtime();
    while stride > 0 {
        if u < stride {
            sh[u as usize] += sh[(u + stride) as usize];
        }
        sync_cube();
        stride /= 2;
    }
    let total = sh[0];
    sync_cube();
    total
}

/// The dimension `j` rotates with ([`RopeStyle::partner`]).
#[cube]
fn rope_partner(j: u32, n_rot: u32, #[comptime] neox: bool) -> u32 {
    let mut p = j;
    if j < n_rot {
        if comptime!(neox) {
            let half = n_rot / 2;
            if j < half {
                p = j + half;
            } else {
                p = j - half;
            }
        } else {
            p = j ^ 1u32;
        }
    }
    p
}

/// RMSNorm of each `d`-wide row of `x` (`out = s · (1/sqrt(mean(s²) + eps)) · w`), with
/// `s = x + r` written to `sum` first when `add`, and `r` itself normalized with `rw` before the
/// add when `post` (`s = x + rms_norm(r, rw)`). One cube per row.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn rms_norm_kernel(
    x: &Array<f32>,
    r: &Array<f32>,
    rw: &Array<f32>,
    w: &Array<f32>,
    sum: &mut Array<f32>,
    out: &mut Array<f32>,
    d: u32,
    eps: f32,
    #[comptime] add: bool,
    #[comptime] post: bool,
) {
    let mut sh = SharedMemory::<f32>::new(comptime!(NORM_UNITS as usize));
    let row = CUBE_POS as u32;
    let base = row * d;
    let u = UNIT_POS_X;
    let mut rscale = 1.0f32;
    if comptime!(post) {
        let mut acc = 0.0f32;
        let mut i = u;
        while i < d {
            let v = r[(base + i) as usize];
            acc += v * v;
            i += NORM_UNITS;
        }
        let mean = cube_sum(&mut sh, acc, NORM_UNITS) / f32::cast_from(d);
        rscale = 1.0 / f32::sqrt(mean + eps);
    }
    let mut acc = 0.0f32;
    let mut i = u;
    while i < d {
        let at = (base + i) as usize;
        let mut v = x[at];
        if comptime!(add) {
            let mut rv = r[at];
            if comptime!(post) {
                rv = rv * rscale * rw[i as usize];
            }
            v += rv;
            sum[at] = v;
        }
        acc += v * v;
        i += NORM_UNITS;
    }
    let mean = cube_sum(&mut sh, acc, NORM_UNITS) / f32::cast_from(d);
    let scale = 1.0 / f32::sqrt(mean + eps);
    let mut j = u;
    while j < d {
        let at = (base + j) as usize;
        let mut v = x[at];
        if comptime!(add) {
            v = sum[at];
        }
        out[at] = v * scale * w[j as usize];
        j += NORM_UNITS;
    }
}

/// RMSNorm over `hd` of every head of `q` `[b, t, hq, hd]` (weight `qw`) and `k` `[b, t, hk, hd]`
/// (`kw`), then RoPE as [`rope_kernel`]: one cube per head, the first `rows_q` of them Q's.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn norm_rope_kernel(
    q: &Array<f32>,
    k: &Array<f32>,
    qw: &Array<f32>,
    kw: &Array<f32>,
    cos: &Array<f32>,
    sin: &Array<f32>,
    out_q: &mut Array<f32>,
    out_k: &mut Array<f32>,
    t: u32,
    hq: u32,
    hk: u32,
    hd: u32,
    n_rot: u32,
    rows_q: u32,
    eps: f32,
    #[comptime] neox: bool,
) {
    let mut sh = SharedMemory::<f32>::new(comptime!(HEAD_UNITS as usize));
    let row = CUBE_POS as u32;
    let u = UNIT_POS_X;
    let is_k = row >= rows_q;
    let mut r = row;
    let mut heads = hq;
    if is_k {
        r = row - rows_q;
        heads = hk;
    }
    // rows are [b, t, heads]: the head's time step
    let i = (r / heads) % t;
    let base = r * hd;
    let mut acc = 0.0f32;
    let mut j = u;
    while j < hd {
        let at = (base + j) as usize;
        let mut v = 0.0f32;
        if is_k {
            v = k[at];
        } else {
            v = q[at];
        }
        acc += v * v;
        j += HEAD_UNITS;
    }
    let mean = cube_sum(&mut sh, acc, HEAD_UNITS) / f32::cast_from(hd);
    let scale = 1.0 / f32::sqrt(mean + eps);
    let mut j = u;
    while j < hd {
        let p = rope_partner(j, n_rot, neox);
        let c = cos[(i * hd + j) as usize];
        let s = sin[(i * hd + j) as usize];
        let at = (base + j) as usize;
        let ap = (base + p) as usize;
        if is_k {
            let a = k[at] * scale * kw[j as usize];
            let b = k[ap] * scale * kw[p as usize];
            out_k[at] = a * c + b * s;
        } else {
            let a = q[at] * scale * qw[j as usize];
            let b = q[ap] * scale * qw[p as usize];
            out_q[at] = a * c + b * s;
        }
        j += HEAD_UNITS;
    }
}

/// RoPE of `q` `[b, t, hq, hd]` and `k` `[b, t, hk, hd]` (one unit per output value of either):
/// `out[j] = x[j]·cos[i, j] + x[p(j)]·sin[i, j]` at time step `i`.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
fn rope_kernel(
    q: &Array<f32>,
    k: &Array<f32>,
    cos: &Array<f32>,
    sin: &Array<f32>,
    out_q: &mut Array<f32>,
    out_k: &mut Array<f32>,
    t: u32,
    hq: u32,
    hk: u32,
    hd: u32,
    n_rot: u32,
    total_q: u32,
    total: u32,
    #[comptime] neox: bool,
) {
    let pos = ABSOLUTE_POS as u32;
    if pos >= total {
        terminate!();
    }
    let mut e = pos;
    let mut heads = hq;
    if pos >= total_q {
        e = pos - total_q;
        heads = hk;
    }
    let j = e % hd;
    let i = (e / (hd * heads)) % t;
    let p = rope_partner(j, n_rot, neox);
    let c = cos[(i * hd + j) as usize];
    let s = sin[(i * hd + j) as usize];
    let at = e as usize;
    let partner = (e - j + p) as usize;
    if pos < total_q {
        out_q[at] = q[at] * c + q[partner] * s;
    } else {
        out_k[at] = k[at] * c + k[partner] * s;
    }
}

/// `out = glu(g, u)` elementwise.
#[cube(launch_unchecked)]
fn gate_kernel(
    g: &Array<f32>,
    u: &Array<f32>,
    out: &mut Array<f32>,
    total: u32,
    #[comptime] gelu: bool,
) {
    let pos = ABSOLUTE_POS as u32;
    if pos >= total {
        terminate!();
    }
    let at = pos as usize;
    out[at] = glu_value(g[at], u[at], gelu);
}

/// A residual `r` to add, with the weight of its own RMSNorm where it has one (a post-norm).
type Residual<R, BT, const D: usize> = Option<(FloatT<R, BT, D>, Option<FloatT<R, BT, 1>>)>;

/// `(s, rms_norm(s, w))` with `s = x`, `x + r`, or `x + rms_norm(r, rw)` ([`rms_norm_kernel`]).
fn cube_rms<R: CubeRuntime, BT: BoolElement, const D: usize>(
    x: FloatT<R, BT, D>,
    r: Residual<R, BT, D>,
    w: FloatT<R, BT, 1>,
    eps: f64,
) -> (FloatT<R, BT, D>, FloatT<R, BT, D>) {
    let dims = x.dims();
    let d = dims[D - 1];
    assert_eq!(
        w.dims()[0],
        d,
        "rms_norm: weight length differs from the last axis"
    );
    let rows: usize = dims[..D - 1].iter().product();
    let add = r.is_some();
    let x = float_in(x);
    let w = float_in(w);
    let (r, rw) = match r {
        Some((r, rw)) => {
            assert_eq!(r.dims(), dims, "add_rms_norm: residual shape differs");
            let rw = rw.map(|rw| {
                assert_eq!(rw.dims()[0], d, "post-norm weight length differs");
                float_in(rw)
            });
            (float_in(r), rw)
        }
        None => (x.clone(), None),
    };
    let post = rw.is_some();
    let out = float_out(&x, &dims);
    let sum = if add { float_out(&x, &dims) } else { x.clone() };
    // SAFETY: one cube per row of d values: x, r, sum and out are [rows, d], w and rw [d]; `sum`
    // is written only when `add` (it is then a new buffer), `rw` read only when `post`.
    unsafe {
        rms_norm_kernel::launch_unchecked::<R>(
            &x.client,
            grid(rows),
            CubeDim::new_1d(NORM_UNITS),
            arr(&x),
            arr(&r),
            arr(rw.as_ref().unwrap_or(&w)),
            arr(&w),
            arr(&sum),
            arr(&out),
            d as u32,
            eps as f32,
            add,
            post,
        );
    }
    (float_tensor(sum), float_tensor(out))
}

/// QK-norm and RoPE of `q` and `k` in one launch ([`norm_rope_kernel`]).
#[allow(clippy::too_many_arguments)]
fn cube_norm_rope_pair<R: CubeRuntime, BT: BoolElement>(
    q: FloatT<R, BT, 4>,
    k: FloatT<R, BT, 4>,
    qw: FloatT<R, BT, 1>,
    kw: FloatT<R, BT, 1>,
    eps: f64,
    cos: FloatT<R, BT, 2>,
    sin: FloatT<R, BT, 2>,
    style: RopeStyle,
    n_rot: usize,
) -> (FloatT<R, BT, 4>, FloatT<R, BT, 4>) {
    let [b, t, hq, hd] = q.dims();
    let [bk, tk, hk, hdk] = k.dims();
    assert_eq!((b, t, hd), (bk, tk, hdk), "rope: q and k shapes");
    assert_eq!(cos.dims(), [t, hd], "rope: cos table shape");
    assert_eq!(sin.dims(), [t, hd], "rope: sin table shape");
    assert_eq!(
        qw.dims()[0],
        hd,
        "q norm weight length differs from the head size"
    );
    assert_eq!(
        kw.dims()[0],
        hd,
        "k norm weight length differs from the head size"
    );
    let (qs, ks) = (float_in(q), float_in(k));
    let (qw, kw, cos, sin) = (float_in(qw), float_in(kw), float_in(cos), float_in(sin));
    let out_q = float_out(&qs, &[b, t, hq, hd]);
    let out_k = float_out(&ks, &[b, t, hk, hd]);
    let rows_q = b * t * hq;
    // SAFETY: one cube per head row of hd values: the first rows_q read q/qw and write out_q
    // within their row (partners stay in the head), the rest the same for k; cos/sin are [t, hd].
    unsafe {
        norm_rope_kernel::launch_unchecked::<R>(
            &qs.client,
            grid(rows_q + b * t * hk),
            CubeDim::new_1d(HEAD_UNITS),
            arr(&qs),
            arr(&ks),
            arr(&qw),
            arr(&kw),
            arr(&cos),
            arr(&sin),
            arr(&out_q),
            arr(&out_k),
            t as u32,
            hq as u32,
            hk as u32,
            hd as u32,
            n_rot as u32,
            rows_q as u32,
            eps as f32,
            style == RopeStyle::Neox,
        );
    }
    (float_tensor(out_q), float_tensor(out_k))
}

/// RoPE of `q` and, when given, `k` (see [`rope_kernel`]).
fn cube_rope_pair<R: CubeRuntime, BT: BoolElement>(
    q: FloatT<R, BT, 4>,
    k: Option<FloatT<R, BT, 4>>,
    cos: FloatT<R, BT, 2>,
    sin: FloatT<R, BT, 2>,
    style: RopeStyle,
    n_rot: usize,
) -> (FloatT<R, BT, 4>, Option<FloatT<R, BT, 4>>) {
    let [b, t, hq, hd] = q.dims();
    assert_eq!(cos.dims(), [t, hd], "rope: cos table shape");
    assert_eq!(sin.dims(), [t, hd], "rope: sin table shape");
    let qs = float_in(q);
    let (ks, hk) = match k {
        Some(k) => {
            let [bk, tk, hk, hdk] = k.dims();
            assert_eq!((b, t, hd), (bk, tk, hdk), "rope: q and k shapes");
            (Some(float_in(k)), hk)
        }
        None => (None, 0),
    };
    let (cos, sin) = (float_in(cos), float_in(sin));
    let out_q = float_out(&qs, &[b, t, hq, hd]);
    let out_k = ks.as_ref().map(|ks| float_out(ks, &[b, t, hk, hd]));
    let total_q = b * t * hq * hd;
    let total = total_q + b * t * hk * hd;
    // SAFETY: units below total_q read q/cos/sin and write out_q at index < total_q (partners
    // stay in the same head); the rest do the same for k. Units past `total` return at once.
    unsafe {
        rope_kernel::launch_unchecked::<R>(
            &qs.client,
            grid(total.div_ceil(256)),
            CubeDim::new_1d(256),
            arr(&qs),
            arr(ks.as_ref().unwrap_or(&qs)),
            arr(&cos),
            arr(&sin),
            arr(&out_q),
            arr(out_k.as_ref().unwrap_or(&out_q)),
            t as u32,
            hq as u32,
            hk as u32,
            hd as u32,
            n_rot as u32,
            total_q as u32,
            total as u32,
            style == RopeStyle::Neox,
        );
    }
    (float_tensor(out_q), out_k.map(float_tensor))
}

fn cube_gate<R: CubeRuntime, BT: BoolElement, const D: usize>(
    g: FloatT<R, BT, D>,
    u: FloatT<R, BT, D>,
    gelu: bool,
) -> FloatT<R, BT, D> {
    let dims = g.dims();
    assert_eq!(dims, u.dims(), "gate and up shapes differ");
    let (g, u) = (float_in(g), float_in(u));
    let out = float_out(&g, &dims);
    let total: usize = dims.iter().product();
    // SAFETY: g, u and out hold `total` values; units past it return at once.
    unsafe {
        gate_kernel::launch_unchecked::<R>(
            &g.client,
            grid(total.div_ceil(256)),
            CubeDim::new_1d(256),
            arr(&g),
            arr(&u),
            arr(&out),
            total as u32,
            gelu,
        );
    }
    float_tensor(out)
}

fn cube_glu_matmul<R: CubeRuntime, BT: BoolElement>(
    x: FloatT<R, BT, 2>,
    gate: &CubeQMatrix<R>,
    up: &CubeQMatrix<R>,
    kind: Glu,
) -> FloatT<R, BT, 2> {
    let gelu = kind == Glu::Gelu;
    match cube_glu_matvec(x, gate, up, gelu) {
        Ok(y) => y,
        Err(x) => {
            let mut p = cube_matmul_many(x, &[gate, up]).into_iter();
            match (p.next(), p.next()) {
                (Some(g), Some(u)) => cube_gate(g, u, gelu),
                _ => unreachable!("two weights give two products"),
            }
        }
    }
}

/// `impl FusedOps` for a CubeCL backend type.
macro_rules! cube_fused_ops {
    ($t:ty) => {
        impl FusedOps for $t {
            fn silu_mul<const D: usize>(g: Tensor<Self, D>, u: Tensor<Self, D>) -> Tensor<Self, D> {
                cube_gate(g, u, false)
            }
            fn gelu_mul<const D: usize>(g: Tensor<Self, D>, u: Tensor<Self, D>) -> Tensor<Self, D> {
                cube_gate(g, u, true)
            }
            fn rms_norm<const D: usize>(
                x: Tensor<Self, D>,
                w: Tensor<Self, 1>,
                eps: f64,
            ) -> Tensor<Self, D> {
                cube_rms(x, None, w, eps).1
            }
            fn add_rms_norm<const D: usize>(
                x: Tensor<Self, D>,
                r: Option<Tensor<Self, D>>,
                w: Tensor<Self, 1>,
                eps: f64,
            ) -> (Tensor<Self, D>, Tensor<Self, D>) {
                cube_rms(x, r.map(|r| (r, None)), w, eps)
            }
            fn post_norm_add_rms_norm<const D: usize>(
                x: Tensor<Self, D>,
                r: Tensor<Self, D>,
                rw: Tensor<Self, 1>,
                w: Tensor<Self, 1>,
                eps: f64,
            ) -> (Tensor<Self, D>, Tensor<Self, D>) {
                cube_rms(x, Some((r, Some(rw))), w, eps)
            }
            fn rope(
                x: Tensor<Self, 4>,
                cos: Tensor<Self, 2>,
                sin: Tensor<Self, 2>,
                style: RopeStyle,
                n_rot: usize,
            ) -> Tensor<Self, 4> {
                cube_rope_pair(x, None, cos, sin, style, n_rot).0
            }
            fn rope_pair(
                q: Tensor<Self, 4>,
                k: Tensor<Self, 4>,
                cos: Tensor<Self, 2>,
                sin: Tensor<Self, 2>,
                style: RopeStyle,
                n_rot: usize,
            ) -> (Tensor<Self, 4>, Tensor<Self, 4>) {
                match cube_rope_pair(q, Some(k), cos, sin, style, n_rot) {
                    (q, Some(k)) => (q, k),
                    (_, None) => unreachable!("k was given"),
                }
            }
            fn norm_rope_pair(
                q: Tensor<Self, 4>,
                k: Tensor<Self, 4>,
                qw: Tensor<Self, 1>,
                kw: Tensor<Self, 1>,
                eps: f64,
                cos: Tensor<Self, 2>,
                sin: Tensor<Self, 2>,
                style: RopeStyle,
                n_rot: usize,
            ) -> (Tensor<Self, 4>, Tensor<Self, 4>) {
                cube_norm_rope_pair(q, k, qw, kw, eps, cos, sin, style, n_rot)
            }
            fn glu_matmul(
                x: Tensor<Self, 2>,
                gate: &Self::QMatrix,
                up: &Self::QMatrix,
                kind: Glu,
            ) -> Tensor<Self, 2> {
                cube_glu_matmul(x, gate, up, kind)
            }
        }
    };
}

#[cfg(feature = "wgpu")]
cube_fused_ops!(crate::types::Wgpu);
#[cfg(feature = "cuda")]
cube_fused_ops!(crate::types::Cuda);
