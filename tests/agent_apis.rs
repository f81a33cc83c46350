//! The APIs agents speak, on `cinder serve smollm2-135m` through the official clients: Anthropic's
//! Messages API (the `anthropic` Python client) and OpenAI's Responses API (the `openai` client).
//! Each runs a conversation whole and streamed, a forced function call and its round trip, and bad
//! requests that must come back as that API's 4xx shape naming the field. SmolLM2's template has no
//! tool syntax, so every call is forced by a grammar: no greedy near-tie decides whether it calls.

mod common;

use common::server::Server;
use common::*;
use serde_json::{Value, json};

const MODEL: &str = "smollm2-135m";

fn stop_ok(reason: &Value) -> bool {
    reason == "end_turn" || reason == "max_tokens"
}

#[test]
fn the_anthropic_client_talks_to_the_messages_api() {
    let s = Server::start(&["--no-grpc"]);
    let v = s.python_client_on(&anthropic_python_site(), "anthropic_messages.py", &[MODEL]);
    eprintln!("{v:#}");
    let chat = &v["chat"];
    assert!(
        chat["id"].as_str().is_some_and(|i| i.starts_with("msg_")),
        "{v}"
    );
    assert_eq!(chat["type"], "message");
    assert_eq!(chat["role"], "assistant");
    assert!(stop_ok(&chat["stop_reason"]), "{v}");
    assert!(
        !chat["text"].as_str().unwrap_or("").trim().is_empty(),
        "{v}"
    );
    // the prompt counted by count_tokens is the prompt the answer was made from
    let u = &chat["usage"];
    let prompt = u["input_tokens"].as_u64().unwrap_or(0)
        + u["cache_read_input_tokens"].as_u64().unwrap_or(0);
    assert_eq!(Some(prompt), v["count"].as_u64(), "{v}");
    assert!(
        u["output_tokens"]
            .as_u64()
            .is_some_and(|n| (1..=24).contains(&n)),
        "{v}"
    );

    let st = &v["stream"];
    assert_eq!(st["joined"], st["final"], "{v}");
    assert!(st["deltas"].as_u64().is_some_and(|n| n > 1), "{v}");
    assert!(stop_ok(&st["stop_reason"]), "{v}");
    let events: Vec<&str> = st["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    // the documented order: message_start, content blocks, message_delta, message_stop
    assert_eq!(events.first(), Some(&"message_start"), "{events:?}");
    assert_eq!(
        &events[events.len() - 2..],
        ["message_delta", "message_stop"],
        "{events:?}"
    );
    let pos = |e: &str| events.iter().position(|x| *x == e);
    assert!(
        pos("content_block_start") < pos("text") || pos("text").is_none(),
        "{events:?}"
    );
    assert!(events.contains(&"content_block_stop"), "{events:?}");

    // the stop sequence ends the answer before it and is named
    if let Some(stop) = v.get("stop").filter(|s| !s.is_null()) {
        assert_eq!(stop["stop_reason"], "stop_sequence", "{v}");
        assert_eq!(stop["stop_sequence"], stop["word"], "{v}");
        let word = stop["word"].as_str().unwrap_or("");
        let t = stop["text"].as_str().unwrap_or("");
        assert!(!t.contains(word), "{v}");
        assert!(chat["text"].as_str().unwrap_or("").starts_with(t), "{v}");
    }

    for key in ["tool", "stream_tool"] {
        let t = &v[key];
        assert_eq!(t["stop_reason"], "tool_use", "{key}: {v}");
        assert_eq!(t["n"], 1, "{key}: {v}");
        assert_eq!(t["name"], "get_weather", "{key}: {v}");
        assert!(
            t["input"]["city"]
                .as_str()
                .is_some_and(|c| !c.is_empty() && c.len() <= 30),
            "{key}: {v}"
        );
        assert!(
            t["id"].as_str().is_some_and(|i| i.starts_with("toolu_")),
            "{key}: {v}"
        );
        let a = &v[format!("{key}_answer")];
        assert!(stop_ok(&a["stop_reason"]), "{key}: {v}");
        assert_eq!(a["kinds"], json!(["text"]), "{key}: {v}");
    }

    // the schema holds: the answer parses and has both fields within their bounds
    let j: Value =
        serde_json::from_str(v["json"]["text"].as_str().unwrap_or("")).expect("JSON answer");
    for f in ["city", "country"] {
        assert!(j[f].as_str().is_some_and(|c| c.len() <= 20), "{j}");
    }
    assert_eq!(j.as_object().map(|o| o.len()), Some(2), "{j}");

    let e = &v["errors"];
    for (name, status, kind, names) in [
        ("no_max_tokens", 400, "invalid_request_error", "max_tokens"),
        ("bad_role", 400, "invalid_request_error", "role"),
        ("bad_model", 404, "not_found_error", "no-such-model"),
        (
            "bad_temperature",
            400,
            "invalid_request_error",
            "temperature",
        ),
        ("unknown_tool", 400, "invalid_request_error", "tool_choice"),
        ("bad_schema", 400, "invalid_request_error", "output_config"),
    ] {
        assert_eq!(e[name]["status"], status, "{name}: {e}");
        assert_eq!(e[name]["type"], kind, "{name}: {e}");
        assert!(
            e[name]["message"]
                .as_str()
                .is_some_and(|m| m.contains(names)),
            "{name}: {e}"
        );
    }
}

/// Raw HTTP on the Messages routes: a full-queue refusal is `529 overloaded_error`, the key is
/// read from `x-api-key`, a malformed body names its problem, all in Anthropic's shape.
#[test]
fn the_messages_api_refuses_in_anthropics_shape() {
    let s = Server::start(&[
        "--no-grpc",
        "--api-key",
        "k1",
        "--max-seqs",
        "1",
        "--max-waiting",
        "1",
    ]);
    let c = server::client();
    let body =
        json!({"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]});
    let r = c
        .post(s.url("/v1/messages"))
        .json(&body)
        .send()
        .expect("request");
    assert_eq!(r.status().as_u16(), 401);
    let v: Value = r.json().expect("json");
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "authentication_error");
    let r = c
        .post(s.url("/v1/messages"))
        .header("x-api-key", "k1")
        .json(&body)
        .send()
        .expect("request");
    assert_eq!(r.status().as_u16(), 200);
    let r = c
        .post(s.url("/v1/messages"))
        .header("x-api-key", "k1")
        .header("content-type", "application/json")
        .body("{\"model\": 3}")
        .send()
        .expect("request");
    assert_eq!(r.status().as_u16(), 400);
    let v: Value = r.json().expect("json");
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("model")),
        "{v}"
    );
    let r = c
        .post(s.url("/v1/messages/count_tokens"))
        .header("x-api-key", "k1")
        .json(&json!({"model": MODEL, "messages": [{"role": "user", "content": [{"type": "image"}]}]}))
        .send()
        .expect("request");
    assert_eq!(r.status().as_u16(), 400);
    let v: Value = r.json().expect("json");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("messages[0].content[0]")),
        "{v}"
    );

    // A full queue: 16 streams at once against one running and one waiting slot.
    let threads: Vec<_> = (0..16)
        .map(|i| {
            let url = s.url("/v1/messages");
            std::thread::spawn(move || {
                let body = json!({"model": MODEL, "max_tokens": 48, "stream": true,
                    "messages": [{"role": "user", "content": format!("Count from {i} to 100.")}]});
                let r = server::client()
                    .post(url)
                    .header("x-api-key", "k1")
                    .json(&body)
                    .send()
                    .expect("send");
                (r.status().as_u16(), r.text().unwrap_or_default())
            })
        })
        .collect();
    let (mut ok, mut busy) = (0, 0);
    for t in threads {
        let (st, text) = t.join().expect("thread");
        match st {
            200 => {
                assert!(text.contains("event: message_stop"), "{text}");
                ok += 1;
            }
            529 => {
                let v: Value = serde_json::from_str(&text).expect("json");
                assert_eq!(v["error"]["type"], "overloaded_error", "{v}");
                busy += 1;
            }
            other => panic!("status {other}: {text}"),
        }
    }
    assert!(ok >= 1 && busy >= 1, "ok {ok}, overloaded {busy}");
}

#[test]
fn the_openai_client_talks_to_the_responses_api() {
    let s = Server::start(&["--no-grpc"]);
    let v = s.python_client("openai_responses.py", &[MODEL]);
    eprintln!("{v:#}");
    let first = &v["first"];
    assert!(
        first["id"].as_str().is_some_and(|i| i.starts_with("resp_")),
        "{v}"
    );
    assert_eq!(first["object"], "response");
    assert!(
        first["status"] == "completed" || first["status"] == "incomplete",
        "{v}"
    );
    assert_eq!(first["items"], json!(["message"]), "{v}");
    let text = first["text"].as_str().unwrap_or("");
    assert!(!text.trim().is_empty(), "{v}");
    let u = &first["usage"];
    assert_eq!(
        u["total_tokens"].as_u64(),
        Some(u["input_tokens"].as_u64().unwrap_or(0) + u["output_tokens"].as_u64().unwrap_or(0))
    );

    let st = &v["stream"];
    assert_eq!(st["joined"], st["final"], "{v}");
    assert_eq!(st["helper"], st["final"], "{v}");
    let events: Vec<&str> = st["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        &events[..3],
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added"
        ],
        "{events:?}"
    );
    for e in [
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.output_item.done",
    ] {
        assert!(events.contains(&e), "{e}: {events:?}");
    }
    assert!(
        events
            .last()
            .is_some_and(|e| *e == "response.completed" || *e == "response.incomplete"),
        "{events:?}"
    );

    // previous_response_id continues the conversation: the same prompt as sending it whole
    let f = &v["follow_up"];
    assert_eq!(f["previous"], first["id"], "{v}");
    assert_eq!(f["input_tokens"], f["whole_input_tokens"], "{v}");
    assert!(
        f["input_tokens"].as_u64() > u["input_tokens"].as_u64(),
        "{v}"
    );

    assert_eq!(v["retrieve"]["id"], first["id"], "{v}");
    assert_eq!(v["retrieve"]["text"], first["text"], "{v}");
    assert_eq!(v["deleted"], true, "{v}");
    for key in ["after_delete", "follow_deleted", "unstored"] {
        assert_eq!(v[key]["status"], 404, "{key}: {v}");
    }

    for key in ["call", "stream_call"] {
        let c = &v[key];
        assert_eq!(c["n"], 1, "{key}: {v}");
        assert_eq!(c["name"], "get_weather", "{key}: {v}");
        assert!(
            c["arguments"]["city"]
                .as_str()
                .is_some_and(|c| !c.is_empty() && c.len() <= 30),
            "{key}: {v}"
        );
        assert!(
            c["call_id"]
                .as_str()
                .is_some_and(|i| i.starts_with("call_")),
            "{key}: {v}"
        );
        let a = &v[format!("{key}_answer")];
        assert_eq!(a["items"], json!(["message"]), "{key}: {v}");
        assert!(
            !a["text"].as_str().unwrap_or("").trim().is_empty(),
            "{key}: {v}"
        );
    }
    assert!(v["stream_call"]["arg_deltas"].as_u64() >= Some(1), "{v}");

    let j: Value = serde_json::from_str(v["json"].as_str().unwrap_or("")).expect("JSON answer");
    assert!(j["city"].as_str().is_some_and(|c| c.len() <= 20), "{j}");
    assert!(j["country"].as_str().is_some_and(|c| c.len() <= 20), "{j}");

    let e = &v["errors"];
    for (name, status, param) in [
        ("image", 400, "input"),
        ("bad_model", 404, "model"),
        ("unknown_previous", 404, "previous_response_id"),
        ("cycle", 400, "text.format"),
        ("unknown_tool", 400, "tool_choice"),
        ("web_search", 400, "tools"),
        ("max_output_tokens", 400, "max_output_tokens"),
    ] {
        assert_eq!(e[name]["status"], status, "{name}: {e}");
        assert_eq!(e[name]["param"], param, "{name}: {e}");
    }
}

/// SmolLM2 served with Qwen3's chat template (`--chat-template-file`, the real template; SmolLM2
/// has its ChatML tokens): an answer that opens with a `<think>` block — forced here by a regular
/// expression, since SmolLM2 does not write one itself — comes back split into reasoning and
/// answer in every API, whole and streamed; `enable_thinking: false` reaches the template (the
/// prompt closes an empty block, so it is longer).
#[test]
fn reasoning_is_split_out_in_every_api() {
    let template = format!(
        "{}/tests/data/templates/Qwen-Qwen3-0.6B.jinja",
        env!("CARGO_MANIFEST_DIR")
    );
    let s = Server::start(&["--no-grpc", "--chat-template-file", &template]);
    let regex = "<think>\nThe user greets me\\.\n</think>\n\nHello there\\.";
    let (thought, answer) = ("The user greets me.", "Hello there.");
    let hi = json!([{"role": "user", "content": "Hi!"}]);

    let chat = json!({"messages": hi, "max_tokens": 40, "temperature": 0, "guided_regex": regex});
    let (st, v) = s.post("/v1/chat/completions", &chat);
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        v["choices"][0]["message"]["reasoning_content"], thought,
        "{v}"
    );
    assert_eq!(v["choices"][0]["message"]["content"], answer, "{v}");
    let mut body = chat.clone();
    body["stream"] = json!(true);
    let (mut r, mut a) = (String::new(), String::new());
    for d in s.stream("/v1/chat/completions", &body) {
        let Ok(c) = serde_json::from_str::<Value>(&d) else {
            continue;
        };
        let delta = &c["choices"][0]["delta"];
        r.push_str(delta["reasoning_content"].as_str().unwrap_or(""));
        a.push_str(delta["content"].as_str().unwrap_or(""));
    }
    assert_eq!((r.as_str(), a.as_str()), (thought, answer));

    let msg = json!({"model": MODEL, "max_tokens": 40, "temperature": 0, "messages": hi,
                     "guided_regex": regex});
    let (st, v) = s.post("/v1/messages", &msg);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["content"][0]["type"], "thinking", "{v}");
    assert_eq!(v["content"][0]["thinking"], thought, "{v}");
    assert_eq!(
        v["content"][1],
        json!({"type": "text", "text": answer}),
        "{v}"
    );
    let mut body = msg.clone();
    body["stream"] = json!(true);
    let (mut r, mut a) = (String::new(), String::new());
    for d in s.stream("/v1/messages", &body) {
        let Ok(e) = serde_json::from_str::<Value>(&d) else {
            continue;
        };
        r.push_str(e["delta"]["thinking"].as_str().unwrap_or(""));
        a.push_str(e["delta"]["text"].as_str().unwrap_or(""));
    }
    assert_eq!((r.as_str(), a.as_str()), (thought, answer));

    let resp = json!({"model": MODEL, "max_output_tokens": 40, "temperature": 0, "input": "Hi!",
                      "guided_regex": regex, "store": false});
    let (st, v) = s.post("/v1/responses", &resp);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["output"][0]["type"], "reasoning", "{v}");
    assert_eq!(v["output"][0]["content"][0]["text"], thought, "{v}");
    assert_eq!(v["output"][1]["content"][0]["text"], answer, "{v}");

    // Thinking off: the template closes an empty block in the prompt.
    let plain = json!({"messages": hi, "max_tokens": 1, "temperature": 0});
    let mut off = plain.clone();
    off["chat_template_kwargs"] = json!({"enable_thinking": false});
    let tokens = |b: &Value| s.post("/v1/chat/completions", b).1["usage"]["prompt_tokens"].as_u64();
    assert!(
        tokens(&off) > tokens(&plain),
        "enable_thinking: false changed nothing"
    );
    let mut m_off = msg.clone();
    m_off["thinking"] = json!({"type": "disabled"});
    m_off["max_tokens"] = json!(1);
    m_off.as_object_mut().map(|o| o.remove("guided_regex"));
    let (_, v) = s.post("/v1/messages", &m_off);
    let (_, w) = s.post(
        "/v1/messages/count_tokens",
        &json!({"model": MODEL, "messages": hi}),
    );
    assert!(
        v["usage"]["input_tokens"].as_u64().unwrap_or(0)
            + v["usage"]["cache_read_input_tokens"].as_u64().unwrap_or(0)
            > w["input_tokens"].as_u64().unwrap_or(u64::MAX),
        "{v} {w}"
    );
    let (st, v) = s.post(
        "/v1/chat/completions",
        &json!({"messages": hi, "chat_template_kwargs": {"thinking": true}}),
    );
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["error"]["param"], "chat_template_kwargs");
}
