//! Turning the engine's event streams of one request (one per choice, `n` of them) into OpenAI's
//! responses: one JSON body, or Server-Sent Events whose chunks carry each choice's `index`.
//! Log-probabilities and parsed tool calls ride along.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::Json;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use cinder_runtime::engine::{Event, EventStream, FinishReason, TokenLogprob};
use futures_util::stream::{self, Stream, StreamExt};
use serde_json::{Value, json};

use crate::AppState;
use crate::error::ApiError;
use crate::openai::{Common, Usage};
use crate::turn::{Split, Step};
use crate::{structured, tools};
use cinder_runtime::reasoning;

/// Which endpoint is answering.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Chat,
    Completion,
}

/// OpenAI's `finish_reason` for an engine finish (`timeout`, `error` are Cinder's own).
pub fn finish_reason(r: FinishReason) -> &'static str {
    match r {
        FinishReason::Length => "length",
        FinishReason::Eos | FinishReason::Stop => "stop",
        FinishReason::Timeout => "timeout",
        FinishReason::Cancelled => "cancelled",
        FinishReason::Error => "error",
    }
}

/// Latency bookkeeping for one stream.
pub(crate) struct Clock {
    start: Instant,
    last: Option<Instant>,
}

impl Clock {
    pub(crate) fn new() -> Self {
        Self {
            start: Instant::now(),
            last: None,
        }
    }

    pub(crate) fn tick(&mut self, s: &AppState) {
        let now = Instant::now();
        match self.last {
            None => s.metrics.ttft.observe((now - self.start).as_secs_f64()),
            Some(l) => s.metrics.itl.observe((now - l).as_secs_f64()),
        }
        self.last = Some(now);
    }
}

pub(crate) fn count_usage(s: &AppState, u: &cinder_runtime::engine::Usage) {
    s.metrics
        .prompt_tokens
        .fetch_add(u.prompt_tokens as u64, Ordering::Relaxed);
    s.metrics
        .generation_tokens
        .fetch_add(u.completion_tokens as u64, Ordering::Relaxed);
}

/// The usage of `n` choices of one prompt: the prompt counted once, completions summed.
fn add_usage(total: &mut Option<cinder_runtime::engine::Usage>, u: cinder_runtime::engine::Usage) {
    match total {
        None => *total = Some(u),
        Some(t) => t.completion_tokens += u.completion_tokens,
    }
}

pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Whether the request asked for log-probabilities (`logprobs` true or a number).
fn logprobs_asked(c: &Common, kind: Kind) -> bool {
    match kind {
        Kind::Chat => c.logprobs == Some(Value::Bool(true)),
        Kind::Completion => c.logprobs.as_ref().is_some_and(Value::is_number),
    }
}

/// What one choice produced.
struct Collected {
    text: String,
    lps: Vec<(u32, TokenLogprob)>,
    reason: FinishReason,
    usage: cinder_runtime::engine::Usage,
}

async fn collect(s: AppState, mut stream: EventStream) -> Result<Collected, ApiError> {
    let (mut text, mut lps, mut clock) = (String::new(), Vec::new(), Clock::new());
    loop {
        match stream.next().await {
            Some(Event::Token {
                id,
                text: t,
                logprob,
            }) => {
                clock.tick(&s);
                text.push_str(&t);
                lps.extend(logprob.map(|lp| (id, lp)));
            }
            Some(Event::Finished {
                reason,
                text: t,
                usage,
                ..
            }) => {
                text.push_str(&t);
                count_usage(&s, &usage);
                return Ok(Collected {
                    text,
                    lps,
                    reason,
                    usage,
                });
            }
            None => return Err(ApiError::internal("the engine stopped")),
        }
    }
}

/// How a chat answer is taken apart: calls of these functions, reasoning marked this way.
#[derive(Debug, Clone, Default)]
pub(crate) struct Parsing {
    /// the functions whose calls are parsed out
    pub tools: Option<Vec<String>>,
    /// the reasoning block's marking, where the template has one
    pub reasoning: Option<reasoning::Reasoning>,
}

/// Answers a request whose choices run as `streams` (index = position).
pub(crate) async fn respond(
    s: AppState,
    streams: Vec<EventStream>,
    id: String,
    kind: Kind,
    c: &Common,
    parse: Parsing,
) -> Result<Response, ApiError> {
    let created = unix_now();
    if c.stream {
        let usage = c.stream_options.as_ref().is_some_and(|o| o.include_usage);
        return Ok(sse(s, streams, id, kind, created, usage, parse).into_response());
    }
    let done =
        futures_util::future::join_all(streams.into_iter().map(|st| collect(s.clone(), st))).await;
    let asked = logprobs_asked(c, kind);
    let mut choices = Vec::with_capacity(done.len());
    let mut total = None;
    for (index, r) in done.into_iter().enumerate() {
        let r = r?;
        add_usage(&mut total, r.usage);
        if r.reason == FinishReason::Error {
            return Err(ApiError::internal("generation failed in the engine"));
        }
        let mut fr = finish_reason(r.reason);
        let choice = match kind {
            Kind::Chat => {
                let (thinking, answer) = match parse.reasoning {
                    Some(m) => reasoning::split_all(m, &r.text),
                    None => (String::new(), r.text.clone()),
                };
                let (content, calls) = match &parse.tools {
                    Some(names) => tools::split(&answer, names.clone()),
                    None => (Some(answer), Vec::new()),
                };
                let mut message = json!({"role": "assistant", "content": content});
                if !thinking.is_empty() {
                    message["reasoning_content"] = json!(thinking);
                }
                if !calls.is_empty() {
                    let list: Vec<Value> = calls
                        .iter()
                        .map(|c| tools::call_json(c, &tools::call_id()))
                        .collect();
                    message["tool_calls"] = json!(list);
                    fr = "tool_calls";
                }
                let lp = asked.then(|| {
                    let content: Vec<Value> = r
                        .lps
                        .iter()
                        .map(|(t, lp)| structured::chat_entry(&s.tok, *t, lp))
                        .collect();
                    json!({"content": content, "refusal": null})
                });
                json!({"index": index, "message": message, "logprobs": lp, "finish_reason": fr})
            }
            Kind::Completion => {
                let lp = asked.then(|| structured::completion_block(&s.tok, &r.lps, 0));
                json!({"index": index, "text": r.text, "logprobs": lp, "finish_reason": fr})
            }
        };
        choices.push(choice);
    }
    let object = match kind {
        Kind::Chat => "chat.completion",
        Kind::Completion => "text_completion",
    };
    let body = json!({
        "id": id, "object": object, "created": created, "model": s.cfg.model_name,
        "choices": choices, "usage": total.map(Usage::from),
    });
    Ok(Json(body).into_response())
}

/// One chunk of a stream, for choice `index`.
fn chunk(
    st: &SseState,
    index: usize,
    text: Option<&str>,
    first: bool,
    finish: Option<&str>,
) -> Value {
    match st.kind {
        Kind::Chat => {
            let mut delta = json!({});
            if first {
                delta["role"] = json!("assistant");
            }
            if let Some(t) = text {
                delta["content"] = json!(t);
            }
            json!({"id": st.id, "object": "chat.completion.chunk", "created": st.created,
                   "model": st.s.cfg.model_name,
                   "choices": [{"index": index, "delta": delta, "logprobs": null, "finish_reason": finish}]})
        }
        Kind::Completion => json!({"id": st.id, "object": "text_completion", "created": st.created,
                   "model": st.s.cfg.model_name,
                   "choices": [{"index": index, "text": text.unwrap_or(""), "logprobs": null,
                                "finish_reason": finish}]}),
    }
}

fn data(v: &Value) -> SseEvent {
    SseEvent::default().data(v.to_string())
}

/// One choice's place in a stream.
struct Choice {
    /// no chunk sent yet (a completion's first chunk; chat sends the role first)
    first: bool,
    /// bytes of text sent so far (completions' `text_offset`)
    offset: usize,
    /// splits reasoning and function calls out of the content
    split: Split,
    /// reasoning taken out and not yet sent
    new_reasoning: String,
    /// calls parsed and not yet sent
    new_calls: Vec<tools::Call>,
    /// calls sent so far (the next call's `index`)
    calls: usize,
    clock: Clock,
}

impl Choice {
    /// The content part of `text` (all of it without tools); calls found go to `new_calls`.
    /// `end`: the text is the last, so nothing is held back.
    fn content_of(&mut self, text: &str, end: bool) -> String {
        let mut content = String::new();
        for step in self.split.feed(text, end) {
            match step {
                Step::Text(t) => content.push_str(&t),
                Step::Reasoning(r) => self.new_reasoning.push_str(&r),
                Step::Call(c) => self.new_calls.push(c),
                Step::End(_) => {}
            }
        }
        content
    }
}

type Events = stream::SelectAll<std::pin::Pin<Box<dyn Stream<Item = (usize, Event)> + Send>>>;

struct SseState {
    s: AppState,
    id: String,
    kind: Kind,
    created: u64,
    include_usage: bool,
    events: Events,
    choices: Vec<Choice>,
    pending: std::collections::VecDeque<SseEvent>,
    usage: Option<cinder_runtime::engine::Usage>,
    finished: usize,
    done: bool,
}

impl SseState {
    /// One chunk per parsed call of choice `i`: `delta.tool_calls` with its index, id, name and
    /// arguments.
    fn push_calls(&mut self, i: usize) {
        for c in std::mem::take(&mut self.choices[i].new_calls) {
            let mut call = tools::call_json(&c, &tools::call_id());
            call["index"] = json!(self.choices[i].calls);
            self.choices[i].calls += 1;
            let mut ch = chunk(self, i, None, false, None);
            ch["choices"][0]["delta"] = json!({"tool_calls": [call]});
            self.pending.push_back(data(&ch));
        }
    }

    /// A chunk with the reasoning choice `i` has taken out since the last one.
    fn push_reasoning(&mut self, i: usize) {
        let r = std::mem::take(&mut self.choices[i].new_reasoning);
        if !r.is_empty() {
            let mut c = chunk(self, i, None, false, None);
            c["choices"][0]["delta"] = json!({"reasoning_content": r});
            self.pending.push_back(data(&c));
        }
    }

    fn on_token(&mut self, i: usize, id: u32, text: &str, logprob: Option<TokenLogprob>) {
        self.choices[i].clock.tick(&self.s);
        let text = self.choices[i].content_of(text, false);
        self.push_reasoning(i);
        if !text.is_empty() || logprob.is_some() {
            let mut c = chunk(self, i, Some(&text), self.choices[i].first, None);
            if let Some(lp) = logprob {
                c["choices"][0]["logprobs"] = match self.kind {
                    Kind::Chat => {
                        json!({"content": [structured::chat_entry(&self.s.tok, id, &lp)]})
                    }
                    Kind::Completion => structured::completion_block(
                        &self.s.tok,
                        &[(id, lp)],
                        self.choices[i].offset,
                    ),
                };
            }
            self.choices[i].offset += text.len();
            self.choices[i].first = false;
            self.pending.push_back(data(&c));
        }
        self.push_calls(i);
    }

    fn on_finish(
        &mut self,
        i: usize,
        reason: FinishReason,
        text: &str,
        usage: cinder_runtime::engine::Usage,
    ) {
        count_usage(&self.s, &usage);
        add_usage(&mut self.usage, usage);
        let text = self.choices[i].content_of(text, true);
        self.push_reasoning(i);
        if !text.is_empty() {
            let c = chunk(self, i, Some(&text), self.choices[i].first, None);
            self.pending.push_back(data(&c));
        }
        self.push_calls(i);
        let fr = if self.choices[i].calls > 0 {
            "tool_calls"
        } else {
            finish_reason(reason)
        };
        let mut last = chunk(self, i, None, false, Some(fr));
        if self.kind == Kind::Completion {
            last["choices"][0]["text"] = json!("");
        }
        self.pending.push_back(data(&last));
        self.finished += 1;
        if self.finished < self.choices.len() {
            return;
        }
        if self.include_usage {
            let obj = match self.kind {
                Kind::Chat => "chat.completion.chunk",
                Kind::Completion => "text_completion",
            };
            let u = json!({"id": self.id, "object": obj, "created": self.created,
                           "model": self.s.cfg.model_name, "choices": [],
                           "usage": self.usage.map(Usage::from)});
            self.pending.push_back(data(&u));
        }
        self.pending.push_back(SseEvent::default().data("[DONE]"));
        self.done = true;
    }
}

/// Server-Sent Events in OpenAI's chunk format, ending with `data: [DONE]` once every choice has
/// finished. Dropping the response (client gone) drops the engine streams, which cancels the
/// sequences.
fn sse(
    s: AppState,
    streams: Vec<EventStream>,
    id: String,
    kind: Kind,
    created: u64,
    include_usage: bool,
    parse: Parsing,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let n = streams.len();
    let events = stream::select_all(streams.into_iter().enumerate().map(|(i, st)| {
        let s = stream::unfold(st, |mut st| async move { st.next().await.map(|e| (e, st)) })
            .map(move |e| (i, e));
        Box::pin(s) as std::pin::Pin<Box<dyn Stream<Item = (usize, Event)> + Send>>
    }));
    let choices = (0..n)
        .map(|_| Choice {
            first: true,
            offset: 0,
            split: Split::new(parse.tools.clone(), parse.reasoning),
            new_reasoning: String::new(),
            new_calls: Vec::new(),
            calls: 0,
            clock: Clock::new(),
        })
        .collect();
    let mut st = SseState {
        s,
        id,
        kind,
        created,
        include_usage,
        events,
        choices,
        pending: Default::default(),
        usage: None,
        finished: 0,
        done: false,
    };
    if kind == Kind::Chat {
        // The role comes first, as OpenAI's streams do.
        for i in 0..n {
            let c = chunk(&st, i, Some(""), true, None);
            st.pending.push_back(data(&c));
            st.choices[i].first = false;
        }
    }
    let events = stream::unfold(st, |mut st| async move {
        loop {
            if let Some(e) = st.pending.pop_front() {
                return Some((Ok(e), st));
            }
            if st.done {
                return None;
            }
            match st.events.next().await {
                Some((i, Event::Token { id, text, logprob })) => st.on_token(i, id, &text, logprob),
                Some((
                    i,
                    Event::Finished {
                        reason,
                        text,
                        usage,
                        ..
                    },
                )) => st.on_finish(i, reason, &text, usage),
                None => {
                    let e = json!({"error": {"message": "the engine stopped", "type": "server_error",
                                             "param": null, "code": null}});
                    st.pending.push_back(data(&e));
                    st.done = true;
                }
            }
        }
    });
    Sse::new(events).keep_alive(KeepAlive::default())
}
