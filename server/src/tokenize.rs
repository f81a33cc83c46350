//! `POST /tokenize` and `POST /detokenize` in llama.cpp server's shapes: the served model's own
//! tokenizer, so a client can count and inspect tokens exactly as the engine will see them.

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::error::ApiError;

/// `POST /tokenize`: `content`, and llama.cpp's switches.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenizeRequest {
    /// the text
    content: String,
    /// add BOS/EOS as the vocabulary says (llama.cpp's default: no)
    #[serde(default)]
    add_special: bool,
    /// read control tokens written in the text (`<|im_start|>`) as themselves (default: yes)
    #[serde(default = "yes")]
    parse_special: bool,
    /// each token with its piece: a string where its bytes are UTF-8, else the bytes
    #[serde(default)]
    with_pieces: bool,
}

fn yes() -> bool {
    true
}

/// `POST /detokenize`: token ids back to text.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DetokenizeRequest {
    /// the ids
    tokens: Vec<u32>,
}

/// `{"tokens": [ids]}`, or `{"tokens": [{"id", "piece"}]}` with `with_pieces`.
pub async fn tokenize(
    State(s): State<AppState>,
    body: Result<Json<TokenizeRequest>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(r) = body.map_err(ApiError::from_rejection)?;
    let ids = s
        .tok
        .tokenize(&r.content, r.add_special, r.parse_special)
        .map_err(|e| ApiError::bad_request(e.to_string(), "content"))?;
    if !r.with_pieces {
        return Ok(Json(json!({ "tokens": ids })));
    }
    let tokens = ids
        .iter()
        .map(|&id| {
            let bytes = s
                .tok
                .token_bytes(id)
                .map_err(|e| ApiError::internal(&e.to_string()))?;
            let piece = match std::str::from_utf8(bytes) {
                Ok(t) => json!(t),
                Err(_) => json!(bytes),
            };
            Ok(json!({ "id": id, "piece": piece }))
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    Ok(Json(json!({ "tokens": tokens })))
}

/// `{"content": text}`; control tokens are written out, as llama.cpp does.
pub async fn detokenize(
    State(s): State<AppState>,
    body: Result<Json<DetokenizeRequest>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(r) = body.map_err(ApiError::from_rejection)?;
    if let Some(bad) = r.tokens.iter().find(|&&t| t as usize >= s.tok.vocab_size) {
        return Err(ApiError::bad_request(
            format!(
                "token id {bad} is outside the vocabulary of {} tokens",
                s.tok.vocab_size
            ),
            "tokens",
        ));
    }
    let content = s
        .tok
        .decode(&r.tokens, false)
        .map_err(|e| ApiError::bad_request(e.to_string(), "tokens"))?;
    Ok(Json(json!({ "content": content })))
}
