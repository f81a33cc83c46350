//! `cinder embed` and `cinder index` on the real binary and the real MiniLM models: output
//! contracts, an index lifecycle (create, add, search, delete, reopen) and the bad inputs users
//! send (empty text, wrong dimension or metric, corrupt index, mismatched model or tokenizer).

use std::process::{Command, Output};

fn cinder(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cinder"))
        .args(args)
        .output()
        .expect("cinder runs")
}

fn ok(args: &[&str]) -> String {
    let out = cinder(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "cinder {args:?} failed: {stderr}");
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// Runs a command that must fail, returning its stderr (which must hold `needle`) without a panic.
fn fails(args: &[&str], needle: &str) {
    let out = cinder(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "cinder {args:?} succeeded");
    assert!(
        stderr.contains(needle),
        "cinder {args:?}: {needle:?} not in {stderr}"
    );
    assert!(
        !stderr.contains("panicked"),
        "cinder {args:?} panicked: {stderr}"
    );
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[test]
fn embed_json_contract_and_similarity() {
    let out = ok(&[
        "embed",
        "all-minilm-l6-v2",
        "--text",
        "A man is eating food.",
        "--text",
        "A man is eating a piece of bread.",
        "--text",
        "The girl is carrying a baby.",
        "--json",
    ]);
    assert_eq!(out.lines().count(), 1, "one JSON line: {out}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["model"], "all-minilm-l6-v2");
    assert_eq!(v["dim"], 384);
    let e: Vec<Vec<f64>> = serde_json::from_value(v["embeddings"].clone()).expect("vectors");
    assert_eq!(e.len(), 3);
    for x in &e {
        assert!((dot(x, x) - 1.0).abs() < 1e-4, "L2-normalized by default");
    }
    // sentence-transformers documents 0.7553 for this pair (same model); order is kept.
    assert!(
        (dot(&e[0], &e[1]) - 0.7553).abs() < 2e-3,
        "{}",
        dot(&e[0], &e[1])
    );
    assert!(dot(&e[0], &e[2]) < 0.3);

    let raw = ok(&[
        "embed",
        "all-minilm-l6-v2",
        "--text",
        "A man is eating food.",
        "--json",
        "--no-normalize",
    ]);
    let v: serde_json::Value = serde_json::from_str(&raw).expect("json");
    let x: Vec<f64> = serde_json::from_value(v["embeddings"][0].clone()).expect("vector");
    assert!(
        dot(&x, &x).sqrt() > 1.5,
        "--no-normalize keeps the pooled length"
    );
}

#[test]
fn embed_bad_inputs() {
    fails(
        &["embed", "all-minilm-l6-v2", "--text", "  "],
        "text 0 is empty",
    );
    fails(&["embed", "all-minilm-l6-v2"], "nothing to embed");
    fails(
        &["embed", "/nonexistent/model", "--text", "x"],
        "resolving model",
    );
    let dir = tempfile::tempdir().expect("tmp");
    // A pickle checkpoint is refused with the reason.
    let bin = dir.path().join("pytorch_model.bin");
    std::fs::write(&bin, b"not really a pickle").expect("write");
    fails(
        &["embed", bin.to_str().expect("utf8"), "--text", "x"],
        "pickle",
    );
    // A truncated SafeTensors file beside a real config and tokenizer.
    let minilm = cinder::catalog::resolve("all-minilm-l6-v2")
        .expect("model")
        .dir;
    for f in ["config.json", "tokenizer.json"] {
        std::fs::copy(minilm.join(f), dir.path().join(f)).expect("copy");
    }
    let bytes = std::fs::read(minilm.join("model.safetensors")).expect("read");
    std::fs::write(
        dir.path().join("model.safetensors"),
        &bytes[..bytes.len() / 2],
    )
    .expect("write");
    std::fs::remove_file(&bin).expect("rm");
    fails(
        &["embed", dir.path().to_str().expect("utf8"), "--text", "x"],
        "not a valid SafeTensors file",
    );
    // A config that disagrees with the weights is refused naming the tensor's shape.
    std::fs::write(dir.path().join("model.safetensors"), &bytes).expect("write");
    let cfg = std::fs::read_to_string(minilm.join("config.json")).expect("config");
    std::fs::write(dir.path().join("config.json"), cfg.replace("30522", "1000")).expect("write");
    fails(
        &["embed", dir.path().to_str().expect("utf8"), "--text", "x"],
        "has shape",
    );
    // A tokenizer with more tokens than the model embeds (another model's) is refused.
    std::fs::write(dir.path().join("config.json"), &cfg).expect("write");
    let tok = std::fs::read_to_string(minilm.join("tokenizer.json")).expect("tokenizer");
    let mut tok: serde_json::Value = serde_json::from_str(&tok).expect("json");
    let vocab = tok["model"]["vocab"].as_object_mut().expect("vocab");
    for i in 0..8 {
        vocab.insert(format!("extra{i}"), (30522 + i).into());
    }
    std::fs::write(dir.path().join("tokenizer.json"), tok.to_string()).expect("write");
    fails(
        &["embed", dir.path().to_str().expect("utf8"), "--text", "x"],
        "do not belong together",
    );
}

#[test]
fn index_lifecycle_and_refusals() {
    let dir = tempfile::tempdir().expect("tmp");
    let ix = dir.path().join("docs.cidx");
    let ix = ix.to_str().expect("utf8");
    let docs = dir.path().join("docs.jsonl");
    std::fs::write(
        &docs,
        [
            r#"{"id": "rust", "text": "Rust is a systems programming language with memory safety.", "tag": "lang"}"#,
            r#"{"id": "bread", "text": "A man is eating a piece of bread."}"#,
            r#"{"id": 3, "text": "The weather is sunny and warm today."}"#,
            "",
            r#"{"id": "stadium", "text": "He drove to the stadium to watch the match."}"#,
        ]
        .join("\n"),
    )
    .expect("write");
    ok(&[
        "index",
        "create",
        ix,
        "--dim",
        "384",
        "--metric",
        "cosine",
        "--model",
        "all-minilm-l6-v2",
    ]);
    fails(&["index", "create", ix, "--dim", "384"], "exists");
    ok(&["index", "add", ix, "--file", docs.to_str().expect("utf8")]);
    let out = ok(&[
        "index",
        "search",
        ix,
        "--query",
        "Which language is memory safe?",
        "-k",
        "2",
        "--json",
    ]);
    let hits: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("hit"))
        .collect();
    assert_eq!(hits.len(), 2);
    assert_eq!(hits[0]["id"], "rust");
    assert_eq!(hits[0]["payload"]["tag"], "lang");
    assert!(hits[0]["score"].as_f64().expect("score") > hits[1]["score"].as_f64().expect("score"));
    let out = ok(&[
        "index",
        "search",
        ix,
        "--query",
        "forecast: sun",
        "-k",
        "1",
        "--json",
    ]);
    assert!(out.contains("\"id\":\"3\""), "{out}");
    ok(&["index", "delete", ix, "--id", "rust"]);
    let out = ok(&[
        "index",
        "search",
        ix,
        "--query",
        "Which language is memory safe?",
        "-k",
        "4",
        "--json",
    ]);
    assert_eq!(out.lines().count(), 3);
    assert!(!out.contains("\"rust\""));
    let info = ok(&["index", "info", ix]);
    assert!(
        info.contains("points    3") && info.contains("metric    cosine"),
        "{info}"
    );

    // Another model's vectors would be another space: refused. So is a model of another width.
    fails(
        &[
            "index",
            "add",
            ix,
            "--file",
            docs.to_str().expect("utf8"),
            "--model",
            "paraphrase-minilm-l3-v2-onnx",
        ],
        "mix two vector spaces",
    );
    let small = dir.path().join("small.cidx");
    let small = small.to_str().expect("utf8");
    ok(&[
        "index", "create", small, "--dim", "16", "--kind", "flat", "--metric", "l2",
    ]);
    fails(
        &[
            "index",
            "add",
            small,
            "--file",
            docs.to_str().expect("utf8"),
            "--model",
            "all-minilm-l6-v2",
        ],
        "384-d vectors; the index holds 16-d",
    );
    fails(
        &[
            "index",
            "create",
            dir.path().join("m.cidx").to_str().expect("utf8"),
            "--dim",
            "8",
            "--metric",
            "manhattan",
        ],
        "unknown metric",
    );
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"id\": 1}\n").expect("write");
    fails(
        &["index", "add", ix, "--file", bad.to_str().expect("utf8")],
        "line 1: needs a non-empty \"text\"",
    );

    // A damaged file is refused, by name, never half-read.
    let mut bytes = std::fs::read(ix).expect("read");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 1;
    std::fs::write(ix, &bytes).expect("write");
    fails(&["index", "info", ix], "checksum mismatch");
    fails(
        &[
            "index",
            "search",
            dir.path().join("none.cidx").to_str().expect("utf8"),
            "--query",
            "x",
        ],
        "no index",
    );
}
