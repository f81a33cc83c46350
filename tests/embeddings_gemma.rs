//! EmbeddingGemma-300M (the catalog's sentence-transformers folder, fp32 SafeTensors) against
//! sentence-transformers on the CPU (`tests/data/embeddinggemma-300m.json`, made by
//! `benches/reference/embeddinggemma_reference.py`): token ids equal, cosine ≥ 0.9999 on every
//! backend. The texts include an 840-token one, past the 512-token window, so
//! the symmetric sliding window and the global layers both matter. Damaged folders are refused with
//! the problem named.

mod common;

use std::path::{Path, PathBuf};

use cinder::backends::BackendKind;
use cinder::models::decoder_embed::Embedder;
use cinder::prelude::*;
use common::*;
use serde::Deserialize;

const MODEL: &str = "embeddinggemma-300m";

#[derive(Deserialize)]
struct Reference {
    texts: Vec<RefText>,
}

#[derive(Deserialize)]
struct RefText {
    text: String,
    input_ids: Vec<u32>,
    embedding: Vec<f32>,
}

fn reference() -> Reference {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/embeddinggemma-300m.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("reference file")).expect("json")
}

fn load<B: InferenceBackend>(path: &Path, device: &B::Device) -> Result<Embedder<B>, String> {
    cinder::importer::load_text_embedder::<B>(MODEL, path, device).map_err(|e| e.to_string())
}

struct Check {
    kind: BackendKind,
    primary: bool,
}

impl BackendTask for Check {
    type Output = ();
    fn run<B: InferenceBackend>(self, device: B::Device) {
        let r = reference();
        let e = load::<B>(&model_path(MODEL), &device).expect("EmbeddingGemma loads");
        assert!(
            matches!(e, Embedder::Gemma(_)),
            "loaded as the Gemma embedder"
        );
        assert_eq!(e.dim(), 768);
        let bar = 0.9999;
        // The long text runs on the first backend only (a few seconds on a CPU, minutes on lavapipe).
        let texts: Vec<&RefText> = r
            .texts
            .iter()
            .filter(|t| self.primary || t.input_ids.len() < 512)
            .collect();
        for t in &texts {
            assert_eq!(
                e.token_ids(&t.text).expect("tokenize"),
                t.input_ids,
                "{:?}",
                t.text
            );
        }
        let inputs: Vec<&str> = texts.iter().map(|t| t.text.as_str()).collect();
        let got = e.embed(&inputs, true).expect("embed");
        let mut worst = 1.0f64;
        for (t, g) in texts.iter().zip(&got) {
            let c = cosine(g, &t.embedding);
            worst = worst.min(c);
            assert!(
                c >= bar,
                "{:?}: cosine {c:.6} < {bar} ({} tokens)",
                self.kind,
                t.input_ids.len()
            );
            let norm: f64 = g.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
            assert!((norm - 1.0).abs() < 1e-4, "not normalized: {norm}");
        }
        eprintln!(
            "{:?}: {} texts, lowest cosine {worst:.7}",
            self.kind,
            texts.len()
        );
        // Each text runs alone: its vector does not depend on the others of the request.
        let alone = e.embed(&inputs[1..2], true).expect("embed one");
        assert!(cosine(&alone[0], &got[1]) > 0.999_999);
        // A text past max_seq_length (2048) is cut there, its closing <eos> kept, as
        // sentence-transformers' tokenizer does; an empty text is an error.
        if self.primary {
            let long = "word ".repeat(3000);
            let ids = e.token_ids(&long).expect("tokenize");
            assert_eq!(ids.len(), 2048);
            assert_eq!((ids[0], ids[2047]), (2, 1), "<bos> … <eos>");
            let err = e.embed(&["fine", "  "], true).expect_err("empty text");
            assert!(err.to_string().contains("text 1 is empty"), "{err}");
        }
    }
}

#[test]
fn embeddinggemma_matches_sentence_transformers() {
    for (i, kind) in test_backends().into_iter().enumerate() {
        dispatch(
            kind,
            Check {
                kind,
                primary: i == 0,
            },
        )
        .expect("backend");
    }
}

/// A copy of the model folder made of links to the real files, with some files replaced.
fn altered(replace: &[(&str, &[u8])]) -> tempfile::TempDir {
    let src = model_path(MODEL).parent().expect("folder").to_path_buf();
    let tmp = tempfile::tempdir().expect("tmp");
    for rel in [
        "model.safetensors",
        "config.json",
        "tokenizer.json",
        "modules.json",
        "sentence_bert_config.json",
        "1_Pooling/config.json",
        "2_Dense/config.json",
        "2_Dense/model.safetensors",
        "3_Dense/config.json",
        "3_Dense/model.safetensors",
    ] {
        let to = tmp.path().join(rel);
        std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
        match replace.iter().find(|(r, _)| *r == rel) {
            Some((_, bytes)) => std::fs::write(&to, bytes).expect("write"),
            None => std::os::unix::fs::symlink(src.join(rel), &to).expect("link"),
        }
    }
    tmp
}

fn edited_json(rel: &str, edit: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
    let src = model_path(MODEL).parent().expect("folder").join(rel);
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src).expect("read")).expect("json");
    edit(&mut v);
    serde_json::to_vec(&v).expect("json")
}

/// Every way a folder can be wrong gets an error naming the problem, never a panic or a model
/// that runs without something the checkpoint asks for.
#[test]
fn damaged_embeddinggemma_folders_are_refused() {
    let head: Vec<u8> = {
        use std::io::Read;
        let mut b = vec![0u8; 1 << 20];
        let mut f = std::fs::File::open(model_path(MODEL)).expect("open");
        f.read_exact(&mut b).expect("read");
        b
    };
    let yarn = edited_json("config.json", |v| {
        v["rope_scaling"] = serde_json::json!({"rope_type": "yarn", "factor": 4.0});
    });
    let irregular = edited_json("config.json", |v| {
        v["layer_types"][0] = "full_attention".into();
    });
    let softcap = edited_json("config.json", |v| v["attn_logit_softcapping"] = 50.0.into());
    let relu = edited_json("2_Dense/config.json", |v| {
        v["activation_function"] = "torch.nn.modules.activation.ReLU".into();
    });
    let layer_norm = edited_json("modules.json", |v| {
        v[3]["type"] = "sentence_transformers.models.LayerNorm".into();
    });
    // (what, files replaced by new bytes, what the error must name)
    type Case<'a> = (&'a str, Vec<(&'a str, &'a [u8])>, &'a str);
    let cases: Vec<Case> = vec![
        ("yarn", vec![("config.json", &yarn)], "yarn"),
        ("irregular layers", vec![("config.json", &irregular)], "layer_types"),
        ("soft-capping", vec![("config.json", &softcap)], "attn_logit_softcapping"),
        ("relu dense", vec![("2_Dense/config.json", &relu)], "ReLU"),
        ("unknown module", vec![("modules.json", &layer_norm)], "LayerNorm"),
        ("truncated weights", vec![("model.safetensors", &head)], "SafeTensors"),
        (
            "dense of another width",
            vec![("3_Dense/config.json", br#"{"in_features": 3072, "out_features": 512, "bias": false, "activation_function": "torch.nn.modules.linear.Identity"}"#)],
            "[768, 3072]",
        ),
    ];
    struct Load(PathBuf);
    impl BackendTask for Load {
        type Output = Result<usize, String>;
        fn run<B: InferenceBackend>(self, device: B::Device) -> Result<usize, String> {
            load::<B>(&self.0, &device).map(|e| e.dim())
        }
    }
    for (what, files, needle) in cases {
        let dir = altered(&files);
        let p = dir.path().to_path_buf();
        let r = std::panic::catch_unwind(|| dispatch(primary_backend(), Load(p)).expect("backend"));
        match r {
            Ok(Ok(dim)) => panic!("{what}: loaded ({dim}-d) instead of being refused"),
            Ok(Err(e)) => assert!(e.contains(needle), "{what}: {e:?} does not name {needle:?}"),
            Err(_) => panic!("{what}: panicked"),
        }
    }
}
