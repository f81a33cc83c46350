//! Reasoning text: templates of thinking models (Qwen3, QwQ, DeepSeek-R1 and their kin) have the
//! model write `<think>…</think>` before its answer, or open the `<think>` themselves at the end
//! of the prompt. [`of_prompt`] tells from a rendered prompt whether and how an answer is marked;
//! [`Splitter`] takes the reasoning out of the streamed answer text, piece by piece, so the APIs
//! return it apart (`reasoning_content`, `thinking` blocks, reasoning items).

use crate::tokenizer::Tokenizer;

/// The tag that opens reasoning.
pub const OPEN: &str = "<think>";
/// The tag that closes it.
pub const CLOSE: &str = "</think>";

/// How one answer's reasoning is marked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reasoning {
    /// the prompt ends inside an open `<think>`: the answer starts with reasoning
    pub opened_by_prompt: bool,
}

/// Whether answers to `prompt` (rendered by `tok`'s chat template) may carry reasoning: the
/// template writes the thinking tags. `opened_by_prompt` when the prompt ends inside one.
///
/// ```
/// use cinder_runtime::reasoning::{Reasoning, Splitter, Part};
/// let mut s = Splitter::new(Reasoning { opened_by_prompt: false });
/// let mut parts = s.feed("<think>\n2 and 2 make 4.\n</think>\n\nFour.");
/// parts.extend(s.finish());
/// assert_eq!(parts, [Part::Reasoning("2 and 2 make 4.".into()), Part::Answer("Four.".into())]);
/// ```
pub fn of_prompt(tok: &Tokenizer, prompt: &str) -> Option<Reasoning> {
    let t = tok.chat_template.as_deref()?;
    if !(t.contains(OPEN) && t.contains(CLOSE)) {
        return None;
    }
    let tail = prompt.trim_end();
    Some(Reasoning {
        opened_by_prompt: tail.ends_with(OPEN),
    })
}

/// A piece of the answer text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// reasoning (between the tags)
    Reasoning(String),
    /// the answer proper
    Answer(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// nothing but whitespace yet: `<think>` may still open
    Start,
    /// right after `<think>`: whitespace before the reasoning is dropped
    Opened,
    /// inside the tags
    Inside,
    /// right after `</think>`: whitespace before the answer is dropped
    After,
    /// the answer
    Answer,
}

/// Splits streamed answer text into reasoning and answer. Text that may be the start of a tag is
/// held back until it is known. Only an answer that opens with `<think>` (after whitespace), or a
/// prompt that opened it, has reasoning; an unclosed block at the end is all reasoning (the
/// answer ran out of tokens while thinking).
#[derive(Debug)]
pub struct Splitter {
    state: State,
    buf: String,
}

impl Splitter {
    /// A splitter for answers marked as `r` says.
    pub fn new(r: Reasoning) -> Self {
        Self {
            state: if r.opened_by_prompt {
                State::Opened
            } else {
                State::Start
            },
            buf: String::new(),
        }
    }

    /// Adds `text`; returns what is now certain.
    pub fn feed(&mut self, text: &str) -> Vec<Part> {
        self.buf.push_str(text);
        let mut out = Vec::new();
        loop {
            match self.state {
                State::Start => {
                    let t = self.buf.trim_start();
                    if let Some(rest) = t.strip_prefix(OPEN) {
                        self.buf = rest.to_string();
                        self.state = State::Opened;
                    } else if t.is_empty() || OPEN.starts_with(t) {
                        return out;
                    } else {
                        self.state = State::Answer;
                    }
                }
                State::Opened | State::After => {
                    let t = self.buf.trim_start();
                    if t.is_empty() {
                        self.buf.clear();
                        return out;
                    }
                    self.buf = t.to_string();
                    self.state = if self.state == State::Opened {
                        State::Inside
                    } else {
                        State::Answer
                    };
                }
                State::Inside => match self.buf.find(CLOSE) {
                    Some(i) => {
                        push(
                            &mut out,
                            Part::Reasoning(self.buf[..i].trim_end().to_string()),
                        );
                        self.buf.drain(..i + CLOSE.len());
                        self.state = State::After;
                    }
                    None => {
                        // Hold back what may start `</think>` and the whitespace before it.
                        let keep = (1..CLOSE.len())
                            .rev()
                            .find(|&n| self.buf.ends_with(&CLOSE[..n]))
                            .unwrap_or(0);
                        let cut = self.buf[..self.buf.len() - keep].trim_end().len();
                        push(&mut out, Part::Reasoning(self.buf[..cut].to_string()));
                        self.buf.drain(..cut);
                        return out;
                    }
                },
                State::Answer => {
                    push(&mut out, Part::Answer(std::mem::take(&mut self.buf)));
                    return out;
                }
            }
        }
    }

    /// The end of the text: whatever is held back.
    pub fn finish(&mut self) -> Vec<Part> {
        let rest = std::mem::take(&mut self.buf);
        let mut out = Vec::new();
        match self.state {
            State::Inside => push(&mut out, Part::Reasoning(rest.trim_end().to_string())),
            State::Start | State::Answer => push(&mut out, Part::Answer(rest)),
            State::Opened | State::After => {}
        }
        out
    }
}

/// A whole answer split into its reasoning and its answer text.
pub fn split_all(r: Reasoning, text: &str) -> (String, String) {
    split_pieces(r, &[text])
}

/// [`split_all`] over text that arrives in `pieces`.
fn split_pieces(r: Reasoning, pieces: &[&str]) -> (String, String) {
    let mut s = Splitter::new(r);
    let mut parts: Vec<Part> = pieces.iter().flat_map(|p| s.feed(p)).collect();
    parts.extend(s.finish());
    let (mut think, mut answer) = (String::new(), String::new());
    for p in parts {
        match p {
            Part::Reasoning(t) => think.push_str(&t),
            Part::Answer(t) => answer.push_str(&t),
        }
    }
    (think, answer)
}

/// Appends `p` unless it is empty text.
fn push(out: &mut Vec<Part>, p: Part) {
    match &p {
        Part::Reasoning(t) | Part::Answer(t) if t.is_empty() => {}
        _ => out.push(p),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(r: bool, pieces: &[&str]) -> (String, String) {
        split_pieces(
            Reasoning {
                opened_by_prompt: r,
            },
            pieces,
        )
    }

    #[test]
    fn tags_split_across_pieces() {
        let text = "<think>\nLet me add.\n</think>\n\nIt is 4.";
        for cut in 0..text.len() {
            let (a, b) = text.split_at(cut);
            let (think, answer) = split(false, &[a, b]);
            assert_eq!(think, "Let me add.", "cut {cut}");
            assert_eq!(answer, "It is 4.", "cut {cut}");
        }
    }

    #[test]
    fn prompt_opened_unclosed_and_absent() {
        assert_eq!(
            split(true, &["Hmm.</think>Yes."]),
            ("Hmm.".into(), "Yes.".into())
        );
        // ran out of tokens while thinking
        assert_eq!(split(false, &["<think>still going"]).1, "");
        // no tags: all answer, even one that mentions the tag later
        assert_eq!(
            split(false, &["Plain ", "answer <think>"]).1,
            "Plain answer <think>"
        );
        // a '<' that turns out not to be the tag
        assert_eq!(split(false, &["<", "b>bold</b>"]).1, "<b>bold</b>");
    }
}
