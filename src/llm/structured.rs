//! Typed structured output: the JSON schema of a Rust type (schemars) constrains generation
//! through the engine's grammar matcher, so the text always parses into the type.

use cinder_runtime::constraint::Constraint;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use super::{GenerateOptions, Llm, Message, Output, collect_blocking};
use crate::error::{Error, Result};

/// The JSON schema of `T` as the grammar compiler takes it.
///
/// # Examples
///
/// ```
/// #[derive(schemars::JsonSchema)]
/// struct City { name: String, population: u64 }
/// let s = cinder::llm::json_schema_of::<City>();
/// assert_eq!(s["type"], "object");
/// assert!(s["properties"]["population"].is_object());
/// assert_eq!(s["additionalProperties"], false);
/// ```
pub fn json_schema_of<T: JsonSchema>() -> serde_json::Value {
    let mut v = schemars::schema_for!(T).to_value();
    if let Some(o) = v.as_object_mut() {
        // Documentation keys, not constraints.
        o.remove("$schema");
        o.remove("title");
    }
    tighten(&mut v);
    v
}

/// Makes the schema say what the type takes, for a grammar to follow:
/// - a struct's object takes its fields only (`additionalProperties: false` where schemars leaves
///   it open: serde skips unknown fields, so a model left free to add some writes on and on);
/// - schemars writes Rust's integer widths as `format` (`uint64`, `int32`, …) beside the
///   `minimum` that already bounds them; they are not JSON Schema formats, and a grammar compiler
///   that enforces `format` refuses unknown ones.
fn tighten(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(o) => {
            if o.contains_key("properties") && !o.contains_key("additionalProperties") {
                o.insert(
                    "additionalProperties".into(),
                    serde_json::Value::Bool(false),
                );
            }
            if o.get("format").and_then(|f| f.as_str()).is_some_and(|f| {
                f.starts_with("int") || f.starts_with("uint") || f == "float" || f == "double"
            }) {
                o.remove("format");
            }
            o.values_mut().for_each(tighten);
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(tighten),
        _ => {}
    }
}

impl Llm {
    /// Answers a chat with a value of type `T`: generation follows `T`'s JSON schema (so the text
    /// always parses), greedily, up to 1024 tokens.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use cinder::{Llm, Message};
    /// #[derive(serde::Deserialize, schemars::JsonSchema, Debug)]
    /// struct City { name: String, country: String, population: u64 }
    ///
    /// let llm = Llm::load("smollm2-135m")?;
    /// let city: City = llm.chat_json(&[Message::user("Describe a large city as JSON.")])?;
    /// println!("{city:?}");
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn chat_json<T: DeserializeOwned + JsonSchema>(&self, messages: &[Message]) -> Result<T> {
        self.chat_json_with(messages, &GenerateOptions::greedy(1024))
    }

    /// [`Llm::chat_json`] with options (sampling, token limit).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use cinder::{GenerateOptions, Llm, Message};
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Verdict { positive: bool }
    /// let llm = Llm::load("smollm2-135m")?;
    /// let v: Verdict = llm.chat_json_with(
    ///     &[Message::user("Is 'I loved it' a positive review?")],
    ///     &GenerateOptions::greedy(32),
    /// )?;
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn chat_json_with<T: DeserializeOwned + JsonSchema>(
        &self,
        messages: &[Message],
        opts: &GenerateOptions,
    ) -> Result<T> {
        let out = self.chat_constrained(
            messages,
            &Constraint::JsonSchema(json_schema_of::<T>()),
            opts,
        )?;
        if out.finish == cinder_runtime::engine::FinishReason::Length {
            return Err(Error::Json {
                reason: format!(
                    "the value was not complete within max_tokens = {} (raise it)",
                    opts.max_tokens
                ),
                text: out.text,
            });
        }
        parse_json(&out.text)
    }

    /// Answers a chat under any constraint: a JSON schema, a regular expression or a Lark grammar.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use cinder::runtime::constraint::Constraint;
    /// use cinder::{GenerateOptions, Llm, Message};
    /// let llm = Llm::load("smollm2-135m")?;
    /// let out = llm.chat_constrained(
    ///     &[Message::user("Pick a number from 1 to 9.")],
    ///     &Constraint::Regex("[1-9]".into()),
    ///     &GenerateOptions::greedy(4),
    /// )?;
    /// assert_eq!(out.text.len(), 1);
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn chat_constrained(
        &self,
        messages: &[Message],
        constraint: &Constraint,
        opts: &GenerateOptions,
    ) -> Result<Output> {
        let r = self.constrained(self.chat_ids(messages)?, constraint, opts)?;
        collect_blocking(self.submit(r)?)
    }

    /// Continues raw text under a constraint (as [`Llm::chat_constrained`], without a template).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use cinder::runtime::constraint::Constraint;
    /// let llm = cinder::Llm::load("smollm2-135m")?;
    /// let out = llm.generate_constrained(
    ///     "The answer (yes or no):",
    ///     &Constraint::Regex(" (yes|no)".into()),
    ///     &cinder::GenerateOptions::greedy(4),
    /// )?;
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn generate_constrained(
        &self,
        prompt: &str,
        constraint: &Constraint,
        opts: &GenerateOptions,
    ) -> Result<Output> {
        let r = self.constrained(self.encode(prompt)?, constraint, opts)?;
        collect_blocking(self.submit(r)?)
    }
}

fn parse_json<T: DeserializeOwned>(text: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|e| Error::Json {
        reason: e.to_string(),
        text: text.to_string(),
    })
}
