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
