//! Mutations of a tokenizer-only GGUF: the tokenizer metadata is untrusted input too. Every variant
//! goes through the fuzz target's tokenizer step (build the tokenizer when the file still parses,
//! then encode and decode with it), which must never panic.

use cinder_gguf::writer::GgufWriter;
use cinder_gguf::{GgufFile, Value, ValueType};

// only its tokenizer step is used here (`mutations.rs` runs the whole body)
#[allow(dead_code)]
#[path = "../../gguf/fuzz/src/lib.rs"]
mod fuzz_body;

/// A small byte-level BPE vocabulary as a GGUF (no tensors): the 256 byte characters, a few merges,
/// two control tokens, the llama3 pre-tokenizer (so `ignore_merges` runs too).
fn tokenizer_file() -> Vec<u8> {
    let strs = |xs: Vec<String>| {
        Value::Array(
            ValueType::String,
            xs.into_iter().map(Value::String).collect(),
        )
    };
    let mut tokens: Vec<String> = (0..=255u8)
        .map(|b| {
            let keep = (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
            let skipped = (0..b)
                .filter(|&x| !((33..=126).contains(&x) || (161..=172).contains(&x) || x >= 174))
                .count() as u32;
            let c = if keep {
                char::from(b)
            } else {
                char::from_u32(256 + skipped).unwrap()
            };
            c.to_string()
        })
        .collect();
    tokens.extend(["Ġh", "Ġhi", "hi", "<|end|>", "<s>"].map(String::from));
    let n = tokens.len();
    let mut types = vec![Value::I32(1); n];
    types[n - 2] = Value::I32(3);
    types[n - 1] = Value::I32(3);
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", Value::String("llama".into()))
        .unwrap();
    w.add_kv("tokenizer.ggml.model", Value::String("gpt2".into()))
        .unwrap();
    w.add_kv("tokenizer.ggml.pre", Value::String("llama3".into()))
        .unwrap();
    w.add_kv("tokenizer.ggml.tokens", strs(tokens)).unwrap();
    w.add_kv(
        "tokenizer.ggml.token_type",
        Value::Array(ValueType::I32, types),
    )
    .unwrap();
    w.add_kv(
        "tokenizer.ggml.merges",
        strs(["Ġ h", "Ġh i", "h i"].map(String::from).to_vec()),
    )
    .unwrap();
    w.add_kv("tokenizer.ggml.eos_token_id", Value::U32(n as u32 - 2))
        .unwrap();
    w.add_kv("tokenizer.ggml.bos_token_id", Value::U32(n as u32 - 1))
        .unwrap();
    w.add_kv("tokenizer.ggml.add_bos_token", Value::Bool(true))
        .unwrap();
    w.add_kv(
        "tokenizer.chat_template",
        Value::String("{{ messages }}".into()),
    )
    .unwrap();
    w.to_bytes().unwrap()
}

/// The tokenizer metadata is untrusted input too: every truncation of a tokenizer-only file and
/// byte flips across its header go through the fuzz body, which builds the tokenizer when the file
/// still parses and encodes and decodes with it. No variant may panic; the intact file builds.
#[test]
fn tokenizer_metadata_mutations() {
    let bytes = tokenizer_file();
    let f = GgufFile::from_bytes(bytes.clone()).unwrap();
    let tok = cinder_tokenizer::Tokenizer::from_gguf(&f).expect("the intact file builds");
    assert_eq!(tok.encode(" hi hi", false).unwrap().len(), 2);
    let mut panics = Vec::new();
    let mut built = 0;
    let mut run = |label: String, b: &[u8]| {
        let r = std::panic::catch_unwind(|| {
            GgufFile::from_bytes(b.to_vec())
                .ok()
                .is_some_and(|f| fuzz_body::use_tokenizer(&f))
        });
        match r {
            Ok(ok) => built += usize::from(ok),
            Err(_) => panics.push(label),
        }
    };
    for cut in (0..bytes.len()).step_by(7) {
        run(format!("truncate at {cut}"), &bytes[..cut]);
    }
    for pos in 0..bytes.len() {
        for v in [0x00u8, 0xff, bytes[pos] ^ 0x01, bytes[pos] ^ 0x80] {
            let mut b = bytes.clone();
            b[pos] = v;
            run(format!("byte {pos} = {v:#04x}"), &b);
        }
    }
    assert!(
        panics.is_empty(),
        "variants panicked:\n{}",
        panics.join("\n")
    );
    // many flips land in token texts or values and still build
    assert!(built > 1000, "only {built} variants built a tokenizer");
}

/// Adds `tokenizer.gguf` to the fuzz seed corpus in `CINDER_GGUF_FUZZ_CORPUS` when it names a
/// directory (beside the files `gguf/tests/mutations.rs` writes; see `gguf/fuzz/README.md`), else
/// to a temporary one; the seed must parse and build its tokenizer in the fuzz body.
#[test]
fn write_fuzz_seed_tokenizer() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::env::var_os("CINDER_GGUF_FUZZ_CORPUS")
        .map_or_else(|| tmp.path().to_path_buf(), std::path::PathBuf::from);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tokenizer.gguf"), tokenizer_file()).unwrap();
    let bytes = std::fs::read(dir.join("tokenizer.gguf")).unwrap();
    let f = cinder_gguf::GgufFile::from_bytes(bytes).expect("the seed parses");
    assert!(
        fuzz_body::use_tokenizer(&f),
        "the seed builds its tokenizer"
    );
}
