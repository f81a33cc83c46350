//! Tool calls in the Hermes format (`<tool_call>{"name": …, "arguments": {…}}</tool_call>`, as
//! Qwen2.5's and Hermes' chat templates write them): the functions a request offers and what it
//! asks of them, the grammar that forces a call, and the parser that takes calls back out of the
//! generated text, whole or piece by piece. Shared by the server's APIs and `cinder::Llm`.
//!
//! The parser also reads the whole-answer formats other families write: Llama 3.x's JSON call
//! (`{"name": …, "parameters": {…}}`, bare or after `<|python_tag|>`, several joined by `;`) and
//! Mistral's `[TOOL_CALLS]` list (`[TOOL_CALLS][{"name": …, "arguments": {…}}, …]`). Such an answer
//! is a call only when every call in it names one of the request's functions; otherwise it stays
//! text.

use serde_json::{Value, json};

use crate::constraint::{Constraint, json_layout};
use crate::tokenizer::{ChatMessage, Tokenizer, template_has_tool_calls};

/// The tag that opens a call in the Hermes format.
pub const OPEN: &str = "<tool_call>";
/// The tag that closes it.
pub const CLOSE: &str = "</tool_call>";
/// The markers that open a whole-answer call: Llama 3.x's and Mistral's.
const ANSWER_MARKERS: &[&str] = &["<|python_tag|>", "[TOOL_CALLS]"];

/// How a model family writes its calls, as its chat template shows them (the template renders
/// past calls the way the model was trained to write them, so the same syntax is forced and
/// parsed back):
/// - [`ToolFormat::Hermes`]: `<tool_call>{"name", "arguments"}</tool_call>` (Qwen2.5, Qwen3,
///   QwQ, Hermes);
/// - [`ToolFormat::Llama3`]: a bare `{"name", "parameters"}` object (Llama 3.1–3.3 JSON tool
///   calling);
/// - [`ToolFormat::Mistral`]: `[TOOL_CALLS][{"name", "arguments"}, …]` (Mistral's templates up to
///   tokenizer v7: Mistral-Nemo, Mistral-Small 3.1);
/// - [`ToolFormat::MistralArgs`]: `[TOOL_CALLS]name[ARGS]{…}` per call (tokenizer v11 and
///   later: Devstral, Mistral-Small 3.2, Magistral).
///
/// A template with none of these has no tool syntax: calls can then only be forced, shown to the
/// model by [`Tools::system_prompt`] in the Hermes format.
///
/// ```
/// use cinder_runtime::tools::ToolFormat;
/// let t = "{% for m in messages %}{% if m.tool_calls %}[TOOL_CALLS][...]{% endif %}{% endfor %}{{ tools }}";
/// assert_eq!(ToolFormat::of_template(t), Some(ToolFormat::Mistral));
/// assert_eq!(ToolFormat::of_template("{{ messages }}"), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFormat {
    /// Hermes tags around `{"name", "arguments"}`
    Hermes,
    /// Llama 3.x: `{"name", "parameters"}`
    Llama3,
    /// Mistral: `[TOOL_CALLS]` and a list of `{"name", "arguments"}`
    Mistral,
    /// Mistral v11: `[TOOL_CALLS]name[ARGS]{arguments}` per call
    MistralArgs,
}

impl ToolFormat {
    /// The format of a chat template's source; `None` when it renders no tools.
    pub fn of_template(t: &str) -> Option<Self> {
        if !t.contains("tools") {
            return None;
        }
        if t.contains(OPEN) {
            Some(Self::Hermes)
        } else if t.contains("[TOOL_CALLS]") && t.contains("[ARGS]") {
            Some(Self::MistralArgs)
        } else if t.contains("[TOOL_CALLS]") {
            Some(Self::Mistral)
        } else if t.contains("<|start_header_id|>") && t.contains("\"parameters\"") {
            Some(Self::Llama3)
        } else {
            None
        }
    }

    /// The format of `tok`'s chat template.
    pub fn of(tok: &Tokenizer) -> Option<Self> {
        Self::of_template(tok.chat_template.as_deref()?)
    }

    /// The key of a call's arguments.
    fn arguments_key(self) -> &'static str {
        match self {
            Self::Llama3 => "parameters",
            Self::Hermes | Self::Mistral | Self::MistralArgs => "arguments",
        }
    }
}

/// One function the model may call.
#[derive(Debug, Clone)]
pub struct Function {
    /// its name
    pub name: String,
    /// the JSON schema of its arguments (an object schema)
    pub parameters: Value,
    /// the whole `{"type": "function", "function": {...}}` entry, as the template renders it
    pub entry: Value,
}

/// What a request's `tool_choice` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// no calls (the tools are not shown to the model)
    None,
    /// the model decides
    Auto,
    /// at least one call, of any tool
    Required,
    /// one call of this function
    Named(String),
}

/// The tools of a request, checked.
#[derive(Debug, Clone)]
pub struct Tools {
    /// the functions
    pub functions: Vec<Function>,
    /// what `tool_choice` asks for
    pub choice: Choice,
    /// whether several calls may come in one answer
    pub parallel: bool,
}

impl Tools {
    /// The tool entries the template renders (none for `tool_choice: "none"`).
    pub fn rendered(&self) -> Option<Vec<Value>> {
        (self.choice != Choice::None)
            .then(|| self.functions.iter().map(|f| f.entry.clone()).collect())
    }

    /// Whether the answer is parsed for calls.
    pub fn parses(&self) -> bool {
        self.choice != Choice::None
    }

    /// The grammar that forces a call (`required` or a named function) in the model's
    /// [`ToolFormat`] (Hermes for templates without one): `{"name": …, "arguments": …}` (Llama:
    /// `"parameters"`) valid under the function's parameters; several calls when parallel calls are
    /// allowed, any function may be called and the format has a way to write several (Llama 3.x's
    /// templates take one). `None` for `auto` and `none`.
    pub fn forced(&self, tok: &Tokenizer) -> Option<Constraint> {
        let format = ToolFormat::of(tok).unwrap_or(ToolFormat::Hermes);
        let args = format.arguments_key();
        let targets: Vec<&Function> = match &self.choice {
            Choice::Required => self.functions.iter().collect(),
            Choice::Named(n) => self.functions.iter().filter(|f| &f.name == n).collect(),
            Choice::None | Choice::Auto => return None,
        };
        // A tag that is a control token of the vocabulary is named as one (`<tool_call>`);
        // otherwise it is text.
        let tag = |t: &str| match tok.token_id(t) {
            Some(id) if tok.is_control(id) => t.to_string(),
            _ => format!("{t:?}"),
        };
        let many = self.parallel && self.choice == Choice::Required;
        let with_layout = |mut schema: Value| {
            if let (Some(o), Ok(layout)) = (schema.as_object_mut(), json_layout()) {
                o.insert("x-guidance".into(), layout);
            }
            schema
        };
        if format == ToolFormat::MistralArgs {
            // `[TOOL_CALLS]name[ARGS]{…}`: one rule per function, its arguments under its schema.
            let mut rules = String::new();
            let mut alts = Vec::with_capacity(targets.len());
            for (i, f) in targets.iter().enumerate() {
                let params = with_layout(f.parameters.clone());
                rules.push_str(&format!(
                    "c{i}: {} {:?} {} %json {params}\n",
                    tag("[TOOL_CALLS]"),
                    f.name,
                    tag("[ARGS]")
                ));
                alts.push(format!("c{i}"));
            }
            let start = if many { "start: call+" } else { "start: call" };
            return Some(Constraint::Lark(format!(
                "{start}\ncall: {}\n{rules}",
                alts.join(" | ")
            )));
        }
        let calls: Vec<Value> = targets
            .iter()
            .map(|f| {
                let mut props = json!({"name": {"const": f.name}, args: f.parameters});
                // Mistral's templates write each call's 9-character id after its arguments.
                if format == ToolFormat::Mistral {
                    props["id"] = json!({"type": "string", "pattern": "^[a-zA-Z0-9]{9}$"});
                }
                json!({
                    "type": "object",
                    "properties": props,
                    "required": ["name", args],
                    "additionalProperties": false
                })
            })
            .collect();
        let schema = with_layout(if calls.len() == 1 {
            calls[0].clone()
        } else {
            json!({"anyOf": calls})
        });
        let (start, call) = match format {
            ToolFormat::Hermes => (
                if many {
                    "start: call (\"\\n\" call)*".to_string()
                } else {
                    "start: call".to_string()
                },
                format!("{} \"\\n\" json_call \"\\n\" {}", tag(OPEN), tag(CLOSE)),
            ),
            ToolFormat::Llama3 => ("start: call".to_string(), "json_call".to_string()),
            ToolFormat::Mistral | ToolFormat::MistralArgs => (
                format!(
                    "start: {} \"[\" call {}\"]\"",
                    tag("[TOOL_CALLS]"),
                    if many { "(\", \" call)* " } else { "" }
                ),
                "json_call".to_string(),
            ),
        };
        Some(Constraint::Lark(format!(
            "{start}\ncall: {call}\njson_call: %json {schema}\n"
        )))
    }
}

impl Tools {
    /// For a chat template without tool syntax: a system text that shows the functions and the
    /// call format (the one [`Parser`] reads).
    pub fn system_prompt(&self) -> String {
        let mut s = String::from("You may call functions to answer. Their signatures, as JSON:\n");
        for f in &self.functions {
            s.push_str(&f.entry.to_string());
            s.push('\n');
        }
        s.push_str(
            "To call one, write <tool_call>\n{\"name\": <function-name>, \"arguments\": \
             <args-json-object>}\n</tool_call>",
        );
        s
    }

    /// Readies `messages` for `tok`'s chat template and returns the tool entries to render with
    /// them: the template's own tool syntax when it has one; otherwise, when a grammar forces the
    /// call, [`Tools::system_prompt`] joined to (or put before) the system message. `Err` names why
    /// the model cannot choose a call itself (`auto` without a tool syntax in its template).
    pub fn prepare(
        &self,
        tok: &Tokenizer,
        messages: &mut Vec<ChatMessage>,
    ) -> Result<Option<Vec<Value>>, String> {
        let native = template_has_tool_calls(tok);
        if self.choice == Choice::Auto && !native {
            return Err(
                "this model's chat template has no tool-call syntax, so it cannot choose \
                        to call a function; require a call or name the function (a grammar then \
                        forces the call)"
                    .into(),
            );
        }
        let rendered = self.rendered();
        if rendered.is_some() && !native {
            match messages.first_mut().filter(|m| m.role == "system") {
                Some(sys) => sys.content = format!("{}\n\n{}", sys.content, self.system_prompt()),
                None => messages.insert(0, ChatMessage::new("system", self.system_prompt())),
            }
            return Ok(None);
        }
        Ok(rendered)
    }
}

/// A whole answer split into its content (`None` when only calls) and its calls.
pub fn split(text: &str, names: Vec<String>) -> (Option<String>, Vec<Call>) {
    let mut p = Parser::new(names);
    let mut pieces = p.feed(text);
    pieces.extend(p.finish());
    let mut content = String::new();
    let mut calls = Vec::new();
    for piece in pieces {
        match piece {
            Piece::Content(c) => content.push_str(&c),
            Piece::Call(c) => calls.push(c),
        }
    }
    let content = if calls.is_empty() {
        Some(content)
    } else {
        Some(content.trim().to_string()).filter(|c| !c.is_empty())
    };
    (content, calls)
}

/// A parsed call.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// the function
    pub name: String,
    /// its arguments as a JSON string (OpenAI's `function.arguments`)
    pub arguments: String,
}

/// What the parser took from the text so far.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    /// plain text (the answer's `content`)
    Content(String),
    /// a complete call
    Call(Call),
}

/// Splits streamed text into content and calls. Text that may be the start of `<tool_call>` is
/// held back until it is known; a block that does not parse as a call stays content. An answer
/// that is nothing but calls (one object `{"name": …, "arguments": …}` bare or in a ```json fence,
/// as small models write them instead of the tags; a list of them; Llama 3.x's and Mistral's
/// formats, see the module docs) is calls when each names one of `names`: such an answer is held
/// back whole until the end.
#[derive(Debug, Default)]
pub struct Parser {
    buf: String,
    /// the functions a bare call object may name
    names: Vec<String>,
    /// nothing but whitespace has been emitted as content yet
    sent: bool,
}

fn call_of(body: &str) -> Option<Call> {
    call_of_value(&serde_json::from_str(body.trim()).ok()?)
}

/// A call object: `name`, and its arguments as `arguments` (Hermes, Mistral, OpenAI) or
/// `parameters` (Llama 3.x), an object or a JSON string.
fn call_of_value(v: &Value) -> Option<Call> {
    let name = v.get("name")?.as_str()?.to_string();
    let args = match v.get("arguments").or_else(|| v.get("parameters")) {
        Some(Value::String(s)) => s.clone(),
        Some(a @ Value::Object(_)) => a.to_string(),
        None | Some(Value::Null) => "{}".into(),
        Some(_) => return None,
    };
    Some(Call {
        name,
        arguments: args,
    })
}

/// The calls in `text` when all of it is calls naming functions of `names`: one call object
/// (bare or in a ```json fence), a list of them, several joined by `;`, after a Llama 3.x or
/// Mistral marker or none.
fn bare_calls(text: &str, names: &[String]) -> Option<Vec<Call>> {
    let mut t = text.trim();
    // Mistral v11: `[TOOL_CALLS]name[ARGS]{…}`, once per call
    if t.starts_with("[TOOL_CALLS]") && t.contains("[ARGS]") {
        let calls: Vec<Call> = t
            .split("[TOOL_CALLS]")
            .filter(|p| !p.trim().is_empty())
            .map(|p| {
                let (name, args) = p.split_once("[ARGS]")?;
                let args: Value = serde_json::from_str(args.trim()).ok()?;
                args.is_object().then(|| Call {
                    name: name.trim().to_string(),
                    arguments: args.to_string(),
                })
            })
            .collect::<Option<Vec<_>>>()?;
        return (!calls.is_empty() && calls.iter().all(|c| names.contains(&c.name)))
            .then_some(calls);
    }
    if let Some(rest) = ANSWER_MARKERS.iter().find_map(|m| t.strip_prefix(m)) {
        t = rest.trim();
    }
    let t = t
        .strip_prefix("```json")
        .or_else(|| t.strip_prefix("```"))
        .and_then(|r| r.strip_suffix("```"))
        .unwrap_or(t)
        .trim();
    let values: Vec<Value> = match serde_json::from_str::<Value>(t) {
        Ok(Value::Array(items)) => items,
        Ok(v) => vec![v],
        // Llama 3.x may join calls with `;`
        Err(_) => t
            .split(';')
            .map(|part| serde_json::from_str::<Value>(part.trim()).ok())
            .collect::<Option<Vec<_>>>()?,
    };
    let calls: Vec<Call> = values
        .iter()
        .map(call_of_value)
        .collect::<Option<Vec<_>>>()?;
    (!calls.is_empty() && calls.iter().all(|c| names.contains(&c.name))).then_some(calls)
}

impl Parser {
    /// A parser that also takes a bare call object naming one of `names`.
    pub fn new(names: Vec<String>) -> Self {
        Self {
            names,
            ..Self::default()
        }
    }

    /// Adds `text`; returns what is now certain.
    pub fn feed(&mut self, text: &str) -> Vec<Piece> {
        self.buf.push_str(text);
        if !self.sent && !self.names.is_empty() {
            // An answer that opens like a call object, a list of them or a family's call marker
            // waits for the end.
            let t = self.buf.trim_start();
            let opens = |m: &str| m.starts_with(t) || t.starts_with(m);
            if t.is_empty()
                || t.starts_with('{')
                || t.starts_with('[')
                || opens("```")
                || ANSWER_MARKERS.iter().any(|m| opens(m))
            {
                return Vec::new();
            }
        }
        let out = self.scan();
        self.sent |= out
            .iter()
            .any(|p| !matches!(p, Piece::Content(c) if c.trim().is_empty()));
        out
    }

    fn scan(&mut self) -> Vec<Piece> {
        let mut out = Vec::new();
        loop {
            match self.buf.find(OPEN) {
                Some(i) => {
                    let Some(j) = self.buf[i..].find(CLOSE) else {
                        if i > 0 {
                            out.push(Piece::Content(self.buf[..i].to_string()));
                            self.buf.drain(..i);
                        }
                        return out;
                    };
                    let body = &self.buf[i + OPEN.len()..i + j];
                    // A call of a function the request does not offer stays text.
                    let known = |c: &Call| self.names.is_empty() || self.names.contains(&c.name);
                    let piece = match call_of(body).filter(known) {
                        Some(c) => Piece::Call(c),
                        None => Piece::Content(self.buf[i..i + j + CLOSE.len()].to_string()),
                    };
                    if i > 0 {
                        out.push(Piece::Content(self.buf[..i].to_string()));
                    }
                    out.push(piece);
                    self.buf.drain(..i + j + CLOSE.len());
                }
                None => {
                    // Keep a tail that could still become `<tool_call>`.
                    let keep = (1..OPEN.len())
                        .rev()
                        .find(|&n| self.buf.ends_with(&OPEN[..n]))
                        .unwrap_or(0);
                    let cut = self.buf.len() - keep;
                    if cut > 0 {
                        out.push(Piece::Content(self.buf[..cut].to_string()));
                        self.buf.drain(..cut);
                    }
                    return out;
                }
            }
        }
    }

    /// The end of the text: a held-back bare call object, then whatever else is held back as
    /// content (tagged calls in it parsed).
    pub fn finish(&mut self) -> Vec<Piece> {
        if !self.sent
            && let Some(calls) = bare_calls(&self.buf, &self.names)
        {
            self.buf.clear();
            return calls.into_iter().map(Piece::Call).collect();
        }
        let mut out = self.scan();
        let rest = std::mem::take(&mut self.buf);
        if !rest.is_empty() {
            out.push(Piece::Content(rest));
        }
        out
    }
}

/// A fresh call id (`call_` and 24 hex digits).
pub fn call_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("call_{:016x}{:08x}", t, n as u32)
}

/// OpenAI's `tool_calls` entry for `c`.
pub fn call_json(c: &Call, id: &str) -> Value {
    json!({"id": id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed_all(parts: &[&str]) -> Vec<Piece> {
        let mut p = Parser::default();
        let mut out: Vec<Piece> = parts.iter().flat_map(|t| p.feed(t)).collect();
        out.extend(p.finish());
        out
    }

    #[test]
    fn a_bare_call_object_naming_a_tool_is_a_call() {
        let names = vec!["get_weather".to_string()];
        let text =
            "```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n```";
        let (content, calls) = split(text, names.clone());
        assert_eq!(content, None);
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].arguments, "{\"city\":\"Paris\"}");
        let (content, calls) = split("{\"name\": \"other\", \"arguments\": {}}", names.clone());
        assert!(calls.is_empty());
        assert_eq!(
            content.as_deref(),
            Some("{\"name\": \"other\", \"arguments\": {}}")
        );
        let mut p = Parser::new(names);
        assert_eq!(p.feed("Sure"), vec![Piece::Content("Sure".into())]);
        assert_eq!(p.feed(" {"), vec![Piece::Content(" {".into())]);
    }

    #[test]
    fn llama3_and_mistral_answers_are_calls() {
        let names = vec!["get_weather".to_string(), "get_time".to_string()];
        let cases = [
            // Llama 3.1/3.2 JSON tool calling: `parameters`, bare or after the python tag
            "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
            "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
            // Mistral: a list after [TOOL_CALLS]
            "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]",
        ];
        for text in cases {
            // whole, and fed in pieces at every split point
            let (content, calls) = split(text, names.clone());
            assert_eq!(content, None, "{text}");
            assert_eq!(calls.len(), 1, "{text}");
            assert_eq!(calls[0].name, "get_weather");
            assert_eq!(calls[0].arguments, "{\"city\":\"Paris\"}");
            for cut in (0..text.len()).filter(|&c| text.is_char_boundary(c)) {
                let mut p = Parser::new(names.clone());
                let mut out = p.feed(&text[..cut]);
                out.extend(p.feed(&text[cut..]));
                out.extend(p.finish());
                assert_eq!(out, vec![Piece::Call(calls[0].clone())], "{text} cut {cut}");
            }
        }
        // Several calls: a Mistral list, Llama's `;`.
        for text in [
            "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}, {\"name\": \"get_time\", \"arguments\": {\"city\": \"Oslo\"}}]",
            "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}; {\"name\": \"get_time\", \"parameters\": {\"city\": \"Oslo\"}}",
            // Mistral v11: `[TOOL_CALLS]name[ARGS]{…}` per call
            "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Oslo\"}[TOOL_CALLS]get_time[ARGS]{\"city\": \"Oslo\"}",
        ] {
            let (_, calls) = split(text, names.clone());
            let got: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
            assert_eq!(got, ["get_weather", "get_time"], "{text}");
        }
        // An unknown function, broken JSON or text around a marker stay text.
        for text in [
            "[TOOL_CALLS][{\"name\": \"nope\", \"arguments\": {}}]",
            "[TOOL_CALLS]nope[ARGS]{}",
            "[TOOL_CALLS]get_weather[ARGS]{\"city\": ",
            "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\"",
            "[1, 2, 3]",
        ] {
            let (content, calls) = split(text, names.clone());
            assert!(calls.is_empty(), "{text}");
            assert_eq!(content.as_deref(), Some(text));
        }
        // Without functions there is nothing to call: the marker is text.
        let (content, calls) = split(cases[1], Vec::new());
        assert!(calls.is_empty());
        assert_eq!(content.as_deref(), Some(cases[1]));
    }

    #[test]
    fn calls_are_parsed_across_pieces_and_text_stays_text() {
        let text = "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
        // Every split point gives the same pieces, once merged.
        for cut in 0..text.len() {
            if !text.is_char_boundary(cut) {
                continue;
            }
            let out = feed_all(&[&text[..cut], &text[cut..]]);
            let content: String = out
                .iter()
                .filter_map(|p| match p {
                    Piece::Content(c) => Some(c.as_str()),
                    _ => None,
                })
                .collect();
            let calls: Vec<&Call> = out
                .iter()
                .filter_map(|p| match p {
                    Piece::Call(c) => Some(c),
                    _ => None,
                })
                .collect();
            assert_eq!(content, "Let me look.\n", "cut {cut}");
            assert_eq!(calls.len(), 1);
            assert_eq!(calls[0].name, "get_weather");
            assert_eq!(calls[0].arguments, "{\"city\":\"Paris\"}");
        }
        let out = feed_all(&["a <tool_call> not json </tool_call> b <tool"]);
        assert_eq!(
            out,
            vec![
                Piece::Content("a ".into()),
                Piece::Content("<tool_call> not json </tool_call>".into()),
                Piece::Content(" b ".into()),
                Piece::Content("<tool".into()),
            ]
        );
    }
}
