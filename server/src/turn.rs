//! The one request path every chat-shaped API shares (OpenAI chat completions, OpenAI Responses,
//! Anthropic Messages): a conversation of [`ChatMessage`]s and the request's checked [`Tools`]
//! become an engine [`Request`] through the chat template ([`prepare`]); the engine's events of
//! one answer come back as [`Step`]s — text, reasoning, parsed calls, the end — through the shared
//! tool-call parser and reasoning splitter ([`Turn`]). Each API only translates its own request
//! and response shapes around these two.

use std::collections::VecDeque;

use cinder_runtime::engine::{Event, EventStream, FinishReason, Request, Usage};
use cinder_runtime::reasoning::{self, Reasoning};
use cinder_runtime::tokenizer::{ChatMessage, apply_chat_template_opts};

use crate::AppState;
use crate::error::ApiError;
use crate::openai::Common;
use crate::respond::{Clock, count_usage};
use crate::{structured, tools};

/// A conversation ready for the engine.
pub(crate) struct Prepared {
    /// the engine request
    pub request: Request,
    /// the functions whose calls the answer is parsed for (`None`: no parsing)
    pub parse: Option<Vec<String>>,
    /// how the answer's reasoning is marked, where the template marks it
    pub reasoning: Option<Reasoning>,
}

/// How a conversation is rendered.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Render {
    /// `Some(false)` asks the template to skip the model's thinking (Qwen3's `enable_thinking`)
    pub thinking: Option<bool>,
}

/// The prompt tokens of `msgs` with `tools` shown the model's way (the template's own tool syntax,
/// or Cinder's instructions where a grammar forces the call); `field` names the request field
/// that holds the conversation in errors. Also says whether the answer opens inside reasoning.
pub(crate) fn render(
    s: &AppState,
    mut msgs: Vec<ChatMessage>,
    tools: Option<&tools::Tools>,
    how: Render,
    field: &str,
) -> Result<(Vec<u32>, Option<Reasoning>), ApiError> {
    let shown = match tools {
        Some(t) => t
            .prepare(&s.tok, &mut msgs)
            .map_err(|m| ApiError::bad_request(m, "tool_choice"))?,
        None => None,
    };
    let text = apply_chat_template_opts(&s.tok, &msgs, shown.as_deref(), true, how.thinking)
        .map_err(|e| ApiError::bad_request(e.to_string(), field))?;
    let ids = s
        .tok
        .tokenize(&text, false, true)
        .map_err(|e| ApiError::bad_request(e.to_string(), field))?;
    Ok((ids, reasoning::of_prompt(&s.tok, &text)))
}

/// [`render`], then the engine request with the shared sampling fields `c` and, where `tools`
/// force a call, the grammar that forces it.
pub(crate) fn prepare(
    s: &AppState,
    msgs: Vec<ChatMessage>,
    tools: Option<&tools::Tools>,
    how: Render,
    c: &Common,
    field: &str,
) -> Result<Prepared, ApiError> {
    let (ids, reasoning) = render(s, msgs, tools, how, field)?;
    let mut request = crate::http::build_request(s, ids, c, field)?;
    if let Some(g) = tools.and_then(|t| t.forced(&s.tok)) {
        if request.constraint.is_some() {
            return Err(ApiError::bad_request(
                "a required tool call cannot be combined with a response format or a guided constraint",
                "tool_choice",
            ));
        }
        request.constraint = Some(structured::compile_raw(s, &g).map_err(|e| match e {
            Ok(bad) => ApiError::bad_request(bad, "tools"),
            Err(internal) => ApiError::internal(&internal),
        })?);
    }
    // A constrained answer writes the grammar's text from its first token: a reasoning block the
    // prompt opened would never be closed, so none is parsed out of it.
    let reasoning = reasoning.filter(|r| !(r.opened_by_prompt && request.constraint.is_some()));
    let parse = tools
        .filter(|t| t.parses())
        .map(|t| t.functions.iter().map(|f| f.name.clone()).collect());
    Ok(Prepared {
        request,
        parse,
        reasoning,
    })
}

/// What one answer produced, in order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Step {
    /// answer text
    Text(String),
    /// the model's reasoning (between the template's thinking tags)
    Reasoning(String),
    /// a complete function call
    Call(tools::Call),
    /// the end
    End(Ending),
}

/// How an answer ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Ending {
    /// the engine's reason
    pub reason: FinishReason,
    /// the stop string that ended it
    pub stop: Option<String>,
    /// token counts
    pub usage: Usage,
}

/// Answer text taken apart as it streams: the reasoning splitter first (where the template marks
/// reasoning), then the call parser over the answer part (where the request has tools).
pub(crate) struct Split {
    think: Option<reasoning::Splitter>,
    parser: Option<tools::Parser>,
}

impl Split {
    /// Parsing calls of `parse`'s functions, splitting `reasoning` out.
    pub(crate) fn new(parse: Option<Vec<String>>, reasoning: Option<Reasoning>) -> Self {
        Self {
            think: reasoning.map(reasoning::Splitter::new),
            parser: parse.map(tools::Parser::new),
        }
    }

    /// The steps `text` completes (text, reasoning and calls; never [`Step::End`]); `end`: the
    /// text is the last, so nothing is held back.
    pub(crate) fn feed(&mut self, text: &str, end: bool) -> Vec<Step> {
        let mut out = Vec::new();
        let mut answer = String::new();
        match &mut self.think {
            Some(t) => {
                let mut parts = t.feed(text);
                if end {
                    parts.extend(t.finish());
                }
                for p in parts {
                    match p {
                        reasoning::Part::Reasoning(r) => out.push(Step::Reasoning(r)),
                        reasoning::Part::Answer(a) => answer.push_str(&a),
                    }
                }
            }
            None => answer.push_str(text),
        }
        let Some(p) = &mut self.parser else {
            out.push(Step::Text(answer));
            return out;
        };
        let mut pieces = p.feed(&answer);
        if end {
            pieces.extend(p.finish());
        }
        out.extend(pieces.into_iter().map(|piece| match piece {
            tools::Piece::Content(c) => Step::Text(c),
            tools::Piece::Call(c) => Step::Call(c),
        }));
        out
    }
}

/// One answer's engine events as [`Step`]s. Dropping it cancels the request.
pub(crate) struct Turn {
    s: AppState,
    stream: EventStream,
    split: Split,
    clock: Clock,
    queue: VecDeque<Step>,
    ended: bool,
}

impl Turn {
    /// Follows `stream`, parsing calls of `parse`'s functions and splitting `reasoning` out.
    pub(crate) fn new(
        s: AppState,
        stream: EventStream,
        parse: Option<Vec<String>>,
        reasoning: Option<Reasoning>,
    ) -> Self {
        Self {
            s,
            stream,
            split: Split::new(parse, reasoning),
            clock: Clock::new(),
            queue: VecDeque::new(),
            ended: false,
        }
    }

    /// The next step; `None` after [`Step::End`]. `Err` when the engine stopped under the request.
    pub(crate) async fn next(&mut self) -> Option<Result<Step, ApiError>> {
        loop {
            if let Some(step) = self.queue.pop_front() {
                return Some(Ok(step));
            }
            if self.ended {
                return None;
            }
            match self.stream.next().await {
                Some(Event::Token { text, .. }) => {
                    self.clock.tick(&self.s);
                    self.feed(&text, false);
                }
                Some(Event::Finished {
                    reason,
                    text,
                    usage,
                    stop,
                }) => {
                    count_usage(&self.s, &usage);
                    self.feed(&text, true);
                    if reason == FinishReason::Error {
                        self.ended = true;
                        return Some(Err(ApiError::internal("generation failed in the engine")));
                    }
                    self.queue.push_back(Step::End(Ending {
                        reason,
                        stop,
                        usage,
                    }));
                    self.ended = true;
                }
                None => {
                    self.ended = true;
                    return Some(Err(ApiError::internal("the engine stopped")));
                }
            }
        }
    }

    /// Routes `text` through the splitter into the queue.
    fn feed(&mut self, text: &str, end: bool) {
        for step in self.split.feed(text, end) {
            self.push(step);
        }
    }

    /// Queues `step`, joining text to text and dropping empty text.
    fn push(&mut self, step: Step) {
        match (&step, self.queue.back_mut()) {
            (Step::Text(t) | Step::Reasoning(t), _) if t.is_empty() => {}
            (Step::Text(t), Some(Step::Text(prev))) => prev.push_str(t),
            (Step::Reasoning(t), Some(Step::Reasoning(prev))) => prev.push_str(t),
            _ => self.queue.push_back(step),
        }
    }
}

/// A whole answer.
pub(crate) struct Answer {
    /// the answer text (calls taken out; trimmed where calls were)
    pub text: String,
    /// the reasoning text
    pub reasoning: String,
    /// the calls, in order
    pub calls: Vec<tools::Call>,
    /// how it ended
    pub end: Ending,
}

/// Runs `turn` to its end.
pub(crate) async fn collect(mut turn: Turn) -> Result<Answer, ApiError> {
    let (mut text, mut reasoning, mut calls) = (String::new(), String::new(), Vec::new());
    while let Some(step) = turn.next().await {
        match step? {
            Step::Text(t) => text.push_str(&t),
            Step::Reasoning(r) => reasoning.push_str(&r),
            Step::Call(c) => calls.push(c),
            Step::End(end) => {
                if !calls.is_empty() {
                    text = text.trim().to_string();
                }
                return Ok(Answer {
                    text,
                    reasoning: reasoning.trim().to_string(),
                    calls,
                    end,
                });
            }
        }
    }
    Err(ApiError::internal("the engine stopped"))
}

/// Submits `r` (one answer), refusing with the engine's reason (a full queue: 429).
pub(crate) fn submit(s: &AppState, r: Request, field: &str) -> Result<EventStream, ApiError> {
    s.engine
        .submit(r)
        .map_err(|e| ApiError::from_engine(e, field))
}
