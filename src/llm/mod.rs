//! [`Llm`]: a language model behind one continuous-batching engine, on a backend chosen at run
//! time, as a cheap `Clone + Send + Sync` handle.
//!
//! The handle turns text into engine requests (tokenizer, chat template, grammar) and the engine's
//! events back into text: there is no second generation loop. Calls from many threads or tasks
//! batch together in the one engine; dropping a stream cancels its sequence and frees its KV
//! blocks at the engine's next step.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use cinder_backends::BackendKind;
use cinder_importer::{ModelInfo, Offload};
use cinder_runtime::constraint::{Constraint, Grammars};
use cinder_runtime::engine::{
    Engine, EngineConfig, EngineHandle, EngineStats, Event, EventStream, FinishReason, Request,
};
use cinder_runtime::tokenizer::{ChatMessage, Tokenizer, apply_chat_template_with_tools};

use crate::error::{Error, Result};

mod builder;
mod options;
mod stream;
mod structured;
mod tools;

pub use builder::{LlmBuilder, Speculative, offload_plan};
pub use options::{GenerateOptions, Message, Output, Role};
pub use stream::{AsyncTextStream, TextStream};
pub use structured::json_schema_of;
pub use tools::{Tool, ToolCall, ToolChoice, ToolReply};

struct Inner {
    name: String,
    backend: BackendKind,
    offload: Option<Offload>,
    handle: EngineHandle,
    /// Owned so the engine thread stops when the last handle goes.
    engine: Option<Engine>,
    tokenizer: Arc<Tokenizer>,
    info: ModelInfo,
    vocab: usize,
    /// The grammar compiler (token trie), built on the first constrained call.
    grammars: OnceLock<std::result::Result<Grammars, String>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(e) = self.engine.take() {
            e.shutdown();
        }
    }
}

/// A language model, ready to generate: `Clone` (cheap: one engine behind every clone), `Send`
/// and `Sync`, with no backend type parameter.
///
/// The plain calls (`generate`, `chat`, `stream`, …) block the calling thread until their text is
/// ready; inside async code use `generate_async`, `chat_async` and `stream_async`, which wait
/// without holding a runtime thread (a blocking call made on a tokio worker panics, as tokio's
/// blocking receivers do). The engine thread stops when the last clone is dropped.
///
/// # Examples
///
/// ```no_run
/// use cinder::{GenerateOptions, Llm, Message};
/// let llm = Llm::load("smollm2-135m")?;
/// let out = llm.generate("The capital of France is", &GenerateOptions::greedy(16))?;
/// println!("{}", out.text);
/// let reply = llm.chat(&[Message::system("Be brief."), Message::user("Name three colours.")])?;
/// println!("{}", reply.text);
/// for piece in llm.stream("Once upon a time", &GenerateOptions::default())? {
///     print!("{}", piece?);
/// }
/// # Ok::<(), cinder::Error>(())
/// ```
#[derive(Clone)]
pub struct Llm {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Llm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Llm")
            .field("model", &self.inner.name)
            .field("backend", &self.inner.backend)
            .finish_non_exhaustive()
    }
}

impl Llm {
    /// Loads a model with the default settings ([`BackendKind::Auto`]): a catalog name
    /// (`smollm2-135m`), a GGUF file, a record directory or a Hugging Face checkpoint directory.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let llm = cinder::Llm::load("smollm2-135m")?;
    /// let gguf = cinder::Llm::load(std::path::Path::new("model.gguf"))?;
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn load(model: impl AsRef<Path>) -> Result<Self> {
        Self::builder(model).build()
    }

    /// Starts a [`LlmBuilder`] for `model` (as in [`Llm::load`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let llm = cinder::Llm::builder("smollm2-135m").threads(2).build()?;
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn builder(model: impl AsRef<Path>) -> LlmBuilder {
        LlmBuilder {
            model: model.as_ref().to_string_lossy().into_owned(),
            backend: BackendKind::Auto,
            threads: None,
            gpu_layers: 0,
            engine: EngineConfig::default(),
            speculative: None,
        }
    }

    /// The backend the model runs on ([`BackendKind::Auto`] resolved; with layer offload, the CPU
    /// side — see [`Llm::offload`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let llm = cinder::Llm::load("smollm2-135m")?;
    /// assert_ne!(llm.backend(), cinder::BackendKind::Auto);
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn backend(&self) -> BackendKind {
        self.inner.backend
    }

    /// The layer split, when some layers run on an accelerator.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let llm = cinder::Llm::builder("smollm2-135m").gpu_layers(4).build()?;
    /// assert_eq!(llm.offload().map(|o| o.layers), Some(4));
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn offload(&self) -> Option<Offload> {
        self.inner.offload
    }

    /// The model's file facts (architecture, sizes, tensor types, sha256).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let llm = cinder::Llm::load("smollm2-135m")?;
    /// println!("{}", llm.info().arch);
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn info(&self) -> &ModelInfo {
        &self.inner.info
    }

    /// The model's tokenizer.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let llm = cinder::Llm::load("smollm2-135m")?;
    /// let ids = llm.tokenizer().encode("Hello", true)?;
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.inner.tokenizer
    }

    /// The engine's figures now (queue, running sequences, KV use, speculation).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let llm = cinder::Llm::load("smollm2-135m")?;
    /// println!("{} KV blocks", llm.stats().kv_blocks_total);
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn stats(&self) -> EngineStats {
        self.inner.handle.stats()
    }

    /// The engine underneath, for requests in token ids ([`cinder_runtime::engine::Request`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use cinder::runtime::engine::Request;
    /// let llm = cinder::Llm::load("smollm2-135m")?;
    /// let ids = llm.tokenizer().encode("Hi", true)?;
    /// let events = llm.engine().submit(Request::greedy(ids, 4))?;
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn engine(&self) -> &EngineHandle {
        &self.inner.handle
    }

    /// Most tokens (prompt + generated) one request can have.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let llm = cinder::Llm::load("smollm2-135m")?;
    /// assert!(llm.max_request_tokens() >= 1024);
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn max_request_tokens(&self) -> usize {
        self.inner.handle.max_request_tokens()
    }

    /// Continues `prompt` (raw text; the model's BOS is added when it wants one).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let llm = cinder::Llm::load("smollm2-135m")?;
    /// let out = llm.generate("The capital of France is", &cinder::GenerateOptions::greedy(8))?;
    /// println!("{}", out.text);
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn generate(&self, prompt: &str, opts: &GenerateOptions) -> Result<Output> {
        let r = opts.request(self.encode(prompt)?);
        collect_blocking(self.submit(r)?)
    }

    /// `n` continuations of `prompt`, each sampled with its own seed (the options' seed + its
    /// index), batched together in the engine.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let llm = cinder::Llm::load("smollm2-135m")?;
    /// let opts = cinder::GenerateOptions::default().max_tokens(12);
    /// for out in llm.generate_n("A haiku about rain:", &opts, 3)? {
    ///     println!("{}", out.text);
    /// }
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn generate_n(
        &self,
        prompt: &str,
        opts: &GenerateOptions,
        n: usize,
    ) -> Result<Vec<Output>> {
        let ids = self.encode(prompt)?;
        let streams = (0..n)
            .map(|i| {
                let mut r = opts.request(ids.clone());
                r.sampling.seed = r.sampling.seed.wrapping_add(i as u64);
                self.submit(r)
            })
            .collect::<Result<Vec<_>>>()?;
        streams.into_iter().map(collect_blocking).collect()
    }

    /// Answers a chat, rendered with the model's own template, greedily (up to 512 tokens).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use cinder::{Llm, Message};
    /// let llm = Llm::load("smollm2-135m")?;
    /// let reply = llm.chat(&[Message::system("Be brief."), Message::user("Name three colours.")])?;
    /// println!("{}", reply.text);
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn chat(&self, messages: &[Message]) -> Result<Output> {
        self.chat_with(messages, &GenerateOptions::greedy(512))
    }

    /// [`Llm::chat`] with options.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use cinder::{GenerateOptions, Llm, Message};
    /// let llm = Llm::load("smollm2-135m")?;
    /// let opts = GenerateOptions::default().temperature(0.7).max_tokens(64);
    /// let reply = llm.chat_with(&[Message::user("Tell me a joke.")], &opts)?;
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn chat_with(&self, messages: &[Message], opts: &GenerateOptions) -> Result<Output> {
        let r = opts.request(self.chat_ids(messages)?);
        collect_blocking(self.submit(r)?)
    }

    /// Streams the continuation of `prompt` piece by piece; dropping the stream cancels the
    /// request.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let llm = cinder::Llm::load("smollm2-135m")?;
    /// for piece in llm.stream("Once upon a time", &cinder::GenerateOptions::default())? {
    ///     print!("{}", piece?);
    /// }
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn stream(&self, prompt: &str, opts: &GenerateOptions) -> Result<TextStream> {
        let r = opts.request(self.encode(prompt)?);
        Ok(TextStream::new(self.submit(r)?))
    }

    /// Streams a chat's answer (as [`Llm::stream`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use cinder::{GenerateOptions, Llm, Message};
    /// let llm = Llm::load("smollm2-135m")?;
    /// for piece in llm.stream_chat(&[Message::user("Hi!")], &GenerateOptions::greedy(32))? {
    ///     print!("{}", piece?);
    /// }
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn stream_chat(&self, messages: &[Message], opts: &GenerateOptions) -> Result<TextStream> {
        let r = opts.request(self.chat_ids(messages)?);
        Ok(TextStream::new(self.submit(r)?))
    }

    /// [`Llm::generate`] for async code: waits without blocking a thread.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), cinder::Error> {
    /// let llm = cinder::Llm::load("smollm2-135m")?;
    /// let out = llm.generate_async("Hello", &cinder::GenerateOptions::greedy(8)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn generate_async(&self, prompt: &str, opts: &GenerateOptions) -> Result<Output> {
        let r = opts.request(self.encode(prompt)?);
        collect_async(self.submit(r)?).await
    }

    /// [`Llm::chat`] for async code.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), cinder::Error> {
    /// let llm = cinder::Llm::load("smollm2-135m")?;
    /// let reply = llm.chat_async(&[cinder::Message::user("Hi")], &cinder::GenerateOptions::greedy(16)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn chat_async(&self, messages: &[Message], opts: &GenerateOptions) -> Result<Output> {
        let r = opts.request(self.chat_ids(messages)?);
        collect_async(self.submit(r)?).await
    }

    /// A [`futures_core::Stream`] of text pieces; dropping it cancels the request.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), cinder::Error> {
    /// use futures_util::StreamExt;
    /// let llm = cinder::Llm::load("smollm2-135m")?;
    /// let mut s = llm.stream_async("Once upon a time", &cinder::GenerateOptions::greedy(32))?;
    /// while let Some(piece) = s.next().await {
    ///     print!("{}", piece?);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn stream_async(&self, prompt: &str, opts: &GenerateOptions) -> Result<AsyncTextStream> {
        let r = opts.request(self.encode(prompt)?);
        Ok(AsyncTextStream::new(self.submit(r)?))
    }

    /// Prompt ids of raw text.
    fn encode(&self, prompt: &str) -> Result<Vec<u32>> {
        Ok(self.inner.tokenizer.encode(prompt, true)?)
    }

    /// Prompt ids of a chat rendered through the model's template (special tokens parsed).
    fn chat_ids(&self, messages: &[Message]) -> Result<Vec<u32>> {
        let msgs: Vec<_> = messages.iter().map(Message::to_chat).collect();
        self.template_ids(&msgs, None)
    }

    /// Prompt ids of chat messages rendered through the model's template, with `tools` shown to
    /// it, special tokens parsed.
    fn template_ids(
        &self,
        msgs: &[ChatMessage],
        tools: Option<&[serde_json::Value]>,
    ) -> Result<Vec<u32>> {
        let tok = &self.inner.tokenizer;
        let text = apply_chat_template_with_tools(tok, msgs, tools, true)?;
        Ok(tok.tokenize(&text, false, true)?)
    }

    fn submit(&self, r: Request) -> Result<EventStream> {
        Ok(self.inner.handle.submit(r)?)
    }

    /// The model's grammar compiler, built on first use.
    fn grammars(&self) -> Result<&Grammars> {
        self.inner
            .grammars
            .get_or_init(|| {
                Grammars::new(&self.inner.tokenizer, self.inner.vocab).map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(|e| Error::Runtime(cinder_runtime::RuntimeError::Constraint(e.clone())))
    }

    /// A request for `ids` that follows `c`.
    fn constrained(
        &self,
        ids: Vec<u32>,
        c: &Constraint,
        opts: &GenerateOptions,
    ) -> Result<Request> {
        let mut r = opts.request(ids);
        r.constraint = Some(self.grammars()?.compile(c)?);
        Ok(r)
    }
}

/// Gathers a request's events into an [`Output`].
#[derive(Default)]
struct Collector {
    out_text: String,
    tokens: Vec<u32>,
    logprobs: Vec<cinder_runtime::engine::TokenLogprob>,
}

impl Collector {
    /// Takes one event; the output once the request has finished.
    fn push(&mut self, ev: Event) -> Result<Option<Output>> {
        match ev {
            Event::Token { id, text, logprob } => {
                self.tokens.push(id);
                self.out_text.push_str(&text);
                self.logprobs.extend(logprob);
                Ok(None)
            }
            Event::Finished {
                reason,
                text,
                usage,
                ..
            } => {
                if !matches!(
                    reason,
                    FinishReason::Length | FinishReason::Eos | FinishReason::Stop
                ) {
                    return Err(Error::Ended(reason));
                }
                self.out_text.push_str(&text);
                Ok(Some(Output {
                    text: std::mem::take(&mut self.out_text),
                    tokens: std::mem::take(&mut self.tokens),
                    finish: reason,
                    usage,
                    logprobs: std::mem::take(&mut self.logprobs),
                }))
            }
        }
    }
}

/// Waits for a request without blocking a thread.
async fn collect_async(mut s: EventStream) -> Result<Output> {
    let mut acc = Collector::default();
    while let Some(ev) = s.next().await {
        if let Some(out) = acc.push(ev)? {
            return Ok(out);
        }
    }
    Err(cinder_runtime::RuntimeError::EngineStopped.into())
}

/// Waits for a request on this thread.
fn collect_blocking(mut s: EventStream) -> Result<Output> {
    let mut acc = Collector::default();
    while let Some(ev) = s.blocking_next() {
        if let Some(out) = acc.push(ev)? {
            return Ok(out);
        }
    }
    Err(cinder_runtime::RuntimeError::EngineStopped.into())
}
