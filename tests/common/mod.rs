//! Shared helpers for the integration tests: the real models from the catalog, the reference data, and
//! the list of backends to run on.
#![allow(dead_code)]

use std::path::PathBuf;

pub mod hf;
pub mod server;

use cinder::backends::{self, BackendKind};
use serde::Deserialize;

/// Drains an engine stream: the token ids, the finish reason and the prompt tokens served from the
/// prefix cache.
pub fn collect_stream(
    mut s: cinder::runtime::engine::EventStream,
) -> (Vec<u32>, cinder::runtime::engine::FinishReason, usize) {
    use cinder::runtime::engine::Event;
    let mut toks = Vec::new();
    while let Some(ev) = s.blocking_next() {
        match ev {
            Event::Token { id, .. } => toks.push(id),
            Event::Finished { reason, usage, .. } => return (toks, reason, usage.cached_tokens),
        }
    }
    panic!("stream ended without a Finished event");
}

/// [`collect_stream`] for a request that must run to its token limit: the token ids.
pub fn collect_to_length(s: cinder::runtime::engine::EventStream) -> Vec<u32> {
    let (toks, reason, _) = collect_stream(s);
    assert_eq!(reason, cinder::runtime::engine::FinishReason::Length);
    toks
}

/// The prompts of a greedy reference file, then `extra`.
pub fn reference_prompts(reference: &str, extra: &[&str]) -> Vec<String> {
    let mut p: Vec<String> = greedy_refs(reference)
        .into_iter()
        .map(|r| r.prompt)
        .collect();
    p.extend(extra.iter().map(|s| s.to_string()));
    p
}

/// A catalog model's path (pulled into the cache on first use).
pub fn model_path(name: &str) -> PathBuf {
    match cinder::catalog::resolve(name) {
        Ok(r) => r.path,
        Err(e) => panic!("cannot get model {name}: {e}"),
    }
}

/// A model file by name: a tiny architecture file of `tests/data/tiny` (`qwen3moe-tiny`, …), or
/// else a catalog model ([`model_path`]).
pub fn model_file(name: &str) -> PathBuf {
    let tiny = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/tiny")
        .join(format!("{name}.gguf"));
    if tiny.is_file() {
        tiny
    } else {
        model_path(name)
    }
}

/// Backends the tests run on: `CINDER_TEST_BACKENDS=flex,ndarray` or every compiled one. A named
/// backend that is not compiled in fails the test (a pass that silently ran on fewer backends
/// would claim what it did not check).
pub fn test_backends() -> Vec<BackendKind> {
    let kinds = match std::env::var("CINDER_TEST_BACKENDS") {
        Ok(s) if !s.trim().is_empty() => s
            .split(',')
            .map(|n| {
                let k: BackendKind = n.trim().parse().expect("bad CINDER_TEST_BACKENDS entry");
                assert!(
                    k.is_compiled(),
                    "CINDER_TEST_BACKENDS names {k}, which this test binary was built without \
                     (add `--features {k}`)"
                );
                k
            })
            .collect(),
        _ => backends::compiled(),
    };
    assert!(!kinds.is_empty(), "no backend to test on");
    kinds
}

/// One line of a `*.greedy.jsonl` reference file.
#[derive(Debug, Deserialize)]
pub struct GreedyRef {
    pub prompt: String,
    pub prompt_tokens: Vec<u32>,
    pub greedy: Vec<u32>,
    pub text: String,
    pub steps: Vec<StepRef>,
}

/// The reference's top-5 at one generated position.
#[derive(Debug, Deserialize)]
pub struct StepRef {
    pub token: u32,
    pub top5: Vec<(u32, f32)>,
}

/// Reads a reference file from tests/data.
pub fn greedy_refs(file: &str) -> Vec<GreedyRef> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(file);
    let text = std::fs::read_to_string(&path).expect("reference file");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("reference line"))
        .collect()
}

/// llama-perplexity's PPL for a model file, read from tests/data/perplexity.md.
pub fn reference_ppl(file_prefix: &str) -> f64 {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/perplexity.md");
    let text = std::fs::read_to_string(path).expect("perplexity.md");
    for line in text.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() >= 4 && cells[1].starts_with(file_prefix) {
            return cells[2].parse().expect("PPL cell");
        }
    }
    panic!("no reference PPL for {file_prefix}");
}

/// The backend heavy tests run on: the first of [`test_backends`].
pub fn primary_backend() -> BackendKind {
    test_backends()[0]
}

/// The official OpenAI Python client, installed by pip into Cinder's cache
/// (`$CINDER_HOME/python/openai-3.57.0`) as the catalog installs models: pinned, reused across runs.
/// Returns the directory to put on `PYTHONPATH`.
pub fn openai_python_site() -> PathBuf {
    python_package_site("openai", "3.57.0")
}

/// The official Anthropic Python client, pinned, as [`openai_python_site`] installs OpenAI's.
pub fn anthropic_python_site() -> PathBuf {
    python_package_site("anthropic", "2.17.0")
}

/// `PACKAGE==VERSION` installed by pip into `$CINDER_HOME/python/PACKAGE-VERSION` once.
fn python_package_site(package: &str, version: &str) -> PathBuf {
    let home = std::env::var("CINDER_HOME").map_or_else(
        |_| {
            PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| ".".into()))
                .join(".cache/cinder")
        },
        PathBuf::from,
    );
    let site = home.join(format!("python/{package}-{version}"));
    if !site.join(package).exists() {
        let st = std::process::Command::new("python3")
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--target",
            ])
            .arg(&site)
            .arg(format!("{package}=={version}"))
            .status()
            .expect("python3 -m pip runs (the model catalog needs it too)");
        assert!(st.success(), "pip could not install {package}=={version}");
    }
    site
}

/// Cosine similarity of two vectors, summed in f64.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let na: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

/// A model's own near-tie: its top two within 0.03 in probability or 0.2 in logit.
pub const NEAR_TIE: (f32, f32) = (0.03, 0.2);

/// Checks that `tok` is the greedy pick of the logits `row` or within the row's own near-tie
/// `tie` of it (`.0` in probability, `.1` in logit): a token whose probability is that close to
/// the top one's may be taken first by arithmetic that rounds differently, whether it ranks
/// second or third (a three-way near-tie). Returns the top token and both probabilities on a
/// miss, for the caller's message; `Ok(None)` where `tok` is the top pick.
pub fn near_tie_pick(
    row: &[f32],
    tok: usize,
    tie: (f32, f32),
) -> Result<Option<(usize, f32, f32)>, String> {
    let top = row
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or(0, |(i, _)| i);
    if top == tok {
        return Ok(None);
    }
    let max = row[top];
    let z: f32 = row.iter().map(|l| (l - max).exp()).sum();
    let (p_top, p_tok) = (1.0 / z, (row[tok] - max).exp() / z);
    if p_top - p_tok <= tie.0 || max - row[tok] <= tie.1 {
        Ok(Some((top, p_top, p_tok)))
    } else {
        Err(format!(
            "took {tok} (p {p_tok:.4}) where the model picks {top} (p {p_top:.4}): not a near-tie"
        ))
    }
}
