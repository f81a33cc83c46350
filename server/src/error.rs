//! Errors: the crate's own (`ServerError`) and the OpenAI-format HTTP error response (`ApiError`).

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use cinder_runtime::RuntimeError;

use crate::openai::{ErrorBody, ErrorDetail};

/// Errors starting or running the server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A socket could not be bound or served.
    #[error("{what}: {source}")]
    Io {
        /// what was being done
        what: String,
        /// the cause
        source: std::io::Error,
    },
    /// The gRPC server failed.
    #[error("gRPC server: {0}")]
    Grpc(String),
    /// An embedding request's input is unusable (the message names the field or text).
    #[error("embedding input: {0}")]
    EmbedInput(String),
    /// Too many embedding requests are already waiting.
    #[error("the embedding queue is full; retry later")]
    EmbedBusy,
    /// The embedding model stopped or its task failed.
    #[error("the embedding model is not available")]
    EmbedUnavailable,
}

/// An HTTP error with an OpenAI error body.
#[derive(Debug, Clone)]
pub struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
    param: Option<String>,
    code: Option<String>,
    retry_after: Option<u64>,
}

impl ApiError {
    /// An error of `status` and OpenAI error `kind`.
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            kind,
            message: message.into(),
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// 400 naming the request field at fault.
    pub fn bad_request(message: impl Into<String>, param: &str) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message).param(param)
    }

    /// 401.
    pub fn unauthorized(missing: bool) -> Self {
        let msg = if missing {
            "missing API key: send `Authorization: Bearer <key>`"
        } else {
            "invalid API key"
        };
        Self::new(StatusCode::UNAUTHORIZED, "authentication_error", msg).code("invalid_api_key")
    }

    /// 503.
    pub fn unavailable(message: &str) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", message).code("unavailable")
    }

    /// 500.
    pub fn internal(message: &str) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// Sets `code`.
    pub fn code(mut self, code: &str) -> Self {
        self.code = Some(code.to_string());
        self
    }

    /// Sets `param`.
    pub fn param(mut self, param: &str) -> Self {
        self.param = Some(param.to_string());
        self
    }

    /// The same error naming the field `to` where it named `from` (an API whose field for the
    /// same setting has another name), in its message too.
    pub fn renamed(mut self, from: &str, to: &str) -> Self {
        if self.param.as_deref() == Some(from) {
            self.param = Some(to.to_string());
            self.message = self.message.replace(from, to);
        }
        self
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// A body that did not parse: 413 when over the size limit, else 400 with serde's message.
    pub fn from_rejection(r: JsonRejection) -> Self {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            return Self::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid_request_error",
                "request body too large",
            )
            .code("request_too_large");
        }
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            r.body_text(),
        )
        .code("invalid_json")
    }

    /// An engine refusal: 429 + `Retry-After` for a full queue, 400 for a request it cannot serve.
    pub fn from_engine(e: RuntimeError, prompt_field: &str) -> Self {
        match e {
            RuntimeError::QueueFull { .. } => {
                let mut a = Self::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "rate_limit_error",
                    format!("{e}; retry shortly"),
                )
                .code("queue_full");
                a.retry_after = Some(1);
                a
            }
            RuntimeError::ContextOverflow { .. } => {
                Self::bad_request(e.to_string(), prompt_field).code("context_length_exceeded")
            }
            RuntimeError::EmptyPrompt => Self::bad_request(e.to_string(), prompt_field),
            RuntimeError::InvalidRequest(_)
            | RuntimeError::Sampling(_)
            | RuntimeError::Constraint(_) => Self::new(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                e.to_string(),
            ),
            RuntimeError::EngineStopped => Self::unavailable("the engine has stopped"),
            other => Self::internal(&other.to_string()),
        }
    }
}

impl ApiError {
    /// The error in Anthropic's shape (`{"type": "error", "error": {"type", "message"}}`), for the
    /// Messages API: a full queue is `529 overloaded_error`, the field at fault leads the message.
    pub fn into_anthropic(self) -> Response {
        let (status, kind) = match self.status.as_u16() {
            429 if self.code.as_deref() == Some("queue_full") => (
                StatusCode::from_u16(529).unwrap_or(StatusCode::SERVICE_UNAVAILABLE),
                "overloaded_error",
            ),
            400 | 422 => (self.status, "invalid_request_error"),
            401 => (self.status, "authentication_error"),
            403 => (self.status, "permission_error"),
            404 => (self.status, "not_found_error"),
            413 => (self.status, "request_too_large"),
            429 => (self.status, "rate_limit_error"),
            503 => (self.status, "overloaded_error"),
            _ => (self.status, "api_error"),
        };
        let message = match &self.param {
            Some(p) if !self.message.contains(p.as_str()) => format!("{p}: {}", self.message),
            _ => self.message,
        };
        let body =
            serde_json::json!({"type": "error", "error": {"type": kind, "message": message}});
        let mut resp = (status, Json(body)).into_response();
        if let Some(s) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        resp
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                message: self.message,
                kind: self.kind.to_string(),
                param: self.param,
                code: self.code,
            },
        };
        let mut resp = (self.status, Json(body)).into_response();
        if let Some(s) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        resp
    }
}
