//! `cinder_gguf::quantize` produces the same blocks as the `gguf` Python package (a port of ggml's
//! reference quantizers) for the same f32 input: see tests/data/quant_ref.json.

use cinder_gguf::GgmlType;
use cinder_gguf::quantize::quantize;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// A fixture's f32 input, its row length and the expected blocks per type name.
fn fixture(text: &str) -> (Vec<f32>, usize, serde_json::Map<String, serde_json::Value>) {
    let v: serde_json::Value = serde_json::from_str(text).expect("json");
    let raw = hex(v["input_f32_hex"].as_str().expect("input"));
    let x: Vec<f32> = raw
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let row_len = v["row_len"].as_u64().expect("row_len") as usize;
    let blocks = v["blocks"].as_object().expect("blocks").clone();
    (x, row_len, blocks)
}

#[test]
fn blocks_equal_gguf_py() {
    let (x, row_len, blocks) = fixture(include_str!("data/quant_ref.json"));
    assert_eq!(blocks.len(), 6);
    for (name, want) in &blocks {
        let ty = match name.as_str() {
            "Q8_0" => GgmlType::Q8_0,
            "Q4_0" => GgmlType::Q4_0,
            "Q4_1" => GgmlType::Q4_1,
            "Q5_0" => GgmlType::Q5_0,
            "Q5_1" => GgmlType::Q5_1,
            "F16" => GgmlType::F16,
            other => panic!("unexpected type {other}"),
        };
        let want = hex(want.as_str().expect("hex string"));
        let got = quantize(ty, &x, row_len).expect("quantize");
        assert_eq!(got.len(), want.len(), "{name} length");
        let bad: Vec<usize> = (0..got.len()).filter(|&i| got[i] != want[i]).collect();
        assert!(
            bad.is_empty(),
            "{name}: {} bytes differ, first at {:?}",
            bad.len(),
            bad.first()
        );
    }
}

/// Q4_K, Q5_K and Q6_K blocks equal ggml's `quantize_row_q{4,5,6}_K_ref` (C, no FMA contraction) on
/// rows with outliers, all-positive and all-negative rows, an all-zero and a constant super-block,
/// and tiny magnitudes: see tests/data/make_kquant_vectors.c.
#[test]
fn k_quant_blocks_equal_ggml() {
    let (x, row_len, blocks) = fixture(include_str!("data/kquant_ref.json"));
    assert_eq!(blocks.len(), 3);
    for (name, want) in &blocks {
        let ty = match name.as_str() {
            "Q4_K" => GgmlType::Q4_K,
            "Q5_K" => GgmlType::Q5_K,
            "Q6_K" => GgmlType::Q6_K,
            other => panic!("unexpected type {other}"),
        };
        let want = hex(want.as_str().expect("hex string"));
        let got = quantize(ty, &x, row_len).expect("quantize");
        assert_eq!(got.len(), want.len(), "{name} length");
        let block = ty.bytes_for(256).expect("block bytes") as usize;
        let bad: Vec<usize> = (0..got.len()).filter(|&i| got[i] != want[i]).collect();
        assert!(
            bad.is_empty(),
            "{name}: {} bytes differ, first at byte {:?} (super-block {:?})",
            bad.len(),
            bad.first(),
            bad.first().map(|b| b / block)
        );
    }
}
