//! The CubeCL kernels of quantized products ([`super::pack`]'s layout; activations rounded as
//! llama.cpp's CPU path rounds them, in the kernel: [`crate::cube::act_value`]).
//!
//! - [`matvec_kernel`], a few activation rows (decode): a cube is 32 lanes × 8 weight rows; each
//!   lane takes whole activation blocks of its weight row (32 values, 256 for the K-quants' Q8_K
//!   blocks), rounds the block's activations itself and reads the block's quants as 32-bit words;
//!   the 32 lanes' sums are reduced with one plane (warp) sum where planes are 32 wide, through
//!   shared memory elsewhere. Up to three weights of the same layout and input (a layer's Q/K/V)
//!   share one launch: a cube picks its weight by its index.
//! - [`glu_kernel`]: the gate and up products of one weight row side by side, the GLU gate
//!   (`silu(g)·u` or GEGLU's f16 `gelu(g)·u`) applied before the single write.
//! - [`act_kernel`] and [`tiled_kernel`], many rows (prefill): activations rounded once, then 64×64
//!   output tiles over 32-value slices of `k`, the weight slice dequantized into shared memory.
//! - [`rows_kernel`]: rows of the weight, expanded (embedding lookups).
//!
//! `bits == 32` is an f32 weight (F32/F16/BF16 checkpoints, and weights no layout reproduces):
//! the words are the values' bits, and scales/offsets are not read.

#![allow(unused_assignments)] // kernels assign a default before branches resolved at expansion

use cubecl::prelude::*;

use crate::cube::{act_code, act_inverse, act_scale, act_value, round_f16};

/// Weight rows per matvec cube (its `CUBE_DIM_Y`); its `CUBE_DIM_X` is 32 lanes.
pub(super) const MV_ROWS: u32 = 8;
/// Output tile of the tiled kernel, in rows and columns.
pub(super) const TILE: u32 = 64;

/// Activation values per unit of work of a lane: whole blocks of the rounding format.
fn act_block(act: u32) -> u32 {
    crate::cube::act_block(act)
}

/// Adds `x`'s rows `0..m` (`[m, k]`) times weight row `row` to `acc[0..m]`, over the activation
/// blocks `lane, lane + 32, …` of the row.
#[cube]
#[allow(clippy::too_many_arguments)]
fn accumulate_row(
    x: &Array<f32>,
    qs: &Array<u32>,
    scales: &Array<f32>,
    offsets: &Array<f32>,
    acc: &mut Array<f32>,
    row: u32,
    k: u32,
    lane: u32,
    #[comptime] m: u32,
    #[comptime] bits: u32,
    #[comptime] group: u32,
    #[comptime] zero: u32,
    #[comptime] act: u32,
) {
    let ab = comptime!(act_block(act));
    let gpb = comptime!(ab / group);
    let wpg = comptime!(group * bits / 32);
    let vpw = comptime!(32 / bits);
    let mask = comptime!(if bits == 32 {
        u32::MAX
    } else {
        (1u32 << bits) - 1
    });
    let zf = comptime!(zero as f32);
    let nb = k / ab;
    let gpr = k / group;
    let mut ids = Array::<f32>::new(comptime!(m as usize));
    let mut ds = Array::<f32>::new(comptime!(m as usize));
    // Q8_1: each activation row's block sum, multiplied by the group's offset once (`group` is
    // the block there: Q4_1/Q5_1 groups are 32 values).
    let q8_1 = comptime!(act == act_code::Q8_1);
    let mut xsum = Array::<f32>::new(comptime!(m as usize));
    let mut amaxs = Array::<f32>::new(comptime!(m as usize));
    let mut b = lane;
    while b < nb {
        // The block's scale for every activation row.
        #[unroll]
        for r in 0..m {
            let mut amax = 0.0f32;
            if comptime!(act_code::is_block(act)) {
                let base = r * k + b * ab;
                for i in 0..ab {
                    amax = f32::max(amax, f32::abs(x[(base + i) as usize]));
                }
            }
            ids[r as usize] = act_inverse(amax);
            ds[r as usize] = act_scale(amax, act);
            amaxs[r as usize] = amax;
        }
        for gi in 0..gpb {
            let g = b * gpb + gi;
            let p = row * gpr + g;
            let mut s = 1.0f32;
            let mut o = 0.0f32;
            if comptime!(bits != 32) {
                s = scales[p as usize];
                o = offsets[p as usize];
            }
            // The offset leaves the product for the block sum (Q8_1).
            let mut o_each = o;
            if comptime!(q8_1) {
                o_each = 0.0;
                #[unroll]
                for r in 0..m {
                    xsum[r as usize] = 0.0;
                }
            }
            #[unroll]
            for wi in 0..wpg {
                let word = qs[(p * wpg + wi) as usize];
                #[unroll]
                for l in 0..vpw {
                    let mut w = 0.0f32;
                    if comptime!(bits == 32) {
                        w = f32::reinterpret(word);
                    } else {
                        let q = (word >> (l * bits)) & mask;
                        w = s * (f32::cast_from(q) - zf) + o_each;
                    }
                    let c = g * group + wi * vpw + l;
                    #[unroll]
                    for r in 0..m {
                        let xr = x[(r * k + c) as usize];
                        let xv = act_value(xr, ids[r as usize], ds[r as usize], act);
                        acc[r as usize] += xv * w;
                        if comptime!(q8_1) {
                            xsum[r as usize] += f32::round(xr * ids[r as usize]);
                        }
                    }
                }
            }
            if comptime!(q8_1) {
                // ggml's block sum: f16(d·Σq) with the unrounded scale d = amax/127.
                #[unroll]
                for r in 0..m {
                    acc[r as usize] += o * q8_1_sum(amaxs[r as usize], xsum[r as usize]);
                }
            }
        }
        b += 32u32;
    }
}

/// A Q8_1 block's stored sum: `f16(d · Σq)` with `d = amax / 127` unrounded (ggml's
/// `quantize_row_q8_1`).
#[cube]
fn q8_1_sum(amax: f32, qsum: f32) -> f32 {
    round_f16((amax / 127.0) * qsum)
}

/// The sum of `v` over the 32 lanes of this unit's cube row (`UNIT_POS_Y`): one plane sum where a
/// plane is exactly those 32 lanes, a shared-memory tree otherwise. Every unit of the cube must
/// call it (it may hold barriers).
#[cube]
fn lane_sum(v: f32, sh: &mut SharedMemory<f32>, #[comptime] plane: bool) -> f32 {
    let mut total = 0.0f32;
    if comptime!(plane) {
        total = plane_sum(v);
    } else {
        let lane = UNIT_POS_X;
        let base = UNIT_POS_Y * 32;
        sh[(base + lane) as usize] = v;
        sync_cube();
        if lane < 16 {
            sh[(base + lane) as usize] += sh[(base + lane + 16) as usize];
        }
        sync_cube();
        if lane < 8 {
            sh[(base + lane) as usize] += sh[(base + lane + 8) as usize];
        }
        sync_cube();
        if lane < 4 {
            sh[(base + lane) as usize] += sh[(base + lane + 4) as usize];
        }
        sync_cube();
        if lane < 2 {
            sh[(base + lane) as usize] += sh[(base + lane + 2) as usize];
        }
        sync_cube();
        if lane < 1 {
            sh[(base + lane) as usize] += sh[(base + lane + 1) as usize];
        }
        sync_cube();
        total = sh[base as usize];
        sync_cube();
    }
    total
}

/// One weight's share of a matvec launch: weight rows `cube·8 ..` of `n`, written to
/// `out[r · stride + col0 + row]`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn matvec_weight(
    x: &Array<f32>,
    qs: &Array<u32>,
    scales: &Array<f32>,
    offsets: &Array<f32>,
    out: &mut Array<f32>,
    sh: &mut SharedMemory<f32>,
    cube: u32,
    k: u32,
    n: u32,
    stride: u32,
    col0: u32,
    #[comptime] m: u32,
    #[comptime] bits: u32,
    #[comptime] group: u32,
    #[comptime] zero: u32,
    #[comptime] act: u32,
    #[comptime] plane: bool,
) {
    let lane = UNIT_POS_X;
    let row = cube * CUBE_DIM_Y + UNIT_POS_Y;
    let mut acc = Array::<f32>::new(comptime!(m as usize));
    #[unroll]
    for r in 0..m {
        acc[r as usize] = 0.0;
    }
    if row < n {
        accumulate_row(
            x, qs, scales, offsets, &mut acc, row, k, lane, m, bits, group, zero, act,
        );
    }
    #[unroll]
    for r in 0..m {
        let total = lane_sum(acc[r as usize], sh, plane);
        if lane == 0 && row < n {
            out[(r * stride + col0 + row) as usize] = total;
        }
    }
}

/// `out_i[r, j] = Σ_c x[r, c] · W_i[j, c]` for `m` activation rows and up to three weights of the
/// same layout (`n_i` rows; a weight of 0 rows takes no cube). Weight 0 may be a chunk of a larger
/// weight: its rows go to columns `col0 ..` of an output `stride0` wide.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub(super) fn matvec_kernel(
    x: &Array<f32>,
    qs0: &Array<u32>,
    sc0: &Array<f32>,
    of0: &Array<f32>,
    out0: &mut Array<f32>,
    qs1: &Array<u32>,
    sc1: &Array<f32>,
    of1: &Array<f32>,
    out1: &mut Array<f32>,
    qs2: &Array<u32>,
    sc2: &Array<f32>,
    of2: &Array<f32>,
    out2: &mut Array<f32>,
    k: u32,
    n0: u32,
    n1: u32,
    n2: u32,
    stride0: u32,
    col0: u32,
    #[comptime] m: u32,
    #[comptime] bits: u32,
    #[comptime] group: u32,
    #[comptime] zero: u32,
    #[comptime] act: u32,
    #[comptime] plane: bool,
) {
    let mut sh = SharedMemory::<f32>::new(comptime!((32 * MV_ROWS) as usize));
    let rows = CUBE_DIM_Y;
    let c0 = n0.div_ceil(rows);
    let c1 = n1.div_ceil(rows);
    let cube = CUBE_POS as u32;
    if cube < c0 {
        matvec_weight(
            x, qs0, sc0, of0, out0, &mut sh, cube, k, n0, stride0, col0, m, bits, group, zero, act,
            plane,
        );
    } else if cube < c0 + c1 {
        matvec_weight(
            x,
            qs1,
            sc1,
            of1,
            out1,
            &mut sh,
            cube - c0,
            k,
            n1,
            n1,
            0u32,
            m,
            bits,
            group,
            zero,
            act,
            plane,
        );
    } else {
        matvec_weight(
            x,
            qs2,
            sc2,
            of2,
            out2,
            &mut sh,
            cube - c0 - c1,
            k,
            n2,
            n2,
            0u32,
            m,
            bits,
            group,
            zero,
            act,
            plane,
        );
    }
}

/// The GLU gate of one value pair, as ggml's CPU ops compute it: `silu(g)·u` with the overflow-safe
/// logistic, or (`gelu`) GEGLU's `f16(gelu_tanh(f16(g)))·u` with `g ≤ −10 → 0`, `g ≥ 10 → g`.
#[cube]
pub(crate) fn glu_value(g: f32, u: f32, #[comptime] gelu: bool) -> f32 {
    let mut y = 0.0f32;
    if comptime!(gelu) {
        if g >= 10.0 {
            y = g * u;
        } else if g > -10.0 {
            let xh = round_f16(g);
            let inner = 0.797_884_6f32 * xh * (1.0 + 0.044_715f32 * xh * xh);
            y = round_f16(0.5 * xh * (1.0 + f32::tanh(inner))) * u;
        }
    } else {
        let mut sig = 0.0f32;
        if g >= 0.0 {
            sig = 1.0 / (1.0 + f32::exp(-g));
        } else {
            let e = f32::exp(g);
            sig = e / (1.0 + e);
        }
        y = g * sig * u;
    }
    y
}

/// `out[r, j] = glu(x[r] · G[j], x[r] · U[j])` for `m` activation rows: the gate and up weights
/// (same layout, `n` rows each) of one row side by side, the gate applied before the one write.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub(super) fn glu_kernel(
    x: &Array<f32>,
    qs_g: &Array<u32>,
    sc_g: &Array<f32>,
    of_g: &Array<f32>,
    qs_u: &Array<u32>,
    sc_u: &Array<f32>,
    of_u: &Array<f32>,
    out: &mut Array<f32>,
    k: u32,
    n: u32,
    #[comptime] m: u32,
    #[comptime] bits: u32,
    #[comptime] group: u32,
    #[comptime] zero: u32,
    #[comptime] act: u32,
    #[comptime] plane: bool,
    #[comptime] gelu: bool,
) {
    let mut sh = SharedMemory::<f32>::new(comptime!((32 * MV_ROWS) as usize));
    let lane = UNIT_POS_X;
    let row = (CUBE_POS as u32) * CUBE_DIM_Y + UNIT_POS_Y;
    let mut acc_g = Array::<f32>::new(comptime!(m as usize));
    let mut acc_u = Array::<f32>::new(comptime!(m as usize));
    #[unroll]
    for r in 0..m {
        acc_g[r as usize] = 0.0;
        acc_u[r as usize] = 0.0;
    }
    if row < n {
        accumulate_row(
            x, qs_g, sc_g, of_g, &mut acc_g, row, k, lane, m, bits, group, zero, act,
        );
        accumulate_row(
            x, qs_u, sc_u, of_u, &mut acc_u, row, k, lane, m, bits, group, zero, act,
        );
    }
    #[unroll]
    for r in 0..m {
        let g = lane_sum(acc_g[r as usize], &mut sh, plane);
        let u = lane_sum(acc_u[r as usize], &mut sh, plane);
        if lane == 0 && row < n {
            out[(r * n + row) as usize] = glu_value(g, u, gelu);
        }
    }
}

/// `out = x` rounded as `act` rounds a matmul input (`[m, k]`, one unit per activation block),
/// and for Q8_1 each block's stored sum in `sums` (`[m · k / 32]`).
#[cube(launch_unchecked)]
pub(super) fn act_kernel(
    x: &Array<f32>,
    out: &mut Array<f32>,
    sums: &mut Array<f32>,
    k: u32,
    blocks: u32,
    #[comptime] act: u32,
) {
    let pos = ABSOLUTE_POS as u32;
    if pos >= blocks {
        terminate!();
    }
    let ab = comptime!(act_block(act));
    let base = pos * ab;
    let _ = k;
    let mut amax = 0.0f32;
    if comptime!(act_code::is_block(act)) {
        for i in 0..ab {
            amax = f32::max(amax, f32::abs(x[(base + i) as usize]));
        }
    }
    let id = act_inverse(amax);
    let d = act_scale(amax, act);
    let mut qsum = 0.0f32;
    for i in 0..ab {
        let at = (base + i) as usize;
        out[at] = act_value(x[at], id, d, act);
        qsum += f32::round(x[at] * id);
    }
    if comptime!(act == act_code::Q8_1) {
        sums[pos as usize] = q8_1_sum(amax, qsum);
    }
}

/// `out[r, col0 + j] = Σ_c xq[r, c] · W[j, c]` for many rows: a cube (16×16 units) computes a
/// 64×64 tile (4×4 per unit) over 32-value slices of `k`, each slice of 64 activation rows and 64
/// weight rows (dequantized) staged in shared memory. `xq` is already rounded ([`act_kernel`]).
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub(super) fn tiled_kernel(
    xq: &Array<f32>,
    xsum: &Array<f32>,
    qs: &Array<u32>,
    scales: &Array<f32>,
    offsets: &Array<f32>,
    out: &mut Array<f32>,
    m: u32,
    k: u32,
    n: u32,
    stride: u32,
    col0: u32,
    #[comptime] bits: u32,
    #[comptime] group: u32,
    #[comptime] zero: u32,
    #[comptime] q8_1: bool,
) {
    // [64][33]: the padding column spreads a column's reads over the banks.
    let mut xs = SharedMemory::<f32>::new(comptime!((TILE * 33) as usize));
    let mut ws = SharedMemory::<f32>::new(comptime!((TILE * 33) as usize));
    // Q8_1: the slice's block sum per activation row and offset per weight row.
    let mut xsums = SharedMemory::<f32>::new(comptime!(TILE as usize));
    let mut offs = SharedMemory::<f32>::new(comptime!(TILE as usize));
    let vpw = comptime!(32 / bits);
    let wpg = comptime!(group * bits / 32);
    let mask = comptime!(if bits == 32 {
        u32::MAX
    } else {
        (1u32 << bits) - 1
    });
    let zf = comptime!(zero as f32);
    let gpr = k / group;
    let tile_n = CUBE_POS_X * TILE;
    let tile_m = CUBE_POS_Y * TILE;
    let tx = UNIT_POS_X;
    let ty = UNIT_POS_Y;
    let unit = ty * 16 + tx;
    let mut acc = Array::<f32>::new(16usize);
    #[unroll]
    for i in 0..16u32 {
        acc[i as usize] = 0.0;
    }
    let mut k0 = 0u32.runtime();
    while k0 < k {
        // Activations: 64 rows × 32 values, 8 per unit.
        #[unroll]
        for i in 0..8u32 {
            let idx = unit + i * 256;
            let rr = idx / 32;
            let cc = idx % 32;
            let r = tile_m + rr;
            let mut v = 0.0f32;
            if r < m {
                v = xq[(r * k + k0 + cc) as usize];
            }
            xs[(rr * 33 + cc) as usize] = v;
        }
        // Weights: 64 rows × 32 values, 8 per unit (a unit's 8 values are consecutive).
        #[unroll]
        for i in 0..8u32 {
            let idx = unit * 8 + i;
            let rr = idx / 32;
            let cc = idx % 32;
            let j = tile_n + rr;
            let mut w = 0.0f32;
            if j < n {
                let c = k0 + cc;
                if comptime!(bits == 32) {
                    w = f32::reinterpret(qs[(j * k + c) as usize]);
                } else {
                    let g = c / group;
                    let p = j * gpr + g;
                    let within = c % group;
                    let word = qs[(p * wpg + within / vpw) as usize];
                    let q = (word >> ((within % vpw) * bits)) & mask;
                    let mut o = offsets[p as usize];
                    if comptime!(q8_1) {
                        o = 0.0;
                    }
                    w = scales[p as usize] * (f32::cast_from(q) - zf) + o;
                }
            }
            ws[(rr * 33 + cc) as usize] = w;
        }
        if comptime!(q8_1) {
            sync_cube();
            if unit < TILE {
                let r = tile_m + unit;
                let mut s = 0.0f32;
                if r < m {
                    s = xsum[(r * (k / 32) + k0 / 32) as usize];
                }
                xsums[unit as usize] = s;
            } else if unit < 2 * TILE {
                let j = tile_n + unit - TILE;
                let mut o = 0.0f32;
                if j < n {
                    o = offsets[(j * gpr + k0 / group) as usize];
                }
                offs[(unit - TILE) as usize] = o;
            }
        }
        sync_cube();
        for kk in 0..32u32 {
            #[unroll]
            for i in 0..4u32 {
                let a = xs[((ty * 4 + i) * 33 + kk) as usize];
                #[unroll]
                for j in 0..4u32 {
                    acc[(i * 4 + j) as usize] += a * ws[((tx * 4 + j) * 33 + kk) as usize];
                }
            }
        }
        if comptime!(q8_1) {
            #[unroll]
            for i in 0..4u32 {
                #[unroll]
                for j in 0..4u32 {
                    acc[(i * 4 + j) as usize] +=
                        xsums[(ty * 4 + i) as usize] * offs[(tx * 4 + j) as usize];
                }
            }
        }
        sync_cube();
        k0 += 32u32;
    }
    #[unroll]
    for i in 0..4u32 {
        let r = tile_m + ty * 4 + i;
        #[unroll]
        for j in 0..4u32 {
            let c = tile_n + tx * 4 + j;
            if r < m && c < n {
                out[(r * stride + col0 + c) as usize] = acc[(i * 4 + j) as usize];
            }
        }
    }
}

/// Rows `ids[i]` of the weight chunk holding rows `row0 .. row0 + rows`, expanded:
/// `out[i, c] = scale · (q − zero) + offset` (ids outside the chunk are left to other launches).
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub(super) fn rows_kernel(
    ids: &Array<i32>,
    qs: &Array<u32>,
    scales: &Array<f32>,
    offsets: &Array<f32>,
    out: &mut Array<f32>,
    k: u32,
    total: u32,
    row0: u32,
    rows: u32,
    #[comptime] bits: u32,
    #[comptime] group: u32,
    #[comptime] zero: u32,
) {
    let pos = ABSOLUTE_POS as u32;
    if pos >= total {
        terminate!();
    }
    let i = pos / k;
    let c = pos % k;
    let id = u32::cast_from(ids[i as usize]);
    if id < row0 || id >= row0 + rows {
        terminate!();
    }
    let row = id - row0;
    let e = row * k + c;
    if comptime!(bits == 32) {
        out[pos as usize] = f32::reinterpret(qs[e as usize]);
    } else {
        let vpw = comptime!(32 / bits);
        let mask = comptime!((1u32 << bits) - 1);
        let p = e / group;
        let word = qs[(e / vpw) as usize];
        let q = (word >> ((e % vpw) * bits)) & mask;
        out[pos as usize] =
            scales[p as usize] * (f32::cast_from(q) - f32::cast_from(zero)) + offsets[p as usize];
    }
}
