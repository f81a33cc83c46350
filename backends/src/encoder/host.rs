//! The encoder operations on the CPU backends (flex, ndarray): fused loops, rows in parallel, and
//! attention as two small gemms per (sequence, head) read in place.

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use rayon::prelude::*;

use super::{EncoderAttention, EncoderOps};
use crate::host::host_values;
use cinder_kernels::attn::dot;

/// `fn name(args) body`, compiled three times — plain, AVX2 and AVX-512F — and dispatched at run
/// time to the widest the CPU has. The build targets baseline x86-64 (SSE2), so without this the
/// element-wise loops below vectorize only 4 wide; the body is the same IEEE arithmetic in every
/// version (no FMA contraction), so the results are bit-identical.
macro_rules! widest_simd {
    ($(#[$doc:meta])* fn $name:ident($($a:ident: $t:ty),*) $body:block) => {
        $(#[$doc])*
        fn $name($($a: $t),*) {
            #[inline(always)]
            fn plain($($a: $t),*) $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                unsafe fn v4($($a: $t),*) {
                    plain($($a),*)
                }
                #[target_feature(enable = "avx2")]
                unsafe fn v3($($a: $t),*) {
                    plain($($a),*)
                }
                if std::arch::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU has AVX-512F (checked just above).
                    return unsafe { v4($($a),*) };
                }
                if std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU has AVX2 (checked just above).
                    return unsafe { v3($($a),*) };
                }
            }
            plain($($a),*)
        }
    };
}

/// Rows per rayon task: a few tasks per thread, each at least ~16 K values of work.
fn rows_per_task(rows: usize, width: usize) -> usize {
    let tasks = rayon::current_num_threads().max(1) * 4;
    rows.div_ceil(tasks).max((16_384 / width.max(1)).max(1))
}

/// Host layer norm: two passes per row (mean, then centered variance), summed in 8 f32 lanes so
/// the loops vectorize; rows in parallel.
pub fn host_layer_norm<B: Backend, const D: usize>(
    x: Tensor<B, D>,
    w: Tensor<B, 1>,
    b: Tensor<B, 1>,
    eps: f64,
) -> Tensor<B, D> {
    let shape = x.dims();
    let device = x.device();
    let d = shape[D - 1];
    let (w, b) = (host_values(w), host_values(b));
    let mut v = host_values(x);
    if d == 0 || w.len() != d || b.len() != d {
        panic!(
            "layer_norm: width {d} with weight {} and bias {}",
            w.len(),
            b.len()
        );
    }
    let per = rows_per_task(v.len() / d, d);
    v.par_chunks_mut(per * d)
        .for_each(|chunk| layer_norm_rows(chunk, &w, &b, eps as f32));
    Tensor::from_data(TensorData::new(v, shape), &device)
}

widest_simd! {
    /// Layer norm of each `w.len()`-wide row of `chunk` in place.
    fn layer_norm_rows(chunk: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
        let d = w.len();
        for row in chunk.chunks_exact_mut(d) {
            let mean = lane_sum(row, |a| a) / d as f32;
            let var = lane_sum(row, |a| (a - mean) * (a - mean)) / d as f32;
            let inv = 1.0 / (var + eps).sqrt();
            for ((a, &g), &o) in row.iter_mut().zip(w).zip(b) {
                *a = (*a - mean) * inv * g + o;
            }
        }
    }
}

/// Sum in 8 independent lanes (vectorizable, unlike a left-to-right f32 sum).
#[inline(always)]
fn lane_sum(row: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut acc = [0.0f32; 8];
    let chunks = row.chunks_exact(8);
    let tail: f32 = chunks.remainder().iter().map(|&x| f(x)).sum();
    for c in chunks {
        for l in 0..8 {
            acc[l] += f(c[l]);
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `e^x` for the encoder's softmax and GELU, branch-free so loops over it vectorize (the C
/// library's `expf` is a scalar call per element: 6–7% of a batch-32 MiniLM encode went to it).
/// `e^x = 2^k · e^r` with `k = round(x·log2 e)` and `|r| ≤ ln2/2`, `e^r` by Cephes' degree-7
/// polynomial: within 2 ulp of `expf` over the clamped range [-87.3, 88.3] (tested; the callers
/// pass x ≤ 0); below it the result is ~1e-38 rather than 0, which changes no softmax or GELU
/// output.
#[inline(always)]
fn exp_approx(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split in two so `k·LN2_HI` is exact
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // 1.5·2^23: adding and subtracting it rounds to the nearest integer (|x·log2 e| < 2^22)
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.3, 88.3);
    let k = (x * LOG2E + ROUND) - ROUND;
    let r = x - k * LN2_HI - k * LN2_LO;
    let p = 1.987_569_1e-4;
    let p = p * r + 1.398_199_9e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 1.666_666_5e-1;
    let p = p * r + 0.5;
    let er = p * r * r + r + 1.0;
    // 2^k built in the exponent field (k in [-126, 127]: a normal number)
    er * f32::from_bits(((k as i32 + 127) as u32) << 23)
}

/// `erf(x)` to ~1.5e-7 absolute (Abramowitz & Stegun 7.1.26), branch-free so it vectorizes.
#[inline(always)]
fn erf(x: f32) -> f32 {
    const P: f32 = 0.327_591_1;
    const A: [f32; 5] = [
        0.254_829_6,
        -0.284_496_72,
        1.421_413_8,
        -1.453_152_1,
        1.061_405_4,
    ];
    let ax = x.abs();
    let t = 1.0 / (1.0 + P * ax);
    let poly = t * (A[0] + t * (A[1] + t * (A[2] + t * (A[3] + t * A[4]))));
    let y = 1.0 - poly * exp_approx(-ax * ax);
    y.copysign(x)
}

/// Host exact GELU `0.5·x·(1 + erf(x/√2))`, in parallel chunks.
pub fn host_gelu<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    let shape = x.dims();
    let device = x.device();
    let mut v = host_values(x);
    v.par_chunks_mut(16_384).for_each(gelu_in_place);
    Tensor::from_data(TensorData::new(v, shape), &device)
}

widest_simd! {
    /// Exact GELU of every value in place.
    fn gelu_in_place(c: &mut [f32]) {
        for a in c {
            *a = 0.5 * *a * (1.0 + erf(*a * std::f32::consts::FRAC_1_SQRT_2));
        }
    }
}

widest_simd! {
    /// `row = softmax(row · scale)` in place (all zeros for an empty row's sum).
    fn softmax_row(row: &mut [f32], scale: f32) {
        let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x * scale));
        // exponentials first (a loop that vectorizes), then their sum in lanes
        row.iter_mut().for_each(|x| *x = exp_approx(*x * scale - max));
        let sum = lane_sum(row, |x| x);
        let inv = if sum > 0.0 { 1.0 / sum } else { 0.0 };
        row.iter_mut().for_each(|x| *x *= inv);
    }
}

/// `dst [m, n] (row-major) = lhs [m, k] · rhs [k, n]`, single-threaded gemm. Each operand is
/// `(buffer, offset, row stride, column stride)`; every index it addresses is checked first.
fn small_gemm(
    (m, n, k): (usize, usize, usize),
    dst: &mut [f32],
    lhs: (&[f32], usize, usize, usize),
    rhs: (&[f32], usize, usize, usize),
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        dst[..m * n].fill(0.0);
        return;
    }
    let last = |(buf, off, rs, cs): (&[f32], usize, usize, usize), rows: usize, cols: usize| {
        assert!(
            off + (rows - 1) * rs + (cols - 1) * cs < buf.len(),
            "small_gemm: operand out of bounds"
        );
    };
    last(lhs, m, k);
    last(rhs, k, n);
    assert!(dst.len() >= m * n, "small_gemm: destination too small");
    // SAFETY: the asserts above bound every element the strides address; `read_dst` is false.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n as isize,
            false,
            lhs.0.as_ptr().add(lhs.1),
            lhs.3 as isize,
            lhs.2 as isize,
            rhs.0.as_ptr().add(rhs.1),
            rhs.3 as isize,
            rhs.2 as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// One head of one sequence whose keys are rows `0..keys` (contiguous, no padding among them):
/// `out [rows, hd] = softmax(Q_h Kᵀ_h · scale) V_h`, with Q/K/V read in place from `[.., width]`
/// buffers at `at` (the sequence's first row plus the head's column), by two small gemms.
fn attend_head(
    (q, k, v): (&[f32], &[f32], &[f32]),
    out: &mut [f32],
    at: usize,
    (rows, keys): (usize, usize),
    (width, hd): (usize, usize),
    scale: f32,
) {
    attend_head_gqa(
        (q, k, v),
        out,
        (at, at),
        (rows, keys),
        (width, width, hd),
        scale,
        None,
    );
}

/// [`attend_head`] with K/V in buffers of their own width (grouped-query attention: `kv_at` is
/// the KV head's column in `[.., kv_width]`) and an optional symmetric window: query `i` sees keys
/// `i - half ..= i + half` only (both counted from the sequence's first token).
fn attend_head_gqa(
    (q, k, v): (&[f32], &[f32], &[f32]),
    out: &mut [f32],
    (q_at, kv_at): (usize, usize),
    (rows, keys): (usize, usize),
    (width, kv_width, hd): (usize, usize, usize),
    scale: f32,
    half: Option<usize>,
) {
    let mut p = vec![0.0f32; rows * keys];
    // scores [rows, keys] = Q_h [rows, hd] · K_hᵀ [hd, keys]
    small_gemm(
        (rows, keys, hd),
        &mut p,
        (q, q_at, width, 1),
        (k, kv_at, 1, kv_width),
    );
    for (i, row) in p.chunks_exact_mut(keys.max(1)).enumerate() {
        match half {
            Some(h) => {
                let (lo, hi) = (i.saturating_sub(h), (i + h + 1).min(keys));
                row[..lo].fill(0.0);
                row[hi..].fill(0.0);
                softmax_row(&mut row[lo..hi], scale);
            }
            None => softmax_row(row, scale),
        }
    }
    // out [rows, hd] = P [rows, keys] · V_h [keys, hd]
    small_gemm(
        (rows, hd, keys),
        out,
        (&p, 0, keys, 1),
        (v, kv_at, kv_width, 1),
    );
}

/// [`EncoderOps::encoder_attention_windowed`] on the host: one task per (sequence, query head),
/// each a pair of small gemms over that sequence's rows, K/V read from the head's KV head.
pub fn host_encoder_attention_windowed<B: Backend>(
    q: Tensor<B, 2>,
    k: Tensor<B, 2>,
    v: Tensor<B, 2>,
    lengths: &[usize],
    p: &EncoderAttention,
) -> Tensor<B, 2> {
    let [n, width] = q.dims();
    let kv_width = k.dims()[1];
    assert_eq!(
        lengths.iter().sum::<usize>(),
        n,
        "encoder_attention_windowed: lengths do not sum to the rows"
    );
    let device = q.device();
    let (heads, hd) = (p.heads, width / p.heads);
    let group = heads / p.kv_heads;
    let half = p.window.map(|w| w / 2);
    let (q, k, v) = (host_values(q), host_values(k), host_values(v));
    let starts: Vec<usize> = lengths
        .iter()
        .scan(0, |acc, &l| {
            let s = *acc;
            *acc += l;
            Some(s)
        })
        .collect();
    let parts: Vec<(usize, usize, Vec<f32>)> = (0..lengths.len() * heads)
        .into_par_iter()
        .map(|job| {
            let (s, h) = (job / heads, job % heads);
            let len = lengths[s];
            let mut out = vec![0.0f32; len * hd];
            attend_head_gqa(
                (&q, &k, &v),
                &mut out,
                (
                    starts[s] * width + h * hd,
                    starts[s] * kv_width + (h / group) * hd,
                ),
                (len, len),
                (width, kv_width, hd),
                p.scale,
                half,
            );
            (s, h, out)
        })
        .collect();
    let mut ctx = vec![0.0f32; n * width];
    for (s, h, out) in parts {
        for (i, row) in out.chunks_exact(hd).enumerate() {
            let o = (starts[s] + i) * width + h * hd;
            ctx[o..o + hd].copy_from_slice(row);
        }
    }
    Tensor::from_data(TensorData::new(ctx, [n, width]), &device)
}

/// [`EncoderOps::encoder_attention_packed`] on the host: one task per (sequence,
/// head), each a pair of small gemms over that sequence's rows of the packed `[n, width]` buffers.
pub fn host_encoder_attention_packed<B: Backend>(
    q: Tensor<B, 2>,
    k: Tensor<B, 2>,
    v: Tensor<B, 2>,
    lengths: &[usize],
    heads: usize,
) -> Tensor<B, 2> {
    // BERT's attention is the windowed one with as many KV heads as query heads, no window and
    // the usual 1/√hd scale.
    let hd = q.dims()[1] / heads;
    let p = EncoderAttention {
        heads,
        kv_heads: heads,
        scale: 1.0 / (hd as f32).sqrt(),
        window: None,
    };
    host_encoder_attention_windowed(q, k, v, lengths, &p)
}

/// Host attention: one task per (sequence, head); each query attends to that sequence's unpadded
/// keys only (what the generic form's -1e9 bias gives after the softmax, without the wasted work).
pub fn host_encoder_attention<B: Backend>(
    q: Tensor<B, 3>,
    k: Tensor<B, 3>,
    v: Tensor<B, 3>,
    mask: Tensor<B, 2>,
    heads: usize,
) -> Tensor<B, 3> {
    let [b, t, width] = q.dims();
    let device = q.device();
    let hd = width / heads;
    let (q, k, v, mask) = (
        host_values(q),
        host_values(k),
        host_values(v),
        host_values(mask),
    );
    let scale = 1.0 / (hd as f32).sqrt();
    // Each task writes its head's columns of its sequence: [t, hd] per (sequence, head), merged below.
    let parts: Vec<(usize, usize, Vec<f32>)> = (0..b * heads)
        .into_par_iter()
        .map(|job| {
            let (s, h) = (job / heads, job % heads);
            let keys: Vec<usize> = (0..t).filter(|&j| mask[s * t + j] != 0.0).collect();
            let (base, col) = (s * t * width, h * hd);
            let mut out = vec![0.0f32; t * hd];
            // Right padding (the usual case): the real keys are rows 0..n, so both products are
            // small gemms read in place from the [t, heads·hd] buffers.
            if keys.iter().enumerate().all(|(i, &j)| i == j) {
                attend_head(
                    (&q, &k, &v),
                    &mut out,
                    base + col,
                    (t, keys.len()),
                    (width, hd),
                    scale,
                );
                return (s, h, out);
            }
            // Any other mask: the listed keys one by one.
            let at = |i: usize| base + i * width + col..base + i * width + col + hd;
            let mut p = vec![0.0f32; keys.len()];
            for (i, o) in out.chunks_exact_mut(hd).enumerate() {
                let qi = &q[at(i)];
                for (pj, &j) in p.iter_mut().zip(&keys) {
                    *pj = dot(qi, &k[at(j)]);
                }
                softmax_row(&mut p, scale);
                for (&w, &j) in p.iter().zip(&keys) {
                    for (a, &vv) in o.iter_mut().zip(&v[at(j)]) {
                        *a += w * vv;
                    }
                }
            }
            (s, h, out)
        })
        .collect();
    let mut ctx = vec![0.0f32; b * t * width];
    for (s, h, out) in parts {
        for (i, row) in out.chunks_exact(hd).enumerate() {
            let o = (s * t + i) * width + h * hd;
            ctx[o..o + hd].copy_from_slice(row);
        }
    }
    Tensor::from_data(TensorData::new(ctx, [b, t, width]), &device)
}

/// `impl EncoderOps` for a host backend type.
macro_rules! host_encoder_ops {
    ($t:ty) => {
        impl EncoderOps for $t {
            fn encoder_layer_norm<const D: usize>(
                x: Tensor<Self, D>,
                w: Tensor<Self, 1>,
                b: Tensor<Self, 1>,
                eps: f64,
            ) -> Tensor<Self, D> {
                host_layer_norm(x, w, b, eps)
            }
            fn encoder_gelu<const D: usize>(x: Tensor<Self, D>) -> Tensor<Self, D> {
                host_gelu(x)
            }
            fn encoder_attention(
                q: Tensor<Self, 3>,
                k: Tensor<Self, 3>,
                v: Tensor<Self, 3>,
                mask: Tensor<Self, 2>,
                heads: usize,
            ) -> Tensor<Self, 3> {
                host_encoder_attention(q, k, v, mask, heads)
            }
            fn encoder_attention_packed(
                q: Tensor<Self, 2>,
                k: Tensor<Self, 2>,
                v: Tensor<Self, 2>,
                lengths: &[usize],
                heads: usize,
            ) -> Tensor<Self, 2> {
                host_encoder_attention_packed(q, k, v, lengths, heads)
            }
            fn encoder_attention_windowed(
                q: Tensor<Self, 2>,
                k: Tensor<Self, 2>,
                v: Tensor<Self, 2>,
                lengths: &[usize],
                p: &EncoderAttention,
            ) -> Tensor<Self, 2> {
                host_encoder_attention_windowed(q, k, v, lengths, p)
            }
        }
    };
}

#[cfg(feature = "flex")]
host_encoder_ops!(crate::types::Flex);
#[cfg(feature = "ndarray")]
host_encoder_ops!(crate::types::NdArray);

#[cfg(all(test, feature = "flex"))]
mod tests {
    use super::*;
    use crate::encoder::{
        generic_encoder_attention, generic_encoder_attention_packed, generic_gelu,
        generic_layer_norm, packed_index,
    };
    use crate::types::Flex;

    fn data(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| (((i as u32).wrapping_mul(2_654_435_761) ^ seed) % 2001) as f32 / 500.0 - 2.0)
            .collect()
    }

    fn close(a: Vec<f32>, b: Vec<f32>, tol: f32, what: &str) {
        assert_eq!(a.len(), b.len());
        let worst = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max);
        assert!(worst <= tol, "{what}: host vs generic differ by {worst}");
    }

    #[test]
    fn host_encoder_ops_equal_the_generic_ones() {
        let dev = Default::default();
        let t3 =
            |v: Vec<f32>, s: [usize; 3]| Tensor::<Flex, 3>::from_data(TensorData::new(v, s), &dev);
        let (b, t, heads, hd) = (3, 7, 4, 8);
        let w = heads * hd;
        let x = t3(data(b * t * w, 1), [b, t, w]);
        let g = Tensor::<Flex, 1>::from_data(TensorData::new(data(w, 2), [w]), &dev);
        let o = Tensor::<Flex, 1>::from_data(TensorData::new(data(w, 3), [w]), &dev);
        close(
            host_values(host_layer_norm(x.clone(), g.clone(), o.clone(), 1e-12)),
            host_values(generic_layer_norm(x.clone(), g, o, 1e-12)),
            1e-5,
            "layer norm",
        );
        close(
            host_values(host_gelu(x.clone())),
            host_values(generic_gelu(x.clone())),
            1e-6,
            "gelu",
        );
        // Sequences of 7, 4 and 1 tokens (right padding).
        let lens = [7, 4, 1];
        let mask: Vec<f32> = (0..b * t)
            .map(|i| if i % t < lens[i / t] { 1.0 } else { 0.0 })
            .collect();
        let mask = Tensor::<Flex, 2>::from_data(TensorData::new(mask, [b, t]), &dev);
        let (q, k, v) = (
            t3(data(b * t * w, 4), [b, t, w]),
            t3(data(b * t * w, 5), [b, t, w]),
            t3(data(b * t * w, 6), [b, t, w]),
        );
        close(
            host_values(host_encoder_attention(
                q.clone(),
                k.clone(),
                v.clone(),
                mask.clone(),
                heads,
            )),
            host_values(generic_encoder_attention(
                q.clone(),
                k.clone(),
                v.clone(),
                mask,
                heads,
            )),
            1e-5,
            "attention",
        );
        // Left padding and a hole: the per-key path instead of the in-place gemms.
        let holes: Vec<f32> = (0..b * t)
            .map(|i| if i % t == 0 || i % t == 3 { 0.0 } else { 1.0 })
            .collect();
        let holes = Tensor::<Flex, 2>::from_data(TensorData::new(holes, [b, t]), &dev);
        close(
            host_values(host_encoder_attention(
                q.clone(),
                k.clone(),
                v.clone(),
                holes.clone(),
                heads,
            )),
            host_values(generic_encoder_attention(
                q.clone(),
                k.clone(),
                v.clone(),
                holes,
                heads,
            )),
            1e-5,
            "attention, non-prefix mask",
        );
        // The same sequences packed back to back: the host form against the generic one
        // (scatter, masked attention, gather).
        let n: usize = lens.iter().sum();
        let pack = |x: &Tensor<Flex, 3>| {
            let v = host_values(x.clone());
            let rows: Vec<f32> = lens
                .iter()
                .enumerate()
                .flat_map(|(s, &l)| v[s * t * w..(s * t + l) * w].to_vec())
                .collect();
            Tensor::<Flex, 2>::from_data(TensorData::new(rows, [n, w]), &dev)
        };
        let (pq, pk, pv) = (pack(&q), pack(&k), pack(&v));
        let host = host_values(host_encoder_attention_packed(
            pq.clone(),
            pk.clone(),
            pv.clone(),
            &lens,
            heads,
        ));
        close(
            host.clone(),
            host_values(generic_encoder_attention_packed(pq, pk, pv, &lens, heads)),
            1e-5,
            "packed attention",
        );
        // ... and equal to the padded attention's real rows.
        let padded = host_values(generic_encoder_attention(
            q,
            k,
            v,
            mask_of(&lens, t, &dev),
            heads,
        ));
        let real: Vec<f32> = lens
            .iter()
            .enumerate()
            .flat_map(|(s, &l)| padded[s * t * w..(s * t + l) * w].to_vec())
            .collect();
        close(host, real, 1e-5, "packed against padded attention");
    }

    fn mask_of(lens: &[usize], t: usize, dev: &burn::tensor::Device<Flex>) -> Tensor<Flex, 2> {
        let (_, mask, longest) = packed_index(lens);
        assert_eq!(longest, t);
        Tensor::<Flex, 2>::from_data(TensorData::new(mask, [lens.len(), t]), dev)
    }

    #[test]
    fn exp_approx_is_within_two_ulp_of_expf() {
        let mut worst = 0.0f64;
        for i in 0..=2_000_000 {
            let x = -87.0 + 175.0 * i as f32 / 2_000_000.0;
            let (got, want) = (exp_approx(x), x.exp());
            let ulp = f64::from(want.next_up() - want);
            worst = worst.max(f64::from((got - want).abs()) / ulp);
        }
        assert!(worst <= 2.0, "exp_approx is {worst} ulp from expf");
        assert!(exp_approx(-1e9) < 1e-37 && exp_approx(-1e9) >= 0.0);
        assert_eq!(exp_approx(0.0), 1.0);
    }

    /// Grouped-query heads (6 query heads on 2 KV heads), its own scale and a symmetric window,
    /// over three packed sequences (11, 5 and 1 tokens): the host kernel equals the Burn-ops form,
    /// and a window wider than every sequence equals no window.
    #[test]
    fn host_windowed_attention_equals_the_generic_form() {
        use crate::encoder::{EncoderAttention, generic_encoder_attention_windowed};
        let dev = Default::default();
        let t2 =
            |v: Vec<f32>, s: [usize; 2]| Tensor::<Flex, 2>::from_data(TensorData::new(v, s), &dev);
        let (heads, kv_heads, hd) = (6, 2, 8);
        let lens = [11, 5, 1];
        let n: usize = lens.iter().sum();
        let (q, k, v) = (
            t2(data(n * heads * hd, 7), [n, heads * hd]),
            t2(data(n * kv_heads * hd, 8), [n, kv_heads * hd]),
            t2(data(n * kv_heads * hd, 9), [n, kv_heads * hd]),
        );
        for window in [None, Some(4), Some(7), Some(64)] {
            let p = EncoderAttention {
                heads,
                kv_heads,
                scale: 0.3,
                window,
            };
            close(
                host_values(host_encoder_attention_windowed(
                    q.clone(),
                    k.clone(),
                    v.clone(),
                    &lens,
                    &p,
                )),
                host_values(generic_encoder_attention_windowed(
                    q.clone(),
                    k.clone(),
                    v.clone(),
                    &lens,
                    &p,
                )),
                1e-5,
                &format!("windowed attention, window {window:?}"),
            );
        }
        let wide = |window| EncoderAttention {
            heads,
            kv_heads,
            scale: 0.3,
            window,
        };
        close(
            host_values(host_encoder_attention_windowed(
                q.clone(),
                k.clone(),
                v.clone(),
                &lens,
                &wide(Some(64)),
            )),
            host_values(host_encoder_attention_windowed(q, k, v, &lens, &wide(None))),
            0.0,
            "a window past every sequence",
        );
    }
}
