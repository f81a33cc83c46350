//! Tool calls and reasoning per model family, on the families' real chat templates
//! (`tests/data/templates`, as the models' repositories ship them) and Python jinja2's renders of
//! them (`renders.json`, by `benches/reference/render_tool_templates.py`, set up as transformers
//! renders chat templates):
//! - Cinder renders each conversation as jinja2 does (or refuses where the template raises);
//! - each template's family is recognised ([`ToolFormat`]) and its own rendering of a past call —
//!   the syntax the model was trained to write — parses back into that call, and is text the
//!   forcing grammar of that family accepts;
//! - reasoning templates mark the answer's `<think>` block, which splits out of the text.

mod common;

use cinder::runtime::constraint::Grammars;
use cinder::runtime::reasoning::{self, Part, Splitter};
use cinder::runtime::tokenizer::{ChatMessage, Tokenizer, apply_chat_template_opts};
use cinder::runtime::tools::{self, Choice, Function, Piece, ToolFormat, Tools};
use common::model_path;
use serde_json::{Value, json};

fn renders() -> Value {
    let p =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/templates/renders.json");
    serde_json::from_str(&std::fs::read_to_string(p).expect("renders.json")).expect("JSON")
}

fn template(name: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/templates")
        .join(name);
    std::fs::read_to_string(p).expect("template")
}

/// SmolLM2's tokenizer (the renders' `bos_token` and `eos_token` are its) with `t` as its template.
fn tokenizer_with(t: &str) -> Tokenizer {
    let f = cinder::gguf::GgufFile::open(model_path("smollm2-135m")).expect("gguf");
    let mut tok = Tokenizer::from_gguf(&f).expect("tokenizer");
    tok.chat_template = Some(t.to_string());
    tok
}

fn tools_json() -> Vec<Value> {
    vec![json!({"type": "function", "function": {
        "name": "get_weather", "description": "The current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}})]
}

/// The conversations of `render_tool_templates.py`, by case name.
fn case(name: &str) -> (Vec<ChatMessage>, bool, bool, Option<bool>) {
    let system = ChatMessage::new("system", "You are a helpful assistant.");
    let user = ChatMessage::new("user", "What is the weather in Paris right now?");
    let mut call = ChatMessage::new("assistant", "");
    call.tool_calls = Some(vec![json!({"id": "a1b2c3d4e", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}})]);
    let mut result = ChatMessage::new("tool", "{\"temperature\": 18}");
    result.tool_call_id = Some("a1b2c3d4e".into());
    result.name = Some("get_weather".into());
    // (messages, tools, add_generation_prompt, enable_thinking)
    match name {
        "prefix" => (vec![system, user], true, true, None),
        "with_call" => (vec![system, user, call], true, false, None),
        "round_trip" => (vec![system, user, call, result], true, true, None),
        "plain" => (vec![user], false, true, None),
        "thinking_off" => (vec![user], false, true, Some(false)),
        "thinking_on" => (vec![user], false, true, Some(true)),
        other => panic!("unknown case {other}"),
    }
}

const FAMILIES: &[(&str, Option<ToolFormat>, bool)] = &[
    (
        "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
        Some(ToolFormat::Hermes),
        false,
    ),
    (
        "Qwen-Qwen2.5-7B-Instruct.jinja",
        Some(ToolFormat::Hermes),
        false,
    ),
    ("Qwen-Qwen3-0.6B.jinja", Some(ToolFormat::Hermes), true),
    ("Qwen-QwQ-32B.jinja", Some(ToolFormat::Hermes), true),
    (
        "meta-llama-Llama-3.1-8B-Instruct.jinja",
        Some(ToolFormat::Llama3),
        false,
    ),
    (
        "meta-llama-Llama-3.2-3B-Instruct.jinja",
        Some(ToolFormat::Llama3),
        false,
    ),
    (
        "mistralai-Mistral-Nemo-Instruct-2407.jinja",
        Some(ToolFormat::Mistral),
        false,
    ),
    (
        "unsloth-mistral-Devstral-Small-2507.jinja",
        Some(ToolFormat::MistralArgs),
        false,
    ),
    // DeepSeek-R1's calls are its own tokens, which Cinder does not parse: no tool format
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", None, true),
];

#[test]
fn cinder_renders_each_family_as_jinja2_does() {
    let r = renders();
    for &(name, _, _) in FAMILIES {
        let tok = tokenizer_with(&template(name));
        for case_name in [
            "prefix",
            "with_call",
            "round_trip",
            "plain",
            "thinking_off",
            "thinking_on",
        ] {
            let (msgs, with_tools, add_gen, thinking) = case(case_name);
            let tools = tools_json();
            let got = apply_chat_template_opts(
                &tok,
                &msgs,
                with_tools.then_some(&tools[..]),
                add_gen,
                thinking,
            );
            let want = &r["templates"][name][case_name];
            match (got, want) {
                (Ok(text), Value::String(w)) => assert_eq!(&text, w, "{name} {case_name}"),
                (Err(e), Value::Object(_)) => {
                    eprintln!("{name} {case_name}: refused as jinja2 does: {e}")
                }
                (got, want) => panic!("{name} {case_name}: Cinder {got:?}, jinja2 {want}"),
            }
        }
    }
}

/// The answer part of the `with_call` render: what follows the generation prompt, without the
/// end-of-turn tokens the engine stops on.
fn rendered_call(r: &Value) -> String {
    let q = "What is the weather in Paris right now?";
    let (prefix, with) = (
        r["prefix"].as_str().expect("prefix"),
        r["with_call"].as_str().expect("with_call"),
    );
    let gen_prompt = &prefix[prefix.rfind(q).expect("question") + q.len()..];
    let after = &with[with.rfind(q).expect("question") + q.len()..];
    let common = gen_prompt
        .chars()
        .zip(after.chars())
        .take_while(|(a, b)| a == b)
        .map(|(a, _)| a.len_utf8())
        .sum::<usize>();
    // back to the end of a line or a tag (`<think>` and `<tool_call>` share their `<t`)
    let common = after[..common].rfind(['\n', '>', ']']).map_or(0, |i| i + 1);
    let mut turn = after[common..].trim_end();
    while let Some(t) = ["<|im_end|>", "<|eot_id|>", "<|eom_id|>", "</s>"]
        .iter()
        .find_map(|e| turn.strip_suffix(e))
    {
        turn = t.trim_end();
    }
    turn.to_string()
}

fn weather_tools(choice: Choice) -> Tools {
    Tools {
        functions: vec![Function {
            name: "get_weather".into(),
            parameters: tools_json()[0]["function"]["parameters"].clone(),
            entry: tools_json()[0].clone(),
        }],
        choice,
        parallel: true,
    }
}

#[test]
fn each_family_s_own_call_parses_back_and_its_grammar_accepts_it() {
    let r = renders();
    let mut grammars = None;
    for &(name, format, thinks) in FAMILIES {
        let t = template(name);
        assert_eq!(ToolFormat::of_template(&t), format, "{name}");
        let Some(format) = format else { continue };
        let call = rendered_call(&r["templates"][name]);
        eprintln!("{name} ({format:?}): the model writes {call:?}");
        // through the reasoning splitter (Qwen3 renders an empty think block before the call)
        let mut text = String::new();
        if thinks {
            let mut s = Splitter::new(reasoning::Reasoning {
                opened_by_prompt: false,
            });
            let mut parts = s.feed(&call);
            parts.extend(s.finish());
            for p in parts {
                if let Part::Answer(a) = p {
                    text.push_str(&a);
                }
            }
        } else {
            text = call.clone();
        }
        // Call ids of any shape render (Mistral's templates take 9 characters only).
        let (mut msgs, ..) = case("round_trip");
        msgs[2].tool_calls.as_mut().expect("calls")[0]["id"] = json!("toolu_0123456789abcdef");
        msgs[3].tool_call_id = Some("toolu_0123456789abcdef".into());
        let tok = tokenizer_with(&t);
        let rendered = apply_chat_template_opts(&tok, &msgs, Some(&tools_json()), true, None)
            .expect("a round trip with a long call id renders");
        assert!(rendered.contains("18"), "{name}");
        let (content, calls) = tools::split(&text, vec!["get_weather".into()]);
        assert_eq!(content, None, "{name}: {text:?}");
        assert_eq!(calls.len(), 1, "{name}: {text:?}");
        assert_eq!(calls[0].name, "get_weather");
        let args: Value = serde_json::from_str(&calls[0].arguments).expect("arguments");
        assert_eq!(args, json!({"city": "Paris"}), "{name}");
        // The same text, fed a piece at a time, gives the same call.
        let mut p = tools::Parser::new(vec!["get_weather".into()]);
        let mut pieces: Vec<Piece> = text
            .split_inclusive(['"', ']'])
            .flat_map(|x| p.feed(x))
            .collect();
        pieces.extend(p.finish());
        assert_eq!(pieces, vec![Piece::Call(calls[0].clone())], "{name}");

        // The family's forcing grammar accepts the template's rendering of the call.
        let g =
            grammars.get_or_insert_with(|| Grammars::new(&tok, tok.vocab_size).expect("grammars"));
        let forced = weather_tools(Choice::Named("get_weather".into()))
            .forced(&tok)
            .expect("a grammar");
        let mut m = g.compile(&forced).expect("the grammar compiles");
        let ids = tok.tokenize(&text, false, false).expect("tokenize");
        let ok = m.valid_prefix(&ids).expect("matcher");
        assert_eq!(
            ok,
            ids.len(),
            "{name}: the grammar stops after {:?}",
            tok.decode(&ids[..ok], false)
        );
        for &id in &ids {
            m.advance(id).expect("advance");
        }
        assert!(
            m.is_done() || m.check(tok.eos_id.unwrap_or(0)).unwrap_or(false),
            "{name}: the grammar wants more after the call"
        );
    }
}

#[test]
fn reasoning_templates_mark_the_answer_and_thinking_can_be_turned_off() {
    let r = renders();
    for &(name, _, thinks) in FAMILIES {
        let tok = tokenizer_with(&template(name));
        let plain = r["templates"][name]["plain"].as_str().expect("plain");
        let off = r["templates"][name]["thinking_off"].as_str().expect("off");
        let (mark, mark_off) = (
            reasoning::of_prompt(&tok, plain),
            reasoning::of_prompt(&tok, off),
        );
        assert_eq!(mark.is_some(), thinks, "{name}");
        if !thinks {
            continue;
        }
        eprintln!(
            "{name}: {mark:?}; with enable_thinking false: {mark_off:?}, prompt ends {:?}",
            off.chars()
                .rev()
                .take(24)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<String>()
        );
        // Turned on, templates that open the block themselves say so.
        let on = r["templates"][name]["thinking_on"].as_str().expect("on");
        let opened = on.trim_end().ends_with(reasoning::OPEN);
        // QwQ's and DeepSeek-R1's open it (their answers start inside the reasoning)
        assert_eq!(opened, !name.starts_with("Qwen-Qwen3"), "{name}: {on:?}");
        assert_eq!(
            reasoning::of_prompt(&tok, on).map(|m| m.opened_by_prompt),
            Some(opened),
            "{name}"
        );
        // Turned off, the prompt closes the block itself: the answer is all answer.
        assert!(off.trim_end().ends_with(reasoning::CLOSE), "{name}");
        assert_eq!(mark_off.map(|m| m.opened_by_prompt), Some(false), "{name}");
        // A model's answer: reasoning split out whichever way the prompt left the block.
        let answer = if mark.is_some_and(|m| m.opened_by_prompt) {
            "The user asks about weather.\n</think>\n\nIt is sunny."
        } else {
            "<think>\nThe user asks about weather.\n</think>\n\nIt is sunny."
        };
        let mut s = Splitter::new(mark.expect("marked"));
        let mut parts = s.feed(answer);
        parts.extend(s.finish());
        assert_eq!(
            parts,
            [
                Part::Reasoning("The user asks about weather.".into()),
                Part::Answer("It is sunny.".into())
            ],
            "{name}"
        );
    }
}
