//! The front door (`cinder::Llm`, `cinder::Embedder`) on the real models: the same tokens as the
//! generic path and as llama.cpp (up to llama.cpp's own near-ties), chat through the template,
//! streams, typed JSON, async calls, many threads on one handle batching in one engine, a dropped
//! stream freeing its sequence, and bad input named in the error.
//!
//! Runs on every backend in `CINDER_TEST_BACKENDS` (default: every compiled one).

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cinder::prelude::{BackendTask, InferenceBackend, SamplingParams};
use cinder::runtime::engine::FinishReason;
use cinder::{BackendKind, Embedder, Error, GenerateOptions, Llm, Message};
use common::*;

const REF: &str = "smollm2-135m-q4_1.greedy.jsonl";

fn load(kind: BackendKind) -> Llm {
    Llm::builder("smollm2-135m")
        .backend(kind)
        .kv_memory(64 << 20)
        .build()
        .expect("SmolLM2 loads through the front door")
}

/// The same greedy request through the generic path: `load_model::<B>` and `generate`.
struct Generic {
    prompt: String,
    max_tokens: usize,
}

impl BackendTask for Generic {
    type Output = Vec<u32>;
    fn run<B: InferenceBackend>(self, device: B::Device) -> Vec<u32> {
        let m = cinder::importer::load_model::<B>(&model_path("smollm2-135m"), &device)
            .expect("model loads");
        let ids = m.tokenizer.encode(&self.prompt, true).expect("encode");
        let opts = cinder::prelude::GenerateOptions {
            max_tokens: self.max_tokens,
            sampling: SamplingParams::greedy(),
            stop_on_eos: false,
            ..Default::default()
        };
        cinder::prelude::generate(&m.model, &m.tokenizer, &ids, &opts, &mut |_| true)
            .expect("generate")
            .tokens
    }
}

/// Greedy tokens agree with llama.cpp's up to the first step where llama.cpp's own top two are
/// within 0.03 in probability (there either pick is right); after it the texts may part.
fn agrees_with_llama_cpp(ours: &[u32], r: &GreedyRef) {
    for (i, step) in r.steps.iter().enumerate().take(ours.len()) {
        let near_tie = step.top5.len() > 1 && step.top5[0].1 - step.top5[1].1 <= 0.03;
        if near_tie {
            return;
        }
        assert_eq!(
            ours[i],
            step.token,
            "{:?}: step {i} differs from llama.cpp's greedy token (not a near-tie: {:?})",
            r.prompt,
            &step.top5[..2]
        );
    }
}

#[test]
fn handles_are_send_sync_clone_static() {
    fn check<T: Clone + Send + Sync + 'static>() {}
    check::<Llm>();
    check::<Embedder>();
    fn send<T: Send + 'static>() {}
    send::<cinder::TextStream>();
    send::<cinder::AsyncTextStream>();
    send::<Error>();
    // Anything a model name is held in.
    fn takes(_: impl Fn(&str) -> cinder::LlmBuilder) {}
    takes(|s| Llm::builder(s));
    let _ = |s: String, r: &String, p: &Path, b: PathBuf| {
        (
            Llm::builder(s),
            Llm::builder(r),
            Llm::builder(p),
            Llm::builder(b),
        )
    };
}

#[test]
fn generate_matches_the_generic_path_and_llama_cpp() {
    for kind in test_backends() {
        let llm = load(kind);
        assert_eq!(llm.backend(), kind);
        // Two prompts on a GPU backend (lavapipe in CI decodes ~1.4 tokens/s), three on the CPU.
        for r in greedy_refs(REF)
            .iter()
            .take(if kind.is_cpu() { 3 } else { 2 })
        {
            let opts = GenerateOptions {
                ignore_eos: true,
                ..GenerateOptions::greedy(16)
            };
            let out = llm.generate(&r.prompt, &opts).expect("generate");
            assert_eq!(out.finish, FinishReason::Length);
            assert_eq!(out.tokens.len(), 16);
            assert_eq!(out.usage.prompt_tokens, r.prompt_tokens.len());
            let generic = cinder::backends::dispatch(
                kind,
                Generic {
                    prompt: r.prompt.clone(),
                    max_tokens: 16,
                },
            )
            .expect("dispatch");
            assert_eq!(out.tokens, generic, "{kind}: front door vs generic path");
            assert_eq!(
                out.text,
                llm.tokenizer().decode(&out.tokens, true).expect("decode")
            );
            agrees_with_llama_cpp(&out.tokens, r);
        }
    }
}

#[test]
fn stream_chat_and_options() {
    for kind in test_backends() {
        let llm = load(kind);
        let opts = GenerateOptions::greedy(16);
        let whole = llm.generate("Once upon a time", &opts).expect("generate");
        let mut s = llm.stream("Once upon a time", &opts).expect("stream");
        let pieces: Vec<String> = s.by_ref().collect::<Result<_, _>>().expect("pieces");
        assert!(pieces.len() > 1, "streamed in pieces: {pieces:?}");
        assert_eq!(pieces.concat(), whole.text);
        assert_eq!(s.finish_reason(), Some(whole.finish));
        assert_eq!(s.tokens(), whole.tokens.len());

        // Chat: the template's prompt, the same tokens as rendering it by hand.
        let msgs = [
            Message::system("You are a concise assistant."),
            Message::user("What is the capital of France?"),
        ];
        let reply = llm
            .chat_with(&msgs, &GenerateOptions::greedy(24))
            .expect("chat");
        assert!(reply.text.contains("Paris"), "reply: {:?}", reply.text);
        let chat: Vec<_> = msgs
            .iter()
            .map(|m| cinder::runtime::tokenizer::ChatMessage::new(m.role.as_str(), &m.content))
            .collect();
        let rendered =
            cinder::runtime::tokenizer::apply_chat_template(llm.tokenizer(), &chat, true)
                .expect("template");
        let ids = llm
            .tokenizer()
            .tokenize(&rendered, false, true)
            .expect("ids");
        assert_eq!(reply.usage.prompt_tokens, ids.len());

        // Stop strings end the text before them; logprobs come per token.
        let out = llm
            .generate(
                "1, 2, 3, 4,",
                &GenerateOptions::greedy(16).stop(" 7").logprobs(2),
            )
            .expect("stop");
        assert_eq!(out.finish, FinishReason::Stop);
        assert!(
            !out.text.contains(" 7") && out.text.contains('6'),
            "{:?}",
            out.text
        );
        assert_eq!(out.logprobs.len(), out.tokens.len());
        assert!(
            out.logprobs
                .iter()
                .all(|l| l.top.len() == 2 && l.logprob <= 0.0)
        );

        // Sampling with a seed: the same seed gives the same text; n choices differ by seed.
        // (Batched with others, a GPU backend's logits move in the last bits, so a sampled choice
        // is compared with a run alone only when it runs alone: n = 1.)
        let hot = GenerateOptions {
            ignore_eos: true,
            ..GenerateOptions::default()
                .temperature(1.0)
                .seed(3)
                .max_tokens(8)
        };
        let a = llm
            .generate("My favourite animal is", &hot)
            .expect("sample");
        let b = llm
            .generate("My favourite animal is", &hot)
            .expect("sample");
        assert_eq!(a.tokens, b.tokens);
        let one = llm
            .generate_n("My favourite animal is", &hot, 1)
            .expect("n = 1");
        assert_eq!(one[0].tokens, a.tokens, "choice 0 uses the options' seed");
        let n = llm
            .generate_n("My favourite animal is", &hot, 3)
            .expect("n");
        assert_eq!(n.len(), 3);
        assert!(n.iter().all(|o| o.tokens.len() == 8));
        assert!(n[1].tokens != n[0].tokens || n[2].tokens != n[0].tokens);
    }
}

#[test]
fn threads_share_one_engine_and_batch() {
    let kind = primary_backend();
    let llm = load(kind);
    let prompts: Vec<String> = reference_prompts(REF, &["Rust is a language that", "1, 2, 3,"]);
    let opts = GenerateOptions {
        ignore_eos: true,
        ..GenerateOptions::greedy(12)
    };
    let alone: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| llm.generate(p, &opts).expect("alone").tokens)
        .collect();
    let steps_before = llm.stats().steps;
    let together: Vec<Vec<u32>> = std::thread::scope(|s| {
        let hs: Vec<_> = prompts
            .iter()
            .map(|p| {
                let (llm, opts) = (llm.clone(), opts.clone());
                s.spawn(move || llm.generate(p, &opts).expect("together").tokens)
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    assert_eq!(together, alone, "batched greedy tokens equal each alone");
    let steps = llm.stats().steps - steps_before;
    let tokens: usize = alone.iter().map(Vec::len).sum();
    assert!(
        (steps as usize) < tokens,
        "{} requests from {} threads ran in {steps} forwards for {tokens} tokens: not batched",
        prompts.len(),
        prompts.len()
    );
}

#[test]
fn dropping_a_stream_frees_its_sequence() {
    let llm = load(primary_backend());
    let opts = GenerateOptions {
        ignore_eos: true,
        ..GenerateOptions::greedy(400)
    };
    let mut s = llm
        .stream("Write a long story about a dragon.", &opts)
        .expect("stream");
    // Two pieces: the step that produced the first has ended, so its figures are published.
    for _ in 0..2 {
        assert!(!s.next().expect("a piece").expect("text").is_empty());
    }
    assert_eq!(llm.stats().running, 1);
    drop(s);
    let t0 = Instant::now();
    while llm.stats().running != 0 || llm.stats().kv_blocks_used != 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "cancel never freed the sequence"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        llm.stats().generated_tokens < 400,
        "the request ran on after the drop"
    );
}

#[test]
fn async_calls_match_blocking_ones() {
    use futures_util::StreamExt;
    let llm = load(primary_backend());
    let opts = GenerateOptions::greedy(16);
    let blocking = llm
        .generate("The capital of France is", &opts)
        .expect("generate");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let a = llm
            .generate_async("The capital of France is", &opts)
            .await
            .expect("async");
        assert_eq!(a.tokens, blocking.tokens);
        let mut s = llm
            .stream_async("The capital of France is", &opts)
            .expect("stream");
        let mut text = String::new();
        while let Some(p) = s.next().await {
            text.push_str(&p.expect("piece"));
        }
        assert_eq!(text, blocking.text);
        assert_eq!(s.finish_reason(), Some(blocking.finish));
        // Many tasks on one handle.
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let (llm, opts) = (llm.clone(), opts.clone());
                tokio::spawn(
                    async move { llm.generate_async("The capital of France is", &opts).await },
                )
            })
            .collect();
        for t in tasks {
            assert_eq!(
                t.await.expect("task").expect("generate").tokens,
                blocking.tokens
            );
        }
    });
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct City {
    name: String,
    country: String,
    population: u64,
    coastal: bool,
}

#[test]
fn chat_json_returns_the_type() {
    let llm = load(primary_backend());
    let city: City = llm
        .chat_json_with(
            &[Message::user("Describe Paris as JSON.")],
            &GenerateOptions::greedy(120),
        )
        .expect("typed JSON");
    assert!(
        !city.name.is_empty() && !city.country.is_empty(),
        "{city:?}"
    );
    // Too few tokens to finish the value: a clear error, not a parse panic.
    let e = llm
        .chat_json_with::<City>(
            &[Message::user("Describe Paris as JSON.")],
            &GenerateOptions::greedy(3),
        )
        .expect_err("3 tokens cannot hold the object");
    assert!(
        matches!(e, Error::Json { .. }) && e.to_string().contains("max_tokens"),
        "{e}"
    );
}

#[test]
fn bad_input_is_named() {
    let e = Llm::load("no-such-model-anywhere").expect_err("unknown model");
    assert!(matches!(e, Error::Catalog(_)), "{e:?}");
    assert!(e.to_string().contains("no-such-model-anywhere"), "{e}");
    if !BackendKind::Cuda.is_compiled() {
        let e = Llm::builder("smollm2-135m")
            .backend(BackendKind::Cuda)
            .build()
            .expect_err("cuda not compiled");
        assert!(
            matches!(e, Error::Backend(_)) && e.to_string().contains("--features cuda"),
            "{e}"
        );
    }
    let e = Llm::builder("smollm2-135m")
        .speculative(cinder::Speculative::Ngram { tokens: 0 })
        .build()
        .expect_err("0 draft tokens");
    assert!(e.to_string().contains("1..=64"), "{e}");
    let llm = load(primary_backend());
    let long = "word ".repeat(llm.max_request_tokens() + 10);
    let e = llm
        .generate(&long, &GenerateOptions::greedy(4))
        .expect_err("too long");
    assert!(e.to_string().contains("exceeds the context length"), "{e}");
    let e = llm
        .generate("", &GenerateOptions::greedy(4))
        .expect_err("empty");
    assert!(e.to_string().contains("empty prompt"), "{e}");
}

#[test]
fn embedder_matches_sentence_transformers_and_searches() {
    #[derive(serde::Deserialize)]
    struct Ref {
        sentences: Vec<String>,
        embeddings: Vec<Vec<f32>>,
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/minilm.json");
    let r: Ref = serde_json::from_str(&std::fs::read_to_string(path).expect("reference"))
        .expect("reference parses");
    for kind in test_backends() {
        let e = Embedder::load_on("all-minilm-l6-v2", kind).expect("embedder loads");
        assert_eq!((e.dim(), e.backend()), (384, kind));
        let v = e.embed(&r.sentences).expect("embed");
        for (ours, theirs) in v.iter().zip(&r.embeddings) {
            assert!(
                cosine(ours, theirs) > 0.9999,
                "{kind}: cosine {}",
                cosine(ours, theirs)
            );
        }
        let mut idx = e.index().expect("index");
        idx.add_all(
            r.sentences
                .iter()
                .enumerate()
                .map(|(i, s)| (["a", "b", "c", "d", "e", "f", "g"][i], s.as_str())),
        )
        .expect("add");
        assert_eq!(idx.len(), r.sentences.len());
        let hits = idx.search("Someone is having a meal.", 2).expect("search");
        let ids: Vec<&str> = hits.iter().map(|h| h.id.as_str()).collect();
        assert!(ids.contains(&"a") && ids.contains(&"b"), "{ids:?}");
        assert_eq!(
            idx.text("d"),
            Some("Rust is a systems programming language.")
        );
    }
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct Weather {
    city: String,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Clock {
    timezone: String,
}

#[test]
fn typed_tool_calls_round_trip() {
    use cinder::{Tool, ToolChoice};
    let llm = load(primary_backend());
    let tools = [
        Tool::new::<Weather>("get_weather", "The current weather in a city"),
        Tool::new::<Clock>("get_time", "The time in a timezone"),
    ];
    let mut chat = vec![Message::user("What is the weather in Paris?")];
    // A named tool: the grammar forces one call of it, with arguments of its type.
    let reply = llm
        .chat_tools(
            &chat,
            &tools,
            ToolChoice::Named("get_weather".into()),
            &GenerateOptions::greedy(64),
        )
        .expect("a forced call");
    assert_eq!(reply.calls.len(), 1, "{reply:?}");
    assert_eq!(reply.calls[0].name, "get_weather");
    let args: Weather = reply.calls[0].arguments().expect("typed arguments");
    assert!(!args.city.is_empty(), "{args:?}");
    // The call and its result go back; `None` answers in text.
    chat.push(reply.message());
    chat.push(Message::tool(
        &reply.calls[0].id,
        r#"{"temperature_c": 21}"#,
    ));
    let answer = llm
        .chat_tools(
            &chat,
            &tools,
            ToolChoice::None,
            &GenerateOptions::greedy(32),
        )
        .expect("an answer");
    assert!(answer.calls.is_empty());
    assert!(!answer.text.unwrap_or_default().trim().is_empty());
    // SmolLM2's template has no tool syntax: the model cannot choose, and says so.
    let e = llm
        .chat_tools(&chat, &tools, ToolChoice::Auto, &GenerateOptions::greedy(8))
        .expect_err("auto without a tool syntax");
    assert!(matches!(e, Error::Unsupported(_)), "{e}");
    let e = llm
        .chat_tools(
            &chat,
            &tools,
            ToolChoice::Named("nope".into()),
            &GenerateOptions::greedy(8),
        )
        .expect_err("unknown tool");
    assert!(e.to_string().contains("nope"), "{e}");
}

#[test]
fn speculation_keeps_the_tokens_and_drafts() {
    use cinder::Speculative;
    let kind = primary_backend();
    let plain = load(kind);
    // A prompt that repeats itself: prompt lookup finds its continuations.
    let prompt = "one two three four five six seven eight nine ten. one two three four five six";
    let opts = GenerateOptions {
        ignore_eos: true,
        ..GenerateOptions::greedy(24)
    };
    let want = plain.generate(prompt, &opts).expect("plain").tokens;
    for spec in [
        Speculative::Ngram { tokens: 4 },
        Speculative::Draft {
            model: "smollm2-135m".into(),
            tokens: 3,
        },
    ] {
        let llm = Llm::builder("smollm2-135m")
            .backend(kind)
            .kv_memory(64 << 20)
            .speculative(spec.clone())
            .build()
            .expect("speculative engine");
        assert_eq!(
            llm.generate(prompt, &opts).expect("spec").tokens,
            want,
            "{spec:?}"
        );
        let st = llm.stats();
        assert!(
            st.spec_draft_tokens > 0,
            "{spec:?} proposed nothing: {st:?}"
        );
        assert!(
            st.spec_accepted_tokens > 0,
            "{spec:?} accepted nothing: {st:?}"
        );
    }
}
