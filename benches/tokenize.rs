//! Criterion benchmark of the GGUF tokenizers: building each from its file's metadata, and encoding the
//! Lee corpus (~6k words) with Cinder's engine against the Hugging Face tokenizer built from the same
//! vocabulary (`Tokenizer::hf_tokenizer`, what Cinder ran for BPE before its own engine). SmolLM2 is
//! byte-level BPE, Gemma 3 SentencePiece (where the Hugging Face form is only an approximation).
//!
//! `cargo bench --bench tokenize`

use cinder::gguf::GgufFile;
use cinder::tokenizer::Tokenizer;
use criterion::{Criterion, criterion_group, criterion_main};

fn bench(c: &mut Criterion) {
    let Ok(lee) = cinder::catalog::resolve("lee-corpus") else {
        eprintln!("lee-corpus not available: tokenize bench skipped");
        return;
    };
    let text = std::fs::read_to_string(&lee.path).expect("lee corpus");
    for name in ["smollm2-135m", "gemma3-270m"] {
        let Ok(r) = cinder::catalog::resolve(name) else {
            eprintln!("{name} not available: skipped");
            continue;
        };
        let file = GgufFile::open(&r.path).expect("gguf");
        let tok = Tokenizer::from_gguf(&file).expect("tokenizer");
        let hf = tok.hf_tokenizer().expect("hf tokenizer");
        let mut g = c.benchmark_group(format!("tokenize_{name}"));
        g.sample_size(10);
        g.bench_function("build_from_gguf", |b| {
            b.iter(|| Tokenizer::from_gguf(&file).expect("tokenizer"))
        });
        g.bench_function("encode_lee_cinder", |b| {
            b.iter(|| tok.encode(&text, true).expect("encode"))
        });
        g.bench_function("encode_lee_hugging_face", |b| {
            b.iter(|| hf.encode(text.as_str(), true).expect("encode"))
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
