//! Function calling on the chat API: `tools`, `tool_choice` and `parallel_tool_calls` checked
//! here (a bad one is a 400 naming the parameter); rendering, the forcing grammar and the parser of
//! the model's calls are the runtime's ([`cinder_runtime::tools`]).

use serde_json::{Value, json};

use crate::error::ApiError;
pub use cinder_runtime::tools::*;

fn bad(m: impl Into<String>, param: &str) -> ApiError {
    ApiError::bad_request(m, param)
}

/// Checks `tools`, `tool_choice` and `parallel_tool_calls`; `None` when no tools were given (a
/// `tool_choice` other than `none` without tools is a 400).
pub fn parse(
    tools: Option<&Value>,
    choice: Option<&Value>,
    parallel: Option<bool>,
) -> Result<Option<Tools>, ApiError> {
    let list = match tools {
        None | Some(Value::Null) => {
            return match choice {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) if s == "none" => Ok(None),
                Some(_) => Err(bad("tool_choice needs tools", "tool_choice")),
            };
        }
        Some(Value::Array(a)) => a,
        Some(_) => return Err(bad("tools must be a list", "tools")),
    };
    if list.is_empty() || list.len() > 128 {
        return Err(bad("tools must hold 1 to 128 functions", "tools"));
    }
    let mut functions: Vec<Function> = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        if t.get("type").and_then(Value::as_str) != Some("function") {
            return Err(bad(
                format!("tools[{i}].type must be \"function\""),
                "tools",
            ));
        }
        let Some(f) = t.get("function").filter(|f| f.is_object()) else {
            return Err(bad(
                format!("tools[{i}].function must be an object"),
                "tools",
            ));
        };
        let name = f.get("name").and_then(Value::as_str).unwrap_or("");
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            return Err(bad(
                format!(
                    "tools[{i}].function.name must be 1 to 64 letters, digits, _ or - (got {name:?})"
                ),
                "tools",
            ));
        }
        if functions.iter().any(|g| g.name == name) {
            return Err(bad(
                format!("tools[{i}]: {name:?} is defined twice"),
                "tools",
            ));
        }
        let parameters = match f.get("parameters") {
            None | Some(Value::Null) => json!({"type": "object", "properties": {}}),
            Some(p @ Value::Object(_)) => p.clone(),
            Some(_) => {
                return Err(bad(
                    format!("tools[{i}].function.parameters must be a JSON schema object"),
                    "tools",
                ));
            }
        };
        functions.push(Function {
            name: name.to_string(),
            parameters,
            entry: t.clone(),
        });
    }
    let choice = match choice {
        None | Some(Value::Null) => Choice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "none" => Choice::None,
            "auto" => Choice::Auto,
            "required" => Choice::Required,
            other => {
                return Err(bad(
                    format!("tool_choice {other:?} is not none, auto, required or a function"),
                    "tool_choice",
                ));
            }
        },
        Some(v) => {
            let name = v
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .filter(|_| v.get("type").and_then(Value::as_str) == Some("function"))
                .ok_or_else(|| {
                    bad(
                        "tool_choice must be a string or {\"type\": \"function\", \"function\": {\"name\"}}",
                        "tool_choice",
                    )
                })?;
            if !functions.iter().any(|f| f.name == name) {
                return Err(bad(
                    format!("tool_choice names {name:?}, which is not among the tools"),
                    "tool_choice",
                ));
            }
            Choice::Named(name.to_string())
        }
    };
    Ok(Some(Tools {
        functions,
        choice,
        parallel: parallel.unwrap_or(true),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_tools_and_choices_are_refused() {
        let f = |name: &str| json!({"type": "function", "function": {"name": name}});
        assert!(parse(Some(&json!([f("a b")])), None, None).is_err());
        assert!(parse(Some(&json!([f("a"), f("a")])), None, None).is_err());
        assert!(parse(Some(&json!([{"type": "code"}])), None, None).is_err());
        assert!(parse(None, Some(&json!("required")), None).is_err());
        let named = json!({"type": "function", "function": {"name": "b"}});
        assert!(parse(Some(&json!([f("a")])), Some(&named), None).is_err());
        let t = parse(Some(&json!([f("a"), f("b")])), Some(&named), Some(false))
            .expect("valid")
            .expect("tools");
        assert_eq!(t.choice, Choice::Named("b".into()));
        assert!(!t.parallel);
    }
}
