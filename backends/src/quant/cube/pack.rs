//! The repacked weight layout the CubeCL kernels read: a GGUF weight's quants in 4-bit lanes
//! (Q4_0, Q4_1, Q4_K) or 8-bit lanes (Q8_0, Q5_0, Q5_1, Q5_K, Q6_K), eight or four to a `u32`, and
//! per group of 32 (16 for Q6_K) values an f32 scale and an f32 offset: `w = scale · (q − zero) +
//! offset`, the same single rounding ggml's own dequantization makes (K-quants' sub-block scales
//! `d·sc` and mins `dmin·m` are exact in f32). Verified value by value at load: a weight it cannot
//! reproduce exactly is kept as f32.

use cinder_gguf::GgmlType;

use crate::BackendError;
use crate::quant::QWeight;

/// A type's layout: (bits per lane, group, zero).
pub(super) fn layout(ty: GgmlType) -> Option<(u32, u32, u32)> {
    Some(match ty {
        GgmlType::Q4_0 => (4, 32, 8),
        GgmlType::Q4_1 | GgmlType::Q4_K => (4, 32, 0),
        GgmlType::Q8_0 => (8, 32, 128),
        GgmlType::Q5_0 => (8, 32, 16),
        GgmlType::Q5_1 | GgmlType::Q5_K => (8, 32, 0),
        GgmlType::Q6_K => (8, 16, 32),
        _ => return None,
    })
}

fn f16_at(b: &[u8], at: usize) -> f32 {
    cinder_gguf::dequant::f16_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// Scale and offset of every group of one block, from its header.
fn group_params(ty: GgmlType, b: &[u8], out: &mut Vec<(f32, f32)>) {
    use cinder_gguf::dequant::scale_min_k4;
    match ty {
        GgmlType::Q4_0 | GgmlType::Q8_0 | GgmlType::Q5_0 => out.push((f16_at(b, 0), 0.0)),
        GgmlType::Q4_1 | GgmlType::Q5_1 => out.push((f16_at(b, 0), f16_at(b, 2))),
        GgmlType::Q4_K | GgmlType::Q5_K => {
            let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
            let mut s = [0u8; 12];
            s.copy_from_slice(&b[4..16]);
            for g in 0..8 {
                let (sc, m) = scale_min_k4(g, &s);
                out.push((d * f32::from(sc), -(dmin * f32::from(m))));
            }
        }
        GgmlType::Q6_K => {
            // ql[128], qh[64], scales[16] (i8), d
            let d = f16_at(b, 208);
            for g in 0..16 {
                out.push((d * f32::from(b[192 + g] as i8), 0.0));
            }
        }
        _ => unreachable!("no layout for {ty:?}"),
    }
}

/// A repacked weight on the host: quant words, scales, offsets.
pub(super) type Repacked = (Vec<u32>, Vec<f32>, Vec<f32>);

/// Repacks `w` (validated); `None` if a value cannot be reproduced exactly.
pub(super) fn repack(w: &QWeight, name: &str) -> Result<Option<Repacked>, BackendError> {
    let Some((bits, group, zero)) = layout(w.ty) else {
        return Ok(None);
    };
    let values = w.dequantize(name)?;
    let (block_vals, block_bytes) = (w.ty.block_size() as usize, w.ty.type_size() as usize);
    let mut params = Vec::with_capacity(values.len() / group as usize);
    for b in w.data.chunks_exact(block_bytes) {
        group_params(w.ty, b, &mut params);
    }
    debug_assert_eq!(params.len() * group as usize, values.len());
    debug_assert_eq!(block_vals % group as usize, 0);
    let lanes = 32 / bits;
    let qmax = (1u32 << bits) - 1;
    let mut words = vec![0u32; values.len() / lanes as usize];
    for (g, (vals, &(s, o))) in values.chunks_exact(group as usize).zip(&params).enumerate() {
        for (j, &y) in vals.iter().enumerate() {
            let q = if s == 0.0 {
                zero
            } else {
                (((y - o) / s).round() + zero as f32).clamp(0.0, qmax as f32) as u32
            };
            // The kernel's arithmetic, which must give back ggml's value.
            if s * (q as f32 - zero as f32) + o != y {
                tracing::debug!(
                    name,
                    ty = w.ty.name(),
                    "repacking is not exact: f32 fallback"
                );
                return Ok(None);
            }
            let i = g * group as usize + j;
            words[i / lanes as usize] |= q << ((i % lanes as usize) as u32 * bits);
        }
    }
    let (scales, offsets) = params.into_iter().unzip();
    Ok(Some((words, scales, offsets)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cinder_gguf::SharedBytes;

    /// Every type with a layout repacks exactly: the kernel's `scale · (q − zero) + offset`
    /// gives back ggml's dequantized value for every weight.
    #[test]
    fn repacking_reproduces_every_value() {
        let (n, k) = (6, 512);
        // Values of several magnitudes and signs, and a row of zeros (scale 0).
        let x: Vec<f32> = (0..n * k)
            .map(|i| {
                let r = i / k;
                if r == 5 {
                    0.0
                } else {
                    ((i * 7919 % 1000) as f32 / 500.0 - 1.0) * 10f32.powi(r as i32 - 2)
                }
            })
            .collect();
        for ty in [
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q8_0,
            GgmlType::Q5_0,
            GgmlType::Q5_1,
            GgmlType::Q4_K,
            GgmlType::Q5_K,
            GgmlType::Q6_K,
        ] {
            let data = cinder_gguf::quantize::quantize(ty, &x, k).expect("quantize");
            let w = QWeight {
                ty,
                n,
                k,
                data: SharedBytes::from_vec(data),
            };
            let (qs, scales, offsets) = repack(&w, "t").expect("valid").expect("exact");
            let (bits, group, zero) = layout(ty).expect("layout");
            let want = w.dequantize("t").expect("dequantize");
            let lanes = (32 / bits) as usize;
            for (e, &y) in want.iter().enumerate() {
                let q = (qs[e / lanes] >> ((e % lanes) as u32 * bits)) & ((1 << bits) - 1);
                let p = e / group as usize;
                let v = scales[p] * (q as f32 - zero as f32) + offsets[p];
                assert_eq!(v, y, "{ty:?} value {e}");
            }
        }
    }
}
