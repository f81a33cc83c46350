//! Chat templates: the file's own (SmolLM2, ChatML) and the built-in fallback for files without one
//! (the Gemma 3 GGUF here carries none).

mod common;

use cinder::gguf::GgufFile;
use cinder::runtime::tokenizer::{ChatMessage, apply_chat_template};
use cinder::tokenizer::Tokenizer;

fn render(model: &str) -> (String, Vec<u32>) {
    let f = GgufFile::open(common::model_path(model)).expect("model");
    let tok = Tokenizer::from_gguf(&f).expect("tokenizer");
    let msgs = [
        ChatMessage::new("system", "Be brief."),
        ChatMessage::new("user", "Hello"),
    ];
    let text = apply_chat_template(&tok, &msgs, true).expect("template");
    let ids = tok.tokenize(&text, false, true).expect("tokenize");
    (text, ids)
}

#[test]
fn smollm2_uses_its_chatml_template() {
    let (text, ids) = render("smollm2-135m");
    assert_eq!(
        text,
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
    );
    // <|im_start|> = 1 and <|im_end|> = 2 are single control tokens, not text
    assert_eq!(ids.iter().filter(|&&t| t == 1).count(), 3);
    assert_eq!(ids.iter().filter(|&&t| t == 2).count(), 2);
}

#[test]
fn gemma3_falls_back_to_turn_format() {
    let (text, ids) = render("gemma3-270m");
    assert_eq!(
        text,
        "<bos><start_of_turn>user\nBe brief.\n\nHello<end_of_turn>\n<start_of_turn>model\n"
    );
    // BOS = 2, <start_of_turn> = 105, <end_of_turn> = 106
    assert_eq!(ids[..2], [2, 105]);
    assert_eq!(ids.iter().filter(|&&t| t == 105).count(), 2);
    assert_eq!(ids.iter().filter(|&&t| t == 106).count(), 1);
}

/// A conversation through one [`Session`] (as `cinder chat` runs it): each turn's prompt is the
/// whole conversation, and all of it but the tail since the last full KV block comes from the
/// earlier turns' cache, so a turn prefills only its new tokens; a session without prefix caching
/// prefills everything.
#[test]
fn a_chat_session_prefills_only_each_turn_s_new_tokens() {
    use cinder::prelude::*;
    use cinder::runtime::generate::Session;
    struct Turns;
    impl BackendTask for Turns {
        type Output = Vec<(usize, usize, usize)>;
        fn run<B: InferenceBackend>(self, device: B::Device) -> Self::Output {
            let m = cinder::importer::load_model::<B>(&common::model_path("smollm2-135m"), &device)
                .expect("load");
            let opts = GenerateOptions {
                max_tokens: 12,
                sampling: cinder::runtime::sampler::SamplingParams::greedy(),
                ..GenerateOptions::default()
            };
            let mut out = Vec::new();
            for caching in [true, false] {
                let mut s = Session::new(&m.model, None, &m.tokenizer, 2048, None, caching)
                    .expect("session");
                let mut msgs = vec![ChatMessage::new("system", "You are a helpful assistant.")];
                for q in [
                    "What is the capital of France?",
                    "And of Italy?",
                    "And of Spain?",
                ] {
                    msgs.push(ChatMessage::new("user", q));
                    let text = apply_chat_template(&m.tokenizer, &msgs, true).expect("template");
                    let ids = m.tokenizer.tokenize(&text, false, true).expect("tokenize");
                    let g = s.generate(&ids, &opts, &mut |_| true).expect("generate");
                    out.push((ids.len(), g.cached_tokens, usize::from(caching)));
                    msgs.push(ChatMessage::new("assistant", g.text.trim()));
                }
            }
            out
        }
    }
    let turns = dispatch(common::primary_backend(), Turns).expect("backend");
    eprintln!("(prompt tokens, cached, caching) per turn: {turns:?}");
    for (i, &(prompt, cached, caching)) in turns.iter().enumerate() {
        let first = i % 3 == 0;
        if caching == 0 || first {
            assert_eq!(cached, 0, "turn {i}: {turns:?}");
        } else {
            // the block size is 16: at most the last partial block and the new message are new
            let prev = turns[i - 1].0;
            assert!(cached >= prev / 16 * 16 - 16, "turn {i}: {turns:?}");
            assert!(prompt - cached < prompt / 2, "turn {i}: {turns:?}");
        }
    }
}
