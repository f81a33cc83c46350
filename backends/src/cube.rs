//! What the CubeCL implementations of the op groups (wgpu, cuda) share: moving Burn tensors in and
//! out of kernels, grid shapes, the device's capabilities, and the arithmetic helpers every kernel
//! uses (f16/bf16 rounding, activation blocks rounded as llama.cpp's CPU path rounds them).
//!
//! Kernels take contiguous buffers. Their outputs are allocated contiguous (`client.empty`), so a
//! decode step's tensors pass from kernel to kernel without copies; an input Burn left strided is
//! made contiguous first (one copy kernel).

use burn::tensor::{DType, Int, Shape, Tensor, TensorPrimitive};
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime};
use cubecl::prelude::*;

/// The CubeCL backend types Cinder builds: f32 floats, i32 ints.
pub(crate) type Cube<R, BT> = CubeBackend<R, f32, i32, BT>;

/// A float tensor of [`Cube`] with `D` dimensions.
pub(crate) type FloatT<R, BT, const D: usize> = Tensor<Cube<R, BT>, D>;

/// A float tensor's buffer, contiguous.
pub(crate) fn float_in<R: CubeRuntime, BT: BoolElement, const D: usize>(
    t: Tensor<Cube<R, BT>, D>,
) -> CubeTensor<R> {
    burn_cubecl::kernel::into_contiguous(t.into_primitive().tensor())
}

/// An int tensor's buffer, contiguous.
pub(crate) fn int_in<R: CubeRuntime, BT: BoolElement, const D: usize>(
    t: Tensor<Cube<R, BT>, D, Int>,
) -> CubeTensor<R> {
    burn_cubecl::kernel::into_contiguous(t.into_primitive())
}

/// A new contiguous f32 buffer of `shape` on `like`'s device.
pub(crate) fn float_out<R: CubeRuntime>(like: &CubeTensor<R>, shape: &[usize]) -> CubeTensor<R> {
    let n: usize = shape.iter().product();
    let handle = like.client.empty(n.max(1) * 4);
    CubeTensor::new_contiguous(
        like.client.clone(),
        like.device.clone(),
        Shape::from(shape.to_vec()),
        handle,
        DType::F32,
    )
}

/// A kernel's output as a Burn float tensor.
pub(crate) fn float_tensor<R: CubeRuntime, BT: BoolElement, const D: usize>(
    t: CubeTensor<R>,
) -> Tensor<Cube<R, BT>, D> {
    Tensor::from_primitive(TensorPrimitive::Float(t))
}

/// The binding of a whole contiguous buffer as an array of `len` scalars.
pub(crate) fn arr<R: CubeRuntime>(t: &CubeTensor<R>) -> ArrayArg<R> {
    let len = t.meta.shape().num_elements();
    // SAFETY: a contiguous tensor's handle holds `len` scalars of its type.
    unsafe { ArrayArg::from_raw_parts(t.handle.clone(), len) }
}

/// A grid of `cubes` cubes: one dimension of a dispatch is capped (65535 on many devices), so
/// wide grids go 2-D; kernels read their cube's index as `CUBE_POS`, which runs over the whole
/// grid in order.
pub(crate) fn grid(cubes: usize) -> CubeCount {
    let cubes = cubes.max(1) as u32;
    if cubes <= 65535 {
        CubeCount::Static(cubes, 1, 1)
    } else {
        CubeCount::Static(65535, cubes.div_ceil(65535), 1)
    }
}

/// What a device's kernels may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Caps {
    /// Plane (warp/subgroup) reductions over 32 lanes: the device has plane operations and planes
    /// of exactly 32 units, so that one 32-wide row of a cube is one plane.
    pub plane32: bool,
}

impl Caps {
    /// The capabilities of `client`'s device. `CINDER_CUBE_PLANES=0` turns plane operations off
    /// (the shared-memory reductions run instead), `=1` forces them where planes are 32 wide.
    pub fn of<R: CubeRuntime>(client: &ComputeClient<R>) -> Self {
        let props = client.properties();
        let hw = &props.hardware;
        let thirty_two = hw.plane_size_min == 32 && hw.plane_size_max == 32;
        let ops = client
            .features()
            .plane
            .contains(cubecl::ir::features::Plane::Ops);
        let plane32 = match std::env::var("CINDER_CUBE_PLANES").as_deref() {
            Ok("0") => false,
            Ok("1") => thirty_two,
            _ => ops && thirty_two,
        };
        Caps { plane32 }
    }
}

/// Rounds to the nearest value with `keep` significant mantissa bits (10: f16, 7: bf16), ties to
/// even, on the bits: exact for values in the narrower type's normal range (activations and
/// scales live there); smaller magnitudes keep `keep` bits rather than flushing to subnormals, as
/// the generic fallback's rounding (`crate::act`) does.
#[cube]
pub(crate) fn round_mantissa(x: f32, #[comptime] drop: u32) -> f32 {
    let bits = u32::reinterpret(x);
    let lsb = (bits >> drop) & 1u32;
    let bias = comptime!((1u32 << (drop - 1)) - 1);
    let mask = comptime!(!((1u32 << drop) - 1));
    f32::reinterpret((bits + bias + lsb) & mask)
}

/// `x` rounded to f16 precision (see [`round_mantissa`]).
#[cube]
pub(crate) fn round_f16(x: f32) -> f32 {
    round_mantissa(x, 13u32)
}

/// `x` rounded to bf16 precision (see [`round_mantissa`]).
#[cube]
pub(crate) fn round_bf16(x: f32) -> f32 {
    round_mantissa(x, 16u32)
}

/// Activation rounding codes, as the kernels take them (`#[comptime] act: u32`): what llama.cpp's
/// CPU path does to a matmul's input for a weight type ([`crate::act::ActQuant`]).
pub(crate) mod act_code {
    /// f32 as it is
    pub const NONE: u32 = 0;
    /// rounded to f16
    pub const F16: u32 = 1;
    /// rounded to bf16
    pub const BF16: u32 = 2;
    /// 32-value blocks, f16 scale `amax / 127`, `round(x · 127 / amax)`
    pub const Q8: u32 = 3;
    /// 256-value blocks, f32 scale, `round(x · 127 / amax)` times `1 / (127 / amax)`
    pub const Q8K: u32 = 4;
    /// [`Q8`] blocks that also carry their sum `f16(d · Σq)`, which the offset formats (Q4_1,
    /// Q5_1) multiply by their minimum instead of summing the products one by one (ggml's
    /// `block_q8_1`)
    pub const Q8_1: u32 = 5;

    /// Whether `act` rounds in blocks (with a per-block scale).
    pub fn is_block(act: u32) -> bool {
        act == Q8 || act == Q8K || act == Q8_1
    }
}

/// Values per activation block of `act` (32 for the elementwise roundings, so a unit's block is
/// always whole groups of 32).
pub(crate) fn act_block(act: u32) -> u32 {
    if act == act_code::Q8K { 256 } else { 32 }
}

/// The scale of one activation block of absolute maximum `amax` for `act`: what a value's
/// integer is multiplied by (`Q8`: `f16(amax/127)`; `Q8K`: `1 / (127/amax)`), 0 for a zero block.
#[cube]
pub(crate) fn act_scale(amax: f32, #[comptime] act: u32) -> f32 {
    let mut d = 0.0f32;
    if amax > 0.0 {
        if comptime!(act == act_code::Q8 || act == act_code::Q8_1) {
            d = round_f16(amax / 127.0);
        } else {
            d = 1.0 / (127.0 / amax);
        }
    }
    d
}

/// The multiplier that takes a value of a block of absolute maximum `amax` to its integer
/// (`127 / amax`), 0 for a zero block.
#[cube]
pub(crate) fn act_inverse(amax: f32) -> f32 {
    let mut id = 0.0f32;
    if amax > 0.0 {
        id = 127.0 / amax;
    }
    id
}

/// One activation value as the kernel sees it: elementwise roundings apply here; the block
/// formats take `id` and `d` of the value's block ([`act_inverse`], [`act_scale`]).
#[cube]
pub(crate) fn act_value(x: f32, id: f32, d: f32, #[comptime] act: u32) -> f32 {
    let mut v = x;
    if comptime!(act == act_code::F16) {
        v = round_f16(x);
    } else if comptime!(act == act_code::BF16) {
        v = round_bf16(x);
    } else if comptime!(act_code::is_block(act)) {
        // f32 `round` is ties-to-even on every CubeCL target (WGSL `round`, CUDA `rint`).
        v = f32::round(x * id) * d;
    }
    v
}
