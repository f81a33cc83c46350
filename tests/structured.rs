//! Constrained decoding and log-probabilities on the real SmolLM2: JSON schemas, regular
//! expressions and Lark grammars hold under continuous batching, chunked prefill and speculation
//! on every backend; log-probabilities equal the ones `cinder perplexity` computes on the same
//! text teacher-forced; the official OpenAI client's `chat.completions.parse` returns a validated
//! object for 20 schemas sent 8 at a time; bad schemas, patterns and grammars get a 400 naming the
//! problem.

mod common;

use cinder::eval::{PerplexityOptions, perplexity_rows};
use cinder::prelude::*;
use cinder::runtime::constraint::{Constraint, Grammars};
use cinder::runtime::engine::{Engine, EngineConfig, Event, Request, SpeculativeConfig};
use cinder::runtime::kv::KvBudget;
use cinder::runtime::sampler::log_prob;
use cinder::runtime::scheduler::SchedulerConfig;
use cinder::runtime::tokenizer::{ChatMessage, apply_chat_template};
use common::server::Server;
use common::*;
use serde_json::{Value, json};

/// Drains a stream: text, token ids, each token's log-probability (when asked), finish reason.
fn drain(
    mut s: cinder::runtime::engine::EventStream,
) -> (String, Vec<u32>, Vec<f32>, FinishReason) {
    let (mut text, mut ids, mut lps) = (String::new(), Vec::new(), Vec::new());
    while let Some(ev) = s.blocking_next() {
        match ev {
            Event::Token {
                id,
                text: t,
                logprob,
            } => {
                text.push_str(&t);
                ids.push(id);
                lps.extend(logprob.map(|l| l.logprob));
            }
            Event::Finished {
                reason, text: t, ..
            } => {
                text.push_str(&t);
                return (text, ids, lps, reason);
            }
        }
    }
    panic!("stream ended without a Finished event");
}

fn person_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 20},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "city": {"enum": ["Paris", "London", "Tokyo"]}
        },
        "required": ["name", "age", "city"],
        "additionalProperties": false
    })
}

fn check_person(text: &str) {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    let o = v.as_object().expect("an object");
    assert_eq!(o.len(), 3, "{text}");
    assert!(o["name"].as_str().is_some_and(|n| n.chars().count() <= 20));
    assert!(o["age"].as_u64().is_some_and(|a| a <= 120), "{text}");
    assert!(["Paris", "London", "Tokyo"].contains(&o["city"].as_str().unwrap_or("")));
}

fn is_date(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 10
        && b.iter().enumerate().all(|(i, c)| {
            if i == 4 || i == 7 {
                *c == b'-'
            } else {
                c.is_ascii_digit()
            }
        })
}

/// A Lark grammar with three answers, and the check that a text is one of them.
const YES_NO_MAYBE: &str = "start: answer\nanswer: \"yes\" | \"no\" | \"maybe\"";

fn check_answer(text: &str) {
    assert!(["yes", "no", "maybe"].contains(&text), "{text:?}");
}

/// SmolLM2 and its grammar compiler.
fn smollm2_with_grammars<B: InferenceBackend>(
    device: &B::Device,
) -> (cinder::importer::LoadedModel<B>, Grammars) {
    let m = cinder::importer::load_model::<B>(&model_path("smollm2-135m"), device).expect("load");
    let g = Grammars::new(&m.tokenizer, m.model.vocab_size()).expect("grammars");
    (m, g)
}

/// A one-turn chat prompt, rendered by the model's template, as token ids.
fn chat_ids(tok: &cinder::tokenizer::Tokenizer, q: &str) -> Vec<u32> {
    let t = apply_chat_template(tok, &[ChatMessage::new("user", q)], true).expect("template");
    tok.tokenize(&t, false, true).expect("tokenize")
}

struct Constrained;

impl BackendTask for Constrained {
    type Output = ();
    fn run<B: InferenceBackend>(self, device: B::Device) {
        let (m, g) = smollm2_with_grammars::<B>(&device);
        let chat = |q: &str| chat_ids(&m.tokenizer, q);
        // Chunked prefill (16 tokens a step), prompt-lookup speculation, everything at once.
        let cfg = EngineConfig {
            scheduler: SchedulerConfig {
                max_batched_tokens: 16,
                max_seqs: 8,
            },
            speculative: Some(SpeculativeConfig::default()),
            ..EngineConfig::default()
        };
        let engine =
            Engine::start::<B, _>(m.model.clone(), m.tokenizer.clone(), cfg).expect("engine");
        let h = engine.handle();
        let jobs = [
            (
                // An example to copy from: prompt lookup drafts from it, so the grammar meets
                // speculation (asserted below).
                chat(
                    "Describe a person as JSON, like {\"name\": \"Ada Lovelace\", \"age\": 36, \
                     \"city\": \"London\"}.",
                ),
                Constraint::JsonSchema(person_schema()),
                0.0,
            ),
            (
                chat("Describe a person as JSON."),
                Constraint::JsonSchema(person_schema()),
                0.9,
            ),
            (
                chat("What is today's date?"),
                Constraint::Regex(r"[0-9]{4}-[0-9]{2}-[0-9]{2}".into()),
                0.9,
            ),
            (
                chat("Is water wet?"),
                Constraint::Lark(YES_NO_MAYBE.into()),
                0.0,
            ),
        ];
        let streams: Vec<_> = jobs
            .iter()
            .enumerate()
            .map(|(i, (ids, c, temp))| {
                let mut sampling = SamplingParams::greedy();
                sampling.temperature = *temp;
                sampling.seed = i as u64;
                h.submit(Request {
                    sampling,
                    constraint: Some(g.compile(c).expect("compiles")),
                    ..Request::greedy(ids.clone(), 80)
                })
                .expect("submit")
            })
            .collect();
        let outs: Vec<_> = streams.into_iter().map(drain).collect();
        for (i, (text, _, _, reason)) in outs.iter().enumerate() {
            assert_ne!(*reason, FinishReason::Length, "job {i} ran out: {text:?}");
            assert_ne!(*reason, FinishReason::Error, "job {i} failed: {text:?}");
        }
        check_person(&outs[0].0);
        check_person(&outs[1].0);
        assert!(is_date(&outs[2].0), "{:?}", outs[2].0);
        check_answer(&outs[3].0);
        // The constraints met speculation: drafts were proposed and checked against them.
        let st = h.stats();
        assert!(st.spec_draft_tokens > 0, "nothing was drafted: {st:?}");
    }
}

/// Speculative verification stops where the grammar completes: drafts accepted past that point
/// are dropped, and no token is checked against a finished grammar.
#[test]
fn verification_stops_where_the_grammar_completes() {
    use cinder::runtime::engine::spec::verify_drafts;
    use cinder::runtime::sampler::Sampler;
    let f = cinder::gguf::GgufFile::open(model_path("smollm2-135m")).expect("gguf");
    let tok = cinder::tokenizer::Tokenizer::from_gguf(&f).expect("tokenizer");
    let g = Grammars::new(&tok, tok.vocab_size).expect("grammars");
    let mut m = g.compile(&Constraint::Regex("ab".into())).expect("regex");
    let id = |t: &str| tok.token_id(t).expect("token");
    let (a, b, c) = (id("a"), id("b"), id("c"));
    let row = |best: u32| {
        let mut r = vec![0.0f32; tok.vocab_size];
        r[best as usize] = 10.0;
        r
    };
    let rows = [row(a), row(b), row(c), row(c)];
    let refs: Vec<&[f32]> = rows.iter().map(Vec::as_slice).collect();
    assert_eq!(m.valid_prefix(&[a, b, c]).expect("valid"), 2);
    let mut s = Sampler::new(SamplingParams::greedy()).expect("sampler");
    let out = verify_drafts(&mut s, Some(&mut m), &[], &refs, &[a, b, c]).expect("verify");
    assert_eq!(out, vec![a, b]);
    assert!(m.is_done());
    // A finished grammar refuses text and allows only the end.
    assert!(!m.check(c).expect("check"));
    let mut r = row(c);
    m.mask_logits(&mut r).expect("mask");
    assert!(
        r.iter()
            .enumerate()
            .all(|(i, l)| l.is_infinite() || tok.is_eog(i as u32))
    );
}

/// Every kind of constraint, four requests at once, under chunked prefill and speculation, on
/// each backend CI runs.
#[test]
fn constrained_outputs_follow_their_grammar_on_every_backend() {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    for kind in test_backends() {
        dispatch(kind, Constrained).expect("dispatch");
    }
}

/// Greedy constrained requests run together under a KV budget too small for all of them: the
/// newest sequences are preempted and recomputed with their matchers kept, and every output is
/// the one the request gives alone.
#[test]
fn constrained_sequences_survive_preemption() {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    dispatch(primary_backend(), Preempted).expect("dispatch");
}

struct Preempted;

impl BackendTask for Preempted {
    type Output = ();
    fn run<B: InferenceBackend>(self, device: B::Device) {
        let (m, g) = smollm2_with_grammars::<B>(&device);
        let chat = |q: &str| chat_ids(&m.tokenizer, q);
        let jobs = [
            (
                chat("Describe a person as JSON."),
                Constraint::JsonSchema(person_schema()),
            ),
            (
                chat("Who wrote Hamlet? Answer in JSON."),
                Constraint::JsonSchema(person_schema()),
            ),
            (
                chat("Invent a customer record."),
                Constraint::JsonSchema(person_schema()),
            ),
            (
                chat("When did the Berlin Wall fall?"),
                Constraint::Regex(r"[0-9]{4}-[0-9]{2}-[0-9]{2}".into()),
            ),
            (
                chat("Is the sky green?"),
                Constraint::Lark(YES_NO_MAYBE.into()),
            ),
        ];
        const MAX: usize = 60;
        let run = |idx: &[usize], cfg: EngineConfig| {
            let engine =
                Engine::start::<B, _>(m.model.clone(), m.tokenizer.clone(), cfg).expect("engine");
            let h = engine.handle();
            let streams: Vec<_> = idx
                .iter()
                .map(|&i| {
                    h.submit(Request {
                        constraint: Some(g.compile(&jobs[i].1).expect("compiles")),
                        ..Request::greedy(jobs[i].0.clone(), MAX)
                    })
                    .expect("submit")
                })
                .collect();
            let outs: Vec<_> = streams.into_iter().map(drain).collect();
            (outs, h.stats().preemptions)
        };
        let all: Vec<usize> = (0..jobs.len()).collect();
        let alone: Vec<_> = all
            .iter()
            .map(|&i| run(&[i], EngineConfig::default()).0.remove(0))
            .collect();
        let longest = jobs.iter().map(|j| j.0.len()).max().unwrap_or(0) + MAX;
        let tight = EngineConfig {
            // Room for one sequence at its longest, not for five prompts and their answers.
            kv_budget: Some(KvBudget::Tokens(longest + 8)),
            block_size: 4,
            ..EngineConfig::default()
        };
        let (together, preemptions) = run(&all, tight);
        eprintln!("{preemptions} preemptions");
        assert!(preemptions > 0, "the tight budget never preempted");
        for (i, ((a, t), job)) in alone.iter().zip(&together).zip(&jobs).enumerate() {
            assert_eq!(a.1, t.1, "job {i}: preempted output differs from alone");
            assert_ne!(t.3, FinishReason::Error, "job {i} failed: {:?}", t.0);
            assert_ne!(t.3, FinishReason::Length, "job {i} ran out: {:?}", t.0);
            match &job.1 {
                Constraint::JsonSchema(_) => check_person(&t.0),
                Constraint::Regex(_) => assert!(is_date(&t.0), "{:?}", t.0),
                _ => check_answer(&t.0),
            }
        }
    }
}

struct Logprobs;

impl BackendTask for Logprobs {
    type Output = ();
    fn run<B: InferenceBackend>(self, device: B::Device) {
        let m =
            cinder::importer::load_model::<B>(&model_path("smollm2-135m"), &device).expect("load");
        let prompt = m
            .tokenizer
            .encode(
                "The history of the Roman Empire spans many centuries, from",
                true,
            )
            .expect("encode");
        let k = prompt.len();
        let engine = Engine::start::<B, _>(
            m.model.clone(),
            m.tokenizer.clone(),
            EngineConfig::default(),
        )
        .expect("engine");
        let n = k + 8;
        let (_, ids, lps, _) = drain(
            engine
                .handle()
                .submit(Request {
                    stop_on_eos: false,
                    logprobs: Some(5),
                    ..Request::greedy(prompt.clone(), n)
                })
                .expect("submit"),
        );
        assert_eq!(lps.len(), n);
        // Teacher-forced: the prompt and the generated tokens as one perplexity chunk, whose
        // scored second half covers generated positions only.
        let mut all = prompt.clone();
        all.extend(&ids);
        let ctx = all.len();
        let mut teacher = Vec::new();
        perplexity_rows(
            &m.model,
            &all,
            PerplexityOptions {
                ctx,
                max_chunks: Some(1),
                bos: m.tokenizer.bos_id.filter(|_| m.tokenizer.add_bos),
                paged: true,
                kv_type: Default::default(),
            },
            &mut |_, _, _| {},
            &mut |row, target| {
                teacher.push(log_prob(row, target) as f32);
                Ok(())
            },
        )
        .expect("perplexity");
        // Scored targets are positions ctx/2 + 1 .. ctx - 1; generated token j sits at k + j.
        let first_target = ctx / 2 + 1;
        assert!(first_target >= k);
        let mut worst = 0.0f32;
        for (i, t) in teacher.iter().enumerate() {
            let j = first_target + i - k;
            worst = worst.max((t - lps[j]).abs());
        }
        eprintln!("largest |Δ logprob| against perplexity: {worst:.2e}");
        assert!(worst <= 1e-3, "log-probabilities differ by {worst}");
    }
}

/// The engine's log-probabilities are `cinder perplexity`'s on the same text, within 1e-3.
#[test]
fn logprobs_agree_with_perplexity_teacher_forced() {
    dispatch(primary_backend(), Logprobs).expect("dispatch");
}

/// The official client: 20 Pydantic schemas 8 at a time (`chat.completions.parse`), json_object,
/// a streamed strict json_schema, chat log-probabilities, and bad schemas.
#[test]
fn the_openai_client_parses_twenty_schemas_eight_at_a_time() {
    let s = Server::start(&["--no-grpc", "--max-seqs", "8"]);
    let v = s.python_client("openai_structured.py", &["smollm2-135m"]);
    let bad: Vec<&Value> = v["parse"]
        .as_array()
        .expect("parse results")
        .iter()
        .filter(|r| r["valid"] != json!(true))
        .collect();
    assert!(bad.is_empty(), "invalid outputs: {bad:?}");
    assert_eq!(v["parse_valid"], 20);
    assert!(v["json_object"].is_object(), "{v}");
    assert!(v["stream_city"]["population"].is_u64(), "{v}");
    assert_eq!(v["bad_schema"], json!([400, 400, 400]));
    let lp = v["chat_logprobs"].as_array().expect("logprobs");
    assert!(!lp.is_empty());
    for t in lp {
        let top = t["top"].as_array().expect("top");
        assert_eq!(top.len(), 3);
        // Greedy: the chosen token is the most likely one.
        assert_eq!(top[0][0], t["token"], "{t}");
        assert_eq!(top[0][1], t["logprob"], "{t}");
        assert!(t["logprob"].as_f64().is_some_and(|x| x <= 0.0));
    }
}

/// Log-probabilities streamed equal the ones returned whole, and completions carry OpenAI's
/// legacy shape; a constraint with logprobs works too.
#[test]
fn logprobs_streamed_equal_whole_and_completions_have_the_legacy_shape() {
    let s = Server::start(&["--no-grpc"]);
    let body = json!({"messages": [{"role": "user", "content": "Name a color."}],
                      "max_tokens": 12, "temperature": 0, "logprobs": true, "top_logprobs": 2,
                      "response_format": {"type": "json_object"}});
    let (st, whole) = s.post("/v1/chat/completions", &body);
    assert_eq!(st, 200, "{whole}");
    let content = whole["choices"][0]["logprobs"]["content"]
        .as_array()
        .expect("content")
        .clone();
    let mut streamed = Vec::new();
    let mut body = body;
    body["stream"] = json!(true);
    for d in s.stream("/v1/chat/completions", &body) {
        if d == "[DONE]" {
            break;
        }
        let c: Value = serde_json::from_str(&d).expect("chunk");
        if let Some(a) = c["choices"][0]["logprobs"]["content"].as_array() {
            streamed.extend(a.iter().cloned());
        }
    }
    assert_eq!(streamed, content);
    let usage = whole["usage"]["completion_tokens"].as_u64().unwrap_or(0) as usize;
    assert_eq!(content.len(), usage);
    let (st, v) = s.post(
        "/v1/completions",
        &json!({"prompt": "The capital of France is", "max_tokens": 6, "temperature": 0,
                "logprobs": 3}),
    );
    assert_eq!(st, 200, "{v}");
    let lp = &v["choices"][0]["logprobs"];
    let text = v["choices"][0]["text"].as_str().expect("text");
    let tokens: Vec<&str> = lp["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(tokens.len(), 6);
    assert_eq!(tokens.concat(), text);
    assert_eq!(lp["token_logprobs"].as_array().map(Vec::len), Some(6));
    assert_eq!(lp["top_logprobs"][0].as_object().map(|o| o.len()), Some(3));
    assert_eq!(lp["text_offset"][0], 0);
}

/// Bad schemas, patterns and grammars: a 400 whose message names the problem, and the server
/// goes on serving.
#[test]
fn bad_constraints_get_a_400_naming_the_problem() {
    let s = Server::start(&["--no-grpc"]);
    let chat = |extra: Value| {
        let mut b = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4});
        for (k, v) in extra.as_object().expect("object") {
            b[k] = v.clone();
        }
        s.post("/v1/chat/completions", &b)
    };
    let cases = [
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x",
                   "schema": {"type": "object", "properties": {"a": {"type": "integr"}}}}}}),
            "response_format",
            "integr",
        ),
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x",
                   "schema": {"type": "integer", "minimum": 5, "maximum": 2}}}}),
            "response_format",
            "json_schema",
        ),
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x",
                   "schema": [1, 2]}}}),
            "response_format",
            "JSON object",
        ),
        (
            json!({"response_format": {"type": "yaml"}}),
            "response_format",
            "yaml",
        ),
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x",
                   "schema": {"$ref": "#/$defs/n", "$defs": {"n": {"$ref": "#/$defs/n"}}}}}}),
            "response_format",
            "admits no text",
        ),
        (json!({"guided_regex": "[0-9"}), "guided_regex", "regex"),
        (
            json!({"guided_grammar": "start: foo\n"}),
            "guided_grammar",
            "foo",
        ),
        (
            json!({"guided_regex": "a", "guided_grammar": "start: \"a\""}),
            "guided_grammar",
            "one constraint",
        ),
        (
            json!({"logprobs": true, "top_logprobs": 21}),
            "top_logprobs",
            "20",
        ),
        (json!({"top_logprobs": 2}), "top_logprobs", "logprobs"),
    ];
    for (extra, param, says) in cases {
        let (st, v) = chat(extra.clone());
        assert_eq!(st, 400, "{extra} -> {v}");
        assert_eq!(v["error"]["param"], param, "{extra} -> {v}");
        let msg = v["error"]["message"].as_str().unwrap_or("");
        assert!(msg.contains(says), "{extra} -> {msg}");
    }
    let (st, v) = chat(json!({"guided_regex": "(yes|no)"}));
    assert_eq!(st, 200, "{v}");
    let t = v["choices"][0]["message"]["content"].as_str().unwrap_or("");
    assert!(t == "yes" || t == "no", "{t}");
}

/// gRPC carries the same constraints and returns log-probabilities.
#[test]
fn grpc_takes_a_constraint_and_returns_logprobs() {
    use cinder::server::grpc::pb::generate_request::Constraint as C;
    use cinder::server::grpc::pb::{GenerateRequest, inference_client::InferenceClient};
    let s = Server::start(&[]);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let mut c = InferenceClient::connect(s.grpc.clone().expect("grpc address"))
            .await
            .expect("connect");
        let mut stream = c
            .generate(GenerateRequest {
                prompt: "Today's date is".into(),
                max_tokens: 20,
                constraint: Some(C::Regex("[0-9]{4}-[0-9]{2}-[0-9]{2}".into())),
                logprobs: Some(2),
                ..Default::default()
            })
            .await
            .expect("generate")
            .into_inner();
        let (mut text, mut lps, mut finish) = (String::new(), 0, String::new());
        while let Some(m) = stream.message().await.expect("message") {
            text.push_str(&m.text);
            if let Some(lp) = m.logprob {
                assert_eq!(lp.top.len(), 2);
                assert!(lp.logprob <= 0.0);
                lps += 1;
            }
            if !m.finish_reason.is_empty() {
                finish = m.finish_reason;
            }
        }
        assert!(is_date(&text), "{text:?}");
        assert_eq!(finish, "stop");
        assert!(lps > 0);
        let bad = c
            .generate(GenerateRequest {
                prompt: "x".into(),
                constraint: Some(C::JsonSchema("{\"type\": \"strin\"}".into())),
                ..Default::default()
            })
            .await;
        let e = bad.expect_err("refused");
        assert_eq!(format!("{:?}", e.code()), "InvalidArgument");
        assert!(e.message().contains("strin"), "{}", e.message());
    });
}

/// `n` choices: each its own seed stream (same request, same choices; different choices differ),
/// the prompt's full KV blocks computed once and shared through the prefix cache, one usage with
/// the prompt counted once; streamed chunks carry each choice's index and one `[DONE]` ends them.
#[test]
fn n_choices_share_the_prompt_and_each_has_its_own_seed() {
    let s = Server::start(&["--no-grpc", "--max-seqs", "8"]);
    let prompt = "Once upon a time, in a small village by the sea, there lived an old fisherman \
                  who told stories to the children every evening. One night he began a new story:";
    let body = json!({"prompt": prompt, "n": 4, "max_tokens": 12, "temperature": 1.0,
                      "seed": 7, "top_k": 0, "top_p": 1.0});
    let hits_before = s.metric("cinder_prefix_cache_hit_tokens_total");
    let (st, a) = s.post("/v1/completions", &body);
    assert_eq!(st, 200, "{a}");
    let hits = s.metric("cinder_prefix_cache_hit_tokens_total") - hits_before;
    let texts: Vec<&str> = a["choices"]
        .as_array()
        .expect("choices")
        .iter()
        .enumerate()
        .map(|(i, c)| {
            assert_eq!(c["index"], i);
            c["text"].as_str().expect("text")
        })
        .collect();
    assert_eq!(texts.len(), 4);
    let distinct: std::collections::HashSet<&&str> = texts.iter().collect();
    assert!(distinct.len() >= 2, "{texts:?}");
    let prompt_tokens = a["usage"]["prompt_tokens"].as_u64().expect("usage") as f64;
    assert_eq!(a["usage"]["completion_tokens"], 48);
    // Choices 1..3 found the prompt's full 16-token blocks cached by choice 0.
    let full = (prompt_tokens / 16.0).floor() * 16.0;
    assert!(full >= 32.0);
    assert!(
        hits >= 3.0 * full,
        "prefix hits {hits}, full-block tokens {full}"
    );
    let (_, b) = s.post("/v1/completions", &body);
    assert_eq!(a["choices"], b["choices"], "same seed, same choices");
    let mut sb = body.clone();
    sb["n"] = json!(2);
    sb["stream"] = json!(true);
    let events = s.stream("/v1/completions", &sb);
    assert_eq!(events.iter().filter(|d| *d == "[DONE]").count(), 1);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let mut finished = [0; 2];
    for d in events.iter().filter(|d| *d != "[DONE]") {
        let c: Value = serde_json::from_str(d).expect("chunk");
        let i = c["choices"][0]["index"].as_u64().expect("index") as usize;
        if c["choices"][0]["finish_reason"].is_string() {
            finished[i] += 1;
        }
    }
    assert_eq!(finished, [1, 1]);
    let (st, v) = s.post("/v1/completions", &json!({"prompt": "x", "n": 9}));
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["error"]["param"], "n");
}
