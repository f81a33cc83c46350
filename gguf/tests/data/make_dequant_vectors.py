#!/usr/bin/env python3
"""Generates the dequantization test vectors of cinder-gguf (tests/dequant.rs, tests/mutations.rs).

Run from anywhere (needs numpy and the `gguf` Python package, version 0.19 was used):

    python3 gguf/tests/data/make_dequant_vectors.py

It is deterministic (fixed seed), so re-running it rewrites byte-identical files:

* `dequant_vectors.bin`: for every ggml type Cinder dequantizes, a few blocks of quantized bytes and
  the f32 values they decode to. Where `gguf.quants.quantize` exists for the type (Q4_0, Q4_1, Q5_0,
  Q5_1, Q8_0, BF16, F16) the bytes come from quantizing seeded random data; for every quantized type
  there is also a case of random bit patterns in which only the f16/f32 scale fields are overwritten with
  finite values (`gguf` 0.19 cannot quantize K-quants, so Q2_K..Q6_K are tested this way only). Expected
  values come from `gguf.quants.dequantize`, except for the types that package does not decode (Q8_1,
  Q8_K, I8, I16, I32, I64, F64), which are decoded here with numpy from the ggml block layout.
* `smollm2_head.bin` (only if /tmp/models/SmolLM2-135M-Instruct.Q4_1.gguf exists): the first 1024
  values of `token_embd.weight` (Q8_0) and `blk.0.attn_q.weight` (Q4_1) as dequantized by gguf-python.

Format of `dequant_vectors.bin` (all little-endian):
    b"CDQV", u32 format version (1), u32 case count, then per case:
    u32 label length, label (UTF-8), u32 ggml type id, u32 element count n, u32 byte count m,
    m bytes of quantized data, n f32 expected values.
Format of `smollm2_head.bin`: b"CSMH", u32 count (2), then per tensor: u32 name length, name,
    u32 value count n, n f32.
"""

import os
import struct
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader
from gguf.quants import dequantize, quantize

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = "/tmp/models/SmolLM2-135M-Instruct.Q4_1.gguf"
rng = np.random.default_rng(20240607)

# (bytes per block, elements per block) and the byte offsets of each block's f16 scale fields.
LAYOUT = {
    T.Q4_0: (18, 32, [0]),
    T.Q4_1: (20, 32, [0, 2]),
    T.Q5_0: (22, 32, [0]),
    T.Q5_1: (24, 32, [0, 2]),
    T.Q8_0: (34, 32, [0]),
    T.Q8_1: (36, 32, [0, 2]),
    T.Q2_K: (84, 256, [80, 82]),
    T.Q3_K: (110, 256, [108]),
    T.Q4_K: (144, 256, [0, 2]),
    T.Q5_K: (176, 256, [0, 2]),
    T.Q6_K: (210, 256, [208]),
}

cases = []


def add(label, ty, raw, expected):
    raw = np.ascontiguousarray(raw, dtype=np.uint8).tobytes()
    expected = np.ascontiguousarray(expected, dtype=np.float32).ravel()
    cases.append((label, int(ty), raw, expected))


def finite_f16(n, scale):
    """n finite f16 values of roughly the given magnitude (some negative, some zero)."""
    v = (rng.standard_normal(n) * scale).astype(np.float16)
    v[rng.random(n) < 0.1] = 0
    return v


def random_blocks(ty, n_blocks, scale):
    """Random bit patterns with the f16 scale fields replaced by finite values."""
    bsz, _, f16_at = LAYOUT[ty]
    raw = rng.integers(0, 256, size=(n_blocks, bsz), dtype=np.uint8)
    for at in f16_at:
        raw[:, at:at + 2] = finite_f16(n_blocks, scale).view(np.uint8).reshape(n_blocks, 2)
    # One block of all-ones bits (except the scales) and one all-zero block cover the extremes.
    raw[0, :] = 0xFF
    for at in f16_at:
        raw[0, at:at + 2] = np.array([1.25], dtype=np.float16).view(np.uint8)
    raw[1, :] = 0
    return raw


def weights(n_blocks, bs):
    x = rng.standard_normal((n_blocks, bs)).astype(np.float32)
    x *= np.logspace(-3, 1, n_blocks, dtype=np.float32)[:, None]  # a range of block magnitudes
    x[0] = 0.0  # all-zero block: d = 0
    x[1] = 0.75  # constant block: max == min
    x[2, 5] = -40.0  # outlier
    return x


# --- plain element types -------------------------------------------------------------------------
specials = np.array([0.0, -0.0, 1.0, -2.5, np.inf, -np.inf, np.nan, 1e-45, -3.4e38, 6.1e-5], dtype=np.float32)
f32 = np.concatenate([specials, rng.standard_normal(54).astype(np.float32)])
add("F32 specials+random", T.F32, f32.view(np.uint8), f32)

f16_bits = np.concatenate([
    np.array([0x0000, 0x8000, 0x0001, 0x03FF, 0x0400, 0x7BFF, 0x7C00, 0xFC00, 0x7E00, 0x3C00], dtype=np.uint16),
    rng.integers(0, 1 << 16, size=246, dtype=np.uint16),
])
add("F16 bit patterns", T.F16, f16_bits.view(np.uint8), dequantize(f16_bits.view(np.uint8), T.F16))

bf16_q = quantize(rng.standard_normal(128).astype(np.float32) * 100, T.BF16)
add("BF16 quantized", T.BF16, bf16_q, dequantize(bf16_q, T.BF16))
bf16_bits = rng.integers(0, 1 << 16, size=128, dtype=np.uint16).view(np.uint8)
add("BF16 bit patterns", T.BF16, bf16_bits, dequantize(bf16_bits, T.BF16))

f64 = np.concatenate([np.array([0.0, -1.0, 1e300, -1e-300, 1.0000001, np.pi]), rng.standard_normal(26) * 1e3])
with np.errstate(over="ignore"):  # 1e300 -> inf, as Rust's `as f32`
    add("F64 (numpy)", T.F64, f64.view(np.uint8), f64.astype(np.float32))
for ty, dt in [(T.I8, np.int8), (T.I16, np.int16), (T.I32, np.int32), (T.I64, np.int64)]:
    info = np.iinfo(dt)
    v = rng.integers(info.min, info.max, size=64, dtype=dt, endpoint=True)
    v[:2] = [info.min, info.max]
    add(f"{ty.name} (numpy)", ty, v.view(np.uint8), v.astype(np.float32))

# --- 32-element block types ----------------------------------------------------------------------
for ty in [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]:
    q = quantize(weights(8, 32), ty)
    add(f"{ty.name} quantized", ty, q, dequantize(q, ty))
    r = random_blocks(ty, 6, 0.05)
    add(f"{ty.name} bit patterns", ty, r, dequantize(r, ty))

# Q8_1: d f16, s f16, 32 x i8; gguf-python has no decoder: y = q * d.
r = random_blocks(T.Q8_1, 8, 0.05)
d = r[:, 0:2].copy().view(np.float16).astype(np.float32)
add("Q8_1 bit patterns (numpy)", T.Q8_1, r, r[:, 4:].view(np.int8).astype(np.float32) * d)

# --- K-quants ------------------------------------------------------------------------------------
for ty in [T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K]:
    r = random_blocks(ty, 6, 0.02)
    add(f"{ty.name} bit patterns", ty, r, dequantize(r, ty))

# Q8_K: d f32, 256 x i8, 16 x i16 sums; y = d * q.
n = 3
r = rng.integers(0, 256, size=(n, 292), dtype=np.uint8)
r[:, 0:4] = (rng.standard_normal(n).astype(np.float32) * 0.01).view(np.uint8).reshape(n, 4)
d = r[:, 0:4].copy().view(np.float32)
add("Q8_K bit patterns (numpy)", T.Q8_K, r, d * r[:, 4:260].view(np.int8).astype(np.float32))

with open(os.path.join(HERE, "dequant_vectors.bin"), "wb") as f:
    f.write(b"CDQV" + struct.pack("<II", 1, len(cases)))
    for label, ty, raw, exp in cases:
        lb = label.encode()
        f.write(struct.pack("<I", len(lb)) + lb + struct.pack("<III", ty, exp.size, len(raw)))
        f.write(raw)
        f.write(exp.astype("<f4").tobytes())
print(f"dequant_vectors.bin: {len(cases)} cases", file=sys.stderr)

# --- real model head ------------------------------------------------------------------------------
if os.path.exists(MODEL):
    reader = GGUFReader(MODEL)
    out = []
    for name in ["token_embd.weight", "blk.0.attn_q.weight"]:
        t = next(t for t in reader.tensors if t.name == name)
        bsz, bs, _ = LAYOUT[t.tensor_type]
        head = np.asarray(t.data).reshape(-1)[: 1024 // bs * bsz]
        out.append((name, dequantize(head, t.tensor_type).ravel()))
    with open(os.path.join(HERE, "smollm2_head.bin"), "wb") as f:
        f.write(b"CSMH" + struct.pack("<I", len(out)))
        for name, v in out:
            f.write(struct.pack("<I", len(name)) + name.encode() + struct.pack("<I", v.size))
            f.write(v.astype("<f4").tobytes())
    print("smollm2_head.bin written", file=sys.stderr)
else:
    print(f"{MODEL} absent: smollm2_head.bin not regenerated", file=sys.stderr)
