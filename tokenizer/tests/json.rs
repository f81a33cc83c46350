//! `Tokenizer::from_tokenizer_json`: the Hugging Face tokenizers built from the llama.cpp test
//! vocabularies are saved as `tokenizer.json` (with a `tokenizer_config.json` beside them), loaded back, and
//! must still reproduce llama.cpp's test vectors, with BOS/EOS/SEP read from the post-processor.

use std::path::Path;

use cinder_gguf::GgufFile;
use cinder_tokenizer::{Tokenizer, TokenizerKind};

fn vocab(name: &str) -> (Tokenizer, Vec<(String, Vec<u32>)>) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/vocab");
    let base = dir.join(format!("ggml-vocab-{name}.gguf"));
    let tok = Tokenizer::from_gguf(&GgufFile::open(&base).unwrap()).unwrap();
    let inp = std::fs::read_to_string(base.with_extension("gguf.inp")).unwrap();
    let out = std::fs::read_to_string(base.with_extension("gguf.out")).unwrap();
    let mut strings: Vec<String> = inp
        .split("\n__ggml_vocab_test__\n")
        .map(str::to_string)
        .collect();
    if strings.last().is_some_and(String::is_empty) {
        strings.pop();
    }
    let ids = out
        .lines()
        .map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect());
    let cases: Vec<_> = strings.into_iter().zip(ids).collect();
    assert_eq!(cases.len(), 46);
    (tok, cases)
}

fn save_and_load(tok: &Tokenizer, config: &str) -> (tempfile::TempDir, Tokenizer) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer.json");
    tok.hf_tokenizer().unwrap().save(&path, false).unwrap();
    std::fs::write(dir.path().join("tokenizer_config.json"), config).unwrap();
    let loaded = Tokenizer::from_tokenizer_json(&path).unwrap();
    (dir, loaded)
}

#[test]
fn json_round_trip_keeps_tokenization() {
    for name in ["qwen2", "llama-spm", "bert-bge"] {
        let (tok, cases) = vocab(name);
        let cfg = r#"{"chat_template": "{{ messages }}", "eos_token": {"content": "</s>"}}"#;
        let (_dir, json) = save_and_load(&tok, cfg);
        assert_eq!(json.kind, tok.kind, "{name}");
        assert_eq!(json.vocab_size, tok.vocab_size, "{name}");
        assert_eq!(json.chat_template.as_deref(), Some("{{ messages }}"));
        for (text, want) in &cases {
            assert_eq!(&json.encode(text, false).unwrap(), want, "{name}: {text:?}");
            for &id in want {
                assert_eq!(
                    json.token_bytes(id).unwrap(),
                    tok.token_bytes(id).unwrap(),
                    "{name}: token {id}"
                );
            }
        }
        assert_eq!(json.add_bos, tok.add_bos, "{name}: add_bos");
        assert_eq!(
            json.bos_id.filter(|_| json.add_bos),
            tok.bos_id.filter(|_| tok.add_bos),
            "{name}"
        );
    }
}

#[test]
fn json_special_tokens_and_post_processor() {
    let (tok, _) = vocab("llama-spm");
    let (_dir, json) = save_and_load(&tok, "{}");
    assert_eq!(json.kind, TokenizerKind::SentencePiece);
    assert!(json.add_bos && !json.add_eos);
    assert_eq!(json.bos_id, Some(1));
    let ids = json.encode("Hello world", true).unwrap();
    assert_eq!(ids, [1, 15043, 3186]);
    assert_eq!(json.decode(&ids, true).unwrap(), "Hello world");
    // parse_special decides whether "</s>" in the text is the control token
    assert_eq!(
        json.tokenize("a</s>", false, true).unwrap().last(),
        Some(&2)
    );
    assert!(!json.encode("a</s>", false).unwrap().contains(&2));

    let (tok, _) = vocab("bert-bge");
    let (_dir, json) = save_and_load(&tok, "{}");
    assert_eq!(json.kind, TokenizerKind::WordPiece);
    assert_eq!((json.bos_id, json.sep_id), (Some(101), Some(102)));
    assert!(json.add_sep);
    assert_eq!(
        json.encode("hello world", true).unwrap(),
        [101, 7592, 2088, 102]
    );
    assert_eq!(
        tok.encode("hello world", true).unwrap(),
        [101, 7592, 2088, 102]
    );

    let missing = tempfile::tempdir().unwrap();
    assert!(Tokenizer::from_tokenizer_json(missing.path().join("tokenizer.json")).is_err());
    std::fs::write(missing.path().join("tokenizer.json"), "{\"not\": 1}").unwrap();
    assert!(Tokenizer::from_tokenizer_json(missing.path().join("tokenizer.json")).is_err());
}

/// `encode_truncated` cuts as Hugging Face's tokenizer does with a truncation length set (the
/// sentence-transformers input path): the text's tokens are cut so the special tokens still fit.
/// Checked on llama.cpp's test strings for a WordPiece (`[CLS]` … `[SEP]`) and a SentencePiece
/// (BOS only) vocabulary, from the GGUF (Cinder's own tokenizer) and from the `tokenizer.json`.
#[test]
fn truncation_matches_hugging_face() {
    use tokenizers::TruncationParams;
    for name in ["bert-bge", "llama-spm"] {
        let (tok, cases) = vocab(name);
        let (_dir, json) = save_and_load(&tok, "{}");
        for max in [3, 8, 16] {
            let mut hf = tok.hf_tokenizer().unwrap();
            hf.with_truncation(Some(TruncationParams {
                max_length: max,
                ..TruncationParams::default()
            }))
            .unwrap();
            for (text, _) in &cases {
                let want = hf.encode(text.as_str(), true).unwrap().get_ids().to_vec();
                assert!(want.len() <= max);
                for (what, t) in [("gguf", &tok), ("json", &json)] {
                    let got = t.encode_truncated(text, max).unwrap();
                    assert_eq!(got, want, "{name} {what}, max {max}: {text:?}");
                }
            }
        }
        // Long enough: nothing is cut, and it is `tokenize` with specials.
        let t = "Hello world, and more words";
        assert_eq!(
            tok.encode_truncated(t, 512).unwrap(),
            tok.tokenize(t, true, true).unwrap()
        );
    }
}

/// A `tokenizer.json` that carries its own truncation and padding (sentence-transformers exports
/// do) encodes whole and unpadded: lengths are the caller's to set.
#[test]
fn a_files_truncation_and_padding_are_dropped() {
    use tokenizers::{PaddingParams, PaddingStrategy, TruncationParams};
    let (tok, _) = vocab("bert-bge");
    let mut hf = tok.hf_tokenizer().unwrap();
    hf.with_truncation(Some(TruncationParams {
        max_length: 4,
        ..TruncationParams::default()
    }))
    .unwrap();
    hf.with_padding(Some(PaddingParams {
        strategy: PaddingStrategy::Fixed(32),
        ..PaddingParams::default()
    }));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer.json");
    hf.save(&path, false).unwrap();
    let json = Tokenizer::from_tokenizer_json(&path).unwrap();
    let text = "the quick brown fox jumps over the lazy dog";
    let want = tok.encode(text, true).unwrap();
    assert_eq!(want.len(), 11);
    assert_eq!(json.encode(text, true).unwrap(), want);
    assert_eq!(json.encode_truncated(text, 6).unwrap().len(), 6);
}
