//! Tokenizer conformance against llama.cpp's test vectors (`tests/data/vocab/`, see PROVENANCE.md there):
//! each `ggml-vocab-NAME.gguf` with `.inp` (strings separated by `\n__ggml_vocab_test__\n`) and `.out` (the
//! ids llama.cpp's `test-tokenizer-0` expects, tokenized with `add_special = false, parse_special = false`).
//! Also the real SmolLM2 and Gemma 3 GGUFs against llama.cpp's prompt tokens, when present.

use std::path::{Path, PathBuf};

use cinder_gguf::GgufFile;
use cinder_tokenizer::{Tokenizer, TokenizerKind};

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/vocab")
}

/// Reads the `.inp`/`.out` pair as llama.cpp's `read_tests` does.
fn read_cases(name: &str) -> Vec<(String, Vec<u32>)> {
    let base = data_dir().join(format!("ggml-vocab-{name}.gguf"));
    let inp = std::fs::read_to_string(base.with_extension("gguf.inp")).expect("read .inp");
    let out = std::fs::read_to_string(base.with_extension("gguf.out")).expect("read .out");
    let sep = "\n__ggml_vocab_test__\n";
    let mut strings = Vec::new();
    let mut pos = 0;
    while pos < inp.len() {
        match inp[pos..].find(sep) {
            Some(rel) => {
                strings.push(inp[pos..pos + rel].to_string());
                pos += rel + sep.len();
            }
            None => {
                strings.push(inp[pos..].to_string());
                break;
            }
        }
    }
    let ids: Vec<Vec<u32>> = out
        .lines()
        .map(|l| {
            l.split_whitespace()
                .map(|t| t.parse().expect("token id"))
                .collect()
        })
        .collect();
    assert_eq!(
        strings.len(),
        ids.len(),
        "{name}: .inp and .out disagree on the number of tests"
    );
    assert!(strings.len() > 30, "{name}: too few tests");
    strings.into_iter().zip(ids).collect()
}

fn load(name: &str) -> Tokenizer {
    let path = data_dir().join(format!("ggml-vocab-{name}.gguf"));
    let file = GgufFile::open(&path).expect("open vocab gguf");
    Tokenizer::from_gguf(&file).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Encodes every test string; returns (passed, total) and prints each failure. Also checks that the
/// Hugging Face tokenizer in `tokenizer` agrees, and that decoding the expected ids gives the text back.
fn run(name: &str) -> (usize, usize) {
    let tok = load(name);
    let cases = read_cases(name);
    let mut passed = 0;
    for (text, want) in &cases {
        let got = tok
            .encode(text, false)
            .unwrap_or_else(|e| panic!("{name}: encode {text:?}: {e}"));
        if &got == want {
            passed += 1;
        } else {
            eprintln!("{name}: {text:?}\n   want {want:?}\n    got {got:?}");
        }
    }
    eprintln!("{name}: {passed}/{} strings", cases.len());
    let hf_tok = tok.hf_tokenizer().expect("hf tokenizer");
    for (text, want) in &cases {
        let hf = hf_tok.encode(text.as_str(), false).expect("hf encode");
        assert_eq!(
            hf.get_ids(),
            want.as_slice(),
            "{name}: Hugging Face tokenizer on {text:?}"
        );
    }
    for (text, want) in &cases {
        round_trip(name, &tok, text, want);
    }
    (passed, cases.len())
}

/// Decoding llama.cpp's ids gives the text back, as far as the vocabulary allows.
fn round_trip(name: &str, tok: &Tokenizer, text: &str, ids: &[u32]) {
    let decoded = tok.decode(ids, false).expect("decode");
    match tok.kind {
        TokenizerKind::Bpe => {
            let mut bytes = Vec::new();
            for &id in ids {
                bytes.extend_from_slice(tok.token_bytes(id).expect("token bytes"));
            }
            assert_eq!(bytes, text.as_bytes(), "{name}: token bytes of {text:?}");
            if !tok.clean_spaces {
                assert_eq!(decoded, text, "{name}: decode");
            }
        }
        TokenizerKind::SentencePiece => assert_eq!(decoded, text, "{name}: decode"),
        TokenizerKind::WordPiece => {
            // lowercased, accents stripped, unknown words lost: compare what survives
            let simple = |s: &str| {
                s.chars()
                    .filter(char::is_ascii_alphanumeric)
                    .collect::<String>()
            };
            if text.is_ascii() {
                assert_eq!(
                    simple(&decoded),
                    simple(&text.to_lowercase()),
                    "{name}: decode of {text:?}"
                );
            }
        }
    }
}

fn check(name: &str) {
    let (passed, total) = run(name);
    assert_eq!(
        passed, total,
        "{name}: {passed}/{total} strings tokenized as llama.cpp does"
    );
}

#[test]
fn vocab_gpt2() {
    check("gpt-2");
}

#[test]
fn vocab_llama_bpe() {
    check("llama-bpe");
}

#[test]
fn vocab_qwen2() {
    check("qwen2");
}

#[test]
fn vocab_llama_spm() {
    check("llama-spm");
}

#[test]
fn vocab_phi3() {
    check("phi-3");
}

#[test]
fn vocab_bert_bge() {
    check("bert-bge");
}

#[test]
fn vocab_deepseek_coder() {
    check("deepseek-coder");
}

#[test]
fn vocab_falcon() {
    check("falcon");
}

#[test]
fn vocab_starcoder() {
    check("starcoder");
}

/// Texts beyond llama.cpp's vectors: random mixes of words, numbers, punctuation, whitespace runs,
/// accented, CJK, emoji and long letter/digit runs (where merge order matters most), reproducible.
fn random_texts(count: usize, seed: u64) -> Vec<String> {
    const PARTS: &[&str] = &[
        "the",
        " the",
        "The",
        " Hello",
        "world",
        " don't",
        "'s",
        "'LL",
        " I'm",
        "  ",
        "   ",
        "\n",
        "\n\n",
        "\t",
        " \n ",
        "123",
        "4567890",
        " 3.14",
        "1,000",
        "!",
        "?!",
        "...",
        " --",
        "(x)",
        "\"q\"",
        "é",
        "café",
        " naïve",
        "Ωμέγα",
        "Привет",
        "日本語",
        "한국어",
        "🦀",
        "👍🏽",
        "\u{301}",
        "aaaaaaaaaaaaaaaaaaaa",
        "abababababababab",
        "0000000000",
        "\r\n",
        "  indented",
        "snake_case",
        "CamelCase",
        "http://x.y/z?a=1",
        "=>",
        "->",
        "</div>",
        "ǅ",
        "\u{a0}",
    ];
    let mut state = seed;
    let mut next = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) as usize
    };
    (0..count)
        .map(|_| {
            let n = 1 + next() % 12;
            (0..n).map(|_| PARTS[next() % PARTS.len()]).collect()
        })
        .collect()
}

/// Cinder's own byte-level BPE and the Hugging Face BPE model built from the same GGUF give the same
/// ids on texts neither was tuned on.
#[test]
fn bpe_agrees_with_hugging_face_on_random_text() {
    let texts = random_texts(400, 7);
    for name in [
        "gpt-2",
        "llama-bpe",
        "qwen2",
        "falcon",
        "starcoder",
        "deepseek-coder",
    ] {
        let tok = load(name);
        assert_eq!(tok.kind, TokenizerKind::Bpe, "{name}");
        let hf = tok.hf_tokenizer().expect("hf tokenizer");
        for text in &texts {
            let ours = tok.encode(text, false).expect("encode");
            let theirs = hf.encode(text.as_str(), false).expect("hf encode");
            assert_eq!(ours, theirs.get_ids(), "{name}: {text:?}");
            let mut bytes = Vec::new();
            for &id in &ours {
                bytes.extend_from_slice(tok.token_bytes(id).expect("token bytes"));
            }
            assert_eq!(bytes, text.as_bytes(), "{name}: token bytes of {text:?}");
        }
    }
}
