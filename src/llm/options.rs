//! What a front-door call takes and gives back: [`GenerateOptions`], [`Message`] and [`Output`].

use std::time::Duration;

use cinder_runtime::engine::{FinishReason, Request, TokenLogprob, Usage};
use cinder_runtime::sampler::SamplingParams;
use cinder_runtime::tokenizer::ChatMessage;

/// How to generate: token limit, sampling, stop strings, log-probabilities.
///
/// [`GenerateOptions::default`] samples (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, like
/// llama.cpp) up to 256 tokens; [`GenerateOptions::greedy`] picks the most likely token each step.
/// The setters chain.
///
/// # Examples
///
/// ```
/// use cinder::GenerateOptions;
/// let opts = GenerateOptions::default()
///     .max_tokens(64)
///     .temperature(0.7)
///     .top_p(0.9)
///     .seed(42)
///     .stop("\n\n");
/// assert_eq!(opts.max_tokens, 64);
/// assert_eq!(opts.sampling.seed, 42);
/// assert_eq!(GenerateOptions::greedy(16).sampling.temperature, 0.0);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateOptions {
    /// Most new tokens.
    pub max_tokens: usize,
    /// Sampling settings (the engine's sampler; temperature 0 is greedy).
    pub sampling: SamplingParams,
    /// Generation ends where the text contains one of these (not included in the output).
    pub stop: Vec<String>,
    /// Keep going past the model's end-of-generation tokens (for benchmarks).
    pub ignore_eos: bool,
    /// Report each generated token's log-probability and this many alternatives (at most 20).
    pub logprobs: Option<usize>,
    /// End the request with [`crate::Error::Ended`]`(Timeout)` after this long (default: the
    /// engine's 600 s).
    pub timeout: Option<Duration>,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        Self {
            max_tokens: 256,
            sampling: SamplingParams::default(),
            stop: Vec::new(),
            ignore_eos: false,
            logprobs: None,
            timeout: None,
        }
    }
}

impl GenerateOptions {
    /// Greedy decoding of at most `max_tokens` tokens.
    ///
    /// # Examples
    ///
    /// ```
    /// let o = cinder::GenerateOptions::greedy(8);
    /// assert_eq!((o.max_tokens, o.sampling.temperature), (8, 0.0));
    /// ```
    pub fn greedy(max_tokens: usize) -> Self {
        Self {
            max_tokens,
            sampling: SamplingParams::greedy(),
            ..Self::default()
        }
    }

    /// Sets the token limit.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(cinder::GenerateOptions::default().max_tokens(9).max_tokens, 9);
    /// ```
    pub fn max_tokens(mut self, n: usize) -> Self {
        self.max_tokens = n;
        self
    }

    /// Sets the temperature (0: greedy).
    ///
    /// # Examples
    ///
    /// ```
    /// let o = cinder::GenerateOptions::default().temperature(0.2);
    /// assert_eq!(o.sampling.temperature, 0.2);
    /// ```
    pub fn temperature(mut self, t: f32) -> Self {
        self.sampling.temperature = t;
        self
    }

    /// Keeps the smallest set of tokens whose probability reaches `p` (1.0: off).
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(cinder::GenerateOptions::default().top_p(0.5).sampling.top_p, 0.5);
    /// ```
    pub fn top_p(mut self, p: f32) -> Self {
        self.sampling.top_p = p;
        self
    }

    /// Keeps the `k` most likely tokens (0: off).
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(cinder::GenerateOptions::default().top_k(5).sampling.top_k, 5);
    /// ```
    pub fn top_k(mut self, k: usize) -> Self {
        self.sampling.top_k = k;
        self
    }

    /// Drops tokens below `p ×` the top token's probability (0: off).
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(cinder::GenerateOptions::default().min_p(0.1).sampling.min_p, 0.1);
    /// ```
    pub fn min_p(mut self, p: f32) -> Self {
        self.sampling.min_p = p;
        self
    }

    /// Penalizes the last 64 tokens by `r` (1.0: off).
    ///
    /// # Examples
    ///
    /// ```
    /// let o = cinder::GenerateOptions::default().repeat_penalty(1.1);
    /// assert_eq!(o.sampling.repeat_penalty, 1.1);
    /// ```
    pub fn repeat_penalty(mut self, r: f32) -> Self {
        self.sampling.repeat_penalty = r;
        self
    }

    /// Sets the sampler's seed (same seed, same text).
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(cinder::GenerateOptions::default().seed(7).sampling.seed, 7);
    /// ```
    pub fn seed(mut self, seed: u64) -> Self {
        self.sampling.seed = seed;
        self
    }

    /// Adds a stop string.
    ///
    /// # Examples
    ///
    /// ```
    /// let o = cinder::GenerateOptions::greedy(32).stop(".").stop("\n");
    /// assert_eq!(o.stop, [".", "\n"]);
    /// ```
    pub fn stop(mut self, s: impl Into<String>) -> Self {
        self.stop.push(s.into());
        self
    }

    /// Asks for each token's log-probability and its `top` alternatives.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(cinder::GenerateOptions::greedy(4).logprobs(3).logprobs, Some(3));
    /// ```
    pub fn logprobs(mut self, top: usize) -> Self {
        self.logprobs = Some(top);
        self
    }

    /// Sets the request's deadline.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let o = cinder::GenerateOptions::greedy(4).timeout(Duration::from_secs(5));
    /// assert_eq!(o.timeout, Some(Duration::from_secs(5)));
    /// ```
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = Some(t);
        self
    }

    /// The engine request for prompt `ids` (no constraint).
    pub(crate) fn request(&self, ids: Vec<u32>) -> Request {
        Request {
            prompt: ids,
            max_tokens: self.max_tokens,
            sampling: self.sampling.clone(),
            stop_strings: self.stop.clone(),
            stop_on_eos: !self.ignore_eos,
            timeout: self.timeout,
            constraint: None,
            logprobs: self.logprobs,
        }
    }
}

/// Who speaks a chat [`Message`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// instructions
    System,
    /// the user
    User,
    /// the model
    Assistant,
    /// a tool's answer to a call
    Tool,
}

impl Role {
    /// The name chat templates use.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(cinder::Role::Assistant.as_str(), "assistant");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// One turn of a chat, rendered through the model's own chat template.
///
/// # Examples
///
/// ```
/// use cinder::{Message, Role};
/// let m = Message::user("Hello");
/// assert_eq!((m.role, m.content.as_str()), (Role::User, "Hello"));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// who speaks
    pub role: Role,
    /// what is said
    pub content: String,
    /// an assistant turn's tool calls (OpenAI's `{"id", "type": "function", "function": {"name",
    /// "arguments"}}` objects, as the templates expect them)
    pub tool_calls: Vec<serde_json::Value>,
    /// a tool turn's answer to this call id
    pub tool_call_id: Option<String>,
}

impl Message {
    fn new(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    /// A system message.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(cinder::Message::system("Be brief.").role, cinder::Role::System);
    /// ```
    pub fn system(content: impl Into<String>) -> Self {
        Self::new(Role::System, content)
    }

    /// A user message.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(cinder::Message::user("Hi").content, "Hi");
    /// ```
    pub fn user(content: impl Into<String>) -> Self {
        Self::new(Role::User, content)
    }

    /// An assistant message (an earlier reply).
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(cinder::Message::assistant("Hello!").role, cinder::Role::Assistant);
    /// ```
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new(Role::Assistant, content)
    }

    /// A tool's result for the call `call_id`.
    ///
    /// # Examples
    ///
    /// ```
    /// let m = cinder::Message::tool("call_0", "{\"temp\": 21}");
    /// assert_eq!(m.tool_call_id.as_deref(), Some("call_0"));
    /// ```
    pub fn tool(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            tool_call_id: Some(call_id.into()),
            ..Self::new(Role::Tool, content)
        }
    }

    /// The template's form of this message.
    pub(crate) fn to_chat(&self) -> ChatMessage {
        let mut m = ChatMessage::new(self.role.as_str(), &self.content);
        if !self.tool_calls.is_empty() {
            m.tool_calls = Some(self.tool_calls.clone());
        }
        m.tool_call_id = self.tool_call_id.clone();
        m
    }
}

/// A finished generation.
///
/// # Examples
///
/// ```no_run
/// let llm = cinder::Llm::load("smollm2-135m")?;
/// let out = llm.generate("2 + 2 =", &cinder::GenerateOptions::greedy(4))?;
/// println!("{} ({} tokens, {:?})", out.text, out.tokens.len(), out.finish);
/// # Ok::<(), cinder::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    /// the generated text (without a matched stop string)
    pub text: String,
    /// the generated token ids
    pub tokens: Vec<u32>,
    /// why generation ended: `Length`, `Eos` or `Stop` (the others are [`crate::Error::Ended`])
    pub finish: FinishReason,
    /// token counts
    pub usage: Usage,
    /// per token, when [`GenerateOptions::logprobs`] asked for them
    pub logprobs: Vec<TokenLogprob>,
}
