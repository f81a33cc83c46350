//! Row-interleaved ("packed") weights for the 32-wide formats Q4_0, Q4_1, Q8_0 and Q5_0, and their
//! products.
//!
//! GGUF stores a weight row after row. The row-at-a-time kernels unpack each weight block, multiply
//! it with the activation block, and scale and accumulate per row: about ten instructions per
//! (block, weight row, activation row), whatever the batch. Here 8 weight rows are interleaved per
//! block, four values of each row at a time, so one 256-bit register holds 4 values of 8 rows and a
//! broadcast activation quad multiplies all 8 rows at once; the scale multiply is shared by the 8
//! rows, the unpacking by every activation row of the call.
//!
//! Layout of one group of 8 rows (rows `8g..8g+8`; rows past `n` are zero) and one block `b`, groups
//! outermost, then blocks:
//!
//! | bytes | Q4_0 | Q4_1 | Q8_0 |
//! |---|---|---|---|
//! | f16 scales `d[8]` | 0..16 | 0..16 | 0..16 |
//! | f16 offsets `m[8]` | – | 16..32 | – |
//! | quants | 128 | 128 | 256 |
//!
//! Quant chunk `t` (32 bytes) holds, for row `r` at bytes `4r..4r+4`, the block's bytes `4t..4t+4` of
//! that row. For the 4-bit formats a byte's low nibble is value `4t+i` and its high nibble value
//! `16+4t+i` (GGUF's own nibble order); for Q8_0 chunk `t` holds values `4t..4t+4`.
//!
//! The arithmetic is ggml's `vec_dot` for these types, unchanged: per block, 8 exact integer sums of
//! 4 products (quad `g` = ggml's lane `g`), each FMA-accumulated with the block's scale into its own
//! lane, the lanes summed in `hsum_float_8` order at the end (plus `Σ m·sx` for Q4_1). The scalar,
//! AVX2 and NEON paths all compute exactly that, so they agree bit for bit with each other and with the
//! row-at-a-time kernels, and an output does not depend on how many activation rows share the
//! call: a sequence decodes the same alone or in any batch.
//!
//! Q5_0 is packed in the Q8_0 layout, each value stored as the signed byte `q − 16`: ggml pairs both
//! with Q8_0 activations and multiplies the same integers with the same scale, so the Q8_0 kernel
//! gives exactly the Q5_0 row kernel's bits. Its packed copy is 34/22 of the tensor (8 bits per value
//! instead of 5.5); in return Q5_0 — most of Gemma-3's projections, whose 640-wide rows rule out
//! the K-quants — runs on the fastest kernel.

use cinder_gguf::GgmlType;
use rayon::prelude::*;

use crate::act::{self, BlockQ8, BlockQ8K, QK, QK_K};
use crate::{Isa, KernelError, Weights};

/// Weight rows interleaved per group.
pub const ROWS: usize = 8;
/// Activation rows one call of a group kernel handles (its accumulators stay in registers).
pub const TILE: usize = 4;

/// The formats with a packed layout on this machine. Q4_K and Q6_K (`packed_k`) are packed
/// on x86-64 only: their group kernels are AVX2 (elsewhere the NEON row kernels are faster than the
/// portable twins).
pub fn packable(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0 | GgmlType::Q5_0
    ) || (is_kquant(ty) && cfg!(target_arch = "x86_64"))
}

/// The K-quant layouts (256-value super-blocks, Q8_K activations).
fn is_kquant(layout: GgmlType) -> bool {
    matches!(layout, GgmlType::Q4_K | GgmlType::Q6_K)
}

/// Values one packed chunk covers per row (a block, or a K-quant super-block).
fn chunk_values(layout: GgmlType) -> usize {
    if is_kquant(layout) { QK_K } else { QK }
}

/// The packed layout a format is stored in (Q5_0 widens to Q8_0's; see the module docs).
fn layout_of(ty: GgmlType) -> GgmlType {
    match ty {
        GgmlType::Q5_0 => GgmlType::Q8_0,
        t => t,
    }
}

/// A Q5_0 block (f16 d, u32 fifth bits, 16 bytes of nibbles) as a Q8_0 block of `q − 16`.
fn q5_0_as_q8_0(src: &[u8], dst: &mut [u8; 34]) {
    dst[..2].copy_from_slice(&src[..2]);
    let qh = u32::from_le_bytes([src[2], src[3], src[4], src[5]]);
    for (i, &b) in src[6..22].iter().enumerate() {
        let lo = (b & 0x0F) | ((((qh >> i) & 1) as u8) << 4);
        let hi = (b >> 4) | ((((qh >> (i + 16)) & 1) as u8) << 4);
        dst[2 + i] = (lo as i8 - 16) as u8;
        dst[18 + i] = (hi as i8 - 16) as u8;
    }
}

/// Bytes of one packed (group, block) chunk, and where its quants start.
pub(crate) fn chunk_bytes(ty: GgmlType) -> (usize, usize) {
    match ty {
        GgmlType::Q4_K => (crate::packed_k::KCHUNK, 160),
        GgmlType::Q6_K => (crate::packed_k::KCHUNK6, 144),
        GgmlType::Q4_1 => (32 + 128, 32),
        GgmlType::Q8_0 => (16 + 256, 16),
        _ => (16 + 128, 16),
    }
}

/// A weight matrix in the packed layout (see the module docs), built once per weight.
#[derive(Debug, Clone)]
pub struct Packed {
    /// the source format
    ty: GgmlType,
    /// the layout it is packed in (Q4_0, Q4_1 or Q8_0)
    layout: GgmlType,
    n: usize,
    k: usize,
    data: Vec<u8>,
}

impl Packed {
    /// Interleaves `w`; `Ok(None)` for a type without a packed layout.
    pub fn new(w: Weights<'_>) -> Result<Option<Packed>, KernelError> {
        Self::new_releasing(w, |_| {})
    }

    /// [`Packed::new`], calling `done(bytes)` as the first `bytes` of `w.data` have been copied
    /// (in steps of ~1 MiB, and once at the end), so a caller holding them in a memory map can
    /// let their pages go while the rest is packed: the model is not resident twice even for the
    /// moment a large table is being packed.
    pub fn new_releasing(
        w: Weights<'_>,
        done: impl Fn(usize),
    ) -> Result<Option<Packed>, KernelError> {
        let rb = w.validate()?;
        if !packable(w.ty) {
            return Ok(None);
        }
        let layout = layout_of(w.ty);
        let src_block = w.ty.type_size() as usize;
        let header_vals = if layout == GgmlType::Q4_1 { 2 } else { 1 };
        let (cb, qoff) = chunk_bytes(layout);
        let nb = w.k / chunk_values(layout);
        let groups = w.n.div_ceil(ROWS);
        let mut data = vec![0u8; groups * nb * cb];
        // Groups per step: ~1 MiB of source rows, parallel inside a step.
        let step = (1usize << 20).div_ceil(ROWS * rb).max(1);
        for (s, part) in data.chunks_mut(step * nb * cb).enumerate() {
            let g0 = s * step;
            part.par_chunks_mut(nb * cb)
                .enumerate()
                .for_each(|(i, dst)| {
                    let g = g0 + i;
                    for r in 0..ROWS.min(w.n - g * ROWS) {
                        let row = &w.data[(g * ROWS + r) * rb..][..rb];
                        if is_kquant(layout) {
                            let pack = if layout == GgmlType::Q4_K {
                                crate::packed_k::pack_block
                            } else {
                                crate::packed_k::pack_block_q6
                            };
                            for (c, src) in
                                dst.chunks_exact_mut(cb).zip(row.chunks_exact(src_block))
                            {
                                pack(src, r, c);
                            }
                            continue;
                        }
                        let mut widened = [0u8; 34];
                        for (c, src) in dst.chunks_exact_mut(cb).zip(row.chunks_exact(src_block)) {
                            let src = if w.ty == GgmlType::Q5_0 {
                                q5_0_as_q8_0(src, &mut widened);
                                &widened[..]
                            } else {
                                src
                            };
                            c[2 * r..2 * r + 2].copy_from_slice(&src[..2]);
                            if header_vals == 2 {
                                c[16 + 2 * r..16 + 2 * r + 2].copy_from_slice(&src[2..4]);
                            }
                            let qs = &src[2 * header_vals..];
                            for (t, quad) in qs.chunks_exact(4).enumerate() {
                                let at = qoff + 32 * t + 4 * r;
                                c[at..at + 4].copy_from_slice(quad);
                            }
                        }
                    }
                });
            let rows_done = ((g0 + part.len() / (nb * cb)) * ROWS).min(w.n);
            done(rows_done * rb);
        }
        Ok(Some(Packed {
            ty: w.ty,
            layout,
            n: w.n,
            k: w.k,
            data,
        }))
    }

    /// Weight rows `rows` dequantized into `out` (`rows.len() · k` values) from the packed copy:
    /// the values `cinder_gguf::dequant` gives for the GGUF rows (unit test), so an embedding table
    /// that is also the packed output head needs its mapped blocks no more.
    pub fn dequantize_rows(&self, rows: &[usize], out: &mut [f32]) -> Result<(), KernelError> {
        crate::check_rows(rows, self.n, self.k, out.len())?;
        let cb = chunk_bytes(self.layout).0;
        let per = chunk_values(self.layout);
        let nb = self.k / per;
        for (&r, dst) in rows.iter().zip(out.chunks_exact_mut(self.k)) {
            let (g, rr) = (r / ROWS, r % ROWS);
            for (b, y) in dst.chunks_exact_mut(per).enumerate() {
                let c = &self.data[(g * nb + b) * cb..][..cb];
                if self.layout == GgmlType::Q4_K {
                    crate::packed_k::dequantize_block(c, rr, y);
                    continue;
                }
                if self.layout == GgmlType::Q6_K {
                    crate::packed_k::dequantize_block_q6(c, rr, y);
                    continue;
                }
                let d = f16_at(c, 2 * rr);
                let q = block_values(self.layout, c, rr);
                if self.layout == GgmlType::Q4_1 {
                    let m = f16_at(c, 16 + 2 * rr);
                    for (v, &q) in y.iter_mut().zip(&q) {
                        *v = q as f32 * d + m;
                    }
                } else {
                    for (v, &q) in y.iter_mut().zip(&q) {
                        *v = q as f32 * d;
                    }
                }
            }
        }
        Ok(())
    }

    /// Storage type.
    pub fn ty(&self) -> GgmlType {
        self.ty
    }

    /// Output rows.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Inputs per row.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Bytes held (the packed copy is as large as the GGUF tensor, plus padding to 8 rows; Q5_0's
    /// 34/22 of it).
    pub fn bytes(&self) -> usize {
        self.data.len()
    }
}

/// Group kernel: one group's chunks (`nb` blocks) against up to [`TILE`] activation rows of blocks
/// `A` (Q8 blocks, or Q8_K super-blocks for Q4_K), the 8 outputs per activation row written to
/// `out`.
type GroupFn<A> = fn(&[u8], &[&[A]], &mut [[f32; ROWS]]);

/// Two adjacent groups' kernel (512-bit registers, 16 weight rows per instruction): group `g`'s
/// chunks, group `g + 1`'s, up to [`TILE`] activation rows; per row the 8 outputs of `g` then the 8
/// of `g + 1`, each equal to the one-group kernel's.
type PairFn<A> = fn(&[u8], &[u8], &[&[A]], &mut [[f32; 2 * ROWS]]);

/// A weight's group kernel, its tile, and its two-group kernel if it has one.
type Kernels<A> = (GroupFn<A>, usize, Option<PairFn<A>>);

fn group_fn(ty: GgmlType, isa: Isa) -> GroupFn<BlockQ8> {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 && isa.is_available() {
        use crate::avx2_packed as k;
        // VNNI where present: one instruction for the 4-product integer sums, same integers.
        return match (ty, k::dot_level()) {
            (GgmlType::Q4_1, k::EVEX) => k::q4_1_evex,
            (GgmlType::Q8_0, k::EVEX) => k::q8_0_evex,
            (_, k::EVEX) => k::q4_0_evex,
            (GgmlType::Q4_1, k::VEX) => k::q4_1_vnni,
            (GgmlType::Q8_0, k::VEX) => k::q8_0_vnni,
            (_, k::VEX) => k::q4_0_vnni,
            (GgmlType::Q4_1, _) => k::q4_1,
            (GgmlType::Q8_0, _) => k::q8_0,
            _ => k::q4_0,
        };
    }
    #[cfg(target_arch = "aarch64")]
    if isa == Isa::Neon {
        use crate::neon_packed as k;
        return match ty {
            GgmlType::Q4_1 => k::q4_1,
            GgmlType::Q8_0 => k::q8_0,
            _ => k::q4_0,
        };
    }
    let _ = isa;
    match ty {
        GgmlType::Q4_1 => scalar_q4_1,
        GgmlType::Q8_0 => scalar_q8_0,
        _ => scalar_q4_0,
    }
}

/// The K-quant group kernel of `layout` (Q4_K or Q6_K) for `isa`.
fn group_fn_k(layout: GgmlType, isa: Isa) -> GroupFn<BlockQ8K> {
    let q6 = layout == GgmlType::Q6_K;
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 && isa.is_available() {
        use crate::avx2_packed as k;
        return match (q6, k::dot_level()) {
            (false, k::EVEX) => k::q4_k_evex,
            (false, k::VEX) => k::q4_k_vnni,
            (false, _) => k::q4_k,
            (true, k::EVEX) => k::q6_k_evex,
            (true, k::VEX) => k::q6_k_vnni,
            (true, _) => k::q6_k,
        };
    }
    let _ = isa;
    if q6 {
        crate::packed_k::scalar_group_q6
    } else {
        crate::packed_k::scalar_group
    }
}

/// The two-group kernel of a 32-wide `layout` (Q8_0's, which Q5_0 shares), where the CPU has
/// AVX-512 (BW and VNNI) and `isa` may use it.
fn pair_fn(layout: GgmlType, isa: Isa) -> Option<PairFn<BlockQ8>> {
    #[cfg(target_arch = "x86_64")]
    if layout == GgmlType::Q8_0
        && isa == Isa::Avx2
        && isa.is_available()
        && crate::avx2_packed::wide_available()
    {
        return Some(crate::avx2_packed::q8_0_pair_evex);
    }
    let _ = (layout, isa);
    None
}

/// The two-group K-quant kernel of `layout`, where the CPU has AVX-512 (BW and VNNI) and `isa` may
/// use it.
fn pair_fn_k(layout: GgmlType, isa: Isa) -> Option<PairFn<BlockQ8K>> {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 && isa.is_available() && crate::avx2_packed::wide_available() {
        use crate::avx2_packed as k;
        return Some(if layout == GgmlType::Q6_K {
            k::q6_k_pair_evex
        } else {
            k::q4_k_pair_evex
        });
    }
    let _ = (layout, isa);
    None
}

/// `y[m, n] = x[m, k] · Wᵀ` on packed weights, with `isa`.
pub fn matmul_packed_with(
    isa: Isa,
    p: &Packed,
    x: &[f32],
    m: usize,
    y: &mut [f32],
) -> Result<(), KernelError> {
    matmul_packed_many_with(isa, &[p], x, m, &mut [y])
}

/// `ys[i][m, n_i] = x[m, k] · W_iᵀ` for several packed weights of one input width (a layer's Q, K
/// and V, or its gate and up projections): the activations are quantized once and every product
/// runs in one parallel section. Each output equals [`matmul_packed_with`]'s for its weight.
pub fn matmul_packed_many_with(
    isa: Isa,
    ps: &[&Packed],
    x: &[f32],
    m: usize,
    ys: &mut [&mut [f32]],
) -> Result<(), KernelError> {
    let Some(k) = ps.first().map(|p| p.k) else {
        return Ok(());
    };
    if ys.len() != ps.len() {
        return Err(KernelError::Shape {
            what: "outputs",
            expected: ps.len(),
            got: ys.len(),
            unit: "buffers",
        });
    }
    for (p, y) in ps.iter().zip(ys.iter()) {
        if p.k != k {
            return Err(KernelError::Shape {
                what: "weight width",
                expected: k,
                got: p.k,
                unit: "inputs",
            });
        }
        crate::check_io(x, y, m, p.n, k)?;
    }
    if m == 0 {
        return Ok(());
    }
    let is_k = |p: &&Packed| is_kquant(p.layout);
    if ps.iter().any(is_k) && !ps.iter().all(is_k) {
        // Q4_K and the 32-wide formats quantize their activations differently: one by one.
        for (p, y) in ps.iter().zip(ys.iter_mut()) {
            matmul_packed_many_with(isa, &[*p], x, m, &mut [&mut **y])?;
        }
        return Ok(());
    }
    if ps.iter().all(is_k) {
        let acts = match act::quantize(act::ActKind::Q8K, x, k) {
            act::Activations::Q8K(a) => a,
            // `quantize` returns the kind asked for.
            _ => return Err(KernelError::Unsupported(ps[0].ty.name())),
        };
        let rows: Vec<&[BlockQ8K]> = acts.chunks_exact(k / QK_K).collect();
        run_products(ps, &rows, ys, |p| {
            (group_fn_k(p.layout, isa), TILE, pair_fn_k(p.layout, isa))
        });
        return Ok(());
    }
    let acts = match act::quantize(act::ActKind::Q8, x, k) {
        act::Activations::Q8(a) => a,
        _ => return Err(KernelError::Unsupported(ps[0].ty.name())),
    };
    let rows: Vec<&[BlockQ8]> = acts.chunks_exact(k / QK).collect();
    run_products(ps, &rows, ys, |p| {
        (
            group_fn(p.layout, isa),
            group_tile(p.layout, isa),
            pair_fn(p.layout, isa),
        )
    });
    Ok(())
}

/// Every product of `ps` against the quantized activation `rows`, in one parallel section;
/// `kernel_of(p)` gives a weight's group kernel, its tile, and the two-group kernel that, where
/// there is one, runs in both splits (a decode step's 512-bit pass over two groups costs about as
/// much as one 256-bit pass over one).
fn run_products<A: Sync>(
    ps: &[&Packed],
    rows: &[&[A]],
    ys: &mut [&mut [f32]],
    kernel_of: impl Fn(&Packed) -> Kernels<A> + Sync,
) {
    let m = rows.len();
    if m >= ROW_SPLIT_MIN {
        // Prefill: each task takes a block of activation rows against every group of one weight,
        // writing whole rows of that weight's output in place.
        let per_task = act_rows_per_task(m, ps.len());
        let mut tasks: Vec<(&Packed, usize, &mut [f32])> = Vec::new();
        for (p, y) in ps.iter().zip(ys.iter_mut()) {
            for (c, yc) in y.chunks_mut(per_task * p.n).enumerate() {
                tasks.push((p, c * per_task, yc));
            }
        }
        tasks.into_par_iter().for_each(|(p, i0, yc)| {
            let take = yc.len() / p.n;
            row_block_products(kernel_of(p), p, &rows[i0..i0 + take], yc)
        });
        return;
    }
    // Outputs per group, [groups][m][8] per weight: each task owns whole groups of one weight;
    // scattered into the ys afterwards.
    let mut yts: Vec<Vec<f32>> = ps
        .iter()
        .map(|p| vec![0.0f32; p.n.div_ceil(ROWS) * m * ROWS])
        .collect();
    let total_groups: usize = ps.iter().map(|p| p.n.div_ceil(ROWS)).sum();
    let nb = ps.first().map_or(0, |p| p.k / chunk_values(p.layout));
    let per_task = groups_per_task(total_groups, m, nb);
    let mut tasks: Vec<(&Packed, usize, &mut [f32])> = Vec::new();
    for (p, yt) in ps.iter().zip(yts.iter_mut()) {
        for (c, ts) in yt.chunks_mut(per_task * m * ROWS).enumerate() {
            tasks.push((p, c * per_task, ts));
        }
    }
    tasks
        .into_par_iter()
        .for_each(|(p, g0, ts)| group_products(kernel_of(p), p, g0, rows, ts));
    for ((p, yt), y) in ps.iter().zip(&yts).zip(ys.iter_mut()) {
        let n = p.n;
        for (g, gt) in yt.chunks_exact(m * ROWS).enumerate() {
            let cols = ROWS.min(n - g * ROWS);
            for (i, o8) in gt.chunks_exact(ROWS).enumerate() {
                y[i * n + g * ROWS..i * n + g * ROWS + cols].copy_from_slice(&o8[..cols]);
            }
        }
    }
}

/// From this many activation rows on, products split the rows among tasks rather than the weight's
/// groups (here and in the row-at-a-time path of `matmul_with`). Splitting groups keeps every task
/// on all rows, so each task's outputs are a column block of `y` and were gathered in a scratch
/// buffer, then copied on one thread: at prefill sizes that copy and the scratch's page faults took
/// ~6% of Gemma-3's pp512 (`docs/perf.md`, CPU kernels).
pub(crate) const ROW_SPLIT_MIN: usize = 16;

/// Activation rows per task in the row split: about four tasks per thread over all the weights,
/// whole [`TILE`]s, at most 64 rows (their Q8 blocks stay in L1/L2 while a group's weights stream).
pub(crate) fn act_rows_per_task(m: usize, weights: usize) -> usize {
    let threads = rayon::current_num_threads().max(1);
    let tasks_per_weight = (threads * 4).div_ceil(weights.max(1));
    m.div_ceil(tasks_per_weight)
        .next_multiple_of(TILE)
        .clamp(TILE, MAX_TASK_ROWS)
}

/// The most activation rows one task of the row split takes.
pub(crate) const MAX_TASK_ROWS: usize = 64;

/// Bytes of one group of `p` (all its chunks).
fn group_bytes(p: &Packed) -> usize {
    p.k / chunk_values(p.layout) * chunk_bytes(p.layout).0
}

/// Every group of `p` against the activation rows `rows`, written straight into `y` (`[rows][n]`).
fn row_block_products<A>(
    (kernel, tile, pair): Kernels<A>,
    p: &Packed,
    rows: &[&[A]],
    y: &mut [f32],
) {
    let n = p.n;
    let gbytes = group_bytes(p);
    let groups = n.div_ceil(ROWS);
    let gw = |g: usize| &p.data[g * gbytes..(g + 1) * gbytes];
    let mut g = 0;
    while g < groups {
        if let Some(pair) = pair.filter(|_| g + 1 < groups) {
            // groups g and g + 1: 16 output columns, the last group maybe short
            let cols = (2 * ROWS).min(n - g * ROWS);
            pair_against_rows(pair, gw(g), gw(g + 1), rows, |i, o16| {
                let at = i * n + g * ROWS;
                y[at..at + cols].copy_from_slice(&o16[..cols]);
            });
            g += 2;
            continue;
        }
        let cols = ROWS.min(n - g * ROWS);
        group_against_rows(kernel, tile, gw(g), rows, |i, o8| {
            let at = i * n + g * ROWS;
            y[at..at + cols].copy_from_slice(&o8[..cols]);
        });
        g += 1;
    }
}

/// Groups `g0..` of `p` against every activation row: `ts` is `[groups][m][8]`. Where there is a
/// two-group kernel, groups go through it two at a time (its outputs equal the one-group kernel's).
fn group_products<A>(
    (kernel, tile, pair): Kernels<A>,
    p: &Packed,
    g0: usize,
    rows: &[&[A]],
    ts: &mut [f32],
) {
    let m = rows.len();
    let gbytes = group_bytes(p);
    let gw = |g: usize| &p.data[g * gbytes..(g + 1) * gbytes];
    let mut chunks = ts.chunks_exact_mut(m * ROWS).enumerate();
    while let Some((o, t)) = chunks.next() {
        let g = g0 + o;
        if let Some(pair) = pair
            && let Some((_, t1)) = chunks.next()
        {
            pair_against_rows(pair, gw(g), gw(g + 1), rows, |i, o16| {
                t[i * ROWS..(i + 1) * ROWS].copy_from_slice(&o16[..ROWS]);
                t1[i * ROWS..(i + 1) * ROWS].copy_from_slice(&o16[ROWS..]);
            });
            continue;
        }
        group_against_rows(kernel, tile, gw(g), rows, |i, o8| {
            t[i * ROWS..(i + 1) * ROWS].copy_from_slice(o8)
        });
    }
}

/// Two adjacent groups `w0`, `w1` against every row of `rows` through the two-group kernel, [`TILE`]
/// rows per call; `emit(i, outputs)` receives row `i`'s 16 outputs (`w0`'s 8, then `w1`'s).
fn pair_against_rows<A>(
    pair: PairFn<A>,
    w0: &[u8],
    w1: &[u8],
    rows: &[&[A]],
    mut emit: impl FnMut(usize, &[f32; 2 * ROWS]),
) {
    for (c, chunk) in rows.chunks(TILE).enumerate() {
        let mut out = [[0.0f32; 2 * ROWS]; TILE];
        pair(w0, w1, chunk, &mut out[..chunk.len()]);
        for (jj, o16) in out[..chunk.len()].iter().enumerate() {
            emit(c * TILE + jj, o16);
        }
    }
}

/// One group's chunks `gw` against every row of `rows` through `kernel`, `tile` rows per call
/// ([`group_tile`]); `emit(i, outputs)` receives row `i`'s 8 outputs.
fn group_against_rows<A>(
    kernel: GroupFn<A>,
    tile: usize,
    gw: &[u8],
    rows: &[&[A]],
    mut emit: impl FnMut(usize, &[f32; ROWS]),
) {
    let m = rows.len();
    let mut j = 0;
    while j < m {
        let take = tile.min(m - j);
        let mut out = [[0.0f32; ROWS]; TILE];
        kernel(gw, &rows[j..j + take], &mut out[..take]);
        for (jj, o8) in out[..take].iter().enumerate() {
            emit(j + jj, o8);
        }
        j += take;
    }
}

/// Activation rows per group-kernel call: as many as keep the accumulators in registers.
fn group_tile(ty: GgmlType, isa: Isa) -> usize {
    #[cfg(target_arch = "aarch64")]
    if isa == Isa::Neon {
        return crate::neon_packed::TILE;
    }
    #[cfg(target_arch = "x86_64")]
    if ty == GgmlType::Q8_0 && isa == Isa::Avx2 && isa.is_available() {
        // Q8_0 keeps 8 accumulators per activation row and re-derives |w|; with 16 vector
        // registers a second row spills (measured single-threaded: 0.98 ns per block and row at 1
        // row, 1.21 at 2), so each row streams the weight once. The EVEX kernels have 32 registers.
        let wide = crate::avx2_packed::dot_level() == crate::avx2_packed::EVEX;
        return if wide { TILE } else { 1 };
    }
    let _ = (ty, isa);
    TILE
}

/// Groups per parallel task: enough tasks to balance the pool, each at least ~1 K block products
/// (as the row-at-a-time split: a decode's 576-row products still use every thread).
fn groups_per_task(groups: usize, m: usize, nb: usize) -> usize {
    let threads = rayon::current_num_threads().max(1);
    let by_balance = groups.div_ceil(threads * 4);
    let min_groups = 1024usize.div_ceil(ROWS * m.max(1) * nb.max(1)).max(1);
    by_balance.max(min_groups).min(groups.max(1))
}

fn f16_at(c: &[u8], at: usize) -> f32 {
    half::f16::from_le_bytes([c[at], c[at + 1]]).to_f32()
}

/// Row `r`'s 32 values of one packed chunk in element order, as the products use them: signed bytes
/// (Q8_0 layout), nibbles (Q4_1), nibbles − 8 (Q4_0).
fn block_values(layout: GgmlType, c: &[u8], r: usize) -> [i32; QK] {
    let qoff = chunk_bytes(layout).1;
    let mut q = [0i32; QK];
    if layout == GgmlType::Q8_0 {
        for t in 0..8 {
            for i in 0..4 {
                q[4 * t + i] = c[qoff + 32 * t + 4 * r + i] as i8 as i32;
            }
        }
    } else {
        let off = if layout == GgmlType::Q4_0 { 8 } else { 0 };
        for t in 0..4 {
            for i in 0..4 {
                let byte = c[qoff + 32 * t + 4 * r + i];
                q[4 * t + i] = (byte & 15) as i32 - off;
                q[16 + 4 * t + i] = (byte >> 4) as i32 - off;
            }
        }
    }
    q
}

/// The portable twin of the group kernels: row `r`'s blocks read back from the packed chunk into
/// element order and multiplied exactly as [`crate::scalar`] multiplies a GGUF row.
fn scalar_group(ty: GgmlType, gw: &[u8], x: &[&[BlockQ8]], out: &mut [[f32; ROWS]]) {
    let cb = chunk_bytes(ty).0;
    for (xr, o) in x.iter().zip(out.iter_mut()) {
        for (r, v) in o.iter_mut().enumerate() {
            let mut acc = [0.0f32; 8];
            let mut summs = 0.0f32;
            for (c, xb) in gw.chunks_exact(cb).zip(xr.iter()) {
                let q = block_values(ty, c, r);
                if ty == GgmlType::Q4_1 {
                    summs += f16_at(c, 16 + 2 * r) * xb.s;
                }
                let scale = f16_at(c, 2 * r) * xb.d;
                for (g, a) in acc.iter_mut().enumerate() {
                    let lane: i32 = (4 * g..4 * g + 4).map(|i| q[i] * xb.qs[i] as i32).sum();
                    *a = scale.mul_add(lane as f32, *a);
                }
            }
            *v = crate::scalar::hsum8(acc) + summs;
        }
    }
}

fn scalar_q4_0(gw: &[u8], x: &[&[BlockQ8]], out: &mut [[f32; ROWS]]) {
    scalar_group(GgmlType::Q4_0, gw, x, out)
}

fn scalar_q4_1(gw: &[u8], x: &[&[BlockQ8]], out: &mut [[f32; ROWS]]) {
    scalar_group(GgmlType::Q4_1, gw, x, out)
}

fn scalar_q8_0(gw: &[u8], x: &[&[BlockQ8]], out: &mut [[f32; ROWS]]) {
    scalar_group(GgmlType::Q8_0, gw, x, out)
}
