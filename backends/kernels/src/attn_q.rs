//! CPU attention over a quantized KV cache: K and V rows stored as Q8_0 or Q4_0 blocks (32 values
//! with one f16 scale each: 34 or 18 bytes, 0.53× or 0.28× of f16), read in place.
//!
//! Each K or V row is dequantized into an f32 row buffer as the loop reaches it (one row of
//! `head_dim` values, in L1), never into a copy of the cache, and rounded to f16 there: the values
//! the f16 cache would hold had it stored the dequantized row (a relative 2^-11, far below the
//! blocks' own quantization step). After that the arithmetic is [`crate::attn`]'s: the f16-rounded
//! query against the row in the same 8-lane dot, the same softmax with its probabilities rounded to
//! f16, and V accumulated row by row in position order. Products of two f16 values are exact in
//! f32, so a fused multiply-add and a multiply then an add agree and every instruction-set path,
//! and the tiles a prefill chunk shares across its query rows ([`crate::attn_rows`]), compute the
//! same result: a sequence's output does not depend on how its prompt was chunked.
//!
//! Quantizing a row is ggml's reference quantizer (`quantize_row_q8_0_ref`, `_q4_0_ref`): what
//! llama.cpp's `-ctk q8_0 -ctv q8_0` stores.
use std::ops::Range;

use cinder_gguf::dequant::{
    BLOCK_Q4_0_BYTES, BLOCK_Q8_0_BYTES, QK, dequantize_block_q4_0, dequantize_block_q8_0,
};
use cinder_gguf::quantize::{quantize_block_q4_0, quantize_block_q8_0};

use crate::Isa;
use crate::attn::{ScoreParams, dot, round_f16};
use crate::attn_rows::RowsScratch;
use crate::softmax::softmax_f16;

/// A block format of quantized K/V rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KvQuant {
    /// 32 values as int8 with an f16 scale: 34 bytes
    Q8_0,
    /// 32 values as 4-bit nibbles (offset 8) with an f16 scale: 18 bytes
    Q4_0,
}

impl KvQuant {
    /// Bytes of one 32-value block.
    pub fn block_bytes(self) -> usize {
        match self {
            KvQuant::Q8_0 => BLOCK_Q8_0_BYTES,
            KvQuant::Q4_0 => BLOCK_Q4_0_BYTES,
        }
    }

    /// Bytes of a row of `hd` values (`hd` a multiple of 32).
    pub fn row_bytes(self, hd: usize) -> usize {
        hd / QK * self.block_bytes()
    }

    /// Quantizes `x` (a multiple of 32 values) into `out` (`row_bytes(x.len())` bytes).
    pub fn quantize_row(self, x: &[f32], out: &mut [u8]) {
        let bb = self.block_bytes();
        for (b, o) in x.chunks_exact(QK).zip(out.chunks_exact_mut(bb)) {
            match self {
                KvQuant::Q8_0 => quantize_block_q8_0(b, o),
                KvQuant::Q4_0 => quantize_block_q4_0(b, o),
            }
        }
    }

    /// Dequantizes the blocks of `src` into `out` and rounds them to f16, as attention reads them.
    pub fn attention_row(self, isa: Isa, src: &[u8], out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if isa == Isa::Avx2 && isa.is_available() {
            // SAFETY: AVX2 and F16C confirmed above; the loops stay inside whole blocks of `src`
            // and their 32 values of `out`.
            unsafe { avx2::attention_row(self, src, out) };
            return;
        }
        self.dequantize_row(src, out);
        round_f16(isa, out);
    }

    /// Dequantizes the blocks of `src` into `out` (32 values per block).
    pub fn dequantize_row(self, src: &[u8], out: &mut [f32]) {
        match self {
            KvQuant::Q8_0 => {
                for (b, o) in src
                    .chunks_exact(BLOCK_Q8_0_BYTES)
                    .zip(out.chunks_exact_mut(QK))
                {
                    let (b, o) = (as_block(b), as_values(o));
                    dequantize_block_q8_0(b, o);
                }
            }
            KvQuant::Q4_0 => {
                for (b, o) in src
                    .chunks_exact(BLOCK_Q4_0_BYTES)
                    .zip(out.chunks_exact_mut(QK))
                {
                    let (b, o) = (as_block(b), as_values(o));
                    dequantize_block_q4_0(b, o);
                }
            }
        }
    }
}

/// Rotates each `block` values of `x` by the orthonormal Walsh-Hadamard matrix of that size
/// (Sylvester's order, scaled by `1/√block`: its own inverse), in place, by the fast transform.
/// `block` is a power of two dividing `x.len()`.
///
/// Rotating K and Q by the same matrix leaves `q·k` unchanged, and rotating V before it is stored
/// and the attention output after it leaves `Σ p·v` unchanged, while the rotated rows spread an
/// outlier channel over the whole block: the quantization step of a block of 32 rotated values is
/// set by their typical size, not by one outlier's (llama.cpp rotates its quantized KV the same
/// way).
///
/// # Examples
/// ```
/// let mut x = [1.0f32, 0.0, 0.0, 0.0];
/// cinder_kernels::attn_q::hadamard(&mut x, 4);
/// assert_eq!(x, [0.5; 4]);
/// cinder_kernels::attn_q::hadamard(&mut x, 4);
/// assert_eq!(x, [1.0, 0.0, 0.0, 0.0]);
/// ```
pub fn hadamard(x: &mut [f32], block: usize) {
    debug_assert!(block.is_power_of_two() && x.len().is_multiple_of(block));
    let norm = 1.0 / (block as f32).sqrt();
    for b in x.chunks_exact_mut(block) {
        let mut h = 1;
        while h < block {
            for i in (0..block).step_by(2 * h) {
                for j in i..i + h {
                    let (a, c) = (b[j], b[j + h]);
                    b[j] = a + c;
                    b[j + h] = a - c;
                }
            }
            h *= 2;
        }
        b.iter_mut().for_each(|v| *v *= norm);
    }
}

/// The Hadamard blocks a quantized store of `head_dim`-wide rows rotates by, as llama.cpp picks
/// them: K (and Q) by the largest power of two dividing `head_dim`, V (and the output) by 64;
/// `None` unless `head_dim` is a multiple of 64.
pub fn rotation_blocks(head_dim: usize) -> Option<(usize, usize)> {
    if head_dim == 0 || !head_dim.is_multiple_of(64) {
        return None;
    }
    let k = 1 << head_dim.trailing_zeros();
    Some((k, 64))
}

fn as_block<const N: usize>(b: &[u8]) -> &[u8; N] {
    b.try_into().expect("chunks_exact gives whole blocks")
}

fn as_values(o: &mut [f32]) -> &mut [f32; QK] {
    o.try_into().expect("chunks_exact gives whole blocks")
}

/// K and V rows of one KV head for consecutive positions, quantized (`rows · row_bytes` bytes each).
#[derive(Clone, Copy, Debug)]
pub struct QKvRun<'a> {
    /// keys
    pub k: &'a [u8],
    /// values
    pub v: &'a [u8],
}

/// [`crate::attn::attend_f16_lse`] over quantized rows of `kind`: `q` `[nq, hd]` (f16-representable
/// values, `hd` a multiple of 32), `out` `[nq, hd]` overwritten, each query's log-sum-exp into `lse`
/// when it holds `nq` values.
#[allow(clippy::too_many_arguments)]
pub fn attend_q_lse(
    isa: Isa,
    kind: KvQuant,
    q: &[f32],
    hd: usize,
    runs: &[QKvRun<'_>],
    params: ScoreParams,
    scores: &mut Vec<f32>,
    out: &mut [f32],
    lse: &mut [f32],
) {
    let nq = q.len() / hd.max(1);
    let rb = kind.row_bytes(hd);
    let n: usize = runs.iter().map(|r| r.k.len() / rb.max(1)).sum();
    out.fill(0.0);
    if hd == 0 || nq == 0 || n == 0 {
        return;
    }
    // With AVX2, the rows are dequantized a tile at a time and run through the tiled loops of
    // `attn_rows` (every query seeing all rows): the same sums as the portable loops below.
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 && hd.is_multiple_of(8) && isa.is_available() {
        let spans = vec![0..n; nq];
        let fill = tile_fill(isa, kind, runs, hd);
        let mut scratch = RowsScratch::default();
        std::mem::swap(scratch.scores_mut(), scores);
        crate::attn_rows::tiled(q, hd, &spans, &fill, n, params, &mut scratch, out, lse);
        std::mem::swap(scratch.scores_mut(), scores);
        return;
    }
    scores.clear();
    scores.resize(nq * n, 0.0);
    let mut row = vec![0.0f32; hd];
    // 1. scores[qi][j] = q_qi · k_j, each key row dequantized once for every query
    let mut j = 0;
    for run in runs {
        for kr in run.k.chunks_exact(rb) {
            kind.attention_row(isa, kr, &mut row);
            for (qi, qr) in q.chunks_exact(hd).enumerate() {
                scores[qi * n + j] = dot(qr, &row);
            }
            j += 1;
        }
    }
    // 2. softmax per query, probabilities rounded to f16
    for (i, s) in scores.chunks_exact_mut(n).enumerate() {
        let l = softmax_f16(isa, s, params);
        if let Some(x) = lse.get_mut(i) {
            *x = l as f32;
        }
    }
    // 3. out[qi] = Σ_j p[qi][j] · v_j, in position order
    let mut j = 0;
    for run in runs {
        for vr in run.v.chunks_exact(rb) {
            kind.attention_row(isa, vr, &mut row);
            for (qi, orow) in out.chunks_exact_mut(hd).enumerate() {
                let w = scores[qi * n + j];
                for (acc, &x) in orow.iter_mut().zip(&row) {
                    *acc += w * x;
                }
            }
            j += 1;
        }
    }
}

/// Fills a tile with rows `t0..t1` of `runs` (keys or values), dequantized and rounded to f16.
#[cfg(target_arch = "x86_64")]
fn tile_fill<'a>(
    isa: Isa,
    kind: KvQuant,
    runs: &'a [QKvRun<'a>],
    hd: usize,
) -> impl Fn(bool, usize, usize, &mut Vec<f32>) + 'a {
    let rb = kind.row_bytes(hd);
    move |keys: bool, t0: usize, t1: usize, tile: &mut Vec<f32>| {
        tile.clear();
        tile.resize((t1 - t0) * hd, 0.0);
        let mut j0 = 0;
        for r in runs {
            let src = if keys { r.k } else { r.v };
            let rows = src.len() / rb;
            let (a, b) = (t0.max(j0), t1.min(j0 + rows));
            for p in a..b {
                let at = (p - j0) * rb;
                kind.attention_row(
                    isa,
                    &src[at..at + rb],
                    &mut tile[(p - t0) * hd..(p - t0 + 1) * hd],
                );
            }
            j0 += rows;
            if j0 >= t1 {
                break;
            }
        }
    }
}

/// [`crate::attn_rows::attend_f16_rows`] over quantized rows: query rows `q` `[m, hd]`, row `i`
/// seeing rows `spans[i]` of the runs; `out` `[m, hd]` overwritten. With AVX2 the rows are
/// dequantized a tile at a time and shared by every query row of the call (a decode step's equal
/// spans included); otherwise each span is one [`attend_q_lse`].
#[allow(clippy::too_many_arguments)]
pub fn attend_q_rows(
    isa: Isa,
    kind: KvQuant,
    q: &[f32],
    hd: usize,
    spans: &[Range<usize>],
    runs: &[QKvRun<'_>],
    params: ScoreParams,
    scratch: &mut RowsScratch,
    out: &mut [f32],
) {
    let m = spans.len();
    let rb = kind.row_bytes(hd);
    let n: usize = runs.iter().map(|r| r.k.len() / rb.max(1)).sum();
    debug_assert!(q.len() == m * hd && out.len() == m * hd);
    out.fill(0.0);
    if hd == 0 || m == 0 || n == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 && hd.is_multiple_of(8) && isa.is_available() {
        let fill = tile_fill(isa, kind, runs, hd);
        crate::attn_rows::tiled(q, hd, spans, &fill, n, params, scratch, out, &mut []);
        return;
    }
    let mut i = 0;
    let mut sub = Vec::new();
    while i < m {
        let e = i + spans[i..].iter().take_while(|s| **s == spans[i]).count();
        sub.clear();
        let mut j0 = 0;
        for r in runs {
            let rows = r.k.len() / rb;
            let (a, b) = (spans[i].start.max(j0), spans[i].end.min(j0 + rows));
            if a < b {
                let (x, y) = ((a - j0) * rb, (b - j0) * rb);
                sub.push(QKvRun {
                    k: &r.k[x..y],
                    v: &r.v[x..y],
                });
            }
            j0 += rows;
        }
        attend_q_lse(
            isa,
            kind,
            &q[i * hd..e * hd],
            hd,
            &sub,
            params,
            scratch.scores_mut(),
            &mut out[i * hd..e * hd],
            &mut [],
        );
        i = e;
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::KvQuant;
    use cinder_gguf::dequant::{BLOCK_Q4_0_BYTES, BLOCK_Q8_0_BYTES, QK};
    use std::arch::x86_64::*;

    /// 8 int8 values at `p` times `d`, rounded to f16 and widened back, stored at `o`: the
    /// portable `d · q` (exact in f32) then its f16 rounding.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn put8(q: __m128i, d: __m256, o: *mut f32) {
        // SAFETY: the caller points `o` at 8 writable values.
        unsafe {
            let v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d);
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
            _mm256_storeu_ps(o, _mm256_cvtph_ps(h));
        }
    }

    /// [`KvQuant::attention_row`] with AVX2 and F16C.
    #[target_feature(enable = "avx2,f16c")]
    pub(super) unsafe fn attention_row(kind: KvQuant, src: &[u8], out: &mut [f32]) {
        let bb = kind.block_bytes();
        for (b, o) in src.chunks_exact(bb).zip(out.chunks_exact_mut(QK)) {
            let d = half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
            let dv = _mm256_set1_ps(d);
            // SAFETY: `b` is one whole block and `o` 32 values: the loads read bytes 2.. of the
            // block (32 for Q8_0, 16 for Q4_0) and the stores write o[0..32].
            unsafe {
                let op = o.as_mut_ptr();
                match kind {
                    KvQuant::Q8_0 => {
                        debug_assert_eq!(b.len(), BLOCK_Q8_0_BYTES);
                        let q = b.as_ptr().add(2);
                        for i in 0..4 {
                            let v = _mm_loadl_epi64(q.add(8 * i) as *const __m128i);
                            put8(v, dv, op.add(8 * i));
                        }
                    }
                    KvQuant::Q4_0 => {
                        debug_assert_eq!(b.len(), BLOCK_Q4_0_BYTES);
                        // byte j holds value j (low nibble) and value j + 16 (high), offset 8
                        let raw = _mm_loadu_si128(b.as_ptr().add(2) as *const __m128i);
                        let m = _mm_set1_epi8(0x0F);
                        let eight = _mm_set1_epi8(8);
                        let lo = _mm_sub_epi8(_mm_and_si128(raw, m), eight);
                        let hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), m), eight);
                        put8(lo, dv, op);
                        put8(_mm_srli_si128(lo, 8), dv, op.add(8));
                        put8(hi, dv, op.add(16));
                        put8(_mm_srli_si128(hi, 8), dv, op.add(24));
                    }
                }
            }
        }
    }
}
