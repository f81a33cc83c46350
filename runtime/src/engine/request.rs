//! A request, its events and their stream, and the checks a request passes before it queues.

use std::time::Duration;

use serde::Serialize;
use tokio::sync::mpsc::UnboundedReceiver;

use super::FinishReason;
use super::pick::{MAX_TOP_LOGPROBS, TokenLogprob};
use crate::constraint::TokenMatcher;
use crate::error::{Result, RuntimeError};
use crate::kv::SeqId;
use crate::sampler::SamplingParams;

/// What to generate for one request.
#[derive(Debug, Clone)]
pub struct Request {
    /// Prompt token ids (BOS included if the model wants one).
    pub prompt: Vec<u32>,
    /// Most new tokens (at least 1).
    pub max_tokens: usize,
    /// Sampling settings.
    pub sampling: SamplingParams,
    /// Generation ends when the text contains one of these (not emitted).
    pub stop_strings: Vec<String>,
    /// End at the model's end-of-generation tokens.
    pub stop_on_eos: bool,
    /// Ends the request with [`FinishReason::Timeout`] this long after submission (`None`: the
    /// engine's default).
    pub timeout: Option<Duration>,
    /// The grammar the generated text must follow (compiled by
    /// [`crate::constraint::Grammars::compile`]); the request ends when it is complete.
    pub constraint: Option<TokenMatcher>,
    /// Report each token's log-probability and this many alternatives (at most
    /// [`MAX_TOP_LOGPROBS`]); `None`: none.
    pub logprobs: Option<usize>,
}

impl Request {
    /// A greedy request for `max_tokens` tokens.
    pub fn greedy(prompt: Vec<u32>, max_tokens: usize) -> Self {
        Self {
            prompt,
            max_tokens,
            sampling: SamplingParams::greedy(),
            stop_strings: Vec::new(),
            stop_on_eos: true,
            timeout: None,
            constraint: None,
            logprobs: None,
        }
    }
}

/// Token counts of a finished request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// prompt tokens
    pub prompt_tokens: usize,
    /// generated tokens
    pub completion_tokens: usize,
    /// prompt tokens served from the prefix cache
    pub cached_tokens: usize,
}

/// One thing that happened to a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A generated token and the text it completes (empty while bytes or a possible stop string
    /// are held back).
    Token {
        /// token id
        id: u32,
        /// new text
        text: String,
        /// its log-probabilities, when the request asked for them
        logprob: Option<TokenLogprob>,
    },
    /// The end. `text` is what was still held back.
    Finished {
        /// why it ended
        reason: FinishReason,
        /// remaining text
        text: String,
        /// token counts
        usage: Usage,
        /// the stop string that ended it (`reason` [`FinishReason::Stop`] from `stop_strings`)
        stop: Option<String>,
    },
}

/// The events of one request. Dropping it cancels the request.
#[derive(Debug)]
pub struct EventStream {
    pub(super) id: SeqId,
    pub(super) rx: UnboundedReceiver<Event>,
    /// an event taken by [`EventStream::started`], handed out first
    pub(super) peeked: Option<Event>,
}

impl EventStream {
    /// The request's id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The next event (`None` after `Finished`).
    pub async fn next(&mut self) -> Option<Event> {
        match self.peeked.take() {
            Some(e) => Some(e),
            None => self.rx.recv().await,
        }
    }

    /// The next event, blocking the thread (not for async contexts).
    pub fn blocking_next(&mut self) -> Option<Event> {
        match self.peeked.take() {
            Some(e) => Some(e),
            None => self.rx.blocking_recv(),
        }
    }

    /// Polls for the next event (`Ready(None)` after `Finished`): what an async stream adapter
    /// calls from its `poll_next`.
    pub fn poll_next(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<Event>> {
        match self.peeked.take() {
            Some(e) => std::task::Poll::Ready(Some(e)),
            None => self.rx.poll_recv(cx),
        }
    }

    /// The next event if one is ready.
    pub fn try_next(&mut self) -> Option<Event> {
        match self.peeked.take() {
            Some(e) => Some(e),
            None => self.rx.try_recv().ok(),
        }
    }

    /// Waits for the first event (the prompt has been computed, so its KV blocks are in the
    /// prefix cache) and keeps it for [`EventStream::next`].
    pub async fn started(&mut self) {
        if self.peeked.is_none() {
            self.peeked = self.rx.recv().await;
        }
    }
}

/// The request checks shared by the core and the handle.
pub(super) fn validate_request(r: &Request, vocab: usize, max_tokens_total: usize) -> Result<()> {
    let bad = |m: String| Err(RuntimeError::InvalidRequest(m));
    if r.prompt.is_empty() {
        return Err(RuntimeError::EmptyPrompt);
    }
    if r.max_tokens == 0 {
        return bad("max_tokens must be at least 1".into());
    }
    if let Some(&t) = r.prompt.iter().find(|&&t| t as usize >= vocab) {
        return bad(format!(
            "prompt token {t} is outside the vocabulary of {vocab}"
        ));
    }
    if r.prompt.len() + r.max_tokens > max_tokens_total {
        return Err(RuntimeError::ContextOverflow {
            prompt: r.prompt.len(),
            max_new: r.max_tokens,
            ctx: max_tokens_total,
        });
    }
    if r.logprobs.is_some_and(|k| k > MAX_TOP_LOGPROBS) {
        return bad(format!("top_logprobs must be at most {MAX_TOP_LOGPROBS}"));
    }
    r.sampling.validate()
}
