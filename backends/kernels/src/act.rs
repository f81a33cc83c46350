//! Activation quantization: the input of a quantized product, rounded into the block format the weight
//! type is paired with (llama.cpp's `vec_dot_type`).
//!
//! - Q4_0/Q5_0/Q8_0 weights see `block_q8_0` (32 values, f16 scale), Q4_1/Q5_1 see `block_q8_1` (plus
//!   `s = d·Σq` as f16, which folds the weight's offset `m` into one product per block).
//! - K-quants see `block_q8_K` (256 values, f32 scale, 16-value partial sums `bsums`).
//! - F16 weights see activations rounded to f16, BF16 weights to bf16, F32 weights f32.
//!
//! The 32-wide formats round like ggml's x86 SIMD quantizer (`id = 127/amax`, round half to even); the
//! 256-wide one like `quantize_row_q8_K_ref` (`iscale = -127/max`, round half to even, `d = 1/iscale`).

use half::{bf16, f16};

/// Values per 32-wide block.
pub const QK: usize = 32;
/// Values per K-quant super-block.
pub const QK_K: usize = 256;

/// One `block_q8_0` / `block_q8_1` of activations, unpacked for the kernels.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub struct BlockQ8 {
    /// quantized values
    pub qs: [i8; QK],
    /// scale (the f16-stored value, widened)
    pub d: f32,
    /// `d·Σqs` rounded to f16 and widened (used by the offset formats Q4_1/Q5_1)
    pub s: f32,
    /// `8·Σ` of each quad `qs[4g..4g+4]` (the packed Q4_0 kernel multiplies unsigned nibbles and
    /// subtracts these, which equals multiplying `q−8`)
    pub quad8: [i32; 8],
}

/// One `block_q8_K` of activations.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub struct BlockQ8K {
    /// quantized values
    pub qs: [i8; QK_K],
    /// partial sums of 16 consecutive `qs`
    pub bsums: [i16; QK_K / 16],
    /// scale
    pub d: f32,
}

/// Activations rounded for one weight type, for `m` rows of `k` values.
#[derive(Debug, Clone)]
pub enum Activations {
    /// f32 values (F32 weights; F16/BF16 weights get values already rounded to their width)
    F32(Vec<f32>),
    /// `k/32` blocks per row
    Q8(Vec<BlockQ8>),
    /// `k/256` blocks per row
    Q8K(Vec<BlockQ8K>),
}

/// Round half to even for |v| < 2^22, as `f32::round_ties_even` (which compiles to a libm call on
/// baseline x86-64): adding 1.5·2^23 leaves no fraction bits, so the FPU's default rounding does it.
#[inline]
fn rint(v: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    (v + MAGIC) - MAGIC
}

/// Quantizes one 32-value block (`x.len() == 32`).
pub fn quantize_q8(x: &[f32]) -> BlockQ8 {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let mut qs = [0i8; QK];
    let mut sum = 0i32;
    for (q, &v) in qs.iter_mut().zip(x) {
        // |v·id| <= 127 up to one rounding; the clamp keeps a stray 127.00001 in range.
        let r = rint(v * id).clamp(-127.0, 127.0) as i8;
        *q = r;
        sum += r as i32;
    }
    BlockQ8 {
        qs,
        d: f16::from_f32(d).to_f32(),
        s: f16::from_f32(d * sum as f32).to_f32(),
        quad8: std::array::from_fn(|g| {
            8 * qs[4 * g..4 * g + 4].iter().map(|&q| q as i32).sum::<i32>()
        }),
    }
}

/// Quantizes one 256-value super-block (`x.len() == 256`).
pub fn quantize_q8k(x: &[f32]) -> BlockQ8K {
    #[cfg(target_arch = "x86_64")]
    if crate::Isa::Avx2.is_available() {
        // SAFETY: AVX2 confirmed above.
        return unsafe { quantize_q8k_avx2(x) };
    }
    q8k_block(x)
}

/// [`q8k_block`] compiled for AVX2, where its loops vectorize 8 values wide (with the rounding
/// below, the baseline build's per-value saturating conversion kept them scalar).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn quantize_q8k_avx2(x: &[f32]) -> BlockQ8K {
    q8k_block(x)
}

#[inline(always)]
fn q8k_block(x: &[f32]) -> BlockQ8K {
    // The value of largest magnitude, the first if several tie (ggml's scan keeps the first): the
    // magnitude by a max-reduction (which vectorizes; NaNs are skipped as the scan skips them), then
    // the first value reaching it. A scan carrying both through one loop ran serially.
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let max = x.iter().copied().find(|v| v.abs() == amax).unwrap_or(0.0);
    let mut b = BlockQ8K {
        qs: [0; QK_K],
        bsums: [0; QK_K / 16],
        d: 0.0,
    };
    if amax == 0.0 {
        return b;
    }
    let iscale = -127.0 / max;
    for (q, &v) in b.qs.iter_mut().zip(x) {
        *q = nearest_i8(iscale * v);
    }
    for (s, chunk) in b.bsums.iter_mut().zip(b.qs.chunks_exact(16)) {
        *s = chunk.iter().map(|&q| q as i16).sum();
    }
    b.d = 1.0 / iscale;
    b
}

/// `rint(v).clamp(-128, 127) as i8` (NaN to 0) in integer operations that vectorize: after adding
/// 1.5·2^23 the integer sits in the low mantissa bits (ggml's `nearest_int`). Exact for |v| < 2^22;
/// beyond (only ±inf reach it here) the bits are still far outside -128..=127 on the right side.
#[inline(always)]
fn nearest_i8(v: f32) -> i8 {
    const MAGIC: f32 = 12_582_912.0;
    let i = ((v + MAGIC).to_bits() as i32).wrapping_sub(0x4B40_0000);
    if v.is_nan() {
        0
    } else {
        i.clamp(-128, 127) as i8
    }
}

/// The activation format a weight of `ty` pairs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActKind {
    /// f32
    F32,
    /// f32 rounded to f16
    F16,
    /// f32 rounded to bf16
    BF16,
    /// `block_q8_0`/`block_q8_1`
    Q8,
    /// `block_q8_K`
    Q8K,
}

/// Rounds `m` rows of `k` values (`x.len() == m·k`) into `kind`. `k` must be a multiple of the block
/// width for the block formats (a validated quantized weight guarantees it).
pub fn quantize(kind: ActKind, x: &[f32], k: usize) -> Activations {
    match kind {
        ActKind::F32 => Activations::F32(x.to_vec()),
        ActKind::F16 => Activations::F32(x.iter().map(|&v| f16::from_f32(v).to_f32()).collect()),
        ActKind::BF16 => Activations::F32(x.iter().map(|&v| bf16::from_f32(v).to_f32()).collect()),
        ActKind::Q8 => {
            debug_assert_eq!(k % QK, 0);
            Activations::Q8(blocks(x, QK, quantize_q8))
        }
        ActKind::Q8K => {
            debug_assert_eq!(k % QK_K, 0);
            Activations::Q8K(blocks(x, QK_K, quantize_q8k))
        }
    }
}

/// Quantizes `x` block by block, on every thread for prefill-sized inputs: each block is quantized
/// alone, so the blocks are the same either way. Serially, a 512-row activation took 3.5% of
/// Gemma-3's pp512 (`docs/perf.md`, CPU kernels); a decode row is too small to share out.
fn blocks<B: Send>(x: &[f32], qk: usize, f: impl Fn(&[f32]) -> B + Sync + Send) -> Vec<B> {
    use rayon::prelude::*;
    if x.len() >= PARALLEL_MIN {
        x.par_chunks_exact(qk).map(f).collect()
    } else {
        x.chunks_exact(qk).map(f).collect()
    }
}

/// Values from which activation quantization runs in parallel (16 rows of 2048).
const PARALLEL_MIN: usize = 32 * 1024;

/// The values the kernels see: activations rounded into `kind` and expanded back to f32, for
/// backends that compute with f32 weights (the generic fallback) and for tests.
pub fn fake_quantize(kind: ActKind, x: &[f32], k: usize) -> Vec<f32> {
    match quantize(kind, x, k) {
        Activations::F32(v) => v,
        Activations::Q8(blocks) => blocks
            .iter()
            .flat_map(|b| b.qs.iter().map(move |&q| q as f32 * b.d))
            .collect(),
        Activations::Q8K(blocks) => blocks
            .iter()
            .flat_map(|b| b.qs.iter().map(move |&q| q as f32 * b.d))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_quantization_equals_serial() {
        let x: Vec<f32> = (0..PARALLEL_MIN + 4 * QK_K)
            .map(|i| ((i as f32) * 0.37).sin() * (1.0 + (i % 97) as f32))
            .collect();
        let Activations::Q8K(par) = quantize(ActKind::Q8K, &x, QK_K) else {
            panic!("Q8K")
        };
        let serial: Vec<BlockQ8K> = x.chunks_exact(QK_K).map(quantize_q8k).collect();
        assert_eq!(par.len(), serial.len());
        assert!(
            par.iter()
                .zip(&serial)
                .all(|(a, b)| a.d.to_bits() == b.d.to_bits() && a.qs == b.qs && a.bsums == b.bsums)
        );
        let Activations::Q8(par) = quantize(ActKind::Q8, &x, QK) else {
            panic!("Q8")
        };
        let serial: Vec<BlockQ8> = x.chunks_exact(QK).map(quantize_q8).collect();
        assert!(
            par.iter()
                .zip(&serial)
                .all(|(a, b)| a.d.to_bits() == b.d.to_bits() && a.qs == b.qs)
        );
        assert_eq!(par.len(), serial.len());
    }

    #[test]
    fn magic_rounding_is_round_half_even() {
        for i in -300_000..300_000 {
            let v = i as f32 * 0.000_437 + (i % 3) as f32 * 0.5;
            assert_eq!(rint(v), v.round_ties_even(), "{v}");
        }
        for v in [0.5f32, 1.5, 2.5, -0.5, -1.5, 126.5, -127.5, 127.499_99] {
            assert_eq!(rint(v), v.round_ties_even(), "{v}");
        }
    }

    #[test]
    fn integer_rounding_equals_the_float_formula() {
        let float = |v: f32| rint(v).clamp(-128.0, 127.0) as i8;
        let mut vals: Vec<f32> = (-400_000..400_000).map(|i| i as f32 * 0.000_437).collect();
        vals.extend((-300..300).map(|i| i as f32 * 0.5));
        vals.extend([
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            0.0,
            -0.0,
            f32::MIN_POSITIVE,
            1e-45,
            127.499_99,
            -128.5,
            4_194_303.0,
            -4_194_303.0,
        ]);
        for v in vals {
            assert_eq!(nearest_i8(v), float(v), "{v}");
        }
        // whole blocks: the AVX2 build equals the portable one, ties and extremes included
        let mut x: Vec<f32> = (0..4 * QK_K)
            .map(|i| ((i as f32) * 0.61).sin() * 3.0)
            .collect();
        x[3] = 6.35; // 127 / 6.35 puts many values of the block on exact .5 ties
        x[QK_K + 9] = f32::NAN;
        x[2 * QK_K] = f32::INFINITY;
        x[3 * QK_K..].fill(0.0);
        x[3 * QK_K + 5] = 1e-40;
        for blk in x.chunks_exact(QK_K) {
            let (a, b) = (quantize_q8k(blk), q8k_block(blk));
            let reference = {
                let amax = blk.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                let max = blk.iter().copied().find(|v| v.abs() == amax).unwrap_or(0.0);
                let iscale = -127.0 / max;
                blk.iter()
                    .map(|&v| if amax == 0.0 { 0 } else { float(iscale * v) })
                    .collect::<Vec<i8>>()
            };
            assert_eq!(a.qs.to_vec(), reference);
            assert_eq!(
                (a.qs, a.bsums, a.d.to_bits()),
                (b.qs, b.bsums, b.d.to_bits())
            );
        }
    }

    #[test]
    fn q8_block_round_trips_within_half_a_step() {
        let x: Vec<f32> = (0..32).map(|i| (i as f32 - 13.3) * 0.37).collect();
        let b = quantize_q8(&x);
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        assert!(b.qs.iter().any(|&q| q.unsigned_abs() == 127));
        for (&q, &v) in b.qs.iter().zip(&x) {
            assert!((q as f32 * amax / 127.0 - v).abs() <= amax / 127.0 * 0.5 + 1e-6);
        }
        let sum: i32 = b.qs.iter().map(|&q| q as i32).sum();
        assert_eq!(b.s, f16::from_f32(amax / 127.0 * sum as f32).to_f32());
    }

    #[test]
    fn q8k_sign_convention_and_bsums() {
        let mut x: Vec<f32> = (0..256).map(|i| ((i * 37) % 101) as f32 - 50.0).collect();
        x[7] = 90.0; // largest magnitude, positive: ggml's iscale is then negative
        let b = quantize_q8k(&x);
        assert_eq!(b.qs[7], -127);
        assert!(b.d < 0.0);
        for (j, s) in b.bsums.iter().enumerate() {
            let want: i16 = b.qs[16 * j..16 * j + 16].iter().map(|&q| q as i16).sum();
            assert_eq!(*s, want);
        }
        let all_zero = quantize_q8k(&[0.0; 256]);
        assert_eq!(all_zero.d, 0.0);
    }
}
