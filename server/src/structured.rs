//! Structured output and log-probabilities on the OpenAI API: `response_format` (and vLLM's
//! `guided_regex` / `guided_grammar` extensions) turned into a compiled grammar, `logprobs` /
//! `top_logprobs` into the engine's request, and the engine's per-token log-probabilities into
//! OpenAI's two response shapes (chat's `logprobs.content`, completions' `tokens` /
//! `token_logprobs` / `top_logprobs` / `text_offset`).

use cinder_runtime::constraint::{Constraint, Grammars, TokenMatcher};
use cinder_runtime::engine::{MAX_TOP_LOGPROBS, TokenLogprob};
use cinder_runtime::tokenizer::Tokenizer;
use serde_json::{Map, Value, json};

use crate::AppState;
use crate::error::ApiError;
use crate::openai::Common;

/// The constraint a request asks for, if any: `response_format`, else `guided_regex`, else
/// `guided_grammar` (only one may be given).
pub fn constraint_of(c: &Common) -> Result<Option<Constraint>, ApiError> {
    let mut found: Vec<(&str, Constraint)> = Vec::new();
    if let Some(rf) = &c.response_format
        && let Some(k) = response_format(rf)?
    {
        found.push(("response_format", k));
    }
    if let Some(r) = &c.guided_regex {
        found.push(("guided_regex", Constraint::Regex(r.clone())));
    }
    if let Some(g) = &c.guided_grammar {
        found.push(("guided_grammar", Constraint::Lark(g.clone())));
    }
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop().map(|f| f.1)),
        _ => Err(ApiError::bad_request(
            format!(
                "give one constraint, not {}",
                found.iter().map(|f| f.0).collect::<Vec<_>>().join(" and ")
            ),
            found[1].0,
        )),
    }
}

/// OpenAI's `response_format`: `{"type": "text" | "json_object" | "json_schema", ...}`.
fn response_format(rf: &Value) -> Result<Option<Constraint>, ApiError> {
    let bad = |m: String| ApiError::bad_request(m, "response_format");
    let ty = rf
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("response_format must be an object with a string `type`".into()))?;
    match ty {
        "text" => Ok(None),
        "json_object" => Ok(Some(Constraint::JsonObject)),
        "json_schema" => {
            let js = rf.get("json_schema").ok_or_else(|| {
                bad("response_format of type json_schema needs a `json_schema` object".into())
            })?;
            if !js.is_object() {
                return Err(bad("response_format.json_schema must be an object".into()));
            }
            match js.get("name") {
                Some(Value::String(n)) if !n.is_empty() && n.len() <= 64 => {}
                Some(Value::String(_)) => {
                    return Err(bad(
                        "response_format.json_schema.name must have 1 to 64 characters".into(),
                    ));
                }
                Some(_) => {
                    return Err(bad(
                        "response_format.json_schema.name must be a string".into()
                    ));
                }
                None => {
                    return Err(bad("response_format.json_schema needs a `name`".into()));
                }
            }
            let strict = js.get("strict").and_then(Value::as_bool) == Some(true);
            match js.get("schema") {
                None | Some(Value::Null) => Ok(Some(Constraint::JsonObject)),
                Some(s @ Value::Object(_)) => {
                    let mut s = s.clone();
                    if strict {
                        close_objects(&mut s);
                    }
                    Ok(Some(Constraint::JsonSchema(s)))
                }
                Some(_) => Err(bad(
                    "response_format.json_schema.schema must be a JSON object".into(),
                )),
            }
        }
        other => Err(bad(format!(
            "response_format type {other:?} is not one of text, json_object, json_schema"
        ))),
    }
}

/// Strict mode, as OpenAI defines it: an object schema that does not say whether other
/// properties may appear allows none (`additionalProperties: false`), at every depth.
fn close_objects(schema: &mut Value) {
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    let is_object = obj.get("type").is_some_and(|t| {
        t == "object"
            || t.as_array()
                .is_some_and(|a| a.iter().any(|x| x == "object"))
    }) || obj.contains_key("properties");
    if is_object
        && !obj.contains_key("additionalProperties")
        && !obj.contains_key("patternProperties")
    {
        obj.insert("additionalProperties".into(), Value::Bool(false));
    }
    for key in ["properties", "$defs", "definitions"] {
        if let Some(Value::Object(m)) = obj.get_mut(key) {
            m.values_mut().for_each(close_objects);
        }
    }
    for key in ["anyOf", "oneOf", "allOf", "prefixItems"] {
        if let Some(Value::Array(v)) = obj.get_mut(key) {
            v.iter_mut().for_each(close_objects);
        }
    }
    for key in ["items", "additionalProperties", "not", "if", "then", "else"] {
        if let Some(v) = obj.get_mut(key) {
            close_objects(v);
        }
    }
}

/// Compiles `c` against the served model's vocabulary (the token trie is built on first use).
/// `Err(Ok(_))`: the constraint is bad (the reason); `Err(Err(_))`: the server cannot compile any.
pub fn compile_raw(s: &AppState, c: &Constraint) -> Result<TokenMatcher, Result<String, String>> {
    let grammars = s
        .grammars
        .get_or_init(|| Grammars::new(&s.tok, s.tok.vocab_size).map_err(|e| e.to_string()));
    let g = grammars
        .as_ref()
        .map_err(|e| Err(format!("structured output is unavailable: {e}")))?;
    g.compile(c).map_err(|e| Ok(e.to_string()))
}

/// [`compile_raw`] for the HTTP API: a bad constraint is a 400 naming its field.
pub fn compile(s: &AppState, c: &Constraint) -> Result<TokenMatcher, ApiError> {
    let param = match c {
        Constraint::Regex(_) => "guided_regex",
        Constraint::Lark(_) => "guided_grammar",
        _ => "response_format",
    };
    compile_raw(s, c).map_err(|e| match e {
        Ok(bad) => ApiError::bad_request(bad, param),
        Err(internal) => ApiError::internal(&internal),
    })
}

/// Chat's `logprobs` (bool) and `top_logprobs` (0–20): how many alternatives per token, if any.
pub fn chat_logprobs(c: &Common) -> Result<Option<usize>, ApiError> {
    let on = match &c.logprobs {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(ApiError::bad_request(
                "logprobs must be a boolean on chat completions",
                "logprobs",
            ));
        }
    };
    let top = match c.top_logprobs {
        None => None,
        Some(k) if (0..=MAX_TOP_LOGPROBS as i64).contains(&k) => Some(k as usize),
        Some(k) => {
            return Err(ApiError::bad_request(
                format!("top_logprobs must be in [0, {MAX_TOP_LOGPROBS}] (got {k})"),
                "top_logprobs",
            ));
        }
    };
    match (on, top) {
        (true, t) => Ok(Some(t.unwrap_or(0))),
        (false, Some(_)) => Err(ApiError::bad_request(
            "top_logprobs needs logprobs: true",
            "top_logprobs",
        )),
        (false, None) => Ok(None),
    }
}

/// Completions' `logprobs`: an integer 0–20 (alternatives per token).
pub fn completion_logprobs(c: &Common) -> Result<Option<usize>, ApiError> {
    match &c.logprobs {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(k) if k as usize <= MAX_TOP_LOGPROBS => Ok(Some(k as usize)),
            _ => Err(ApiError::bad_request(
                format!("logprobs must be an integer in [0, {MAX_TOP_LOGPROBS}] (got {n})"),
                "logprobs",
            )),
        },
        Some(_) => Err(ApiError::bad_request(
            "logprobs must be an integer on completions",
            "logprobs",
        )),
    }
}

/// A token as OpenAI shows it: its text (bytes of a partial character replaced) and its bytes.
fn token_entry(tok: &Tokenizer, id: u32, logprob: f32) -> Map<String, Value> {
    let bytes = tok.token_bytes(id).map(<[u8]>::to_vec).unwrap_or_default();
    let mut m = Map::new();
    m.insert(
        "token".into(),
        json!(String::from_utf8_lossy(&bytes).into_owned()),
    );
    m.insert("logprob".into(), finite(logprob));
    m.insert("bytes".into(), json!(bytes));
    m
}

/// −∞ has no JSON form; OpenAI reports −9999 for tokens of no probability.
fn finite(x: f32) -> Value {
    json!(if x.is_finite() { x } else { -9999.0 })
}

/// One entry of chat's `logprobs.content`.
pub fn chat_entry(tok: &Tokenizer, id: u32, lp: &TokenLogprob) -> Value {
    let mut m = token_entry(tok, id, lp.logprob);
    let top: Vec<Value> = lp
        .top
        .iter()
        .map(|&(t, l)| Value::Object(token_entry(tok, t, l)))
        .collect();
    m.insert("top_logprobs".into(), json!(top));
    Value::Object(m)
}

/// Completions' `logprobs` object for `entries` (token id, its log-probabilities), whose text
/// starts at byte `offset` of the completion.
pub fn completion_block(tok: &Tokenizer, entries: &[(u32, TokenLogprob)], offset: usize) -> Value {
    let mut tokens = Vec::with_capacity(entries.len());
    let mut lps = Vec::with_capacity(entries.len());
    let mut tops = Vec::with_capacity(entries.len());
    let mut offsets = Vec::with_capacity(entries.len());
    let mut at = offset;
    for (id, lp) in entries {
        let text = tok
            .token_bytes(*id)
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default();
        offsets.push(at);
        at += text.len();
        tokens.push(json!(text));
        lps.push(finite(lp.logprob));
        let mut top = Map::new();
        for &(t, l) in &lp.top {
            let tt = tok
                .token_bytes(t)
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default();
            top.insert(tt, finite(l));
        }
        tops.push(Value::Object(top));
    }
    json!({"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_closes_every_object_but_not_a_property_named_properties() {
        let mut s = json!({
            "type": "object",
            "properties": {
                "properties": {"type": "string"},
                "inner": {"type": "object", "properties": {"a": {"type": "integer"}}},
                "list": {"type": "array", "items": {"$ref": "#/$defs/P"}},
                "open": {"type": "object", "additionalProperties": true}
            },
            "$defs": {"P": {"type": "object", "properties": {"x": {"type": "number"}}}}
        });
        close_objects(&mut s);
        assert_eq!(s["additionalProperties"], json!(false));
        assert_eq!(
            s["properties"]["inner"]["additionalProperties"],
            json!(false)
        );
        assert_eq!(s["$defs"]["P"]["additionalProperties"], json!(false));
        assert_eq!(s["properties"]["open"]["additionalProperties"], json!(true));
        assert!(
            s["properties"]["properties"]
                .get("additionalProperties")
                .is_none()
        );
        assert!(s["properties"].get("additionalProperties").is_none());
    }
}
