//! Tools with typed arguments: a [`Tool`] built from a `JsonSchema` type, offered to the model
//! through its chat template, forced by a grammar when a call is required, and each call's
//! arguments returned as that type ([`ToolCall::arguments`]). The same rendering, grammar and
//! parser as `cinder serve`'s `tools` ([`cinder_runtime::tools`]).

use cinder_runtime::tools::{Choice, Function, Tools, call_id, split};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{GenerateOptions, Llm, Message, Output, Role, collect_blocking, json_schema_of};
use crate::error::{Error, Result};

/// A function the model may call: its name, what it does, and its arguments' JSON schema.
///
/// # Examples
///
/// ```
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Weather { city: String }
/// let t = cinder::Tool::new::<Weather>("get_weather", "The weather in a city");
/// assert_eq!(t.name(), "get_weather");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    name: String,
    description: String,
    parameters: Value,
}

impl Tool {
    /// A tool whose arguments are an `A` (its JSON schema, from schemars).
    ///
    /// # Examples
    ///
    /// ```
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Sum { a: i64, b: i64 }
    /// let t = cinder::Tool::new::<Sum>("add", "Adds two integers");
    /// assert_eq!(t.parameters()["required"], serde_json::json!(["a", "b"]));
    /// ```
    pub fn new<A: JsonSchema>(name: &str, description: &str) -> Self {
        Self::from_schema(name, description, json_schema_of::<A>())
    }

    /// A tool with a hand-written JSON schema of its arguments (an object schema).
    ///
    /// # Examples
    ///
    /// ```
    /// let t = cinder::Tool::from_schema("now", "The time", serde_json::json!({"type": "object"}));
    /// assert_eq!(t.name(), "now");
    /// ```
    pub fn from_schema(name: &str, description: &str, parameters: Value) -> Self {
        Self {
            name: name.to_string(),
            description: description.to_string(),
            parameters,
        }
    }

    /// The function's name.
    ///
    /// # Examples
    ///
    /// ```
    /// let t = cinder::Tool::from_schema("now", "The time", serde_json::json!({"type": "object"}));
    /// assert_eq!(t.name(), "now");
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The arguments' JSON schema.
    ///
    /// # Examples
    ///
    /// ```
    /// let t = cinder::Tool::from_schema("now", "The time", serde_json::json!({"type": "object"}));
    /// assert_eq!(t.parameters()["type"], "object");
    /// ```
    pub fn parameters(&self) -> &Value {
        &self.parameters
    }

    fn function(&self) -> Function {
        Function {
            name: self.name.clone(),
            parameters: self.parameters.clone(),
            entry: json!({"type": "function", "function": {
                "name": self.name, "description": self.description, "parameters": self.parameters
            }}),
        }
    }
}

/// Which calls the answer may or must make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides (its chat template must have a tool-call syntax).
    Auto,
    /// At least one call, of any tool (a grammar forces it).
    Required,
    /// One call of this tool (a grammar forces it).
    Named(String),
    /// No call: the tools are not shown.
    None,
}

/// One call the model made.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// a fresh id (`call_…`), to answer with [`Message::tool`]
    pub id: String,
    /// the function called
    pub name: String,
    /// its arguments, as JSON text
    pub arguments: String,
}

impl ToolCall {
    /// The arguments as the tool's type.
    ///
    /// # Examples
    ///
    /// ```
    /// #[derive(serde::Deserialize)]
    /// struct Weather { city: String }
    /// let c = cinder::ToolCall { id: "call_0".into(), name: "get_weather".into(),
    ///                            arguments: r#"{"city": "Paris"}"#.into() };
    /// assert_eq!(c.arguments::<Weather>()?.city, "Paris");
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn arguments<A: DeserializeOwned>(&self) -> Result<A> {
        serde_json::from_str(&self.arguments).map_err(|e| Error::Json {
            reason: format!("arguments of {}: {e}", self.name),
            text: self.arguments.clone(),
        })
    }
}

/// A chat answer that may call tools.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolReply {
    /// the text besides the calls (`None` when the answer is only calls)
    pub text: Option<String>,
    /// the calls, in order
    pub calls: Vec<ToolCall>,
    /// the generation underneath (tokens, finish reason, usage)
    pub output: Output,
}

impl ToolReply {
    /// The assistant turn to put back into the conversation before the tools' answers.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(llm: &cinder::Llm, mut chat: Vec<cinder::Message>, tools: &[cinder::Tool]) -> cinder::Result<()> {
    /// let reply = llm.chat_tools(&chat, tools, cinder::ToolChoice::Auto, &cinder::GenerateOptions::greedy(128))?;
    /// chat.push(reply.message());
    /// for call in &reply.calls {
    ///     chat.push(cinder::Message::tool(&call.id, "{\"temperature\": 21}"));
    /// }
    /// # Ok(()) }
    /// ```
    pub fn message(&self) -> Message {
        Message {
            role: Role::Assistant,
            content: self.text.clone().unwrap_or_default(),
            tool_calls: self
                .calls
                .iter()
                .map(|c| {
                    // Templates render the arguments with `tojson`: an object, not its text.
                    let args: Value = serde_json::from_str(&c.arguments)
                        .unwrap_or_else(|_| Value::String(c.arguments.clone()));
                    json!({"id": c.id, "type": "function",
                           "function": {"name": c.name, "arguments": args}})
                })
                .collect(),
            tool_call_id: None,
        }
    }
}

impl Llm {
    /// Answers a chat in which the model may call `tools` (as `choice` allows): the tools are
    /// rendered by the model's chat template (or described in a system message where the template
    /// has no tool syntax and a call is forced), `Required` and `Named` are forced by a grammar,
    /// and the calls are parsed out of the text.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use cinder::{GenerateOptions, Llm, Message, Tool, ToolChoice};
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Weather { city: String }
    ///
    /// let llm = Llm::load("qwen2.5-coder-1.5b")?;
    /// let tools = [Tool::new::<Weather>("get_weather", "The current weather in a city")];
    /// let chat = [Message::user("What's the weather in Paris?")];
    /// let reply = llm.chat_tools(&chat, &tools, ToolChoice::Required, &GenerateOptions::greedy(128))?;
    /// let args: Weather = reply.calls[0].arguments()?;
    /// assert_eq!(args.city, "Paris");
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn chat_tools(
        &self,
        messages: &[Message],
        tools: &[Tool],
        choice: ToolChoice,
        opts: &GenerateOptions,
    ) -> Result<ToolReply> {
        let choice = match choice {
            ToolChoice::Auto => Choice::Auto,
            ToolChoice::Required => Choice::Required,
            ToolChoice::None => Choice::None,
            ToolChoice::Named(n) => {
                if !tools.iter().any(|t| t.name == n) {
                    return Err(Error::InvalidOption(format!(
                        "ToolChoice::Named({n:?}) names no tool among those given"
                    )));
                }
                Choice::Named(n)
            }
        };
        if tools.is_empty() && choice != Choice::None {
            return Err(Error::InvalidOption("no tools given to call".into()));
        }
        let t = Tools {
            functions: tools.iter().map(Tool::function).collect(),
            choice,
            parallel: true,
        };
        let tok = &self.inner.tokenizer;
        let mut msgs: Vec<_> = messages.iter().map(Message::to_chat).collect();
        let shown = t.prepare(tok, &mut msgs).map_err(Error::Unsupported)?;
        let ids = self.template_ids(&msgs, shown.as_deref())?;
        let mut r = opts.request(ids);
        if let Some(c) = t.forced(tok) {
            r.constraint = Some(self.grammars()?.compile(&c)?);
        }
        let output = collect_blocking(self.submit(r)?)?;
        let (text, calls) = if t.parses() {
            let names = t.functions.iter().map(|f| f.name.clone()).collect();
            split(&output.text, names)
        } else {
            (Some(output.text.clone()), Vec::new())
        };
        Ok(ToolReply {
            text,
            calls: calls
                .into_iter()
                .map(|c| ToolCall {
                    id: call_id(),
                    name: c.name,
                    arguments: c.arguments,
                })
                .collect(),
            output,
        })
    }
}
