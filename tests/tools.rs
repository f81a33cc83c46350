//! Function calling on the chat API. Qwen2.5-Coder-1.5B-Instruct (its chat template renders
//! `tools` and writes Hermes-style `<tool_call>` blocks): the prompt a tool conversation renders to
//! equals Python jinja2's rendering of the same template; the official OpenAI Python client makes
//! a round trip (the model calls the function named in `tool_choice`, the tool answers, the model
//! answers under `tool_choice: "none"`) non-streaming and streaming, the follow-up request's prompt
//! is as many tokens as the jinja2 rendering of that conversation, and forced calls (`required`
//! with two tools and a question for both, a named function) come out valid. Every choice is forced,
//! so no greedy near-tie decides whether the model calls. SmolLM2, whose template has no tool
//! syntax: `auto` is a clear 400, a forced call still comes out valid.

mod common;

use cinder::runtime::tokenizer::{ChatMessage, apply_chat_template_with_tools};
use common::server::Server;
use common::*;
use serde_json::{Value, json};

const QWEN: &str = "qwen2.5-coder-1.5b";

/// The conversation of `benches/reference/render_tool_prompt.py`, rendered by Cinder, equals the
/// file that script wrote with Python's jinja2.
#[test]
fn a_tool_conversation_renders_as_jinja2_renders_it() {
    let f = cinder::gguf::GgufFile::open(model_path(QWEN)).expect("gguf");
    let tok = cinder::tokenizer::Tokenizer::from_gguf(&f).expect("tokenizer");
    let tools = vec![
        json!({"type": "function", "function": {"name": "get_weather",
        "description": "The current weather in a city", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}}, "required": ["city"]}}}),
    ];
    let mut call = ChatMessage::new("assistant", "");
    call.tool_calls = Some(vec![json!({"id": "c1", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}})]);
    let mut result = ChatMessage::new("tool", "{\"temperature\": 18}");
    result.tool_call_id = Some("c1".into());
    let msgs = [
        ChatMessage::new("user", "What is the weather in Paris right now?"),
        call,
        result,
    ];
    let got = apply_chat_template_with_tools(&tok, &msgs, Some(&tools), true).expect("render");
    assert_eq!(got, reference_render());
}

/// `benches/reference/render_tool_prompt.py`'s jinja2 rendering of a tool conversation.
fn reference_render() -> String {
    std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/qwen2.5-coder-tools.prompt.txt"),
    )
    .expect("reference")
}

/// The official client against Qwen2.5-Coder: a round trip whole and streamed, forced calls.
#[test]
fn the_openai_client_makes_a_tool_round_trip() {
    let s = Server::start_model(QWEN, &["--no-grpc"]);
    let v = s.python_client("openai_tools.py", &[QWEN]);
    for key in ["call", "stream_call"] {
        let c = &v[key];
        assert_eq!(c["finish"], "tool_calls", "{key}: {v}");
        assert_eq!(c["n"], 1, "{key}: {v}");
        assert_eq!(c["name"], "get_weather", "{key}: {v}");
        // exactly the reference conversation's arguments, so the follow-up renders as it does
        assert_eq!(c["arguments"], json!({"city": "Paris"}), "{key}: {v}");
    }
    // The follow-up (the call and the tool's result sent back) is the reference conversation:
    // the server's prompt has as many tokens as jinja2's rendering of it.
    let f = cinder::gguf::GgufFile::open(model_path(QWEN)).expect("gguf");
    let tok = cinder::tokenizer::Tokenizer::from_gguf(&f).expect("tokenizer");
    let want = tok
        .tokenize(&reference_render(), false, true)
        .expect("tokenize")
        .len();
    assert_eq!(v["follow_up_prompt_tokens"], want, "{v}");
    assert!(
        v["call"]["id"]
            .as_str()
            .is_some_and(|i| i.starts_with("call_"))
    );
    // The answer after the tool's result is text, not another call.
    for key in ["answer", "stream_answer"] {
        assert_eq!(v[key]["finish"], "stop", "{key}: {v}");
        let t = v[key]["text"].as_str().unwrap_or("");
        assert!(!t.trim().is_empty(), "{key}: {v}");
    }
    assert_eq!(v["answer"]["calls"], 0, "{v}");
    // `required` with two tools and a question that needs both: both calls, each parseable.
    let mut names: Vec<&str> = v["required"]
        .as_array()
        .expect("required calls")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["get_time", "get_weather"], "{v}");
    for c in v["required"].as_array().into_iter().flatten() {
        assert_eq!(c["arguments"]["city"], "Tokyo", "{v}");
    }
    assert_eq!(v["named"].as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(v["named"][0]["name"], "get_time");
    assert!(v["named"][0]["arguments"]["city"].is_string(), "{v}");
    assert_eq!(v["named_finish"], "tool_calls");
}

fn weather() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
        "properties": {"city": {"type": "string", "maxLength": 30}}, "required": ["city"],
        "additionalProperties": false}}}])
}

/// SmolLM2's template has no tool syntax: `auto` says so; `required` is forced by a grammar and
/// parses; bad tool definitions are 400s naming the problem.
#[test]
fn a_model_without_tool_syntax_gets_forced_calls_and_a_clear_400_for_auto() {
    let s = Server::start(&["--no-grpc"]);
    let ask = json!([{"role": "user", "content": "What is the weather in Oslo?"}]);
    let (st, v) = s.post(
        "/v1/chat/completions",
        &json!({"messages": ask, "tools": weather(), "max_tokens": 40}),
    );
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["error"]["param"], "tool_choice");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("tool-call syntax")
    );
    for stream in [false, true] {
        let body = json!({"messages": ask, "tools": weather(), "tool_choice": "required",
                          "max_tokens": 60, "temperature": 0, "stream": stream});
        let calls: Vec<Value> = if stream {
            s.stream("/v1/chat/completions", &body)
                .iter()
                .filter(|d| *d != "[DONE]")
                .filter_map(|d| serde_json::from_str::<Value>(d).ok())
                .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].as_array().cloned())
                .flatten()
                .collect()
        } else {
            let (st, v) = s.post("/v1/chat/completions", &body);
            assert_eq!(st, 200, "{v}");
            assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
            v["choices"][0]["message"]["tool_calls"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        };
        assert!(!calls.is_empty(), "stream {stream}");
        for c in &calls {
            assert_eq!(c["function"]["name"], "get_weather");
            let args: Value =
                serde_json::from_str(c["function"]["arguments"].as_str().unwrap_or(""))
                    .expect("arguments are JSON");
            assert!(args["city"].is_string(), "{args}");
        }
    }
    let bad = [
        (
            json!([{"type": "function", "function": {"name": "no spaces"}}]),
            "name",
        ),
        (json!([{"type": "retrieval"}]), "type"),
        (
            json!([{"type": "function", "function": {"name": "f", "parameters": 3}}]),
            "parameters",
        ),
        (
            json!([{"type": "function", "function": {"name": "f", "parameters":
                {"type": "object", "properties": {"x": {"type": "strng"}}}}}]),
            "strng",
        ),
    ];
    for (tools, says) in bad {
        let (st, v) = s.post(
            "/v1/chat/completions",
            &json!({"messages": ask, "tools": tools, "tool_choice": "required", "max_tokens": 4}),
        );
        assert_eq!(st, 400, "{tools} -> {v}");
        let m = v["error"]["message"].as_str().unwrap_or("");
        assert!(m.contains(says), "{tools} -> {m}");
    }
    // A named function that is not among the tools; tool history without an id.
    let (st, _) = s.post(
        "/v1/chat/completions",
        &json!({"messages": ask, "tools": weather(), "max_tokens": 4,
                "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
    );
    assert_eq!(st, 400);
    let (st, v) = s.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "tool", "content": "x"}], "max_tokens": 4}),
    );
    assert_eq!(st, 400, "{v}");
}
