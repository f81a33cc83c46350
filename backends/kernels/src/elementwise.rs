//! Row-local ops of the decoder block, fused over the host buffers and parallel over chunks:
//! SwiGLU's `silu(g) · u` in one pass instead of Burn's separate sigmoid, multiply and multiply
//! (each allocating a tensor and running on one thread), GEGLU's `gelu(g) · u` ([`gelu_mul`]) and
//! the RMS norm ([`rms_norm`]).
//!
//! The arithmetic is exactly what Burn's CPU backends compute for `silu(g) * u` (the numerically
//! stable sigmoid with the C library's `expf`, then two products), so fusing changes no output bit.
//! A vectorized polynomial `exp` was measured and not kept: a 1–2 ulp difference in the gate moves
//! the rounding of the next layer's 8-bit activations, and SmolLM2's first-step probabilities then
//! drift by up to 0.04 from llama.cpp's (the agreement bar is 0.03).
use rayon::prelude::*;

/// Below this many values a product runs on the calling thread (a parallel section costs more).
const PAR_MIN: usize = 8 * 1024;
/// Values per parallel task.
const PAR_CHUNK: usize = 4096;

/// The logistic function in the form that never overflows `exp`.
#[inline]
pub fn sigmoid(x: f32) -> f32 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// `g[i] = f(g[i], u[i])` over the common length of `g` and `u`, in parallel chunks when long.
fn gate_mul(g: &mut [f32], u: &[f32], f: impl Fn(f32, f32) -> f32 + Sync) {
    let n = g.len().min(u.len());
    let (g, u) = (&mut g[..n], &u[..n]);
    let run = |g: &mut [f32], u: &[f32]| {
        for (x, &y) in g.iter_mut().zip(u) {
            *x = f(*x, y);
        }
    };
    if n < PAR_MIN {
        run(g, u);
    } else {
        g.par_chunks_mut(PAR_CHUNK)
            .zip(u.par_chunks(PAR_CHUNK))
            .for_each(|(g, u)| run(g, u));
    }
}

/// `g[i] = g[i] · sigmoid(g[i]) · u[i]` over the common length of `g` and `u`.
pub fn silu_mul(g: &mut [f32], u: &[f32]) {
    gate_mul(g, u, |x, y| x * sigmoid(x) * y);
}

/// GELU, tanh approximation, in f32 with ggml's operation order
/// (`0.5·x·(1 + tanh(√(2/π)·x·(1 + a·x·x)))`, the C library's `tanhf`).
#[inline]
pub fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const COEF_A: f32 = 0.044_715;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + COEF_A * x * x)).tanh())
}

/// ggml's CPU GELU table: for every f16 bit pattern, `f16(gelu_tanh(value))`, built once (65,536
/// `tanhf` calls, ~1 ms).
fn gelu_table() -> &'static [half::f16] {
    static TABLE: std::sync::OnceLock<Vec<half::f16>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        (0..=u16::MAX)
            .map(|bits| half::f16::from_f32(gelu_tanh(half::f16::from_bits(bits).to_f32())))
            .collect()
    })
}

/// GELU as ggml's CPU op computes it (`GGML_GELU_FP16`): the input rounded to f16 and looked up in
/// [`gelu_table`], with `x ≤ −10 → 0` and `x ≥ 10 → x`.
#[inline]
fn gelu_f16_lookup(table: &[half::f16], x: f32) -> f32 {
    if x <= -10.0 {
        0.0
    } else if x >= 10.0 {
        x
    } else {
        table[half::f16::from_f32(x).to_bits() as usize].to_f32()
    }
}

/// GEGLU's gate, `g[i] = gelu(g[i]) · u[i]` with ggml's f16-table GELU (`ggml_vec_geglu_f32`), over
/// the common length: one pass instead of Burn's ten (and no `tanhf` per value).
pub fn gelu_mul(g: &mut [f32], u: &[f32]) {
    let table = gelu_table();
    gate_mul(g, u, |x, y| gelu_f16_lookup(table, x) * y);
}

/// RMS norm of each row of `x` (`[rows, d]`, in place): `x · (1 / sqrt(mean(x²) + eps)) · w`,
/// rows in parallel.
///
/// The arithmetic is ggml's `rms_norm` followed by its `mul` with the weight: the squares (f32) are
/// summed one after the other in f64, the mean rounded to f32, then `1/sqrtf(mean + eps)`. A
/// sequential f64 sum does not depend on the SIMD width: Burn's `mean_dim` sums in as many lanes as
/// the CPU's widest vectors (8 with AVX2, 16 with AVX-512), so the last bit of the norm changed
/// with the machine, and SmolLM2's probabilities by up to 0.04 through the 8-bit activations of the
/// next product.
pub fn rms_norm(x: &mut [f32], w: &[f32], eps: f32) {
    let d = w.len();
    if d == 0 {
        return;
    }
    let run = |row: &mut [f32]| {
        let sum: f64 = row.iter().map(|&v| f64::from(v * v)).sum();
        let mean = (sum / d as f64) as f32;
        let scale = 1.0 / (mean + eps).sqrt();
        for (v, &g) in row.iter_mut().zip(w) {
            *v = *v * scale * g;
        }
    };
    if x.len() < PAR_MIN {
        x.chunks_exact_mut(d).for_each(run);
    } else {
        let rows_per_task = PAR_CHUNK.div_ceil(d);
        x.par_chunks_mut(rows_per_task * d)
            .for_each(|c| c.chunks_exact_mut(d).for_each(run));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rms_norm_rows_follow_ggml_and_do_not_depend_on_the_split() {
        let d = 576;
        let rows = 40; // 23k values: the parallel path
        let x: Vec<f32> = (0..rows * d)
            .map(|i| ((i * 7919 % 1000) as f32 - 500.0) * 1e-3)
            .collect();
        let w: Vec<f32> = (0..d).map(|i| 0.5 + (i % 13) as f32 * 0.1).collect();
        let mut y = x.clone();
        rms_norm(&mut y, &w, 1e-5);
        for (r, (xr, yr)) in x.chunks_exact(d).zip(y.chunks_exact(d)).enumerate() {
            // One row at a time on the calling thread, spelled out: f64 sum of f32 squares.
            let mut sum = 0.0f64;
            for &v in xr {
                sum += f64::from(v * v);
            }
            let scale = 1.0 / ((sum / d as f64) as f32 + 1e-5).sqrt();
            for ((&a, &b), &g) in xr.iter().zip(yr).zip(&w) {
                assert_eq!(b.to_bits(), (a * scale * g).to_bits(), "row {r}");
            }
        }
        // An all-zero row stays zero (no NaN from 0/0).
        let mut z = vec![0.0f32; d];
        rms_norm(&mut z, &w, 1e-5);
        assert!(z.iter().all(|&v| v == 0.0));
    }
}
