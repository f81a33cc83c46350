//! # cinder-kernels
//!
//! Matrix products with weights kept in their GGUF block formats. Activations are rounded into the
//! 8-bit block format the weight type pairs with ([`act`]) and multiplied with integer dot products, as
//! llama.cpp's CPU backend does; the float formats (F32/F16/BF16) use FMA dot products.
//!
//! [`Isa::detect`] picks the fastest instruction set the CPU has at run time (AVX2+FMA+F16C on x86-64,
//! with the VNNI dot products where present; NEON on aarch64, with `sdot` where present; otherwise the
//! portable [`scalar`] path). All compute the same arithmetic in the same order, so their results are
//! identical bit for bit (see `tests/`; the aarch64 paths run there under qemu-user in CI), and the
//! choice never changes what a model says.
//! Work is split over output rows with rayon (the global pool Cinder sizes with `--threads`).
#![warn(missing_docs)]

pub mod act;
pub mod attn;
pub mod attn_q;
pub mod attn_rows;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx2_packed;
pub mod elementwise;
#[cfg(target_arch = "aarch64")]
mod neon;
#[cfg(target_arch = "aarch64")]
mod neon_packed;
pub mod packed;
mod packed_k;
pub mod scalar;
pub mod softmax;

pub use packed::{Packed, matmul_packed_many_with, matmul_packed_with};

use std::sync::OnceLock;

use cinder_gguf::GgmlType;
use rayon::prelude::*;

use act::{ActKind, Activations, BlockQ8, BlockQ8K};

/// Errors of the kernels: a weight type without a kernel, or buffers that disagree with the shape.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// No kernel for this storage type.
    #[error("no CPU kernel for weight type {0}")]
    Unsupported(&'static str),
    /// A buffer's length does not match the shape.
    #[error("{what}: expected {expected} {unit}, got {got}")]
    Shape {
        /// which buffer
        what: &'static str,
        /// length implied by the shape
        expected: usize,
        /// actual length
        got: usize,
        /// bytes or values
        unit: &'static str,
    },
}

/// The instruction set a product runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// portable Rust (the reference every SIMD path is tested against)
    Scalar,
    /// x86-64 AVX2 + FMA + F16C
    Avx2,
    /// aarch64 Advanced SIMD (with the dot-product extension where the CPU has it)
    Neon,
}

impl Isa {
    /// Every instruction set, portable first (tests compare each available one with [`Isa::Scalar`]).
    pub const ALL: [Isa; 3] = [Isa::Scalar, Isa::Avx2, Isa::Neon];

    /// The best instruction set this CPU supports. `CINDER_KERNELS=scalar` forces the portable path
    /// (for comparisons and debugging).
    pub fn detect() -> Isa {
        static BEST: OnceLock<Isa> = OnceLock::new();
        *BEST.get_or_init(|| {
            if std::env::var("CINDER_KERNELS").is_ok_and(|v| v == "scalar") {
                return Isa::Scalar;
            }
            [Isa::Avx2, Isa::Neon]
                .into_iter()
                .find(|i| i.is_available())
                .unwrap_or(Isa::Scalar)
        })
    }

    /// Whether this CPU can run `self`.
    pub fn is_available(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                is_x86_feature_detected!("avx2")
                    && is_x86_feature_detected!("fma")
                    && is_x86_feature_detected!("f16c")
            }
            #[cfg(not(target_arch = "x86_64"))]
            Isa::Avx2 => false,
            // Advanced SIMD is part of the aarch64 baseline.
            Isa::Neon => cfg!(target_arch = "aarch64"),
        }
    }

    /// Short name for logs and benchmark reports.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Neon => "neon",
        }
    }
}

/// The instruction set the products run with, for reports: the [`Isa`], plus the packed kernels'
/// dot-product form (`avx2+avxvnni`, `avx2+avx512vnni`, `neon+dotprod`).
pub fn describe() -> String {
    let isa = Isa::detect();
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 {
        return match avx2_packed::dot_level() {
            avx2_packed::EVEX => "avx2+avx512vnni",
            avx2_packed::VEX => "avx2+avxvnni",
            _ => "avx2",
        }
        .to_string();
    }
    #[cfg(target_arch = "aarch64")]
    if isa == Isa::Neon && neon::has_dotprod() {
        return "neon+dotprod".to_string();
    }
    isa.name().to_string()
}

/// The activation format paired with a weight type, or `None` without a kernel.
pub fn act_kind(ty: GgmlType) -> Option<ActKind> {
    use GgmlType::*;
    Some(match ty {
        F32 => ActKind::F32,
        F16 => ActKind::F16,
        BF16 => ActKind::BF16,
        Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 => ActKind::Q8,
        Q4_K | Q5_K | Q6_K => ActKind::Q8K,
        _ => return None,
    })
}

/// Whether [`matmul`] has a kernel for `ty`.
pub fn supports(ty: GgmlType) -> bool {
    act_kind(ty).is_some()
}

type DotQ8 = fn(&[u8], &[BlockQ8]) -> f32;
type DotQ8K = fn(&[u8], &[BlockQ8K]) -> f32;
type DotF = fn(&[u8], &[f32]) -> f32;

#[cfg(target_arch = "x86_64")]
const TILE: usize = avx2::TILE;
#[cfg(not(target_arch = "x86_64"))]
const TILE: usize = 4;
/// One weight row against `TILE` activation rows of block type `X`.
type TileFn<X> = fn(&[u8], &[&[X]; TILE]) -> [f32; TILE];
type TileQ8 = TileFn<BlockQ8>;
type TileQ8K = TileFn<BlockQ8K>;

/// One row-dot function, typed by the activation format it reads, with the tile kernel (one weight
/// row against `TILE` activation rows) where the instruction set has one.
#[derive(Clone, Copy)]
enum Dot {
    Q8(DotQ8, Option<TileQ8>),
    Q8K(DotQ8K, Option<TileQ8K>),
    F(DotF, Option<TileFn<f32>>),
}

// SAFETY (every wrapper below): `Isa::Avx2` is only chosen after `Isa::is_available` confirmed
// AVX2, FMA and F16C on this CPU; the slices are whole blocks, checked by `matmul`.
#[cfg(target_arch = "x86_64")]
mod avx2_safe {
    use super::*;
    macro_rules! wrap {
        ($($name:ident: $act:ty),* $(,)?) => {$(
            pub fn $name(w: &[u8], x: &[$act]) -> f32 {
                unsafe { crate::avx2::$name(w, x) }
            }
        )*};
    }
    wrap!(dot_q5_1: BlockQ8, dot_q4_k: BlockQ8K, dot_q5_k: BlockQ8K, dot_q6_k: BlockQ8K,
          dot_f32: f32, dot_f16: f32, dot_bf16: f32);
    macro_rules! wrap_tile {
        ($($name:ident: $act:ty),* $(,)?) => {$(
            pub fn $name(w: &[u8], x: &[&[$act]; TILE]) -> [f32; TILE] {
                unsafe { crate::avx2::$name(w, x) }
            }
        )*};
    }
    wrap_tile!(tile_q5_1: BlockQ8, tile_q4_k: BlockQ8K, tile_q6_k: BlockQ8K,
               tile_f32: f32, tile_f16: f32, tile_bf16: f32);
    // SAFETY (these): handed out by `k_tiles` only at the `dot_level` that confirmed the VNNI
    // extensions they enable.
    wrap_tile!(tile_q4_k_vnni: BlockQ8K, tile_q6_k_vnni: BlockQ8K,
               tile_q4_k_evex: BlockQ8K, tile_q6_k_evex: BlockQ8K);

    /// The Q4_K and Q6_K tile kernels of this CPU's best 16-bit dot form.
    pub fn k_tiles() -> (TileQ8K, TileQ8K) {
        use crate::avx2_packed::{EVEX, VEX, dot_level};
        match dot_level() {
            EVEX => (tile_q4_k_evex, tile_q6_k_evex),
            VEX => (tile_q4_k_vnni, tile_q6_k_vnni),
            _ => (tile_q4_k, tile_q6_k),
        }
    }
}

fn dot_for(ty: GgmlType, isa: Isa) -> Option<Dot> {
    use GgmlType::*;
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 && isa.is_available() {
        use avx2_safe as v;
        return Some(match ty {
            // Packed by `matmul_with` before a row kernel is looked up (`avx2_packed`).
            Q4_0 | Q4_1 | Q5_0 | Q8_0 => return dot_for(ty, Isa::Scalar),
            Q5_1 => Dot::Q8(v::dot_q5_1, Some(v::tile_q5_1)),
            Q4_K => Dot::Q8K(v::dot_q4_k, Some(v::k_tiles().0)),
            Q5_K => Dot::Q8K(v::dot_q5_k, None),
            Q6_K => Dot::Q8K(v::dot_q6_k, Some(v::k_tiles().1)),
            F32 => Dot::F(v::dot_f32, Some(v::tile_f32)),
            F16 => Dot::F(v::dot_f16, Some(v::tile_f16)),
            BF16 => Dot::F(v::dot_bf16, Some(v::tile_bf16)),
            _ => return None,
        });
    }
    #[cfg(target_arch = "aarch64")]
    if isa == Isa::Neon {
        use neon as v;
        return Some(match ty {
            // Packed by `matmul_with` before a row kernel is looked up (`neon_packed`).
            Q4_0 | Q4_1 | Q5_0 | Q8_0 => return dot_for(ty, Isa::Scalar),
            Q5_1 => Dot::Q8(v::dot_q5_1, None),
            Q4_K => Dot::Q8K(v::dot_q4_k, None),
            Q5_K => Dot::Q8K(v::dot_q5_k, None),
            Q6_K => Dot::Q8K(v::dot_q6_k, None),
            F32 => Dot::F(v::dot_f32, None),
            F16 => Dot::F(v::dot_f16, None),
            BF16 => Dot::F(v::dot_bf16, None),
            _ => return None,
        });
    }
    let _ = isa;
    use scalar as s;
    Some(match ty {
        Q4_0 => Dot::Q8(s::dot_q4_0, None),
        Q4_1 => Dot::Q8(s::dot_q4_1, None),
        Q5_0 => Dot::Q8(s::dot_q5_0, None),
        Q5_1 => Dot::Q8(s::dot_q5_1, None),
        Q8_0 => Dot::Q8(s::dot_q8_0, None),
        Q4_K => Dot::Q8K(s::dot_q4_k, None),
        Q5_K => Dot::Q8K(s::dot_q5_k, None),
        Q6_K => Dot::Q8K(s::dot_q6_k, None),
        F32 => Dot::F(s::dot_f32, None),
        F16 => Dot::F(s::dot_f16, None),
        BF16 => Dot::F(s::dot_bf16, None),
        _ => return None,
    })
}

/// Bytes of one weight row of `k` values, or `None` if `k` is not whole blocks.
pub fn row_bytes(ty: GgmlType, k: usize) -> Option<usize> {
    ty.bytes_for(k as u64).and_then(|b| usize::try_from(b).ok())
}

/// A weight matrix of `n` rows (outputs) of `k` values (inputs), in `ty`'s block format, row-major as
/// GGUF stores a `[k, n]` tensor.
#[derive(Debug, Clone, Copy)]
pub struct Weights<'a> {
    /// storage type
    pub ty: GgmlType,
    /// raw blocks, `n · row_bytes(ty, k)` bytes
    pub data: &'a [u8],
    /// output rows
    pub n: usize,
    /// inputs per row
    pub k: usize,
}

impl Weights<'_> {
    /// Checks the type has a kernel and the byte count matches the shape.
    pub fn validate(&self) -> Result<usize, KernelError> {
        if !supports(self.ty) {
            return Err(KernelError::Unsupported(self.ty.name()));
        }
        let rb = row_bytes(self.ty, self.k).ok_or(KernelError::Shape {
            what: "row width (not whole blocks)",
            expected: self.ty.block_size() as usize,
            got: self.k,
            unit: "values per block",
        })?;
        if self.data.len() != rb * self.n {
            return Err(KernelError::Shape {
                what: "weight bytes",
                expected: rb * self.n,
                got: self.data.len(),
                unit: "bytes",
            });
        }
        Ok(rb)
    }
}

/// Output rows per parallel task: enough tasks for load balance, few enough to keep overhead small.
fn rows_per_task(n: usize, m: usize) -> usize {
    let threads = rayon::current_num_threads().max(1);
    let target_tasks = threads * 8;
    let by_balance = n.div_ceil(target_tasks);
    // Small products stay coarse: a task should cover at least ~64 K row-dots.
    let min_rows = (64usize).div_ceil(m.max(1)).max(4);
    by_balance.max(min_rows).min(n.max(1))
}

/// Checks `x` is `[m, k]` and `y` is `[m, n]`.
pub(crate) fn check_io(
    x: &[f32],
    y: &[f32],
    m: usize,
    n: usize,
    k: usize,
) -> Result<(), KernelError> {
    if x.len() != m * k {
        return Err(KernelError::Shape {
            what: "activations",
            expected: m * k,
            got: x.len(),
            unit: "values",
        });
    }
    if y.len() != m * n {
        return Err(KernelError::Shape {
            what: "output",
            expected: m * n,
            got: y.len(),
            unit: "values",
        });
    }
    Ok(())
}

/// `y[m, n] = x[m, k] · Wᵀ` with `isa` (use [`Isa::detect`] unless comparing paths).
pub fn matmul_with(
    isa: Isa,
    w: Weights<'_>,
    x: &[f32],
    m: usize,
    y: &mut [f32],
) -> Result<(), KernelError> {
    let rb = w.validate()?;
    let (n, k) = (w.n, w.k);
    check_io(x, y, m, n, k)?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    if let Some(p) = Packed::new(w)? {
        // Callers that multiply by the same weight again keep the `Packed` (see `matmul_packed`);
        // packing here keeps every product of these types on the one arithmetic.
        return matmul_packed_with(isa, &p, x, m, y);
    }
    let kind = act_kind(w.ty).ok_or(KernelError::Unsupported(w.ty.name()))?;
    let dot = dot_for(w.ty, isa).ok_or(KernelError::Unsupported(w.ty.name()))?;
    let acts = act::quantize(kind, x, k);
    // Weight row `r` against activation rows `i0..i0 + out.len()`, tiled where a tile kernel exists.
    let row_dots = |r: usize, i0: usize, out: &mut [f32]| {
        let wr = &w.data[r * rb..(r + 1) * rb];
        match (dot, &acts) {
            (Dot::Q8(f, tile), Activations::Q8(a)) => {
                let per = k / act::QK;
                let row = |i: usize| &a[(i0 + i) * per..(i0 + i + 1) * per];
                rows_tiled(out, row, |x| f(wr, x), tile, wr);
            }
            (Dot::Q8K(f, tile), Activations::Q8K(a)) => {
                let per = k / act::QK_K;
                let row = |i: usize| &a[(i0 + i) * per..(i0 + i + 1) * per];
                rows_tiled(out, row, |x| f(wr, x), tile, wr);
            }
            (Dot::F(f, tile), Activations::F32(a)) => {
                let row = |i: usize| &a[(i0 + i) * k..(i0 + i + 1) * k];
                rows_tiled(out, row, |x| f(wr, x), tile, wr);
            }
            // `act_kind` and `dot_for` are built from the same table.
            _ => out.fill(0.0),
        }
    };
    let chunk = rows_per_task(n, m);
    if m == 1 {
        y.par_chunks_mut(chunk).enumerate().for_each(|(c, ys)| {
            for (o, v) in ys.iter_mut().enumerate() {
                row_dots(c * chunk + o, 0, std::slice::from_mut(v));
            }
        });
    } else if m >= packed::ROW_SPLIT_MIN {
        // Prefill: each task takes a block of activation rows against every weight row
        // and writes its own rows of y, so nothing is gathered or transposed on one thread.
        let per = packed::act_rows_per_task(m, 1);
        y.par_chunks_mut(per * n).enumerate().for_each(|(c, yc)| {
            let rows = yc.len() / n;
            let mut col = [0.0f32; packed::MAX_TASK_ROWS];
            for r in 0..n {
                row_dots(r, c * per, &mut col[..rows]);
                for (i, &v) in col[..rows].iter().enumerate() {
                    yc[i * n + r] = v;
                }
            }
        });
    } else {
        // Each task keeps its weight rows hot in L1 while it runs through every activation row, writing
        // a transposed tile [rows, m]; the transpose back is m·n stores.
        let mut yt = vec![0.0f32; n * m];
        yt.par_chunks_mut(chunk * m)
            .enumerate()
            .for_each(|(c, ts)| {
                for (o, row) in ts.chunks_exact_mut(m).enumerate() {
                    row_dots(c * chunk + o, 0, row);
                }
            });
        for (r, col) in yt.chunks_exact(m).enumerate() {
            for (i, &v) in col.iter().enumerate() {
                y[i * n + r] = v;
            }
        }
    }
    Ok(())
}

/// Fills `out[i]` with the dot of weight row `wr` and activation row `i`: `TILE` rows at a time
/// through `tile` when there is one, the rest one by one.
fn rows_tiled<'a, X: 'a>(
    out: &mut [f32],
    row: impl Fn(usize) -> &'a [X],
    one: impl Fn(&'a [X]) -> f32,
    tile: Option<TileFn<X>>,
    wr: &[u8],
) {
    let mut o = 0;
    if let Some(tile) = tile {
        while o + TILE <= out.len() {
            let xs: [&[X]; TILE] = std::array::from_fn(|j| row(o + j));
            out[o..o + TILE].copy_from_slice(&tile(wr, &xs));
            o += TILE;
        }
    }
    for (j, v) in out[o..].iter_mut().enumerate() {
        *v = one(row(o + j));
    }
}

/// `y[m, n] = x[m, k] · Wᵀ` with the best instruction set of this CPU.
pub fn matmul(w: Weights<'_>, x: &[f32], m: usize, y: &mut [f32]) -> Result<(), KernelError> {
    matmul_with(Isa::detect(), w, x, m, y)
}

/// `y[m, n] = x[m, k] · Wᵀ` on a weight packed once with [`Packed::new`], best instruction set.
pub fn matmul_packed(p: &Packed, x: &[f32], m: usize, y: &mut [f32]) -> Result<(), KernelError> {
    matmul_packed_with(Isa::detect(), p, x, m, y)
}

/// [`packed::matmul_packed_many_with`] with the best instruction set: several packed weights of one
/// input width, the input quantized once.
pub fn matmul_packed_many(
    ps: &[&Packed],
    x: &[f32],
    m: usize,
    ys: &mut [&mut [f32]],
) -> Result<(), KernelError> {
    matmul_packed_many_with(Isa::detect(), ps, x, m, ys)
}

/// Dequantizes weight rows `rows` into `out` (`rows.len() · k` values), e.g. embedding lookups.
pub fn dequantize_rows(w: Weights<'_>, rows: &[usize], out: &mut [f32]) -> Result<(), KernelError> {
    let rb = w.validate()?;
    check_rows(rows, w.n, w.k, out.len())?;
    for (&r, dst) in rows.iter().zip(out.chunks_exact_mut(w.k)) {
        let v = cinder_gguf::dequant::dequantize(w.ty, &w.data[r * rb..(r + 1) * rb], w.k)
            .map_err(|_| KernelError::Unsupported(w.ty.name()))?;
        dst.copy_from_slice(&v);
    }
    Ok(())
}

/// Checks a row lookup: every index below `n`, and `out_len` = `rows.len() · k` values.
pub(crate) fn check_rows(
    rows: &[usize],
    n: usize,
    k: usize,
    out_len: usize,
) -> Result<(), KernelError> {
    if out_len != rows.len() * k {
        return Err(KernelError::Shape {
            what: "row output",
            expected: rows.len() * k,
            got: out_len,
            unit: "values",
        });
    }
    match rows.iter().find(|&&r| r >= n) {
        Some(&r) => Err(KernelError::Shape {
            what: "row index",
            expected: n,
            got: r,
            unit: "rows (index must be below)",
        }),
        None => Ok(()),
    }
}
