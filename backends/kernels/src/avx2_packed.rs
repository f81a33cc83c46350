//! AVX2 group kernels for [`crate::packed`]: 8 interleaved weight rows against 1–4 activation rows.
//! Each computes what the row-at-a-time kernels (and their scalar twins) compute: ggml's 8 lanes of
//! 4-value integer sums per block, each lane its own FMA accumulator, summed in `hsum_float_8` order
//! at the end. So packing changes the speed, not one bit of any output.
#![allow(unsafe_op_in_unsafe_fn)]
// Index loops mirror the lane layout (j: activation row, g: quad), as in `avx2.rs`.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use crate::act::{BlockQ8, BlockQ8K};
use crate::packed::{ROWS, chunk_bytes};
use cinder_gguf::GgmlType;

/// The 4 activation bytes `4t..4t+4` of `xb`, in every 32-bit lane.
#[inline(always)]
unsafe fn quad(xb: &BlockQ8, t: usize) -> __m256i {
    _mm256_set1_epi32(std::ptr::read_unaligned(
        xb.qs.as_ptr().add(4 * t) as *const i32
    ))
}

/// How [`dot4`] forms its 4-product sums: AVX2's `maddubs` + `madd`, AVX-VNNI's `vpdpbusd`, or
/// AVX512-VNNI's (EVEX-encoded, so the kernel may use all 32 vector registers: AVX-512 CPUs).
pub(crate) const PLAIN: u8 = 0;
/// AVX-VNNI (VEX).
pub(crate) const VEX: u8 = 1;
/// AVX512-VNNI with AVX512VL on 256-bit registers.
pub(crate) const EVEX: u8 = 2;

/// Per 32-bit lane, the sum of 4 products of unsigned bytes of `w` and signed bytes of `x`. Every
/// form gives the same integers: `maddubs` cannot saturate here (its two products per 16-bit lane
/// are at most 2·128·127 = 32,512: 4-bit weights, or |8-bit| weights, times activations in
/// -127..=127).
#[inline(always)]
unsafe fn dot4<const K: u8>(w: __m256i, x: __m256i) -> __m256i {
    match K {
        VEX => _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), w, x),
        EVEX => _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, x),
        _ => _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1)),
    }
}

/// The best [`dot4`] form this CPU has (`CINDER_KERNELS=avx2` keeps [`PLAIN`], for comparisons).
pub(crate) fn dot_level() -> u8 {
    static LEVEL: std::sync::OnceLock<u8> = std::sync::OnceLock::new();
    *LEVEL.get_or_init(|| {
        if std::env::var("CINDER_KERNELS").is_ok_and(|v| v == "avx2") {
            PLAIN
        } else if is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx512vnni")
        {
            EVEX
        } else if is_x86_feature_detected!("avxvnni") {
            VEX
        } else {
            PLAIN
        }
    })
}

/// 8 f16 values at `p`, widened (exact).
#[inline(always)]
unsafe fn f16x8(p: *const u8) -> __m256 {
    _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
}

/// ggml's `hsum_float_8` order across the 8 quad accumulators, for 8 rows at once.
#[inline(always)]
unsafe fn hsum_quads(a: &[__m256; 8]) -> __m256 {
    let lo = _mm256_add_ps(_mm256_add_ps(a[0], a[4]), _mm256_add_ps(a[2], a[6]));
    let hi = _mm256_add_ps(_mm256_add_ps(a[1], a[5]), _mm256_add_ps(a[3], a[7]));
    _mm256_add_ps(lo, hi)
}

/// 4-bit formats: `OFFSET` is Q4_1 (`+m·sx` per block), otherwise Q4_0 (`-8·Σx` per quad).
/// Inlined into [`q4_avx2`], [`q4_vnni`] and [`q4_evex`], which set the instruction set.
#[inline(always)]
unsafe fn q4<const J: usize, const OFFSET: bool, const K: u8>(
    gw: &[u8],
    x: &[&[BlockQ8]],
    out: &mut [[f32; ROWS]],
) {
    let (cb, qoff) = chunk_bytes(if OFFSET {
        GgmlType::Q4_1
    } else {
        GgmlType::Q4_0
    });
    let nb = gw.len() / cb;
    let m4 = _mm256_set1_epi8(0x0F);
    // acc[j][g]: quad g's lane of ggml's 8-lane accumulator, for 8 rows.
    let mut acc = [[_mm256_setzero_ps(); 8]; J];
    let mut summs = [_mm256_setzero_ps(); J];
    for b in 0..nb {
        let c = gw.as_ptr().add(b * cb);
        let d = f16x8(c);
        let mut w = [_mm256_setzero_si256(); 8];
        for t in 0..4 {
            let v = _mm256_loadu_si256(c.add(qoff + 32 * t) as *const __m256i);
            w[t] = _mm256_and_si256(v, m4);
            w[t + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        }
        for j in 0..J {
            let xb = x.get_unchecked(j).get_unchecked(b);
            let sc = _mm256_mul_ps(d, _mm256_set1_ps(xb.d));
            if OFFSET {
                let m = f16x8(c.add(16));
                summs[j] = _mm256_add_ps(summs[j], _mm256_mul_ps(m, _mm256_set1_ps(xb.s)));
            }
            for g in 0..8 {
                let mut l = dot4::<K>(w[g], quad(xb, g));
                if !OFFSET {
                    l = _mm256_sub_epi32(l, _mm256_set1_epi32(xb.quad8[g]));
                }
                acc[j][g] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(l), acc[j][g]);
            }
        }
    }
    for j in 0..J {
        let s = hsum_quads(&acc[j]);
        let s = if OFFSET {
            _mm256_add_ps(s, summs[j])
        } else {
            s
        };
        _mm256_storeu_ps(out[j].as_mut_ptr(), s);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_avx2<const J: usize, const OFFSET: bool>(
    gw: &[u8],
    x: &[&[BlockQ8]],
    out: &mut [[f32; ROWS]],
) {
    q4::<J, OFFSET, PLAIN>(gw, x, out)
}

#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn q4_vnni<const J: usize, const OFFSET: bool>(
    gw: &[u8],
    x: &[&[BlockQ8]],
    out: &mut [[f32; ROWS]],
) {
    q4::<J, OFFSET, VEX>(gw, x, out)
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
unsafe fn q4_evex<const J: usize, const OFFSET: bool>(
    gw: &[u8],
    x: &[&[BlockQ8]],
    out: &mut [[f32; ROWS]],
) {
    q4::<J, OFFSET, EVEX>(gw, x, out)
}

/// Q8_0: |w| times the activation carrying w's sign (the byte products want one unsigned operand).
#[inline(always)]
unsafe fn q8<const J: usize, const K: u8>(gw: &[u8], x: &[&[BlockQ8]], out: &mut [[f32; ROWS]]) {
    let (cb, qoff) = chunk_bytes(GgmlType::Q8_0);
    let nb = gw.len() / cb;
    let mut acc = [[_mm256_setzero_ps(); 8]; J];
    for b in 0..nb {
        let c = gw.as_ptr().add(b * cb);
        let d = f16x8(c);
        let q = c.add(qoff) as *const __m256i;
        for j in 0..J {
            let xb = x.get_unchecked(j).get_unchecked(b);
            let sc = _mm256_mul_ps(d, _mm256_set1_ps(xb.d));
            for g in 0..8 {
                let w = _mm256_loadu_si256(q.add(g));
                let l = dot4::<K>(_mm256_sign_epi8(w, w), _mm256_sign_epi8(quad(xb, g), w));
                acc[j][g] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(l), acc[j][g]);
            }
        }
    }
    for j in 0..J {
        _mm256_storeu_ps(out[j].as_mut_ptr(), hsum_quads(&acc[j]));
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_avx2<const J: usize>(gw: &[u8], x: &[&[BlockQ8]], out: &mut [[f32; ROWS]]) {
    q8::<J, PLAIN>(gw, x, out)
}

#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn q8_vnni<const J: usize>(gw: &[u8], x: &[&[BlockQ8]], out: &mut [[f32; ROWS]]) {
    q8::<J, VEX>(gw, x, out)
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
unsafe fn q8_evex<const J: usize>(gw: &[u8], x: &[&[BlockQ8]], out: &mut [[f32; ROWS]]) {
    q8::<J, EVEX>(gw, x, out)
}

// SAFETY (the wrappers): `packed::group_fn` hands these out only after `Isa::is_available` confirmed
// AVX2, FMA and F16C (and `dot_level` the VNNI extensions of the `_vnni`/`_evex` ones); `gw` is whole chunks of one group and every activation row has one block per
// chunk (both fixed by `matmul_packed_with`), `x.len() == out.len()` in 1..=4.
macro_rules! dispatch {
    ($name:ident, $ty:expr, $f:ident $(, $flag:expr)?) => {
        pub(crate) fn $name(gw: &[u8], x: &[&[BlockQ8]], out: &mut [[f32; ROWS]]) {
            let cb = chunk_bytes($ty).0;
            assert!(
                x.len() == out.len() && x.iter().all(|r| r.len() * cb == gw.len()),
                "packed group kernel: {} activation rows for {} outputs over {} bytes",
                x.len(),
                out.len(),
                gw.len()
            );
            unsafe {
                match x.len() {
                    1 => $f::<1 $(, $flag)?>(gw, x, out),
                    2 => $f::<2 $(, $flag)?>(gw, x, out),
                    3 => $f::<3 $(, $flag)?>(gw, x, out),
                    4 => $f::<4 $(, $flag)?>(gw, x, out),
                    _ => unreachable!("group kernels take 1 to 4 activation rows"),
                }
            }
        }
    };
}

dispatch!(q4_0, GgmlType::Q4_0, q4_avx2, false);
dispatch!(q4_1, GgmlType::Q4_1, q4_avx2, true);
dispatch!(q8_0, GgmlType::Q8_0, q8_avx2);
dispatch!(q4_0_vnni, GgmlType::Q4_0, q4_vnni, false);
dispatch!(q4_1_vnni, GgmlType::Q4_1, q4_vnni, true);
dispatch!(q8_0_vnni, GgmlType::Q8_0, q8_vnni);
dispatch!(q4_0_evex, GgmlType::Q4_0, q4_evex, false);
dispatch!(q4_1_evex, GgmlType::Q4_1, q4_evex, true);
dispatch!(q8_0_evex, GgmlType::Q8_0, q8_evex);

/// `acc + madd(a, b)` (see `avx2::madd_acc`): one `vpdpwssd` with VNNI, else `vpmaddwd` +
/// `vpaddd`; the same integers either way.
#[inline(always)]
unsafe fn madd_acc<const K: u8>(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
    match K {
        VEX => _mm256_dpwssd_avx_epi32(acc, a, b),
        EVEX => _mm256_dpwssd_epi32(acc, a, b),
        _ => _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)),
    }
}

/// 8 bytes at `p` widened to 8 i32 lanes, each holding its value in both 16-bit halves (the
/// operand `madd` multiplies a row's two 16-bit pair sums with).
#[inline(always)]
unsafe fn dup16(p: *const u8) -> __m256i {
    let v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(p as *const __m128i));
    _mm256_or_si256(v, _mm256_slli_epi32(v, 16))
}

/// Q4_K ([`crate::packed_k`] layout): per super-block, lane `t` of 8 rows summed over its 4 units
/// (`maddubs` of the unit's nibbles with the activation quad, `madd` with the sub-block's scale),
/// FMA-accumulated with `d`; the min terms as the row kernels form them, in 4 lanes.
#[inline(always)]
unsafe fn q4k<const J: usize, const K: u8>(gw: &[u8], x: &[&[BlockQ8K]], out: &mut [[f32; ROWS]]) {
    use crate::packed_k::KCHUNK;
    let nb = gw.len() / KCHUNK;
    let m4 = _mm256_set1_epi8(0x0F);
    let mut acc = [[_mm256_setzero_ps(); 8]; J];
    let mut accm = [[_mm256_setzero_ps(); 4]; J];
    for b in 0..nb {
        let c = gw.as_ptr().add(b * KCHUNK);
        let dw = f16x8(c);
        let dminw = f16x8(c.add(16));
        let sc: [__m256i; 8] = std::array::from_fn(|s| dup16(c.add(32 + 8 * s)));
        for t in 0..8 {
            let mut l = [_mm256_setzero_si256(); J];
            for cc in 0..4 {
                let bits = _mm256_loadu_si256(c.add(160 + 32 * (4 * t + cc)) as *const __m256i);
                let lo = _mm256_and_si256(bits, m4);
                let hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
                for j in 0..J {
                    let qs = x.get_unchecked(j).get_unchecked(b).qs.as_ptr();
                    let at = |o: usize| {
                        _mm256_set1_epi32(std::ptr::read_unaligned(qs.add(o) as *const i32))
                    };
                    let pl = _mm256_maddubs_epi16(lo, at(64 * cc + 4 * t));
                    let ph = _mm256_maddubs_epi16(hi, at(64 * cc + 32 + 4 * t));
                    l[j] = madd_acc::<K>(madd_acc::<K>(l[j], pl, sc[2 * cc]), ph, sc[2 * cc + 1]);
                }
            }
            for j in 0..J {
                let d = _mm256_mul_ps(_mm256_set1_ps(x.get_unchecked(j).get_unchecked(b).d), dw);
                acc[j][t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(l[j]), acc[j][t]);
            }
        }
        // min terms: lanes (2r, 2r + 1) of `mp[k]` hold row r's mins of sub-blocks 2k and 2k + 1
        let mp: [__m256i; 4] = std::array::from_fn(|k| {
            let lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64(c.add(96 + 16 * k) as *const __m128i));
            let hi = _mm256_cvtepu8_epi32(_mm_loadl_epi64(c.add(104 + 16 * k) as *const __m128i));
            _mm256_or_si256(lo, _mm256_slli_epi32(hi, 16))
        });
        for j in 0..J {
            let xb = x.get_unchecked(j).get_unchecked(b);
            let dmin = _mm256_mul_ps(_mm256_set1_ps(-xb.d), dminw);
            for k in 0..4 {
                let bs = |s: usize| xb.bsums[2 * s] as i32 + xb.bsums[2 * s + 1] as i32;
                let pair = (bs(2 * k) as u16 as u32) | ((bs(2 * k + 1) as u16 as u32) << 16);
                let mk = _mm256_madd_epi16(mp[k], _mm256_set1_epi32(pair as i32));
                accm[j][k] = _mm256_fmadd_ps(dmin, _mm256_cvtepi32_ps(mk), accm[j][k]);
            }
        }
    }
    for j in 0..J {
        let m = _mm256_add_ps(
            _mm256_add_ps(accm[j][0], accm[j][2]),
            _mm256_add_ps(accm[j][1], accm[j][3]),
        );
        _mm256_storeu_ps(out[j].as_mut_ptr(), _mm256_add_ps(hsum_quads(&acc[j]), m));
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4k_avx2<const J: usize>(gw: &[u8], x: &[&[BlockQ8K]], out: &mut [[f32; ROWS]]) {
    q4k::<J, PLAIN>(gw, x, out)
}

#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn q4k_vnni<const J: usize>(gw: &[u8], x: &[&[BlockQ8K]], out: &mut [[f32; ROWS]]) {
    q4k::<J, VEX>(gw, x, out)
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
unsafe fn q4k_evex<const J: usize>(gw: &[u8], x: &[&[BlockQ8K]], out: &mut [[f32; ROWS]]) {
    q4k::<J, EVEX>(gw, x, out)
}

// SAFETY: as for `dispatch!` above (Q8_K super-blocks, one per chunk of `$cb` bytes).
macro_rules! dispatch_k {
    ($name:ident, $f:ident, $cb:expr) => {
        pub(crate) fn $name(gw: &[u8], x: &[&[BlockQ8K]], out: &mut [[f32; ROWS]]) {
            let cb = $cb;
            assert!(
                x.len() == out.len() && x.iter().all(|r| r.len() * cb == gw.len()),
                "packed K-quant group kernel: {} activation rows for {} outputs over {} bytes",
                x.len(),
                out.len(),
                gw.len()
            );
            unsafe {
                match x.len() {
                    1 => $f::<1>(gw, x, out),
                    2 => $f::<2>(gw, x, out),
                    3 => $f::<3>(gw, x, out),
                    4 => $f::<4>(gw, x, out),
                    _ => unreachable!("group kernels take 1 to 4 activation rows"),
                }
            }
        }
    };
}

dispatch_k!(q4_k, q4k_avx2, crate::packed_k::KCHUNK);
dispatch_k!(q4_k_vnni, q4k_vnni, crate::packed_k::KCHUNK);
dispatch_k!(q4_k_evex, q4k_evex, crate::packed_k::KCHUNK);

/// Whether the two-group (512-bit) kernels can run: AVX512-VNNI forms in use (`dot_level`)
/// and AVX512BW for the byte and word operations on 512-bit registers.
pub(crate) fn wide_available() -> bool {
    dot_level() == EVEX && is_x86_feature_detected!("avx512bw")
}

/// Two 256-bit loads, `a` in the low half and `b` in the high half.
#[inline(always)]
unsafe fn join256(a: *const u8, b: *const u8) -> __m512i {
    _mm512_inserti64x4::<1>(
        _mm512_castsi256_si512(_mm256_loadu_si256(a as *const __m256i)),
        _mm256_loadu_si256(b as *const __m256i),
    )
}

/// 8 bytes at `a`, then 8 at `b`, widened to 16 i32 lanes (as [`dup16`] for 16 rows when `dup`).
#[inline(always)]
unsafe fn widen16(a: *const u8, b: *const u8, dup: bool) -> __m512i {
    let v = _mm512_cvtepu8_epi32(_mm_unpacklo_epi64(
        _mm_loadl_epi64(a as *const __m128i),
        _mm_loadl_epi64(b as *const __m128i),
    ));
    if dup {
        _mm512_or_si512(v, _mm512_slli_epi32::<16>(v))
    } else {
        v
    }
}

/// 8 f16 at `a` and 8 at `b`, widened (exact).
#[inline(always)]
unsafe fn f16x16(a: *const u8, b: *const u8) -> __m512 {
    _mm512_cvtph_ps(_mm256_inserti128_si256::<1>(
        _mm256_castsi128_si256(_mm_loadu_si128(a as *const __m128i)),
        _mm_loadu_si128(b as *const __m128i),
    ))
}

/// [`hsum_quads`]' order on 16 rows (two groups).
#[inline(always)]
unsafe fn hsum_quads16(a: &[__m512; 8]) -> __m512 {
    let lo = _mm512_add_ps(_mm512_add_ps(a[0], a[4]), _mm512_add_ps(a[2], a[6]));
    let hi = _mm512_add_ps(_mm512_add_ps(a[1], a[5]), _mm512_add_ps(a[3], a[7]));
    _mm512_add_ps(lo, hi)
}

/// [`q4k`] on two groups at once: every operation on 16 rows (group `g` in the low half of each
/// register, `g + 1` in the high half), the same per-row operations in the same order, so each
/// output equals the one-group kernel's.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q4k_pair<const J: usize>(
    g0: &[u8],
    g1: &[u8],
    x: &[&[BlockQ8K]],
    out: &mut [[f32; 2 * ROWS]],
) {
    use crate::packed_k::KCHUNK;
    let nb = g0.len() / KCHUNK;
    let m4 = _mm512_set1_epi8(0x0F);
    let mut acc = [[_mm512_setzero_ps(); 8]; J];
    let mut accm = [[_mm512_setzero_ps(); 4]; J];
    for b in 0..nb {
        let (c0, c1) = (g0.as_ptr().add(b * KCHUNK), g1.as_ptr().add(b * KCHUNK));
        let dw = f16x16(c0, c1);
        let dminw = f16x16(c0.add(16), c1.add(16));
        let sc: [__m512i; 8] =
            std::array::from_fn(|s| widen16(c0.add(32 + 8 * s), c1.add(32 + 8 * s), true));
        for t in 0..8 {
            let mut l = [_mm512_setzero_si512(); J];
            for cc in 0..4 {
                let u = 160 + 32 * (4 * t + cc);
                let bits = join256(c0.add(u), c1.add(u));
                let lo = _mm512_and_si512(bits, m4);
                let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(bits), m4);
                for j in 0..J {
                    let qs = x.get_unchecked(j).get_unchecked(b).qs.as_ptr();
                    let at = |o: usize| {
                        _mm512_set1_epi32(std::ptr::read_unaligned(qs.add(o) as *const i32))
                    };
                    let pl = _mm512_maddubs_epi16(lo, at(64 * cc + 4 * t));
                    let ph = _mm512_maddubs_epi16(hi, at(64 * cc + 32 + 4 * t));
                    l[j] = _mm512_dpwssd_epi32(
                        _mm512_dpwssd_epi32(l[j], pl, sc[2 * cc]),
                        ph,
                        sc[2 * cc + 1],
                    );
                }
            }
            for j in 0..J {
                let d = _mm512_mul_ps(_mm512_set1_ps(x.get_unchecked(j).get_unchecked(b).d), dw);
                acc[j][t] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(l[j]), acc[j][t]);
            }
        }
        let mp: [__m512i; 4] = std::array::from_fn(|k| {
            let lo = widen16(c0.add(96 + 16 * k), c1.add(96 + 16 * k), false);
            let hi = widen16(c0.add(104 + 16 * k), c1.add(104 + 16 * k), false);
            _mm512_or_si512(lo, _mm512_slli_epi32::<16>(hi))
        });
        for j in 0..J {
            let xb = x.get_unchecked(j).get_unchecked(b);
            let dmin = _mm512_mul_ps(_mm512_set1_ps(-xb.d), dminw);
            for k in 0..4 {
                let bs = |s: usize| xb.bsums[2 * s] as i32 + xb.bsums[2 * s + 1] as i32;
                let pair = (bs(2 * k) as u16 as u32) | ((bs(2 * k + 1) as u16 as u32) << 16);
                let mk = _mm512_madd_epi16(mp[k], _mm512_set1_epi32(pair as i32));
                accm[j][k] = _mm512_fmadd_ps(dmin, _mm512_cvtepi32_ps(mk), accm[j][k]);
            }
        }
    }
    for j in 0..J {
        let m = _mm512_add_ps(
            _mm512_add_ps(accm[j][0], accm[j][2]),
            _mm512_add_ps(accm[j][1], accm[j][3]),
        );
        _mm512_storeu_ps(out[j].as_mut_ptr(), _mm512_add_ps(hsum_quads16(&acc[j]), m));
    }
}

/// A two-group K-quant kernel (see [`q4k_pair`]).
// SAFETY: handed out by `packed::pair_fn_k` only where `wide_available` confirmed AVX-512 F, BW, VL
// and VNNI (and `Isa::is_available` AVX2, FMA, F16C); both groups are whole chunk runs of one weight
// and every activation row has one super-block per chunk (asserted).
macro_rules! dispatch_pair {
    ($name:ident, $f:ident, $blk:ty, $cb:expr) => {
        pub(crate) fn $name(g0: &[u8], g1: &[u8], x: &[&[$blk]], out: &mut [[f32; 2 * ROWS]]) {
            let cb = $cb;
            assert!(
                g0.len() == g1.len()
                    && x.len() == out.len()
                    && x.iter().all(|r| r.len() * cb == g0.len()),
                "packed pair kernel: {} activation rows for {} outputs over {} and {} bytes",
                x.len(),
                out.len(),
                g0.len(),
                g1.len()
            );
            unsafe {
                match x.len() {
                    1 => $f::<1>(g0, g1, x, out),
                    2 => $f::<2>(g0, g1, x, out),
                    3 => $f::<3>(g0, g1, x, out),
                    4 => $f::<4>(g0, g1, x, out),
                    _ => unreachable!("group kernels take 1 to 4 activation rows"),
                }
            }
        }
    };
}

/// Q6_K ([`crate::packed_k`] layout): per super-block, lane `t` of 8 rows summed over its two
/// units (4 sub-blocks each: `maddubs(q, x) − maddubs(32, x)`, then `madd` with the 16-value
/// scale), FMA-accumulated with `d`, as the row kernels do.
#[inline(always)]
unsafe fn q6k<const J: usize, const K: u8>(gw: &[u8], x: &[&[BlockQ8K]], out: &mut [[f32; ROWS]]) {
    use crate::packed_k::KCHUNK6;
    let nb = gw.len() / KCHUNK6;
    let (m4, m3, m32) = (
        _mm256_set1_epi8(0x0F),
        _mm256_set1_epi8(3),
        _mm256_set1_epi8(32),
    );
    let mut acc = [[_mm256_setzero_ps(); 8]; J];
    for b in 0..nb {
        let c = gw.as_ptr().add(b * KCHUNK6);
        let dw = f16x8(c);
        // scale i of 8 rows as (sc, sc) 16-bit pairs
        let sc = |i: usize| {
            let v = _mm256_cvtepi8_epi32(_mm_loadl_epi64(c.add(16 + 8 * i) as *const __m128i));
            _mm256_or_si256(
                _mm256_and_si256(v, _mm256_set1_epi32(0xFFFF)),
                _mm256_slli_epi32(v, 16),
            )
        };
        for t in 0..8 {
            let mut l = [_mm256_setzero_si256(); J];
            for n in 0..2 {
                let u = c.add(144 + 96 * (8 * n + t));
                let a = _mm256_loadu_si256(u as *const __m256i);
                let bb = _mm256_loadu_si256(u.add(32) as *const __m256i);
                let h = _mm256_loadu_si256(u.add(64) as *const __m256i);
                let hi2 = |sh: i32| {
                    let v = match sh {
                        0 => h,
                        2 => _mm256_srli_epi16(h, 2),
                        4 => _mm256_srli_epi16(h, 4),
                        _ => _mm256_srli_epi16(h, 6),
                    };
                    _mm256_slli_epi16(_mm256_and_si256(v, m3), 4)
                };
                let q = [
                    _mm256_or_si256(_mm256_and_si256(a, m4), hi2(0)),
                    _mm256_or_si256(_mm256_and_si256(bb, m4), hi2(2)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4), hi2(4)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bb, 4), m4), hi2(6)),
                ];
                let scs: [__m256i; 4] = std::array::from_fn(|jj| sc(8 * n + 2 * jj + t / 4));
                for j in 0..J {
                    let qs = x.get_unchecked(j).get_unchecked(b).qs.as_ptr();
                    for jj in 0..4 {
                        let xq = _mm256_set1_epi32(std::ptr::read_unaligned(
                            qs.add(128 * n + 32 * jj + 4 * t) as *const i32,
                        ));
                        let p = _mm256_sub_epi16(
                            _mm256_maddubs_epi16(q[jj], xq),
                            _mm256_maddubs_epi16(m32, xq),
                        );
                        l[j] = madd_acc::<K>(l[j], p, scs[jj]);
                    }
                }
            }
            for j in 0..J {
                let d = _mm256_mul_ps(_mm256_set1_ps(x.get_unchecked(j).get_unchecked(b).d), dw);
                acc[j][t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(l[j]), acc[j][t]);
            }
        }
    }
    for j in 0..J {
        _mm256_storeu_ps(out[j].as_mut_ptr(), hsum_quads(&acc[j]));
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6k_avx2<const J: usize>(gw: &[u8], x: &[&[BlockQ8K]], out: &mut [[f32; ROWS]]) {
    q6k::<J, PLAIN>(gw, x, out)
}

#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn q6k_vnni<const J: usize>(gw: &[u8], x: &[&[BlockQ8K]], out: &mut [[f32; ROWS]]) {
    q6k::<J, VEX>(gw, x, out)
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
unsafe fn q6k_evex<const J: usize>(gw: &[u8], x: &[&[BlockQ8K]], out: &mut [[f32; ROWS]]) {
    q6k::<J, EVEX>(gw, x, out)
}

dispatch_k!(q6_k, q6k_avx2, crate::packed_k::KCHUNK6);
dispatch_k!(q6_k_vnni, q6k_vnni, crate::packed_k::KCHUNK6);
dispatch_k!(q6_k_evex, q6k_evex, crate::packed_k::KCHUNK6);

/// [`q6k`] on two groups at once (see [`q4k_pair`]).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q6k_pair<const J: usize>(
    g0: &[u8],
    g1: &[u8],
    x: &[&[BlockQ8K]],
    out: &mut [[f32; 2 * ROWS]],
) {
    use crate::packed_k::KCHUNK6;
    let nb = g0.len() / KCHUNK6;
    let (m4, m3, m32) = (
        _mm512_set1_epi8(0x0F),
        _mm512_set1_epi8(3),
        _mm512_set1_epi8(32),
    );
    let mut acc = [[_mm512_setzero_ps(); 8]; J];
    for b in 0..nb {
        let (c0, c1) = (g0.as_ptr().add(b * KCHUNK6), g1.as_ptr().add(b * KCHUNK6));
        let dw = f16x16(c0, c1);
        let sc = |i: usize| {
            let v = _mm512_cvtepi8_epi32(_mm_unpacklo_epi64(
                _mm_loadl_epi64(c0.add(16 + 8 * i) as *const __m128i),
                _mm_loadl_epi64(c1.add(16 + 8 * i) as *const __m128i),
            ));
            _mm512_or_si512(
                _mm512_and_si512(v, _mm512_set1_epi32(0xFFFF)),
                _mm512_slli_epi32::<16>(v),
            )
        };
        for t in 0..8 {
            let mut l = [_mm512_setzero_si512(); J];
            for n in 0..2 {
                let u = 144 + 96 * (8 * n + t);
                let a = join256(c0.add(u), c1.add(u));
                let bb = join256(c0.add(u + 32), c1.add(u + 32));
                let h = join256(c0.add(u + 64), c1.add(u + 64));
                let hi2 = |v: __m512i| _mm512_slli_epi16::<4>(_mm512_and_si512(v, m3));
                let q = [
                    _mm512_or_si512(_mm512_and_si512(a, m4), hi2(h)),
                    _mm512_or_si512(_mm512_and_si512(bb, m4), hi2(_mm512_srli_epi16::<2>(h))),
                    _mm512_or_si512(
                        _mm512_and_si512(_mm512_srli_epi16::<4>(a), m4),
                        hi2(_mm512_srli_epi16::<4>(h)),
                    ),
                    _mm512_or_si512(
                        _mm512_and_si512(_mm512_srli_epi16::<4>(bb), m4),
                        hi2(_mm512_srli_epi16::<6>(h)),
                    ),
                ];
                let scs: [__m512i; 4] = std::array::from_fn(|jj| sc(8 * n + 2 * jj + t / 4));
                for j in 0..J {
                    let qs = x.get_unchecked(j).get_unchecked(b).qs.as_ptr();
                    for jj in 0..4 {
                        let xq = _mm512_set1_epi32(std::ptr::read_unaligned(
                            qs.add(128 * n + 32 * jj + 4 * t) as *const i32,
                        ));
                        let p = _mm512_sub_epi16(
                            _mm512_maddubs_epi16(q[jj], xq),
                            _mm512_maddubs_epi16(m32, xq),
                        );
                        l[j] = _mm512_dpwssd_epi32(l[j], p, scs[jj]);
                    }
                }
            }
            for j in 0..J {
                let d = _mm512_mul_ps(_mm512_set1_ps(x.get_unchecked(j).get_unchecked(b).d), dw);
                acc[j][t] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(l[j]), acc[j][t]);
            }
        }
    }
    for j in 0..J {
        _mm512_storeu_ps(out[j].as_mut_ptr(), hsum_quads16(&acc[j]));
    }
}

dispatch_pair!(q4_k_pair_evex, q4k_pair, BlockQ8K, crate::packed_k::KCHUNK);
dispatch_pair!(q6_k_pair_evex, q6k_pair, BlockQ8K, crate::packed_k::KCHUNK6);
dispatch_pair!(
    q8_0_pair_evex,
    q8_pair,
    BlockQ8,
    chunk_bytes(GgmlType::Q8_0).0
);

/// [`q8`] on two groups at once (see [`q4k_pair`]): `|w|` of 16 rows times the activation quad
/// carrying each `w`'s sign. AVX-512 has no byte `sign`: the quad is negated under the mask of
/// negative `w` instead, which differs from `sign` only where `w = 0`, whose product is 0 either
/// way, so every 4-product sum is the one-group kernel's integer.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q8_pair<const J: usize>(
    g0: &[u8],
    g1: &[u8],
    x: &[&[BlockQ8]],
    out: &mut [[f32; 2 * ROWS]],
) {
    let (cb, qoff) = chunk_bytes(GgmlType::Q8_0);
    let nb = g0.len() / cb;
    let zero = _mm512_setzero_si512();
    let mut acc = [[_mm512_setzero_ps(); 8]; J];
    for b in 0..nb {
        let (c0, c1) = (g0.as_ptr().add(b * cb), g1.as_ptr().add(b * cb));
        let d = f16x16(c0, c1);
        let w: [__m512i; 8] =
            std::array::from_fn(|g| join256(c0.add(qoff + 32 * g), c1.add(qoff + 32 * g)));
        for j in 0..J {
            let xb = x.get_unchecked(j).get_unchecked(b);
            let sc = _mm512_mul_ps(d, _mm512_set1_ps(xb.d));
            for g in 0..8 {
                let xq = _mm512_set1_epi32(std::ptr::read_unaligned(
                    xb.qs.as_ptr().add(4 * g) as *const i32
                ));
                let xs = _mm512_mask_sub_epi8(xq, _mm512_movepi8_mask(w[g]), zero, xq);
                let l = _mm512_dpbusd_epi32(zero, _mm512_abs_epi8(w[g]), xs);
                acc[j][g] = _mm512_fmadd_ps(sc, _mm512_cvtepi32_ps(l), acc[j][g]);
            }
        }
    }
    for j in 0..J {
        _mm512_storeu_ps(out[j].as_mut_ptr(), hsum_quads16(&acc[j]));
    }
}
