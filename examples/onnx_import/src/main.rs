//! paraphrase-MiniLM-L3-v2 as *generated* Burn code: burn-onnx turned the ONNX graph into Rust at
//! build time (`build.rs`); this runs it on the flex CPU backend and checks the sentence embeddings
//! against onnxruntime's (`tests/data/minilm-onnx.json`, made by `tests/data/make_onnx_reference.py`).
//!
//! `cargo run --release --manifest-path examples/onnx_import/Cargo.toml [-- "a sentence" ...]`
//!
//! Cinder's own path for the same file is the hand-written BERT (`cinder embed
//! paraphrase-minilm-l3-v2-onnx`): the book's "Importing models" chapter says when to use which.

// Generated code: not held to this project's lints.
#[allow(clippy::all, unused)]
pub mod model {
    include!(concat!(env!("OUT_DIR"), "/model/minilm.rs"));
}

use anyhow::{Context, Result, bail};
use burn::prelude::*;
use burn_flex::Flex;

type B = Flex;

/// Cosine at least this close to onnxruntime's (the bar Cinder's own ONNX loader meets).
const BAR: f64 = 0.9999;

/// Token ids and unit vectors, one per text.
type Embedded = (Vec<Vec<u32>>, Vec<Vec<f32>>);

/// Mean-pooled (the graph's own pooling output), L2-normalized sentence embeddings of `texts`,
/// run as one padded batch.
fn embed(
    m: &model::Model<B>,
    tok: &tokenizers::Tokenizer,
    texts: &[String],
    device: &burn::tensor::Device<B>,
) -> Result<Embedded> {
    let enc = tok
        .encode_batch(texts.to_vec(), true)
        .map_err(|e| anyhow::anyhow!("tokenizing: {e}"))?;
    let ids: Vec<Vec<u32>> = enc.iter().map(|e| e.get_ids().to_vec()).collect();
    let t = ids.iter().map(Vec::len).max().unwrap_or(0);
    let b = ids.len();
    let mut flat = vec![0i64; b * t];
    let mut mask = vec![0i64; b * t];
    for (i, row) in ids.iter().enumerate() {
        for (j, &id) in row.iter().enumerate() {
            flat[i * t + j] = i64::from(id);
            mask[i * t + j] = 1;
        }
    }
    let input_ids = Tensor::<B, 2, Int>::from_data(TensorData::new(flat, [b, t]), device);
    let attention_mask = Tensor::<B, 2, Int>::from_data(TensorData::new(mask, [b, t]), device);
    // (last_hidden_state [b, t, 384], sentence embedding [b, 384])
    let (_hidden, pooled) = m.forward(input_ids, attention_mask);
    let v: Vec<f32> = pooled
        .into_data()
        .convert::<f32>()
        .to_vec()
        .map_err(|e| anyhow::anyhow!("reading the output: {e:?}"))?;
    let d = v.len() / b.max(1);
    let vecs = v
        .chunks(d)
        .map(|x| {
            let n = x.iter().map(|a| a * a).sum::<f32>().sqrt().max(1e-12);
            x.iter().map(|a| a / n).collect()
        })
        .collect();
    Ok((ids, vecs))
}

fn main() -> Result<()> {
    let device = Default::default();
    let t0 = std::time::Instant::now();
    let m: model::Model<B> = model::Model::default();
    eprintln!("generated model loaded in {:.0?}", t0.elapsed());
    let mut tok =
        tokenizers::Tokenizer::from_file(concat!(env!("CINDER_ONNX_DIR"), "/tokenizer.json"))
            .map_err(|e| anyhow::anyhow!("tokenizer.json: {e}"))?;
    // The shipped tokenizer pads every input to 128; pad to the longest in the batch instead.
    tok.with_padding(None);

    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.is_empty() {
        let (_, vecs) = embed(&m, &tok, &args, &device)?;
        for (text, v) in args.iter().zip(&vecs) {
            println!(
                "{text:?}: [{:.4}, {:.4}, {:.4}, …] ({} dims)",
                v[0],
                v[1],
                v[2],
                v.len()
            );
        }
        return Ok(());
    }

    let reference: serde_json::Value =
        serde_json::from_str(include_str!("../../../tests/data/minilm-onnx.json"))
            .context("reference JSON")?;
    let sentences: Vec<String> = serde_json::from_value(reference["sentences"].clone())?;
    let r = &reference["models"]["paraphrase-minilm-l3-v2-onnx"];
    let want_ids: Vec<Vec<u32>> = serde_json::from_value(r["input_ids"].clone())?;
    let want: Vec<Vec<f64>> = serde_json::from_value(r["embeddings"].clone())?;
    let t1 = std::time::Instant::now();
    let (ids, got) = embed(&m, &tok, &sentences, &device)?;
    eprintln!("{} sentences in {:.0?}", sentences.len(), t1.elapsed());
    if ids != want_ids {
        bail!("token ids differ from the reference's");
    }
    let mut worst = 1.0f64;
    for (s, (g, w)) in sentences.iter().zip(got.iter().zip(&want)) {
        let dot: f64 = g.iter().zip(w).map(|(a, b)| f64::from(*a) * b).sum();
        let nw = w.iter().map(|b| b * b).sum::<f64>().sqrt();
        let cos = dot / nw;
        worst = worst.min(cos);
        println!("cosine {cos:.7}  {s}");
    }
    println!("worst cosine against onnxruntime: {worst:.7} (bar {BAR})");
    if worst < BAR {
        bail!("the generated model disagrees with onnxruntime");
    }
    Ok(())
}
