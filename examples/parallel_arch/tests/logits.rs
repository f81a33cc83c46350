//! The example architecture against an independent forward of the same weights: a float64 NumPy
//! implementation (`reference/make_reference.py`) gives, per prompt, the greedy continuation and
//! each step's top-5 log-probabilities; Cinder runs the file through the registry, the engine and
//! the front door.

use std::path::PathBuf;

use cinder::runtime::engine::{Event, Request};
use cinder::{BackendKind, GenerateOptions, Llm};
use serde::Deserialize;

#[derive(Deserialize)]
struct Reference {
    prompt: String,
    prompt_tokens: Vec<u32>,
    greedy: Vec<u32>,
    /// per step: (token, log-probability), most likely first
    top5: Vec<Vec<(u32, f32)>>,
}

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("data")
        .join(name)
}

/// Largest difference allowed between Cinder's and NumPy's log-probability of the same token:
/// NumPy computes in f64, Cinder in f32 with its own kernels' rounding of the activations; the
/// largest of the 110 differences measured is 0.014.
const LOGPROB_TOL: f32 = 0.03;
/// Two candidates closer than this in log-probability (= logit) are a near-tie: either pick is
/// right, and the texts may part after it.
const NEAR_TIE: f32 = 0.2;

#[test]
fn registered_architecture_matches_numpy() {
    let file = data("neox-tiny.gguf");
    // Before registration the loader names what it does not know.
    let e = Llm::builder(&file)
        .backend(BackendKind::Flex)
        .build()
        .expect_err("gptneox is not built in");
    assert!(e.to_string().contains("gptneox"), "{e}");
    assert!(
        cinder::importer::registry::architectures()
            .iter()
            .all(|(n, _)| *n != "gptneox")
    );

    cinder_example_neox::register();
    let llm = Llm::builder(&file)
        .backend(BackendKind::Flex)
        .kv_memory(16 << 20)
        .build()
        .expect("the registered architecture loads through the front door");
    assert_eq!(llm.info().arch, "gptneox");

    let text = std::fs::read_to_string(data("neox-tiny.reference.jsonl")).expect("reference");
    let mut compared = 0;
    for line in text.lines() {
        let r: Reference = serde_json::from_str(line).expect("reference line");
        assert_eq!(
            llm.tokenizer().encode(&r.prompt, true).expect("encode"),
            r.prompt_tokens
        );
        let req = Request {
            logprobs: Some(5),
            stop_on_eos: false,
            ..Request::greedy(r.prompt_tokens.clone(), r.greedy.len())
        };
        let mut events = llm.engine().submit(req).expect("submit");
        let mut steps = Vec::new();
        while let Some(ev) = events.blocking_next() {
            if let Event::Token { id, logprob, .. } = ev {
                steps.push((id, logprob.expect("asked for log-probabilities")));
            }
        }
        assert_eq!(steps.len(), r.greedy.len());
        for (i, ((id, lp), top)) in steps.iter().zip(&r.top5).enumerate() {
            // Every reference candidate's log-probability, where Cinder lists it too.
            for &(tok, want) in top {
                if let Some(&(_, got)) = lp.top.iter().find(|(t, _)| *t == tok) {
                    assert!(
                        (got - want).abs() <= LOGPROB_TOL,
                        "{:?} step {i}: token {tok} log p {got} vs NumPy {want}",
                        r.prompt
                    );
                    compared += 1;
                }
            }
            if top[0].1 - top[1].1 < NEAR_TIE {
                break; // a near-tie: the continuations may part here
            }
            assert_eq!(*id, top[0].0, "{:?} step {i}: greedy token", r.prompt);
        }
        // The front door's text call gives the same tokens as the engine request.
        let out = llm
            .generate(
                &r.prompt,
                &GenerateOptions {
                    ignore_eos: true,
                    ..GenerateOptions::greedy(r.greedy.len())
                },
            )
            .expect("generate");
        let ids: Vec<u32> = steps.iter().map(|s| s.0).collect();
        assert_eq!(out.tokens, ids);
    }
    assert!(compared >= 40, "only {compared} log-probabilities compared");
}
