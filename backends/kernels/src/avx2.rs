//! x86-64 AVX2 + FMA (+ F16C) dot products. Each computes exactly what its [`crate::scalar`] twin does
//! (same integer lanes, same float operations in the same order), so the two agree bit for bit.
//!
//! Every function here requires the CPU features it is compiled for; [`crate::Isa::detect`] selects
//! this module only after `is_x86_feature_detected!` confirmed them.
#![allow(unsafe_op_in_unsafe_fn)]
// Index loops mirror the scalar twin's lane layout.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use crate::act::{BlockQ8, BlockQ8K};
use crate::avx2_packed::{EVEX, PLAIN, VEX};
use crate::scalar::{add_kmins, unpack_scales_k4};

/// The two f16 values in the 4 bytes at `at`, widened with F16C (exact, as `half` is).
///
/// Written in assembly on purpose: with intrinsics LLVM narrows the load to a 16-bit insert into
/// whatever register it likes, often the loop's accumulator, which chains every block of a dot
/// product onto the previous one (measured: 2× slower). `vmovd` zeroes the rest of the register.
#[inline(always)]
unsafe fn f16x2(b: &[u8], at: usize) -> (f32, f32) {
    let bits = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let v: __m128;
    std::arch::asm!(
        "vmovd {v}, {bits:e}",
        "vcvtph2ps {v}, {v}",
        bits = in(reg) bits,
        v = out(xmm_reg) v,
        options(pure, nomem, nostack, preserves_flags),
    );
    let lanes: [f32; 4] = std::mem::transmute(v);
    (lanes[0], lanes[1])
}

#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn hsum8(v: __m256) -> f32 {
    let r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    let r = _mm_add_ss(r, _mm_movehdup_ps(r));
    _mm_cvtss_f32(r)
}

/// 16 bytes of nibbles -> 32 bytes in element order (low nibbles first).
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn nibbles32(p: *const u8) -> __m256i {
    let t = _mm_loadu_si128(p as *const __m128i);
    let both = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
    _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
}

/// Byte `i` = 0xFF where bit `i` of `qh` is set.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn bits32(qh: u32) -> __m256i {
    let v = _mm256_set1_epi32(qh as i32);
    let pick = _mm256_set_epi64x(
        0x0303_0303_0303_0303,
        0x0202_0202_0202_0202,
        0x0101_0101_0101_0101,
        0,
    );
    let bytes = _mm256_shuffle_epi8(v, pick);
    let mask = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    _mm256_cmpeq_epi8(_mm256_and_si256(bytes, mask), mask)
}

/// 8 i32 lanes: lane `j` = Σ of products of bytes `4j..4j+4`, unsigned `a` times signed `b`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn lanes_us(a: __m256i, b: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1))
}

#[inline]
#[target_feature(enable = "avx2")]
unsafe fn load_q(x: &[i8]) -> __m256i {
    _mm256_loadu_si256(x.as_ptr() as *const __m256i)
}

#[inline]
fn qh_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Q5_1 · Q8_1.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q5_1(w: &[u8], x: &[BlockQ8]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut summs = 0.0f32;
    for (b, xb) in w.chunks_exact(24).zip(x) {
        let (dw, mw) = f16x2(b, 0);
        summs += mw * xb.s;
        let d = _mm256_set1_ps(dw * xb.d);
        let hi = _mm256_and_si256(bits32(qh_at(b, 4)), _mm256_set1_epi8(0x10));
        let q = _mm256_or_si256(nibbles32(b.as_ptr().add(8)), hi);
        let l = _mm256_cvtepi32_ps(lanes_us(q, load_q(&xb.qs)));
        acc = _mm256_fmadd_ps(d, l, acc);
    }
    hsum8(acc) + summs
}

/// The min terms of a Q4_K/Q5_K super-block ([`crate::scalar::kmins`]'s integers and fused
/// multiply-adds, 4 lanes at once): `accm[k] += dmin · (m[2k]·bs(2k) + m[2k+1]·bs(2k+1))` with
/// `bs(s)` the sum of the activations' partial sums `2s` and `2s+1`. `mins` from [`kmins_of`].
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn kmins_v(mins: __m256i, dmin: f32, xb: &BlockQ8K, accm: __m128) -> __m128 {
    let bs16 = _mm256_loadu_si256(xb.bsums.as_ptr() as *const __m256i);
    let bs = _mm256_madd_epi16(bs16, _mm256_set1_epi16(1));
    let p = _mm256_mullo_epi32(bs, mins);
    let mk = _mm_hadd_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256::<1>(p));
    _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(mk), accm)
}

/// A super-block's 8 mins (bytes 8..16 of [`unpack_scales_k4`]) as i32 lanes for [`kmins_v`].
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn kmins_of(sm: &[u8; 16]) -> __m256i {
    _mm256_cvtepu8_epi32(_mm_loadl_epi64(sm.as_ptr().add(8) as *const __m128i))
}

/// [`add_kmins`] on the 4 min lanes.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn finish_v(total: f32, accm: __m128) -> f32 {
    add_kmins(total, std::mem::transmute::<__m128, [f32; 4]>(accm))
}

/// Q4_K · Q8_K.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q4_k(w: &[u8], x: &[BlockQ8K]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut accm = _mm_setzero_ps();
    let m4 = _mm256_set1_epi8(0x0F);
    for (b, xb) in w.chunks_exact(144).zip(x) {
        let sm = unpack_scales_k4(&b[4..16]);
        let mut sumi = _mm256_setzero_si256();
        for c in 0..4 {
            let sl = _mm256_set1_epi16(sm[2 * c] as i16);
            let sh = _mm256_set1_epi16(sm[2 * c + 1] as i16);
            let bits = _mm256_loadu_si256(b.as_ptr().add(16 + 32 * c) as *const __m256i);
            let lo = _mm256_and_si256(bits, m4);
            let hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
            let pl = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, load_q(&xb.qs[64 * c..])), sl);
            let ph = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, load_q(&xb.qs[64 * c + 32..])), sh);
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
        }
        let (dw, dminw) = f16x2(b, 0);
        let d = xb.d * dw;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        accm = kmins_v(kmins_of(&sm), -xb.d * dminw, xb, accm);
    }
    finish_v(hsum8(acc), accm)
}

/// Q5_K · Q8_K.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q5_k(w: &[u8], x: &[BlockQ8K]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut accm = _mm_setzero_ps();
    let m4 = _mm256_set1_epi8(0x0F);
    let one = _mm256_set1_epi8(1);
    for (b, xb) in w.chunks_exact(176).zip(x) {
        let sm = unpack_scales_k4(&b[4..16]);
        let hbits = _mm256_loadu_si256(b.as_ptr().add(16) as *const __m256i);
        let mut sumi = _mm256_setzero_si256();
        for c in 0..4 {
            let sl = _mm256_set1_epi16(sm[2 * c] as i16);
            let sh = _mm256_set1_epi16(sm[2 * c + 1] as i16);
            let bits = _mm256_loadu_si256(b.as_ptr().add(48 + 32 * c) as *const __m256i);
            let hl = _mm256_and_si256(
                _mm256_srl_epi16(hbits, _mm_cvtsi32_si128(2 * c as i32)),
                one,
            );
            let hh = _mm256_and_si256(
                _mm256_srl_epi16(hbits, _mm_cvtsi32_si128(2 * c as i32 + 1)),
                one,
            );
            let lo = _mm256_or_si256(_mm256_and_si256(bits, m4), _mm256_slli_epi16(hl, 4));
            let hi = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4),
                _mm256_slli_epi16(hh, 4),
            );
            let pl = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, load_q(&xb.qs[64 * c..])), sl);
            let ph = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, load_q(&xb.qs[64 * c + 32..])), sh);
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
        }
        let (dw, dminw) = f16x2(b, 0);
        let d = xb.d * dw;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        accm = kmins_v(kmins_of(&sm), -xb.d * dminw, xb, accm);
    }
    finish_v(hsum8(acc), accm)
}

/// Q6_K · Q8_K.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q6_k(w: &[u8], x: &[BlockQ8K]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let m4 = _mm256_set1_epi8(0x0F);
    let m2 = _mm256_set1_epi8(3);
    let m32 = _mm256_set1_epi8(32);
    for (b, xb) in w.chunks_exact(210).zip(x) {
        let scales = &b[192..208];
        let mut sumi = _mm256_setzero_si256();
        for n in 0..2 {
            let ql0 = _mm256_loadu_si256(b.as_ptr().add(64 * n) as *const __m256i);
            let ql1 = _mm256_loadu_si256(b.as_ptr().add(64 * n + 32) as *const __m256i);
            let qh = _mm256_loadu_si256(b.as_ptr().add(128 + 32 * n) as *const __m256i);
            let high = |shift: i32| {
                let h = match shift {
                    0 => qh,
                    2 => _mm256_srli_epi16(qh, 2),
                    4 => _mm256_srli_epi16(qh, 4),
                    _ => _mm256_srli_epi16(qh, 6),
                };
                _mm256_slli_epi16(_mm256_and_si256(h, m2), 4)
            };
            let q = [
                _mm256_or_si256(_mm256_and_si256(ql0, m4), high(0)),
                _mm256_or_si256(_mm256_and_si256(ql1, m4), high(2)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), high(4)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4), high(6)),
            ];
            for (t, qv) in q.iter().enumerate() {
                let s = 4 * n + t;
                let y = load_q(&xb.qs[32 * s..]);
                let p =
                    _mm256_sub_epi16(_mm256_maddubs_epi16(*qv, y), _mm256_maddubs_epi16(m32, y));
                let sc = _mm256_set_m128i(
                    _mm_set1_epi16(scales[2 * s + 1] as i8 as i16),
                    _mm_set1_epi16(scales[2 * s] as i8 as i16),
                );
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, sc));
            }
        }
        let d = xb.d * f16x2(b, 206).1;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum8(acc)
}

/// The float formats (see [`crate::scalar::dot_float`]); `load(i)` reads 8 weights at value `i`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_float(
    k: usize,
    load: impl Fn(usize) -> __m256,
    w1: impl Fn(usize) -> f32,
    x: &[f32],
) -> f32 {
    let mut acc = [_mm256_setzero_ps(); 4];
    let steps = k / 32;
    for t in 0..steps {
        for (a, av) in acc.iter_mut().enumerate() {
            let i = 32 * t + 8 * a;
            let xv = _mm256_loadu_ps(x.as_ptr().add(i));
            *av = _mm256_fmadd_ps(load(i), xv, *av);
        }
    }
    let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let mut tail = 0.0f32;
    for i in 32 * steps..k {
        tail = w1(i).mul_add(x[i], tail);
    }
    hsum8(sum) + tail
}

/// F32 · f32.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_f32(w: &[u8], x: &[f32]) -> f32 {
    let p = w.as_ptr() as *const f32;
    dot_float(
        x.len(),
        |i| _mm256_loadu_ps(p.add(i)),
        |i| f32::from_le_bytes([w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]]),
        x,
    )
}

/// F16 · f16-rounded activations.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_f16(w: &[u8], x: &[f32]) -> f32 {
    let p = w.as_ptr();
    dot_float(
        x.len(),
        |i| _mm256_cvtph_ps(_mm_loadu_si128(p.add(2 * i) as *const __m128i)),
        |i| half::f16::from_bits(u16::from_le_bytes([w[2 * i], w[2 * i + 1]])).to_f32(),
        x,
    )
}

/// BF16 · bf16-rounded activations.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_bf16(w: &[u8], x: &[f32]) -> f32 {
    let p = w.as_ptr();
    dot_float(
        x.len(),
        |i| {
            let h = _mm_loadu_si128(p.add(2 * i) as *const __m128i);
            _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
        },
        |i| f32::from_bits((u16::from_le_bytes([w[2 * i], w[2 * i + 1]]) as u32) << 16),
        x,
    )
}

/// [`dot_float`] for [`TILE`] activation rows at once: each 8-weight load (and its widening from
/// f16/bf16) is shared by the rows; every row keeps its own 4 accumulators and tail, so each result
/// equals [`dot_float`]'s bit for bit.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_float(
    k: usize,
    load: impl Fn(usize) -> __m256,
    w1: impl Fn(usize) -> f32,
    x: &[&[f32]; TILE],
) -> [f32; TILE] {
    let mut acc = [[_mm256_setzero_ps(); 4]; TILE];
    let steps = k / 32;
    for t in 0..steps {
        for a in 0..4 {
            let i = 32 * t + 8 * a;
            let w = load(i);
            for j in 0..TILE {
                let xv = _mm256_loadu_ps(x[j].as_ptr().add(i));
                acc[j][a] = _mm256_fmadd_ps(w, xv, acc[j][a]);
            }
        }
    }
    let mut out = [0.0f32; TILE];
    for j in 0..TILE {
        let a = &acc[j];
        let sum = _mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3]));
        let mut tail = 0.0f32;
        for i in 32 * steps..k {
            tail = w1(i).mul_add(x[j][i], tail);
        }
        out[j] = hsum8(sum) + tail;
    }
    out
}

/// F32 · [`TILE`] rows.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn tile_f32(w: &[u8], x: &[&[f32]; TILE]) -> [f32; TILE] {
    let p = w.as_ptr() as *const f32;
    tile_float(
        x[0].len(),
        |i| _mm256_loadu_ps(p.add(i)),
        |i| f32::from_le_bytes([w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]]),
        x,
    )
}

/// F16 · [`TILE`] rows.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn tile_f16(w: &[u8], x: &[&[f32]; TILE]) -> [f32; TILE] {
    let p = w.as_ptr();
    tile_float(
        x[0].len(),
        |i| _mm256_cvtph_ps(_mm_loadu_si128(p.add(2 * i) as *const __m128i)),
        |i| half::f16::from_bits(u16::from_le_bytes([w[2 * i], w[2 * i + 1]])).to_f32(),
        x,
    )
}

/// BF16 · [`TILE`] rows.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn tile_bf16(w: &[u8], x: &[&[f32]; TILE]) -> [f32; TILE] {
    let p = w.as_ptr();
    tile_float(
        x[0].len(),
        |i| {
            let h = _mm_loadu_si128(p.add(2 * i) as *const __m128i);
            _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
        },
        |i| f32::from_bits((u16::from_le_bytes([w[2 * i], w[2 * i + 1]]) as u32) << 16),
        x,
    )
}

/// Activation rows a tile kernel handles at once: each weight block is unpacked once and multiplied
/// with this many rows (prefill, batches). Every row keeps its own accumulators and the same operation
/// order as the one-row kernel, so tiled results equal row-by-row results bit for bit.
pub const TILE: usize = 4;

macro_rules! tile32 {
    ($name:ident, $bsz:expr, signed: $signed:tt, offset: $off:tt, |$b:ident| $unpack:expr) => {
        /// One weight row against [`TILE`] activation rows (same arithmetic as the one-row kernel).
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $name(w: &[u8], x: &[&[BlockQ8]; TILE]) -> [f32; TILE] {
            let mut acc = [_mm256_setzero_ps(); TILE];
            let mut summs = [0.0f32; TILE];
            for (ib, $b) in w.chunks_exact($bsz).enumerate() {
                let (dw, mw) = f16x2($b, 0);
                let q: __m256i = $unpack;
                // signed weights: |q| once, the sign moved onto each activation row
                let a = if $signed { _mm256_sign_epi8(q, q) } else { q };
                for j in 0..TILE {
                    let xb = &x[j][ib];
                    if $off {
                        summs[j] += mw * xb.s;
                    }
                    let y = load_q(&xb.qs);
                    let y = if $signed { _mm256_sign_epi8(y, q) } else { y };
                    let l = _mm256_cvtepi32_ps(lanes_us(a, y));
                    acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * xb.d), l, acc[j]);
                }
            }
            let mut out = [0.0f32; TILE];
            for j in 0..TILE {
                out[j] = if $off {
                    hsum8(acc[j]) + summs[j]
                } else {
                    hsum8(acc[j])
                };
            }
            out
        }
    };
}

tile32!(tile_q5_1, 24, signed: false, offset: true, |b| {
    let hi = _mm256_and_si256(bits32(qh_at(b, 4)), _mm256_set1_epi8(0x10));
    _mm256_or_si256(nibbles32(b.as_ptr().add(8)), hi)
});
/// `acc + madd(a, b)`: 16-bit pair products summed into 32-bit lanes. With VNNI one `vpdpwssd`
/// (AVX-VNNI, or AVX512-VNNI on 256-bit registers), otherwise `vpmaddwd` + `vpaddd`: the same
/// integers either way (neither form saturates).
#[inline(always)]
unsafe fn madd_acc<const K: u8>(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
    match K {
        VEX => _mm256_dpwssd_avx_epi32(acc, a, b),
        EVEX => _mm256_dpwssd_epi32(acc, a, b),
        _ => _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)),
    }
}

/// Q4_K · [`TILE`] rows (AVX2 / AVX-VNNI / AVX512-VNNI forms below).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn tile_q4_k(w: &[u8], x: &[&[BlockQ8K]; TILE]) -> [f32; TILE] {
    tile_q4_k_with::<PLAIN>(w, x)
}

#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub unsafe fn tile_q4_k_vnni(w: &[u8], x: &[&[BlockQ8K]; TILE]) -> [f32; TILE] {
    tile_q4_k_with::<VEX>(w, x)
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
pub unsafe fn tile_q4_k_evex(w: &[u8], x: &[&[BlockQ8K]; TILE]) -> [f32; TILE] {
    tile_q4_k_with::<EVEX>(w, x)
}

#[inline(always)]
unsafe fn tile_q4_k_with<const K: u8>(w: &[u8], x: &[&[BlockQ8K]; TILE]) -> [f32; TILE] {
    let mut acc = [_mm256_setzero_ps(); TILE];
    let mut accm = [_mm_setzero_ps(); TILE];
    let m4 = _mm256_set1_epi8(0x0F);
    for (ib, b) in w.chunks_exact(144).enumerate() {
        let sm = unpack_scales_k4(&b[4..16]);
        let mut sumi = [_mm256_setzero_si256(); TILE];
        for c in 0..4 {
            let sl = _mm256_set1_epi16(sm[2 * c] as i16);
            let sh = _mm256_set1_epi16(sm[2 * c + 1] as i16);
            let bits = _mm256_loadu_si256(b.as_ptr().add(16 + 32 * c) as *const __m256i);
            let lo = _mm256_and_si256(bits, m4);
            let hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
            for j in 0..TILE {
                let qs = &x[j][ib].qs;
                let pl = _mm256_maddubs_epi16(lo, load_q(&qs[64 * c..]));
                let ph = _mm256_maddubs_epi16(hi, load_q(&qs[64 * c + 32..]));
                sumi[j] = madd_acc::<K>(madd_acc::<K>(sumi[j], pl, sl), ph, sh);
            }
        }
        let (dw, dminw) = f16x2(b, 0);
        let mins = kmins_of(&sm);
        for j in 0..TILE {
            let xb = &x[j][ib];
            let d = xb.d * dw;
            acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi[j]), acc[j]);
            accm[j] = kmins_v(mins, -xb.d * dminw, xb, accm[j]);
        }
    }
    let mut out = [0.0f32; TILE];
    for j in 0..TILE {
        out[j] = finish_v(hsum8(acc[j]), accm[j]);
    }
    out
}

/// Q6_K · [`TILE`] rows (AVX2 / AVX-VNNI / AVX512-VNNI forms below).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn tile_q6_k(w: &[u8], x: &[&[BlockQ8K]; TILE]) -> [f32; TILE] {
    tile_q6_k_with::<PLAIN>(w, x)
}

#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub unsafe fn tile_q6_k_vnni(w: &[u8], x: &[&[BlockQ8K]; TILE]) -> [f32; TILE] {
    tile_q6_k_with::<VEX>(w, x)
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
pub unsafe fn tile_q6_k_evex(w: &[u8], x: &[&[BlockQ8K]; TILE]) -> [f32; TILE] {
    tile_q6_k_with::<EVEX>(w, x)
}

#[inline(always)]
unsafe fn tile_q6_k_with<const K: u8>(w: &[u8], x: &[&[BlockQ8K]; TILE]) -> [f32; TILE] {
    let mut acc = [_mm256_setzero_ps(); TILE];
    let m4 = _mm256_set1_epi8(0x0F);
    let m2 = _mm256_set1_epi8(3);
    let m32 = _mm256_set1_epi8(32);
    for (ib, b) in w.chunks_exact(210).enumerate() {
        let scales = &b[192..208];
        let mut sumi = [_mm256_setzero_si256(); TILE];
        for n in 0..2 {
            let ql0 = _mm256_loadu_si256(b.as_ptr().add(64 * n) as *const __m256i);
            let ql1 = _mm256_loadu_si256(b.as_ptr().add(64 * n + 32) as *const __m256i);
            let qh = _mm256_loadu_si256(b.as_ptr().add(128 + 32 * n) as *const __m256i);
            let h0 = _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4);
            let h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4);
            let h4 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4);
            let h6 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4);
            let q = [
                _mm256_or_si256(_mm256_and_si256(ql0, m4), h0),
                _mm256_or_si256(_mm256_and_si256(ql1, m4), h2),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), h4),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4), h6),
            ];
            for (t, qv) in q.iter().enumerate() {
                let s = 4 * n + t;
                let sc = _mm256_set_m128i(
                    _mm_set1_epi16(scales[2 * s + 1] as i8 as i16),
                    _mm_set1_epi16(scales[2 * s] as i8 as i16),
                );
                for j in 0..TILE {
                    let y = load_q(&x[j][ib].qs[32 * s..]);
                    let p = _mm256_sub_epi16(
                        _mm256_maddubs_epi16(*qv, y),
                        _mm256_maddubs_epi16(m32, y),
                    );
                    sumi[j] = madd_acc::<K>(sumi[j], p, sc);
                }
            }
        }
        let dw = f16x2(b, 206).1;
        for j in 0..TILE {
            let d = x[j][ib].d * dw;
            acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi[j]), acc[j]);
        }
    }
    let mut out = [0.0f32; TILE];
    for j in 0..TILE {
        out[j] = hsum8(acc[j]);
    }
    out
}
