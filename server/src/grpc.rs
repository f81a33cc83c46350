//! The gRPC API (`cinder.v1.Inference`, tonic): server-streamed generation, embeddings, health.
//! Same engine, limits and keys as the HTTP API: a full queue is `RESOURCE_EXHAUSTED`, a bad
//! request `INVALID_ARGUMENT`, a missing key `UNAUTHENTICATED`; cancelling the call cancels the
//! sequence.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use cinder_runtime::RuntimeError;
use cinder_runtime::constraint::Constraint;
use cinder_runtime::engine::{Event, EventStream, MAX_TOP_LOGPROBS, Request as EngineRequest};
use cinder_runtime::sampler::SamplingParams;
use cinder_runtime::tokenizer::{ChatMessage, apply_chat_template};
use futures_util::Stream;
use tokio::net::TcpListener;
use tonic::{Request, Response, Status};

use crate::{AppState, ServerError};

/// Code generated from `proto/cinder/v1/cinder.proto`.
#[allow(missing_docs, clippy::all)]
pub mod pb {
    tonic::include_proto!("cinder.v1");
}

use pb::inference_server::{Inference, InferenceServer};
use pb::{
    EmbedRequest, EmbedResponse, Embedding, GenerateRequest, GenerateResponse, HealthRequest,
    HealthResponse, Usage,
};

/// The service.
#[derive(Debug, Clone)]
pub struct Service {
    state: AppState,
}

fn check_key<T>(state: &AppState, req: &Request<T>) -> Result<(), Status> {
    if state.draining.load(Ordering::SeqCst) {
        return Err(Status::unavailable("the server is shutting down"));
    }
    if state.cfg.api_keys.is_empty() {
        return Ok(());
    }
    let given = req
        .metadata()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(g) if state.cfg.api_keys.iter().any(|k| k == g.trim()) => Ok(()),
        Some(_) => Err(Status::unauthenticated("invalid API key")),
        None => Err(Status::unauthenticated(
            "missing API key: send `authorization: Bearer <key>` metadata",
        )),
    }
}

fn engine_status(e: RuntimeError) -> Status {
    match e {
        RuntimeError::QueueFull { .. } => Status::resource_exhausted(format!("{e}; retry shortly")),
        RuntimeError::EngineStopped => Status::unavailable(e.to_string()),
        RuntimeError::ContextOverflow { .. }
        | RuntimeError::EmptyPrompt
        | RuntimeError::InvalidRequest(_)
        | RuntimeError::Sampling(_)
        | RuntimeError::Constraint(_)
        | RuntimeError::Tokenizer(_)
        | RuntimeError::Template(_) => Status::invalid_argument(e.to_string()),
        other => Status::internal(other.to_string()),
    }
}

type GenStream = Pin<Box<dyn Stream<Item = Result<GenerateResponse, Status>> + Send>>;

impl Service {
    fn build(&self, r: GenerateRequest) -> Result<EngineRequest, Status> {
        let s = &self.state;
        let ids = if r.messages.is_empty() {
            if r.prompt.is_empty() {
                return Err(Status::invalid_argument("prompt or messages must be set"));
            }
            s.tok
                .encode(&r.prompt, true)
                .map_err(|e| Status::invalid_argument(e.to_string()))?
        } else {
            let msgs: Vec<ChatMessage> = r
                .messages
                .iter()
                .map(|m| ChatMessage::new(m.role.clone(), m.content.clone()))
                .collect();
            let text = apply_chat_template(&s.tok, &msgs, true).map_err(engine_status)?;
            s.tok
                .tokenize(&text, false, true)
                .map_err(|e| Status::invalid_argument(e.to_string()))?
        };
        let limit = s.engine.max_request_tokens();
        if ids.len() >= limit {
            return Err(Status::invalid_argument(format!(
                "the prompt is {} tokens; the context holds {limit}",
                ids.len()
            )));
        }
        let max_tokens = match r.max_tokens {
            0 => limit - ids.len(),
            n => n as usize,
        };
        if !(0.0..=2.0).contains(&r.temperature) {
            return Err(Status::invalid_argument("temperature must be in [0, 2]"));
        }
        let top_p = if r.top_p <= 0.0 { 1.0 } else { r.top_p };
        if top_p > 1.0 {
            return Err(Status::invalid_argument("top_p must be in (0, 1]"));
        }
        let timeout = if r.timeout_seconds > 0.0 && r.timeout_seconds.is_finite() {
            Duration::from_secs_f64(r.timeout_seconds)
        } else {
            s.cfg.request_timeout
        };
        Ok(EngineRequest {
            prompt: ids,
            max_tokens,
            sampling: SamplingParams {
                temperature: r.temperature,
                top_k: r.top_k as usize,
                top_p,
                min_p: 0.0,
                repeat_penalty: 1.0,
                repeat_last_n: 64,
                seed: r.seed,
            },
            stop_strings: r.stop,
            stop_on_eos: true,
            timeout: Some(timeout),
            constraint: match constraint_of(r.constraint)? {
                Some(c) => Some(crate::structured::compile_raw(s, &c).map_err(|e| match e {
                    Ok(bad) => Status::invalid_argument(bad),
                    Err(internal) => Status::internal(internal),
                })?),
                None => None,
            },
            logprobs: match r.logprobs {
                Some(k) if k as usize > MAX_TOP_LOGPROBS => {
                    return Err(Status::invalid_argument(format!(
                        "logprobs must be at most {MAX_TOP_LOGPROBS}"
                    )));
                }
                k => k.map(|k| k as usize),
            },
        })
    }
}

/// The request's constraint, as the runtime takes it.
fn constraint_of(
    c: Option<pb::generate_request::Constraint>,
) -> Result<Option<Constraint>, Status> {
    use pb::generate_request::Constraint as C;
    Ok(match c {
        None | Some(C::JsonObject(false)) => None,
        Some(C::JsonObject(true)) => Some(Constraint::JsonObject),
        Some(C::JsonSchema(s)) => {
            let v: serde_json::Value = serde_json::from_str(&s)
                .map_err(|e| Status::invalid_argument(format!("json_schema is not JSON: {e}")))?;
            Some(Constraint::JsonSchema(v))
        }
        Some(C::Regex(r)) => Some(Constraint::Regex(r)),
        Some(C::Grammar(g)) => Some(Constraint::Lark(g)),
    })
}

/// Maps engine events to messages; dropping it (call cancelled) cancels the sequence.
fn messages(state: AppState, stream: EventStream) -> GenStream {
    let start = Instant::now();
    let s = futures_util::stream::unfold(
        (state, stream, None::<Instant>, false),
        move |(state, mut stream, mut last, done)| async move {
            if done {
                return None;
            }
            match stream.next().await {
                Some(Event::Token { id, text, logprob }) => {
                    let now = Instant::now();
                    match last {
                        None => state.metrics.ttft.observe((now - start).as_secs_f64()),
                        Some(l) => state.metrics.itl.observe((now - l).as_secs_f64()),
                    }
                    last = Some(now);
                    let logprob = logprob.map(|lp| pb::TokenLogprob {
                        logprob: lp.logprob,
                        top: lp
                            .top
                            .iter()
                            .map(|&(t, l)| pb::TopLogprob {
                                token_id: t,
                                token: state
                                    .tok
                                    .token_bytes(t)
                                    .map(|b| String::from_utf8_lossy(b).into_owned())
                                    .unwrap_or_default(),
                                logprob: l,
                            })
                            .collect(),
                    });
                    let m = GenerateResponse {
                        token_id: Some(id),
                        text,
                        finish_reason: String::new(),
                        usage: None,
                        logprob,
                    };
                    Some((Ok(m), (state, stream, last, false)))
                }
                Some(Event::Finished {
                    reason,
                    text,
                    usage,
                    ..
                }) => {
                    state
                        .metrics
                        .prompt_tokens
                        .fetch_add(usage.prompt_tokens as u64, Ordering::Relaxed);
                    state
                        .metrics
                        .generation_tokens
                        .fetch_add(usage.completion_tokens as u64, Ordering::Relaxed);
                    let m = GenerateResponse {
                        token_id: None,
                        text,
                        finish_reason: crate::respond::finish_reason(reason).to_string(),
                        usage: Some(Usage {
                            prompt_tokens: usage.prompt_tokens as u32,
                            completion_tokens: usage.completion_tokens as u32,
                            cached_tokens: usage.cached_tokens as u32,
                        }),
                        logprob: None,
                    };
                    Some((Ok(m), (state, stream, last, true)))
                }
                None => Some((
                    Err(Status::internal("the engine stopped")),
                    (state, stream, last, true),
                )),
            }
        },
    );
    Box::pin(s)
}

#[tonic::async_trait]
impl Inference for Service {
    type GenerateStream = GenStream;

    async fn generate(
        &self,
        req: Request<GenerateRequest>,
    ) -> Result<Response<Self::GenerateStream>, Status> {
        check_key(&self.state, &req).inspect_err(|e| {
            self.state
                .metrics
                .count_request("grpc/Generate", grpc_http(e))
        })?;
        let r = self.build(req.into_inner()).inspect_err(|e| {
            self.state
                .metrics
                .count_request("grpc/Generate", grpc_http(e))
        })?;
        let stream = self.state.engine.submit(r).map_err(|e| {
            let st = engine_status(e);
            self.state
                .metrics
                .count_request("grpc/Generate", grpc_http(&st));
            st
        })?;
        self.state.metrics.count_request("grpc/Generate", 200);
        Ok(Response::new(messages(self.state.clone(), stream)))
    }

    async fn embed(&self, req: Request<EmbedRequest>) -> Result<Response<EmbedResponse>, Status> {
        check_key(&self.state, &req)?;
        let Some(svc) = self.state.embedder.clone() else {
            return Err(Status::failed_precondition(format!(
                "this server runs the text-generation model {:?}; no embedding model is loaded \
                 (start it with --embedding-model)",
                self.state.cfg.model_name
            )));
        };
        let r = req.into_inner();
        let (vectors, _) = svc.run(r.texts, r.normalize).await.map_err(|e| match e {
            ServerError::EmbedInput(m) => Status::invalid_argument(m),
            busy @ ServerError::EmbedBusy => Status::resource_exhausted(busy.to_string()),
            other => Status::unavailable(other.to_string()),
        })?;
        self.state.metrics.count_request("grpc/Embed", 200);
        Ok(Response::new(EmbedResponse {
            embeddings: vectors
                .into_iter()
                .map(|values| Embedding { values })
                .collect(),
        }))
    }

    async fn health(
        &self,
        _req: Request<HealthRequest>,
    ) -> Result<Response<HealthResponse>, Status> {
        let s = &self.state;
        let st = s.engine.stats();
        let status = if s.draining.load(Ordering::SeqCst) {
            "DRAINING"
        } else if !s.engine.has_capacity() {
            "QUEUE_FULL"
        } else {
            "SERVING"
        };
        Ok(Response::new(HealthResponse {
            status: status.into(),
            model: s.cfg.model_name.clone(),
            queue_depth: st.waiting as u32,
            running: st.running as u32,
        }))
    }
}

/// The HTTP status a gRPC status corresponds to, for the request counter.
fn grpc_http(s: &Status) -> u16 {
    match s.code() {
        tonic::Code::InvalidArgument => 400,
        tonic::Code::Unauthenticated => 401,
        tonic::Code::ResourceExhausted => 429,
        tonic::Code::Unavailable => 503,
        _ => 500,
    }
}

/// Serves gRPC on `listener` until `shutdown`.
pub async fn serve(
    state: AppState,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServerError> {
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    tonic::transport::Server::builder()
        .add_service(InferenceServer::new(Service { state }))
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
        .map_err(|e| ServerError::Grpc(e.to_string()))
}
