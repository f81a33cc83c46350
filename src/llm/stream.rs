//! Text streams over one request's engine events: [`TextStream`] (an `Iterator`, blocking) and
//! [`AsyncTextStream`] (a `futures_core::Stream`). Dropping either cancels the request.

use std::pin::Pin;
use std::task::{Context, Poll};

use cinder_runtime::engine::{Event, EventStream, FinishReason, Usage};

use crate::error::{Error, Result};

/// What a stream has seen so far, shared by both stream kinds.
#[derive(Debug, Default)]
struct State {
    finish: Option<FinishReason>,
    usage: Option<Usage>,
    tokens: usize,
    done: bool,
}

impl State {
    /// The item an event yields: `Some(Ok(piece))` for text, `Some(Err)` once for an early end,
    /// `None` for an event with nothing to show (the caller polls again).
    fn item(&mut self, ev: Event) -> Option<Result<String>> {
        match ev {
            Event::Token { text, .. } => {
                self.tokens += 1;
                (!text.is_empty()).then_some(Ok(text))
            }
            Event::Finished {
                reason,
                text,
                usage,
                ..
            } => {
                self.done = true;
                self.finish = Some(reason);
                self.usage = Some(usage);
                if !matches!(
                    reason,
                    FinishReason::Length | FinishReason::Eos | FinishReason::Stop
                ) {
                    Some(Err(Error::Ended(reason)))
                } else {
                    (!text.is_empty()).then_some(Ok(text))
                }
            }
        }
    }
}

/// The text of one request, piece by piece, blocking the calling thread between pieces (use
/// [`AsyncTextStream`] inside async code). Ends after the last piece; an early end (timeout,
/// engine error) is one `Err` item. Dropping it cancels the request.
///
/// # Examples
///
/// ```no_run
/// let llm = cinder::Llm::load("smollm2-135m")?;
/// let mut s = llm.stream("Once upon a time", &cinder::GenerateOptions::greedy(32))?;
/// for piece in &mut s {
///     print!("{}", piece?);
/// }
/// println!("\n{:?} after {} tokens", s.finish_reason(), s.tokens());
/// # Ok::<(), cinder::Error>(())
/// ```
#[derive(Debug)]
pub struct TextStream {
    events: EventStream,
    state: State,
}

impl TextStream {
    pub(crate) fn new(events: EventStream) -> Self {
        Self {
            events,
            state: State::default(),
        }
    }

    /// Why the request ended (`None` while it runs).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let llm = cinder::Llm::load("smollm2-135m")?;
    /// let mut s = llm.stream("Hi", &cinder::GenerateOptions::greedy(4))?;
    /// let text: String = s.by_ref().collect::<Result<_, _>>()?;
    /// assert!(s.finish_reason().is_some());
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn finish_reason(&self) -> Option<FinishReason> {
        self.state.finish
    }

    /// Token counts, once the request has ended.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let llm = cinder::Llm::load("smollm2-135m")?;
    /// let mut s = llm.stream("Hi", &cinder::GenerateOptions::greedy(4))?;
    /// s.by_ref().for_each(drop);
    /// println!("{:?}", s.usage());
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn usage(&self) -> Option<Usage> {
        self.state.usage
    }

    /// Tokens generated so far.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let llm = cinder::Llm::load("smollm2-135m")?;
    /// let mut s = llm.stream("Hi", &cinder::GenerateOptions::greedy(4))?;
    /// s.next();
    /// assert!(s.tokens() >= 1);
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn tokens(&self) -> usize {
        self.state.tokens
    }
}

impl Iterator for TextStream {
    type Item = Result<String>;
    fn next(&mut self) -> Option<Self::Item> {
        while !self.state.done {
            let Some(ev) = self.events.blocking_next() else {
                self.state.done = true;
                return Some(Err(cinder_runtime::RuntimeError::EngineStopped.into()));
            };
            if let Some(item) = self.state.item(ev) {
                return Some(item);
            }
        }
        None
    }
}

/// [`TextStream`] for async code: a [`futures_core::Stream`] of text pieces. Dropping it cancels
/// the request.
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
#[derive(Debug)]
pub struct AsyncTextStream {
    events: EventStream,
    state: State,
}

impl AsyncTextStream {
    pub(crate) fn new(events: EventStream) -> Self {
        Self {
            events,
            state: State::default(),
        }
    }

    /// Why the request ended (`None` while it runs).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), cinder::Error> {
    /// use futures_util::StreamExt;
    /// let llm = cinder::Llm::load("smollm2-135m")?;
    /// let mut s = llm.stream_async("Hi", &cinder::GenerateOptions::greedy(4))?;
    /// while s.next().await.is_some() {}
    /// assert!(s.finish_reason().is_some());
    /// # Ok(()) }
    /// ```
    pub fn finish_reason(&self) -> Option<FinishReason> {
        self.state.finish
    }

    /// Token counts, once the request has ended.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), cinder::Error> {
    /// use futures_util::StreamExt;
    /// let llm = cinder::Llm::load("smollm2-135m")?;
    /// let mut s = llm.stream_async("Hi", &cinder::GenerateOptions::greedy(4))?;
    /// while s.next().await.is_some() {}
    /// println!("{:?}", s.usage());
    /// # Ok(()) }
    /// ```
    pub fn usage(&self) -> Option<Usage> {
        self.state.usage
    }
}

impl futures_core::Stream for AsyncTextStream {
    type Item = Result<String>;
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        while !this.state.done {
            match this.events.poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    this.state.done = true;
                    return Poll::Ready(Some(Err(
                        cinder_runtime::RuntimeError::EngineStopped.into()
                    )));
                }
                Poll::Ready(Some(ev)) => {
                    if let Some(item) = this.state.item(ev) {
                        return Poll::Ready(Some(item));
                    }
                }
            }
        }
        Poll::Ready(None)
    }
}
