//! Incremental detokenization on the real tokenizers: pieces never split a UTF-8 character and add up
//! to the text that was encoded (byte-level BPE and SentencePiece with byte fallback both give back
//! every byte, so the round trip is exact).

mod common;

use cinder::gguf::GgufFile;
use cinder::runtime::tokenizer::Detokenizer;
use cinder::tokenizer::Tokenizer;

fn check(model: &str) {
    let f = GgufFile::open(common::model_path(model)).expect("model");
    let tok = Tokenizer::from_gguf(&f).expect("tokenizer");
    for text in [
        "héllo wörld — naïve café",
        "Rust 🦀 and emoji 👩‍💻 mixed with 世界 and Ελληνικά",
        "  leading spaces and\ttabs\nnew lines ",
    ] {
        let ids = tok.encode(text, false).expect("encode");
        let whole = tok.decode(&ids, false).expect("decode");
        assert_eq!(whole, text, "{model}: decode of the encoding");
        let mut d = Detokenizer::new(&[]);
        let mut out = String::new();
        for &id in &ids {
            let piece = d.push(&tok, id).expect("push");
            assert!(
                !piece.contains('\u{FFFD}'),
                "{model}: split character in {piece:?}"
            );
            out.push_str(&piece);
        }
        out.push_str(&d.flush(&tok).expect("flush"));
        assert_eq!(out, text, "{model}: incremental decode of {text:?}");
    }
}

#[test]
fn smollm2_pieces_are_whole_characters() {
    check("smollm2-135m");
}

#[test]
fn gemma3_pieces_are_whole_characters() {
    check("gemma3-270m");
}
