//! Prints, for each reference prompt, our top-5 next to llama.cpp's at every teacher-forced step: the
//! tool for chasing a divergence from the reference.
//!
//! `cargo run --release --example teacher_force -- smollm2-135m tests/data/smollm2-135m-q4_1.greedy.jsonl`

use anyhow::Result;
use cinder::prelude::*;
use cinder::runtime::attention::ContiguousKvCache;
use cinder::runtime::generate::prefill;
use cinder::runtime::model::{logits_to_vec, token_tensor};
use cinder::runtime::sampler::top_k_probs;

struct Task(String, String);

impl BackendTask for Task {
    type Output = Result<()>;
    fn run<B: InferenceBackend>(self, device: B::Device) -> Result<()> {
        let path = cinder::catalog::resolve(&self.0)?.path;
        let m = cinder::importer::load_model::<B>(&path, &device)?;
        for line in std::fs::read_to_string(&self.1)?.lines() {
            let r: serde_json::Value = serde_json::from_str(line)?;
            let prompt = r["prompt"].as_str().unwrap_or_default();
            let ids = m.tokenizer.encode(prompt, true)?;
            println!("== {prompt:?} tokens {ids:?}");
            let mut cache = ContiguousKvCache::<B>::new(m.model.n_layers(), 512);
            let mut logits = prefill(&m.model, &mut cache, &ids)?;
            let steps = r["steps"].as_array().cloned().unwrap_or_default();
            for (i, s) in steps.iter().enumerate() {
                let ours = top_k_probs(&logits, 5);
                let want = s["token"].as_u64().unwrap_or(0) as u32;
                let mark = if ours[0].0 == want { " " } else { "X" };
                let fmt: Vec<String> = ours.iter().map(|(t, p)| format!("{t}:{p:.4}")).collect();
                let refs: Vec<String> = s["top5"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|x| format!("{}:{:.4}", x[0], x[1].as_f64().unwrap_or(0.0)))
                            .collect()
                    })
                    .unwrap_or_default();
                println!(
                    "{mark} step {i:2} ours [{}]\n           ref  [{}]",
                    fmt.join(" "),
                    refs.join(" ")
                );
                logits = logits_to_vec(m.model.forward(
                    token_tensor::<B>(&[want], &device),
                    &mut cache,
                    Logits::Last,
                ))?;
            }
        }
        Ok(())
    }
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let model = args.next().unwrap_or_else(|| "smollm2-135m".into());
    let refs = args
        .next()
        .unwrap_or_else(|| "tests/data/smollm2-135m-q4_1.greedy.jsonl".into());
    cinder::backends::dispatch(cinder::backends::default_kind()?, Task(model, refs))?
}
