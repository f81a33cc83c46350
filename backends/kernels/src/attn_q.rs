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

/// [`crate::attn_rows::attend_f16_rows`] over quantized rows: query rows `q` `[m, hd]`, row `i`
/// seeing rows `spans[i]` of the runs; `out` `[m, hd]` overwritten. With AVX2 and spans that
/// differ (a prefill chunk), the rows are dequantized a tile at a time and shared by every query
/// row of the call; otherwise each span is one [`attend_q_lse`].
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
    if isa == Isa::Avx2
        && hd.is_multiple_of(8)
        && isa.is_available()
        && spans.iter().any(|s| *s != spans[0])
    {
        let fill = |keys: bool, t0: usize, t1: usize, tile: &mut Vec<f32>| {
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
        };
        crate::attn_rows::tiled(q, hd, spans, &fill, n, params, scratch, out);
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
