//! Tokenizers of the real models Cinder's catalog pins, against llama.cpp (through node-llama-cpp): the
//! `prompt_tokens` of `tests/data/vocab/*.greedy.jsonl` (BOS included when the model adds it) and the
//! detokenized `text` of the greedy continuations. The files come from the catalog (pulled on first use).

use std::path::{Path, PathBuf};
use std::time::Instant;

use cinder_gguf::GgufFile;
use cinder_tokenizer::{Tokenizer, TokenizerKind};

/// The catalog's copy of a model file (pulled and sha256-verified on first use), or a file in
/// `$CINDER_MODEL_DIR` when that is set.
fn model(file: &str) -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("CINDER_MODEL_DIR") {
        return Some(PathBuf::from(dir).join(file));
    }
    let name = match file {
        "SmolLM2-135M-Instruct.Q4_1.gguf" => "smollm2-135m",
        "gemma-3-270m-q4_k_m.gguf" => "gemma3-270m",
        other => panic!("no catalog entry for {other}"),
    };
    match cinder_catalog::resolve(name) {
        Ok(r) => Some(r.path),
        Err(e) => panic!("cannot get {name}: {e}"),
    }
}

fn load(path: &Path) -> Tokenizer {
    let t0 = Instant::now();
    let file = GgufFile::open(path).expect("open model");
    let tok = Tokenizer::from_gguf(&file).expect("tokenizer");
    eprintln!(
        "{}: tokenizer built in {:.2?}",
        path.display(),
        t0.elapsed()
    );
    let rows = file
        .require_tensor("token_embd.weight")
        .expect("token_embd")
        .dims[1] as usize;
    tok.validate_against_model(rows)
        .expect("vocabulary matches the embedding");
    assert!(tok.validate_against_model(rows + 1).is_err());
    tok
}

/// (prompt, prompt_tokens, greedy, text) of each line of a reference file.
fn references(name: &str) -> Vec<(String, Vec<u32>, Vec<u32>, String)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/vocab")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("json line");
            let ids = |k: &str| -> Vec<u32> {
                v[k].as_array()
                    .expect(k)
                    .iter()
                    .map(|x| x.as_u64().expect("id") as u32)
                    .collect()
            };
            let s = |k: &str| v[k].as_str().expect(k).to_string();
            (s("prompt"), ids("prompt_tokens"), ids("greedy"), s("text"))
        })
        .collect()
}

fn check_references(tok: &Tokenizer, name: &str) {
    let refs = references(name);
    assert!(refs.len() >= 3);
    for (prompt, want, greedy, text) in refs {
        let got = tok.encode(&prompt, true).expect("encode");
        assert_eq!(got, want, "{name}: prompt {prompt:?}");
        let body = if tok.add_bos { &got[1..] } else { &got[..] };
        assert_eq!(
            tok.decode(body, false).expect("decode"),
            prompt,
            "{name}: decode of {prompt:?}"
        );
        assert_eq!(
            tok.decode(&got, true).expect("decode"),
            prompt,
            "{name}: decode skipping BOS"
        );
        assert_eq!(
            tok.decode(&greedy, false).expect("decode"),
            text,
            "{name}: greedy text"
        );
        // incremental detokenization: the bytes of the tokens concatenate to the same text
        let mut bytes = Vec::new();
        for &id in &greedy {
            bytes.extend_from_slice(tok.token_bytes(id).expect("token bytes"));
        }
        assert_eq!(String::from_utf8(bytes).expect("utf-8"), text);
    }
}

#[test]
fn smollm2_matches_llama_cpp() {
    let Some(path) = model("SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let tok = load(&path);
    assert_eq!(tok.kind, TokenizerKind::Bpe);
    assert_eq!(tok.pre, "smollm");
    assert!(!tok.add_bos);
    assert_eq!(tok.vocab_size, 49152);
    assert_eq!((tok.bos_id, tok.eos_id), (Some(1), Some(2)));
    assert_eq!(
        tok.encode("The capital of France is", true).unwrap(),
        [504, 3575, 282, 4649, 314]
    );
    // llama.cpp's end-of-generation set: <|endoftext|>, <|im_end|> and the auto-detected FIM repo token
    assert_eq!(tok.eot_ids, [0, 2, 4]);
    assert!(tok.is_eog(2) && !tok.is_eog(1));
    assert!(
        tok.chat_template
            .as_deref()
            .is_some_and(|t| t.contains("<|im_start|>"))
    );
    assert!(tok.special_ids.contains(&1) && tok.is_control(1));
    check_references(&tok, "smollm2-135m-q4_1.greedy.jsonl");

    // parse_special: a rendered chat prompt keeps its control tokens as single ids
    let chat = "<|im_start|>user\nHi<|im_end|>\n";
    let ids = tok.tokenize(chat, false, true).unwrap();
    assert_eq!(ids.first(), Some(&1));
    assert!(ids.contains(&2));
    assert_eq!(tok.decode(&ids, false).unwrap(), chat);
    assert_eq!(tok.decode(&ids, true).unwrap(), "user\nHi\n");
    // without parse_special the markers are plain text (as in the reference prompt)
    assert!(!tok.encode(chat, false).unwrap().contains(&1));
    // the Hugging Face tokenizer built from the same metadata agrees (it matches specials in text)
    let hf_tok = tok.hf_tokenizer().unwrap();
    let hf = hf_tok.encode(chat, false).unwrap();
    assert_eq!(hf.get_ids(), ids.as_slice());
    // a whole real corpus (360 kB of news text): Cinder's BPE gives the Hugging Face model's ids
    let lee = cinder_catalog::resolve("lee-corpus").expect("lee-corpus");
    let text = std::fs::read_to_string(&lee.path).expect("read the Lee corpus");
    let ours = tok.encode(&text, false).unwrap();
    let theirs = hf_tok.encode(text.as_str(), false).unwrap();
    assert_eq!(ours.len(), theirs.get_ids().len());
    assert!(
        ours == theirs.get_ids(),
        "the Lee corpus tokenizes differently"
    );
}

#[test]
fn gemma3_matches_llama_cpp() {
    let Some(path) = model("gemma-3-270m-q4_k_m.gguf") else {
        return;
    };
    let tok = load(&path);
    assert_eq!(tok.kind, TokenizerKind::SentencePiece);
    assert!(tok.add_bos && !tok.add_space_prefix);
    assert_eq!((tok.bos_id, tok.eos_id), (Some(2), Some(1)));
    assert_eq!(tok.vocab_size, 262144);
    let eot = tok.token_id("<end_of_turn>").expect("<end_of_turn>");
    assert!(tok.is_eog(eot) && tok.is_eog(1));
    check_references(&tok, "gemma-3-270m-q4_k_m.greedy.jsonl");

    // user-defined tokens (newline runs) are matched in text even without parse_special
    let nl2 = tok.token_id("\n\n").expect("\\n\\n token");
    assert!(tok.encode("a\n\nb", false).unwrap().contains(&nl2));
    // control tokens only with parse_special
    let sot = tok.token_id("<start_of_turn>").expect("<start_of_turn>");
    let text = "<start_of_turn>user\nHello<end_of_turn>\n";
    let ids = tok.tokenize(text, true, true).unwrap();
    assert_eq!(&ids[..2], &[2, sot]);
    assert!(ids.contains(&eot));
    assert!(!tok.encode(text, true).unwrap().contains(&sot));
    assert_eq!(tok.decode(&ids, true).unwrap(), "user\nHello\n");

    // byte fallback and round trips of awkward text
    for s in [
        "Äpfel 🦙 ∮ E⋅da = Q",
        "  two  spaces\tand tabs\n\n\nend",
        "日本語のテキスト",
        "",
    ] {
        let ids = tok.encode(s, false).unwrap();
        assert_eq!(tok.decode(&ids, false).unwrap(), s);
    }
}
