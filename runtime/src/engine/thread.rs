//! [`Engine`]: an [`EngineCore`] on its own thread, and the [`EngineHandle`] requests are submitted
//! through (bounded waiting queue, refusal at once when full).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use cinder_backends::InferenceBackend;
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

use super::{
    Counters, EngineConfig, EngineCore, EngineStats, Event, EventStream, Request, Usage, kv_blocks,
    validate_request,
};
use crate::engine::FinishReason;
use crate::error::{Result, RuntimeError};
use crate::kv::SeqId;
use crate::model::CausalLm;
use crate::tokenizer::Tokenizer;

struct Submission {
    id: SeqId,
    request: Request,
    tx: UnboundedSender<Event>,
    submitted: Instant,
}

#[derive(Default)]
struct Inbox {
    queue: Vec<Submission>,
}

struct Shared {
    inbox: Mutex<Inbox>,
    wake: Condvar,
    shutdown: AtomicBool,
    /// False once the engine thread has ended (shut down, or died): liveness probes report it.
    alive: AtomicBool,
    counters: Arc<Counters>,
    stats: Mutex<EngineStats>,
    next_id: AtomicU64,
    max_waiting: usize,
    vocab: usize,
    max_request_tokens: usize,
}

/// A cheap, cloneable handle to a running [`Engine`].
#[derive(Clone)]
pub struct EngineHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for EngineHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineHandle")
            .field("max_waiting", &self.shared.max_waiting)
            .finish()
    }
}

impl EngineHandle {
    /// Queues a request. Refused at once, without queueing, if it is invalid or if `max_waiting`
    /// requests are already waiting ([`RuntimeError::QueueFull`]).
    pub fn submit(&self, request: Request) -> Result<EventStream> {
        let s = &self.shared;
        if s.shutdown.load(Ordering::SeqCst) {
            return Err(RuntimeError::EngineStopped);
        }
        validate_request(&request, s.vocab, s.max_request_tokens)?;
        // Reserve a waiting slot; give it back if over the limit.
        let before = s.counters.waiting.fetch_add(1, Ordering::SeqCst);
        if before >= s.max_waiting {
            s.counters.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(RuntimeError::QueueFull {
                waiting: before,
                limit: s.max_waiting,
            });
        }
        let id = s.next_id.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = unbounded_channel();
        let mut inbox = s.inbox.lock().unwrap_or_else(|p| p.into_inner());
        inbox.queue.push(Submission {
            id,
            request,
            tx,
            submitted: Instant::now(),
        });
        drop(inbox);
        s.wake.notify_one();
        Ok(EventStream {
            id,
            rx,
            peeked: None,
        })
    }

    /// The latest figures (queue depth, running sequences, KV usage, prefix-cache hits).
    pub fn stats(&self) -> EngineStats {
        let mut st = self
            .shared
            .stats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        // Submissions not yet seen by the engine thread count as waiting too.
        st.waiting = st
            .waiting
            .max(self.shared.counters.waiting.load(Ordering::SeqCst));
        st
    }

    /// Most tokens (prompt + generated) one request can have.
    pub fn max_request_tokens(&self) -> usize {
        self.shared.max_request_tokens
    }

    /// Whether the engine thread is running (false after shutdown or if it died).
    pub fn is_alive(&self) -> bool {
        self.shared.alive.load(Ordering::SeqCst)
    }

    /// Whether the waiting queue has room.
    pub fn has_capacity(&self) -> bool {
        self.shared.counters.waiting.load(Ordering::SeqCst) < self.shared.max_waiting
    }
}

/// An engine running on its own thread. Dropping it stops the thread (live requests end as
/// cancelled).
pub struct Engine {
    handle: EngineHandle,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Engine {
    /// Starts a thread that owns `model` and serves requests submitted through [`Engine::handle`].
    pub fn start<B, M>(model: M, tok: Arc<Tokenizer>, cfg: EngineConfig) -> Result<Self>
    where
        B: InferenceBackend,
        M: CausalLm<B> + Send + Sync + 'static,
    {
        Self::start_with_draft(model, None, tok, cfg)
    }

    /// As [`Engine::start`], with a draft model proposing the speculative tokens
    /// (`cfg.speculative` must be on; check the tokenizers with
    /// [`super::check_draft_tokenizer`] first).
    pub fn start_with_draft<B, M>(
        model: M,
        draft: Option<Box<dyn CausalLm<B> + Send + Sync>>,
        tok: Arc<Tokenizer>,
        cfg: EngineConfig,
    ) -> Result<Self>
    where
        B: InferenceBackend,
        M: CausalLm<B> + Send + Sync + 'static,
    {
        let blocks = kv_blocks(&model, &cfg)?;
        let max_request_tokens = (blocks * cfg.block_size).min(model.context_length());
        // Pin the size: a default derived from free memory must not change between this check and
        // the allocation on the engine thread (the handle admits requests by this capacity).
        let cfg = EngineConfig {
            kv_budget: Some(crate::kv::KvBudget::Tokens(blocks * cfg.block_size)),
            ..cfg
        };
        let shared = Arc::new(Shared {
            inbox: Mutex::new(Inbox::default()),
            wake: Condvar::new(),
            shutdown: AtomicBool::new(false),
            alive: AtomicBool::new(true),
            counters: Arc::new(Counters::default()),
            stats: Mutex::new(EngineStats::default()),
            next_id: AtomicU64::new(0),
            max_waiting: cfg.max_waiting,
            vocab: model.vocab_size(),
            max_request_tokens,
        });
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<()>>();
        let sh = shared.clone();
        let thread = std::thread::Builder::new()
            .name("cinder-engine".into())
            .spawn(move || {
                // Marks the engine dead however the thread ends, a panic included.
                struct Alive<'a>(&'a AtomicBool);
                impl Drop for Alive<'_> {
                    fn drop(&mut self) {
                        self.0.store(false, Ordering::SeqCst);
                    }
                }
                let _alive = Alive(&sh.alive);
                let counters = sh.counters.clone();
                let draft = draft.as_deref().map(|d| d as &(dyn CausalLm<B> + Sync));
                let mut core =
                    match EngineCore::<B, M>::with_counters(&model, &tok, cfg, counters, draft) {
                        Ok(c) => c,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                *sh.stats.lock().unwrap_or_else(|p| p.into_inner()) = core.stats().clone();
                let _ = ready_tx.send(Ok(()));
                run_loop(&mut core, &sh);
            })
            .map_err(|e| RuntimeError::KvCache(format!("cannot start the engine thread: {e}")))?;
        match ready_rx.recv() {
            Ok(r) => r?,
            Err(_) => return Err(RuntimeError::EngineStopped),
        }
        Ok(Self {
            handle: EngineHandle { shared },
            thread: Some(thread),
        })
    }

    /// A handle for submitting requests.
    pub fn handle(&self) -> EngineHandle {
        self.handle.clone()
    }

    /// Stops the engine and waits for its thread.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        // Set the flag under the inbox lock: the engine thread checks it and goes to sleep under
        // that lock, so a flag set between its check and its wait would lose this wake-up and
        // leave `join` waiting forever.
        {
            let _inbox = self
                .handle
                .shared
                .inbox
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            self.handle.shared.shutdown.store(true, Ordering::SeqCst);
        }
        self.handle.shared.wake.notify_all();
        if let Some(t) = self.thread.take()
            && t.join().is_err()
        {
            tracing::error!("the engine thread panicked");
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run_loop<B: InferenceBackend, M: CausalLm<B> + Sync + ?Sized>(
    core: &mut EngineCore<'_, B, M>,
    shared: &Shared,
) {
    loop {
        let new = {
            let mut inbox = shared.inbox.lock().unwrap_or_else(|p| p.into_inner());
            // Sleep only when there is nothing at all to do.
            while inbox.queue.is_empty()
                && core.num_live() == 0
                && !shared.shutdown.load(Ordering::SeqCst)
            {
                inbox = shared.wake.wait(inbox).unwrap_or_else(|p| p.into_inner());
            }
            std::mem::take(&mut inbox.queue)
        };
        if shared.shutdown.load(Ordering::SeqCst) {
            for s in new {
                shared.counters.waiting.fetch_sub(1, Ordering::SeqCst);
                let _ = s.tx.send(Event::Finished {
                    reason: FinishReason::Cancelled,
                    text: String::new(),
                    usage: Usage::default(),
                    stop: None,
                });
            }
            core.end_all(FinishReason::Cancelled);
            return;
        }
        for s in new {
            let id = s.id;
            if let Err(e) = core.insert(s.id, s.request, s.tx, s.submitted) {
                // Validated by the handle; a failure here is reported as the request's end.
                tracing::warn!(id, "request refused by the engine: {e}");
                shared.counters.waiting.fetch_sub(1, Ordering::SeqCst);
            }
        }
        // A failed or panicking step ends the requests in flight with `Error`, not the engine: the
        // server stays up for the next request.
        let ran = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let plan = core.plan_step();
            // From a pool worker: each parallel section of the forward starts on this worker and
            // only wakes the others, instead of handing every section over from the engine thread
            // (a futex sleep and wake each). Measured faster at every batch shape (docs/perf.md).
            cinder_backends::on_thread_pool(|| core.run_plan(&plan))
                .unwrap_or(Err(RuntimeError::EngineStopped))
        })) {
            Ok(Ok(n)) => n,
            Ok(Err(e)) => {
                tracing::error!("engine step failed: {e}; ending the live requests");
                core.end_all(FinishReason::Error);
                0
            }
            Err(_) => {
                tracing::error!("engine step panicked; ending the live requests");
                core.end_all(FinishReason::Error);
                0
            }
        };
        *shared.stats.lock().unwrap_or_else(|p| p.into_inner()) = core.stats().clone();
        if ran == 0 && core.num_live() > 0 {
            // Live requests but nothing schedulable (cannot happen while a request fits the
            // cache alone); do not spin.
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
