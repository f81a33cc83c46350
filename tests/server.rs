//! `cinder serve` end to end: the real binary on loopback sockets, the real model, HTTP and gRPC
//! clients. Greedy text over the API equals `cinder run` / `cinder chat`; errors have OpenAI's
//! shape and status; disconnects, deadlines, overload and SIGTERM behave as documented.

use std::io::Read;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod common;

use common::server::{Server, client};

fn cli(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_cinder"))
        .args(args)
        .output()
        .expect("cinder runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = String::from_utf8_lossy(&out.stdout).to_string();
    // `cinder run`/`chat` end the text with one newline of their own.
    s.strip_suffix('\n').unwrap_or(&s).to_string()
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

const PROMPT: &str = "The capital of France is";

#[test]
fn completions_and_chat_streamed_or_not_equal_the_cli() {
    let s = Server::start(&[]);
    let want = cli(&[
        "run",
        "smollm2-135m",
        "--prompt",
        PROMPT,
        "--temperature",
        "0",
        "--max-tokens",
        "16",
    ]);
    let body =
        json!({"model": "smollm2-135m", "prompt": PROMPT, "max_tokens": 16, "temperature": 0});
    let (st, v) = s.post("/v1/completions", &body);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["choices"][0]["text"].as_str(), Some(want.as_str()));
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 16);
    assert_eq!(v["usage"]["prompt_tokens"], 5);
    // Streamed, with the usage chunk.
    let mut sbody = body.clone();
    sbody["stream"] = json!(true);
    sbody["stream_options"] = json!({"include_usage": true});
    let events = s.stream("/v1/completions", &sbody);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).expect("chunk JSON"))
        .collect();
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"].get(0).and_then(|x| x["text"].as_str()))
        .collect();
    assert_eq!(text, want);
    let finish: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"].get(0).map(|x| &x["finish_reason"]))
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finish, vec![&json!("length")]);
    let usage = chunks.last().expect("usage chunk");
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 16);

    // Chat: the same greedy answer as `cinder chat`.
    let q = "What is the capital of Italy?";
    let want = cli(&[
        "chat",
        "smollm2-135m",
        "--prompt",
        q,
        "--temperature",
        "0",
        "--max-tokens",
        "24",
    ]);
    let body = json!({"model": "smollm2-135m", "max_tokens": 24, "temperature": 0,
                      "messages": [{"role": "user", "content": q}]});
    let (st, v) = s.post("/v1/chat/completions", &body);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    let got = v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(got, want);
    // 24 tokens, or fewer when the model ends its turn first (its answer depends on the last bits
    // of the arithmetic, so the test does not assume either).
    let chat_tokens = v["usage"]["completion_tokens"].as_u64().unwrap_or_default();
    assert!(chat_tokens > 0 && chat_tokens <= 24, "{v}");
    assert_eq!(
        v["choices"][0]["finish_reason"],
        if chat_tokens == 24 { "length" } else { "stop" },
        "{v}"
    );
    let mut sbody = body.clone();
    sbody["stream"] = json!(true);
    let events = s.stream("/v1/chat/completions", &sbody);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).expect("chunk JSON"))
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk")
    );
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, want);
    // Models, health, readiness, replica header, metrics.
    let r = client().get(s.url("/v1/models")).send().expect("models");
    assert!(r.headers().contains_key("x-cinder-replica"));
    let v: Value = r.json().expect("json");
    assert_eq!(v["data"][0]["id"], "smollm2-135m");
    assert_eq!(
        client()
            .get(s.url("/health"))
            .send()
            .expect("health")
            .status(),
        200
    );
    assert_eq!(
        client()
            .get(s.url("/ready"))
            .send()
            .expect("ready")
            .status(),
        200
    );
    // Both completions ran to their 16 tokens, the two chats to `chat_tokens` each.
    assert!(s.metric("cinder_generation_tokens_total") >= (32 + 2 * chat_tokens) as f64);
    assert!(s.metric("cinder_time_to_first_token_seconds_count") >= 4.0);
}

#[test]
fn grpc_stream_gives_the_same_tokens() {
    use cinder::server::grpc::pb::{GenerateRequest, inference_client::InferenceClient};
    let s = Server::start(&[]);
    let body =
        json!({"model": "smollm2-135m", "prompt": PROMPT, "max_tokens": 16, "temperature": 0});
    let (_, v) = s.post("/v1/completions", &body);
    let want = v["choices"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (text, ids, finish) = rt.block_on(async {
        let mut c = InferenceClient::connect(s.grpc.clone().expect("grpc address"))
            .await
            .expect("connect");
        let mut stream = c
            .generate(GenerateRequest {
                prompt: PROMPT.into(),
                max_tokens: 16,
                ..Default::default()
            })
            .await
            .expect("generate")
            .into_inner();
        let (mut text, mut ids, mut finish) = (String::new(), Vec::new(), String::new());
        while let Some(m) = stream.message().await.expect("message") {
            text.push_str(&m.text);
            ids.extend(m.token_id);
            if !m.finish_reason.is_empty() {
                finish = m.finish_reason;
            }
        }
        (text, ids, finish)
    });
    assert_eq!(text, want);
    assert_eq!(ids.len(), 16);
    assert_eq!(finish, "length");
}

#[test]
fn errors_have_the_documented_status_and_body() {
    let s = Server::start(&["--max-kv-tokens", "512", "--max-body-bytes", "4096"]);
    let err = |st: u16, v: &Value, param: Option<&str>| {
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{v}"
        );
        assert!(v["error"]["type"].is_string(), "{v}");
        if let Some(p) = param {
            assert_eq!(v["error"]["param"], p, "{v}");
        }
        st
    };
    // Bad JSON.
    let r = client()
        .post(s.url("/v1/completions"))
        .header("content-type", "application/json")
        .body("{\"prompt\": ")
        .send()
        .expect("send");
    let st = r.status().as_u16();
    assert_eq!(err(st, &r.json().expect("json"), None), 400);
    // Unknown model.
    let (st, v) = s.post(
        "/v1/completions",
        &json!({"model": "gpt-17", "prompt": "x"}),
    );
    assert_eq!(err(st, &v, Some("model")), 404);
    assert_eq!(v["error"]["code"], "model_not_found");
    // Negative max_tokens.
    let (st, v) = s.post("/v1/completions", &json!({"prompt": "x", "max_tokens": -3}));
    assert_eq!(err(st, &v, Some("max_tokens")), 400);
    // A prompt longer than the context (the KV budget here: 512 tokens).
    let long = "word ".repeat(600);
    let (st, v) = s.post("/v1/completions", &json!({"prompt": long}));
    assert_eq!(err(st, &v, Some("prompt")), 400);
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    // A body over the limit.
    let huge = "x".repeat(10_000);
    let (st, v) = s.post("/v1/completions", &json!({"prompt": huge}));
    assert_eq!(err(st, &v, None), 413);
    // Temperature out of range, empty messages.
    let (st, v) = s.post("/v1/completions", &json!({"prompt": "x", "temperature": 7}));
    assert_eq!(err(st, &v, Some("temperature")), 400);
    let (st, v) = s.post("/v1/chat/completions", &json!({"messages": []}));
    assert_eq!(err(st, &v, Some("messages")), 400);
    // Embeddings: no embedding model on a text-generation server.
    let (st, v) = s.post("/v1/embeddings", &json!({"input": "x"}));
    assert_eq!(err(st, &v, None), 404);
    assert!(s.metric("cinder_queue_depth") == 0.0);
}

#[test]
fn api_keys_are_required_when_configured() {
    let s = Server::start(&["--api-key", "sekret", "--no-grpc"]);
    let body = json!({"prompt": PROMPT, "max_tokens": 2, "temperature": 0});
    let r = client()
        .post(s.url("/v1/completions"))
        .json(&body)
        .send()
        .expect("send");
    assert_eq!(r.status().as_u16(), 401);
    let v: Value = r.json().expect("json");
    assert_eq!(v["error"]["type"], "authentication_error");
    let r = client()
        .post(s.url("/v1/completions"))
        .bearer_auth("wrong")
        .json(&body)
        .send()
        .expect("send");
    assert_eq!(r.status().as_u16(), 401);
    let r = client()
        .post(s.url("/v1/completions"))
        .bearer_auth("sekret")
        .json(&body)
        .send()
        .expect("send");
    assert_eq!(r.status().as_u16(), 200);
    // Anthropic's clients send the key as `x-api-key`.
    for (key, status) in [("wrong", 401), ("sekret", 200)] {
        let r = client()
            .post(s.url("/v1/completions"))
            .header("x-api-key", key)
            .json(&body)
            .send()
            .expect("send");
        assert_eq!(r.status().as_u16(), status, "x-api-key {key}");
    }
    // /tokenize is behind the key like the /v1 routes.
    let r = client()
        .post(s.url("/tokenize"))
        .json(&json!({"content": "hi"}))
        .send()
        .expect("send");
    assert_eq!(r.status().as_u16(), 401);
    // Health and metrics stay open for probes and scrapers.
    assert_eq!(
        client().get(s.url("/health")).send().expect("h").status(),
        200
    );
}

#[test]
fn a_disconnect_frees_the_blocks_and_a_deadline_ends_with_timeout() {
    let s = Server::start(&["--no-grpc"]);
    let body = json!({"prompt": "Tell me a long story.", "max_tokens": 400, "stream": true,
                      "temperature": 0.7, "seed": 1});
    let mut r = client()
        .post(s.url("/v1/completions"))
        .json(&body)
        .send()
        .expect("send");
    let mut buf = [0u8; 256];
    let n = r.read(&mut buf).expect("first bytes");
    assert!(n > 0);
    wait_until("a running sequence", || {
        s.metric("cinder_running_sequences") >= 1.0
    });
    drop(r);
    wait_until("blocks back in the pool", || {
        s.metric("cinder_kv_blocks_used") == 0.0 && s.metric("cinder_running_sequences") == 0.0
    });
    // The per-request deadline.
    let (st, v) = s.post(
        "/v1/completions",
        // `ignore_eos`: the model cannot end on its own before the deadline, however fast it runs.
        &json!({"prompt": "Tell me a long story.", "max_tokens": 400, "timeout": 0.3,
                "ignore_eos": true}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "timeout");
    assert!(v["usage"]["completion_tokens"].as_u64().unwrap_or(400) < 400);
}

#[test]
fn overload_gets_only_200_and_429_and_the_server_stays_ready() {
    let s = Server::start(&["--max-seqs", "2", "--max-waiting", "2", "--no-grpc"]);
    let url = s.url("/v1/completions");
    let threads: Vec<_> = (0..24)
        .map(|i| {
            let url = url.clone();
            std::thread::spawn(move || {
                // Long enough that the 24 arrive while the first 4 still run, however fast.
                let body = json!({"prompt": format!("Count to {i}:"), "max_tokens": 64,
                                  "stream": true, "temperature": 0, "ignore_eos": true});
                let r = client().post(&url).json(&body).send().expect("send");
                let st = r.status().as_u16();
                let retry = r.headers().get("retry-after").is_some();
                let text = r.text().unwrap_or_default();
                (st, retry, text)
            })
        })
        .collect();
    let mut ok = 0;
    let mut busy = 0;
    for t in threads {
        let (st, retry, text) = t.join().expect("thread");
        match st {
            200 => {
                assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
                ok += 1;
            }
            429 => {
                assert!(retry, "429 without Retry-After");
                busy += 1;
            }
            other => panic!("status {other}: {text}"),
        }
    }
    assert!(ok >= 2 && busy >= 1, "ok {ok}, busy {busy}");
    wait_until("ready again", || {
        client()
            .get(s.url("/ready"))
            .send()
            .is_ok_and(|r| r.status() == 200)
    });
}

#[test]
fn sigterm_drains_streams_then_exits() {
    let mut s = Server::start(&["--no-grpc"]);
    let url = s.url("/v1/completions");
    let t = std::thread::spawn(move || {
        let body = json!({"prompt": PROMPT, "max_tokens": 48, "stream": true, "temperature": 0});
        client()
            .post(&url)
            .json(&body)
            .send()
            .and_then(|r| r.text())
    });
    wait_until("a running sequence", || {
        s.metric("cinder_running_sequences") >= 1.0
    });
    let pid = s.child.id().to_string();
    let st = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(st.success());
    let text = t.join().expect("thread").expect("stream survives shutdown");
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = s.child.try_wait().expect("wait") {
            break st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "server did not exit"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "exit status {status}");
}

/// The official OpenAI Python client, unchanged, against `cinder serve` (chat, streamed chat with
/// usage, completions, models, error classes), installed by [`common::openai_python_site`].
#[test]
fn the_official_openai_python_client_works_unchanged() {
    let s = Server::start(&["--no-grpc"]);
    let v = s.python_client("openai_python.py", &["smollm2-135m"]);
    let want = cli(&[
        "run",
        "smollm2-135m",
        "--prompt",
        PROMPT,
        "--temperature",
        "0",
        "--max-tokens",
        "8",
    ]);
    assert_eq!(v["completion_text"].as_str(), Some(want.as_str()));
    assert!(v["chat_text"].as_str().is_some_and(|t| !t.is_empty()));
    assert_eq!(
        v["chat_text"], v["stream_text"],
        "streamed chat differs: {v}"
    );
    // 16 tokens, or fewer when the model ends its turn first (its answer depends on the last bits
    // of the arithmetic, so the test does not assume either).
    let used = v["chat_usage"].as_u64().unwrap_or_default();
    assert!(used > 0 && used <= 16, "{v}");
    assert_eq!(
        v["chat_finish"],
        if used == 16 { "length" } else { "stop" },
        "{v}"
    );
    assert_eq!(v["stream_finish"], v["chat_finish"], "{v}");
    assert_eq!(v["stream_usage"], v["chat_usage"], "{v}");
    assert_eq!(v["models"], json!(["smollm2-135m"]));
    assert_eq!(v["not_found"], 404);
    assert_eq!(v["bad_request"], 400);
}

/// `/tokenize` and `/detokenize` in llama.cpp's shapes, with the served model's tokenizer;
/// `/v1/models` gives the context a request may fill, which is the limit requests are held to.
#[test]
fn tokenize_detokenize_and_the_models_context() {
    let s = Server::start(&["--no-grpc", "--max-kv-tokens", "512"]);
    let f = cinder::gguf::GgufFile::open(common::model_path("smollm2-135m")).expect("gguf");
    let tok = cinder::tokenizer::Tokenizer::from_gguf(&f).expect("tokenizer");
    let text = "Hello world, héllo 🦀";
    let (st, v) = s.post("/tokenize", &json!({"content": text}));
    assert_eq!(st, 200, "{v}");
    let want = tok.encode(text, false).expect("encode");
    assert_eq!(v["tokens"], json!(want));
    // Pieces: strings where a token's bytes are UTF-8, byte arrays where they split a character;
    // together, the text's bytes.
    let (_, v) = s.post("/tokenize", &json!({"content": text, "with_pieces": true}));
    let mut bytes = Vec::new();
    for (t, id) in v["tokens"].as_array().expect("tokens").iter().zip(&want) {
        assert_eq!(t["id"], *id, "{v}");
        match &t["piece"] {
            Value::String(p) => bytes.extend_from_slice(p.as_bytes()),
            Value::Array(b) => bytes.extend(b.iter().filter_map(|x| x.as_u64()).map(|x| x as u8)),
            other => panic!("piece {other}"),
        }
    }
    assert_eq!(bytes, text.as_bytes());
    // Control tokens written in the text are read as themselves unless parse_special is off.
    let (_, on) = s.post("/tokenize", &json!({"content": "<|im_start|>"}));
    let (_, off) = s.post(
        "/tokenize",
        &json!({"content": "<|im_start|>", "parse_special": false}),
    );
    assert_eq!(on["tokens"].as_array().map(Vec::len), Some(1), "{on}");
    assert!(off["tokens"].as_array().map_or(0, Vec::len) > 1, "{off}");
    let (st, v) = s.post("/detokenize", &json!({"tokens": want}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["content"], text);
    // Bad input names its field.
    let (st, v) = s.post("/detokenize", &json!({"tokens": [1, 999_999]}));
    assert_eq!(
        (st, v["error"]["param"].as_str()),
        (400, Some("tokens")),
        "{v}"
    );
    let (st, v) = s.post("/tokenize", &json!({"text": "no content"}));
    assert_eq!(st, 400, "{v}");
    // The context a request may fill: one token more is refused.
    let m: Value = client()
        .get(s.url("/v1/models"))
        .send()
        .and_then(|r| r.json())
        .expect("models");
    let limit = m["data"][0]["max_model_len"]
        .as_u64()
        .expect("max_model_len");
    assert!((256..=512).contains(&limit), "{m}");
    let n = tok.encode(PROMPT, true).expect("encode").len() as u64;
    let (st, v) = s.post(
        "/v1/completions",
        &json!({"prompt": PROMPT, "max_tokens": limit - n + 1}),
    );
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["error"]["code"], "context_length_exceeded", "{v}");
    let (st, v) = s.post(
        "/v1/completions",
        &json!({"prompt": PROMPT, "max_tokens": limit - n, "stop": [" "], "temperature": 0}),
    );
    assert_eq!(st, 200, "{v}");
}
