//! The body of the `gguf_parse` fuzz target.
//!
//! `gguf/tests/mutations.rs` and `tokenizer/tests/mutations.rs` include this file by path, so the same body is compiled and run
//! on stable in the normal test suite, over the deterministic mutation corpus.

use cinder_gguf::{GgufError, GgufFile, Value};

/// Parses `data` as GGUF; if that succeeds, reads every metadata value through the typed accessors,
/// dequantizes every tensor, and builds the tokenizer when the file names one ([`use_tokenizer`]).
/// Returns the number of elements dequantized, or the parse error.
///
/// Panics only on a broken invariant of the reader (a validated tensor whose bytes or dequantization
/// disagree with its header): those are the bugs fuzzing looks for.
pub fn parse_and_dequantize(data: &[u8]) -> Result<u64, GgufError> {
    let file = GgufFile::from_bytes(data.to_vec())?;
    for (key, value) in file.metadata() {
        touch(value);
        let _ = (
            file.get_str(key),
            file.get_u64(key),
            file.opt_f64(key),
            file.opt_bool(key),
        );
    }
    assert_eq!(
        file.keys().len(),
        file.metadata().len(),
        "key order and metadata disagree"
    );
    let _ = file.architecture();
    let _ = format!("{file:?}");
    let mut n = 0u64;
    for t in file.tensors() {
        let _ = t.shape_row_major();
        assert!(
            file.tensor(&t.name).is_some(),
            "tensor {:?} not found by name",
            t.name
        );
        let bytes = file.tensor_data(t);
        assert_eq!(
            bytes.len() as u64,
            t.size,
            "tensor {:?}: data length differs from header",
            t.name
        );
        let values = file
            .dequantize(t)
            .unwrap_or_else(|e| panic!("validated tensor {:?} does not dequantize: {e}", t.name));
        assert_eq!(
            values.len() as u64,
            t.n_elements(),
            "tensor {:?}: element count",
            t.name
        );
        n += values.len() as u64;
    }
    use_tokenizer(&file);
    Ok(n)
}

/// Texts that reach every tokenizer path: spaces and newlines, digits, punctuation, multi-byte and
/// invalid-looking characters, special-token markup.
const TEXTS: &[&str] = &[
    "",
    " hi hi\n\n 123,4567 don't!",
    "日本語 🦀 café\t\r\n<|end|><s></s>[CLS]",
    "\u{0}\u{ffff}\u{10ffff}▁▁ab",
];

/// Builds the tokenizer of a file that has `tokenizer.ggml.model` (an error is fine, a panic is
/// not); one that builds must encode and decode [`TEXTS`] with and without special-token parsing.
/// Returns whether a tokenizer was built.
pub fn use_tokenizer(file: &GgufFile) -> bool {
    if file.get("tokenizer.ggml.model").is_none() {
        return false;
    }
    let Ok(tok) = cinder_tokenizer::Tokenizer::from_gguf(file) else {
        return false;
    };
    for text in TEXTS {
        for (add, parse) in [(false, false), (true, true)] {
            if let Ok(ids) = tok.tokenize(text, add, parse) {
                let _ = tok.decode(&ids, false);
                let _ = tok.decode(&ids, true);
                for &id in &ids {
                    let _ = (tok.token_bytes(id), tok.token_text(id), tok.is_eog(id));
                }
            }
        }
    }
    true
}

fn touch(v: &Value) {
    let _ = (
        v.to_string(),
        v.as_u64(),
        v.as_i64(),
        v.as_f64(),
        v.as_bool(),
        v.as_str(),
    );
    if let Some(items) = v.as_array() {
        items.iter().for_each(touch);
    }
}
