//! `/v1/embeddings` (OpenAI format) and gRPC `Embed` on a real `cinder serve smollm2-135m
//! --embedding-model all-minilm-l6-v2`: the vectors equal `cinder embed`'s, base64 decodes to the
//! same floats, the official OpenAI Python client works unchanged, bad requests get named 4xx
//! errors, and a full embedding queue answers 429 while the server stays up. A GGUF decoder embedding
//! model serves the same way.

use std::process::Command;

use base64::Engine as _;
use serde_json::{Value, json};

mod common;

use common::server::{Server, client};

const MODEL: &str = "all-minilm-l6-v2";
const TEXTS: [&str; 3] = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
];

/// `cinder embed MODEL --text … --json`: the reference the server must reproduce.
fn cli_vectors(texts: &[&str]) -> Vec<Vec<f32>> {
    cli_vectors_of(MODEL, texts)
}

/// [`cli_vectors`] for another model.
fn cli_vectors_of(model: &str, texts: &[&str]) -> Vec<Vec<f32>> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cinder"));
    cmd.args(["embed", model, "--json"]);
    for t in texts {
        cmd.args(["--text", t]);
    }
    let out = cmd.output().expect("cinder embed runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    serde_json::from_value(v["embeddings"].clone()).expect("vectors")
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// The `data[].embedding` arrays of an OpenAI response, in `index` order.
fn vectors(v: &Value) -> Vec<Vec<f32>> {
    let data = v["data"].as_array().expect("data");
    for (i, d) in data.iter().enumerate() {
        assert_eq!(d["index"], i, "{d}");
        assert_eq!(d["object"], "embedding");
    }
    data.iter()
        .map(|d| serde_json::from_value(d["embedding"].clone()).expect("float vector"))
        .collect()
}

fn start() -> Server {
    Server::start(&["--embedding-model", MODEL])
}

#[test]
fn float_base64_and_grpc_equal_the_cli() {
    let s = start();
    let want = cli_vectors(&TEXTS);
    let (st, v) = s.post("/v1/embeddings", &json!({"model": MODEL, "input": TEXTS}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["object"], "list");
    assert_eq!(v["model"], MODEL);
    let got = vectors(&v);
    assert_eq!(got.len(), 3);
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.len(), 384);
        assert!(max_diff(g, w) < 1e-5, "server and CLI differ");
        let norm: f32 = g.iter().map(|x| x * x).sum();
        assert!((norm - 1.0).abs() < 1e-4, "unit length: {norm}");
    }
    // Each text holds at least [CLS] + one word + [SEP]; prompt and total agree.
    let tokens = v["usage"]["prompt_tokens"].as_u64().expect("usage");
    assert!(tokens >= 3 * 3, "{v}");
    assert_eq!(v["usage"]["total_tokens"], tokens);

    // One string in, one vector out.
    let (st, v) = s.post("/v1/embeddings", &json!({"input": TEXTS[1]}));
    assert_eq!(st, 200, "{v}");
    let one = vectors(&v);
    assert_eq!(one.len(), 1);
    assert!(max_diff(&one[0], &want[1]) < 1e-5);

    // base64: little-endian f32, bit-identical to the float form.
    let (st, v) = s.post(
        "/v1/embeddings",
        &json!({"model": MODEL, "input": TEXTS, "encoding_format": "base64", "dimensions": 384}),
    );
    assert_eq!(st, 200, "{v}");
    for (d, g) in v["data"].as_array().expect("data").iter().zip(&got) {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(d["embedding"].as_str().expect("base64 string"))
            .expect("valid base64");
        let x: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(&x, g);
    }

    // Both models are listed.
    let m: Value = client()
        .get(s.url("/v1/models"))
        .send()
        .and_then(|r| r.json())
        .expect("models");
    let ids: Vec<&str> = m["data"]
        .as_array()
        .expect("data")
        .iter()
        .filter_map(|d| d["id"].as_str())
        .collect();
    assert_eq!(ids, ["smollm2-135m", MODEL]);
    // MiniLM embeds up to 256 tokens of a text (sentence_bert_config.json's max_seq_length).
    assert_eq!(m["data"][1]["max_model_len"], 256, "{m}");

    // gRPC Embed gives the same vectors.
    use cinder::server::grpc::pb::{EmbedRequest, inference_client::InferenceClient};
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let grpc = rt.block_on(async {
        let mut c = InferenceClient::connect(s.grpc.clone().expect("grpc address"))
            .await
            .expect("connect");
        c.embed(EmbedRequest {
            texts: TEXTS.iter().map(|t| t.to_string()).collect(),
            normalize: true,
        })
        .await
        .expect("embed")
        .into_inner()
    });
    assert_eq!(grpc.embeddings.len(), 3);
    for (e, w) in grpc.embeddings.iter().zip(&want) {
        assert!(max_diff(&e.values, w) < 1e-5);
    }
    assert!(s.metric("cinder_embedding_texts_total") >= 10.0);
    assert_eq!(s.metric("cinder_embedding_queue_depth"), 0.0);
}

#[test]
fn bad_embedding_requests_get_named_errors() {
    let s = Server::start(&["--embedding-model", MODEL, "--no-grpc"]);
    let bad = |body: Value, status: u16, param: Option<&str>| {
        let (st, v) = s.post("/v1/embeddings", &body);
        assert_eq!(st, status, "{body} -> {v}");
        let msg = v["error"]["message"].as_str().unwrap_or_default();
        assert!(!msg.is_empty(), "{v}");
        if let Some(p) = param {
            assert_eq!(v["error"]["param"], p, "{v}");
        }
        msg.to_string()
    };
    let msg = bad(
        json!({"model": "text-embedding-3-small", "input": "x"}),
        404,
        Some("model"),
    );
    assert!(msg.contains(MODEL), "names the served model: {msg}");
    bad(json!({"input": ""}), 400, Some("input"));
    bad(json!({"input": []}), 400, Some("input"));
    bad(json!({"input": ["fine", "  "]}), 400, Some("input"));
    bad(json!({"input": [[101, 2023, 102]]}), 400, Some("input"));
    bad(json!({"input": vec!["a"; 2049]}), 400, Some("input"));
    bad(
        json!({"input": "x", "encoding_format": "int8"}),
        400,
        Some("encoding_format"),
    );
    bad(
        json!({"input": "x", "dimensions": 128}),
        400,
        Some("dimensions"),
    );
    bad(json!({"model": MODEL}), 400, None);
    // A text far past the model's 256-token window is truncated, as sentence-transformers does.
    let (st, v) = s.post("/v1/embeddings", &json!({"input": "word ".repeat(2000)}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(vectors(&v)[0].len(), 384);
}

#[test]
fn a_full_embedding_queue_answers_429_and_the_server_recovers() {
    let s = Server::start(&[
        "--embedding-model",
        MODEL,
        "--embedding-queue",
        "1",
        "--no-grpc",
    ]);
    let url = s.url("/v1/embeddings");
    // Each request is long (hundreds of texts); one runs, one waits, the rest must be refused.
    let statuses: Vec<u16> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..6)
            .map(|i| {
                let url = url.clone();
                sc.spawn(move || {
                    let texts: Vec<String> = (0..256)
                        .map(|j| format!("request {i} sentence {j}: the quick brown fox jumps over the lazy dog"))
                        .collect();
                    client()
                        .post(&url)
                        .json(&json!({"input": texts}))
                        .send()
                        .map(|r| r.status().as_u16())
                        .expect("request")
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    });
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 429),
        "{statuses:?}"
    );
    assert!(statuses.contains(&200), "{statuses:?}");
    assert!(statuses.contains(&429), "{statuses:?}");
    let (st, v) = s.post("/v1/embeddings", &json!({"input": TEXTS}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(s.metric("cinder_embedding_queue_depth"), 0.0);
}

/// The official OpenAI Python client's `embeddings.create` (which asks for base64 by default and
/// decodes it) gets the CLI's vectors.
#[test]
fn the_official_openai_python_client_embeds() {
    let s = Server::start(&["--embedding-model", MODEL, "--no-grpc"]);
    let mut args = vec![MODEL];
    args.extend(TEXTS);
    let v = s.python_client("openai_embeddings.py", &args);
    let want = cli_vectors(&TEXTS);
    for key in ["default", "float"] {
        let got: Vec<Vec<f32>> = serde_json::from_value(v[key].clone()).expect("vectors");
        assert_eq!(got.len(), want.len(), "{key}");
        for (g, w) in got.iter().zip(&want) {
            assert!(max_diff(g, w) < 1e-5, "{key}");
        }
    }
    assert_eq!(v["model"], MODEL);
    assert!(v["prompt_tokens"].as_u64().is_some_and(|t| t > 0), "{v}");
    assert_eq!(v["not_found"], 404);
    assert_eq!(v["bad_request"], 400);
}

/// A GGUF decoder embedding model (the tiny Qwen3 file with last-token pooling, compared with
/// llama.cpp in tests/architectures.rs) served on `/v1/embeddings`: the official client gets the
/// CLI's vectors, unit length.
#[test]
fn a_decoder_embedding_model_serves_through_the_openai_client() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/tiny/qwen3-tiny.gguf"
    );
    let s = Server::start(&["--embedding-model", path, "--no-grpc"]);
    let mut args = vec![path];
    args.extend(TEXTS);
    let v = s.python_client("openai_embeddings.py", &args);
    let want = cli_vectors_of(path, &TEXTS);
    for key in ["default", "float"] {
        let got: Vec<Vec<f32>> = serde_json::from_value(v[key].clone()).expect("vectors");
        assert_eq!(got.len(), want.len(), "{key}");
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g.len(), 128, "{key}: the model's width");
            assert!(max_diff(g, w) < 1e-5, "{key}");
            let norm: f32 = g.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-4, "{key}: norm {norm}");
        }
    }
    assert!(v["prompt_tokens"].as_u64().is_some_and(|t| t > 0), "{v}");
}

/// EmbeddingGemma (Gemma 3 run bidirectionally, with dense projections; compared with
/// sentence-transformers in tests/embeddings_gemma.rs) served on `/v1/embeddings`: the official
/// client gets the CLI's 768-wide vectors, unit length.
#[test]
fn embeddinggemma_serves_through_the_openai_client() {
    let model = "embeddinggemma-300m";
    let s = Server::start(&["--embedding-model", model, "--no-grpc"]);
    let mut args = vec![model];
    args.extend(TEXTS);
    let v = s.python_client("openai_embeddings.py", &args);
    let want = cli_vectors_of(model, &TEXTS);
    for key in ["default", "float"] {
        let got: Vec<Vec<f32>> = serde_json::from_value(v[key].clone()).expect("vectors");
        assert_eq!(got.len(), want.len(), "{key}");
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g.len(), 768, "{key}: the last dense module's width");
            assert!(max_diff(g, w) < 1e-5, "{key}");
            let norm: f32 = g.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-4, "{key}: norm {norm}");
        }
    }
    assert_eq!(v["model"], model);
    assert!(v["prompt_tokens"].as_u64().is_some_and(|t| t > 0), "{v}");
}
