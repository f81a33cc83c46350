//! Sentence embeddings against reference data: all-MiniLM-L6-v2 (SafeTensors) against a float64 numpy
//! implementation, and both catalog ONNX models against onnxruntime, on every test backend.
//!
//! Bars: cosine ≥ 0.9999 on the CPU backends (flex, ndarray) and ≥ 0.999 elsewhere for the
//! SafeTensors and f32 ONNX models; ≥ 0.999 for the int8 ONNX model (its weights are dequantized to
//! f32 once at load; onnxruntime computes the same products, so the difference is only summation
//! order).

mod common;

use burn::tensor::{Int, Tensor, TensorData};
use cinder::backends::BackendKind;
use cinder::models::embed::SentenceEmbedder;
use cinder::prelude::*;
use common::*;
use serde::Deserialize;

#[derive(Deserialize)]
struct MiniLmRef {
    sentences: Vec<String>,
    input_ids: Vec<Vec<u32>>,
    embeddings: Vec<Vec<f32>>,
}

#[derive(Deserialize)]
struct OnnxRef {
    sentences: Vec<String>,
    models: std::collections::HashMap<String, OnnxModelRef>,
}

#[derive(Deserialize)]
struct OnnxModelRef {
    input_ids: Vec<Vec<u32>>,
    embeddings: Vec<Vec<f32>>,
}

fn data(file: &str) -> String {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(file);
    std::fs::read_to_string(path).expect("reference file")
}

/// The bar of a model on a backend.
fn bar(kind: BackendKind, int8: bool) -> f64 {
    if int8 || !kind.is_cpu() {
        0.999
    } else {
        0.9999
    }
}

fn load<B: InferenceBackend>(name: &str, device: &B::Device) -> SentenceEmbedder<B> {
    let path = model_path(name);
    cinder::importer::load_embedder::<B>(name, &path, device).expect("embedding model loads")
}

/// Checks token ids and embeddings (batched, so padding and the mask are exercised) against a
/// reference.
fn check<B: InferenceBackend>(
    e: &SentenceEmbedder<B>,
    sentences: &[String],
    ids: &[Vec<u32>],
    want: &[Vec<f32>],
    min_cos: f64,
) {
    for (s, ids) in sentences.iter().zip(ids) {
        assert_eq!(
            &e.token_ids(s).expect("tokenize"),
            ids,
            "token ids of {s:?}"
        );
    }
    let texts: Vec<&str> = sentences.iter().map(String::as_str).collect();
    let got = e.embed(&texts, true).expect("embed");
    for ((s, g), w) in sentences.iter().zip(&got).zip(want) {
        assert_eq!(g.len(), e.dim());
        let c = cosine(g, w);
        assert!(
            c >= min_cos,
            "{}: cosine {c:.6} < {min_cos} for {s:?}",
            e.name()
        );
        let norm: f64 = g.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "not normalized: {norm}");
    }
    // One at a time gives the same vectors as the batch.
    let alone = e.embed(&texts[..1], true).expect("embed one");
    assert!(cosine(&alone[0], &got[0]) > 0.99999);
    packed_matches_padded(e, ids);
}

/// `embed` runs the batch packed without padding ([`Bert::forward_packed`]); the padded form with
/// its attention mask ([`Bert::forward`]) must give the same hidden state for every real token.
fn packed_matches_padded<B: InferenceBackend>(e: &SentenceEmbedder<B>, ids: &[Vec<u32>]) {
    let device = e.device().clone();
    let (b, t) = (ids.len(), ids.iter().map(Vec::len).max().unwrap_or(0));
    let lengths: Vec<usize> = ids.iter().map(Vec::len).collect();
    assert!(
        lengths.iter().any(|&l| l < t),
        "the reference sentences differ in length, so the padded batch has padding"
    );
    let (mut padded, mut mask) = (vec![0i64; b * t], vec![0f32; b * t]);
    for (s, seq) in ids.iter().enumerate() {
        for (i, &id) in seq.iter().enumerate() {
            padded[s * t + i] = i64::from(id);
            mask[s * t + i] = 1.0;
        }
    }
    let flat: Vec<i64> = ids.iter().flatten().map(|&id| i64::from(id)).collect();
    let n = flat.len();
    let m = e.model();
    let pad_out = m.forward(
        Tensor::<B, 2, Int>::from_data(TensorData::new(padded, [b, t]), &device),
        Tensor::<B, 2, Int>::zeros([b, t], &device),
        Tensor::<B, 2>::from_data(TensorData::new(mask, [b, t]), &device),
    );
    let packed_out = m.forward_packed(
        Tensor::<B, 1, Int>::from_data(TensorData::new(flat, [n]), &device),
        Tensor::<B, 1, Int>::zeros([n], &device),
        &lengths,
    );
    let d = e.model().config().hidden_size;
    let pad_v = pad_out
        .into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .expect("padded");
    let packed_v = packed_out
        .into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .expect("packed");
    let mut worst = 0.0f32;
    let mut row = 0;
    for (s, &len) in lengths.iter().enumerate() {
        for i in 0..len {
            let a = &pad_v[(s * t + i) * d..(s * t + i + 1) * d];
            let p = &packed_v[row * d..(row + 1) * d];
            for (x, y) in a.iter().zip(p) {
                worst = worst.max((x - y).abs());
            }
            row += 1;
        }
    }
    eprintln!(
        "{}: packed vs padded hidden states, max |diff| {worst:.2e}",
        e.name()
    );
    assert!(
        worst < 1e-3,
        "{}: packed and padded forwards differ by {worst}",
        e.name()
    );
}

struct SafeTensorsCheck(BackendKind);

impl BackendTask for SafeTensorsCheck {
    type Output = ();
    fn run<B: InferenceBackend>(self, device: B::Device) {
        let r: MiniLmRef = serde_json::from_str(&data("minilm.json")).expect("minilm.json");
        let e = load::<B>("all-minilm-l6-v2", &device);
        assert_eq!(e.dim(), 384);
        check(
            &e,
            &r.sentences,
            &r.input_ids,
            &r.embeddings,
            bar(self.0, false),
        );
        // Unnormalized output keeps the pooled vector's own length.
        let raw = e.embed(&[r.sentences[0].as_str()], false).expect("embed");
        let norm: f64 = raw[0]
            .iter()
            .map(|x| f64::from(*x).powi(2))
            .sum::<f64>()
            .sqrt();
        assert!(
            norm > 1.5,
            "mean-pooled MiniLM vectors are longer than 1: {norm}"
        );
    }
}

struct OnnxCheck(BackendKind);

impl BackendTask for OnnxCheck {
    type Output = ();
    fn run<B: InferenceBackend>(self, device: B::Device) {
        let r: OnnxRef = serde_json::from_str(&data("minilm-onnx.json")).expect("minilm-onnx.json");
        for (name, int8, layers) in [
            ("all-minilm-l6-v2-onnx-int8", true, 6),
            ("paraphrase-minilm-l3-v2-onnx", false, 3),
        ] {
            let m = &r.models[name];
            let e = load::<B>(name, &device);
            let c = e.model().config();
            assert_eq!(
                (c.num_layers, c.num_heads, c.hidden_size),
                (layers, 12, 384)
            );
            check(
                &e,
                &r.sentences,
                &m.input_ids,
                &m.embeddings,
                bar(self.0, int8),
            );
        }
    }
}

#[test]
fn minilm_safetensors_matches_reference() {
    for kind in test_backends() {
        dispatch(kind, SafeTensorsCheck(kind)).expect("backend");
    }
}

#[test]
fn onnx_models_match_onnxruntime() {
    for kind in test_backends() {
        dispatch(kind, OnnxCheck(kind)).expect("backend");
    }
}

/// Damaged ONNX files (truncated, bytes flipped, a foreign file) give errors, never panics.
#[test]
fn damaged_onnx_files_are_refused_without_panics() {
    let src = model_path("all-minilm-l6-v2-onnx-int8");
    let bytes = std::fs::read(&src).expect("read");
    let dir = tempfile::tempdir().expect("tmp");
    let tok = src.with_file_name("tokenizer.json");
    std::fs::copy(&tok, dir.path().join("tokenizer.json")).expect("copy");
    let path = dir.path().join("model.onnx");
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut cases: Vec<(String, Vec<u8>)> = vec![
        ("empty".into(), Vec::new()),
        ("foreign".into(), b"{\"not\": \"onnx\"}".to_vec()),
        ("header only".into(), bytes[..4096].to_vec()),
    ];
    for i in 0..6 {
        let cut = (next() as usize) % bytes.len();
        cases.push((format!("truncated {i} at {cut}"), bytes[..cut].to_vec()));
        let mut b = bytes.clone();
        // Flip bytes in the first 64 KiB, where the graph's structure (not weight data) lives.
        for _ in 0..8 {
            let at = (next() as usize) % 65_536;
            b[at] ^= 1 << (next() % 8);
        }
        cases.push((format!("flipped {i}"), b));
    }
    struct Load(std::path::PathBuf);
    impl BackendTask for Load {
        type Output = Result<usize, String>;
        fn run<B: InferenceBackend>(self, device: B::Device) -> Result<usize, String> {
            cinder::importer::load_embedder::<B>("damaged", &self.0, &device)
                .map(|e| e.dim())
                .map_err(|e| e.to_string())
        }
    }
    for (what, b) in cases {
        std::fs::write(&path, &b).expect("write");
        let p = path.clone();
        let r = std::panic::catch_unwind(|| dispatch(primary_backend(), Load(p)).expect("backend"));
        match r {
            // A flipped bit in a weight or a name can leave a well-formed graph: nothing in an
            // ONNX file can tell (no checksums). Every other damage must be refused.
            Ok(Ok(dim)) => assert!(
                what.starts_with("flipped"),
                "{what}: a damaged file loaded ({dim}-d)"
            ),
            Ok(Err(e)) => assert!(!e.is_empty(), "{what}: an empty error"),
            Err(_) => panic!("{what}: panicked"),
        }
    }
}
