//! Constrained decoding: JSON schemas, regular expressions and Lark grammars, on llguidance.
//!
//! [`Grammars`] is built once per model from its tokenizer: every token's bytes go into a
//! `toktrie` once, and each request's grammar compiles against it into a [`TokenMatcher`] that
//! lives with the sequence in the engine. A step samples as usual and only then asks the matcher
//! whether the token may follow ([`TokenMatcher::check`]); only when it may not is the full mask
//! over the vocabulary computed ([`TokenMatcher::mask_logits`]) and the token drawn again from the
//! allowed ones, the fast path llama.cpp and mistral.rs take. Most steps of a JSON answer never
//! compute a mask.

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use llguidance::{JsonCompileOptions, Matcher, ParserFactory};
use serde_json::Value;

use crate::error::{Result, RuntimeError};
use crate::tokenizer::Tokenizer;

/// What the generated text must match.
#[derive(Debug, Clone, PartialEq)]
pub enum Constraint {
    /// Any JSON object (OpenAI's `{"type": "json_object"}`).
    JsonObject,
    /// A JSON value valid under this JSON schema.
    JsonSchema(Value),
    /// Text matching this regular expression (Rust `regex` syntax), whole.
    Regex(String),
    /// Text derived from this Lark grammar (llguidance's dialect; `start` is the top rule).
    Lark(String),
}

impl Constraint {
    /// The constraint's kind, as error messages name it.
    pub fn kind(&self) -> &'static str {
        match self {
            Constraint::JsonObject => "json_object",
            Constraint::JsonSchema(_) => "json_schema",
            Constraint::Regex(_) => "regex",
            Constraint::Lark(_) => "grammar",
        }
    }

    fn grammar(&self) -> Result<TopLevelGrammar> {
        let json = |mut schema: Value| -> Result<TopLevelGrammar> {
            let Some(obj) = schema.as_object_mut() else {
                return Err(RuntimeError::Constraint(
                    "json_schema: the schema must be a JSON object".into(),
                ));
            };
            // One space after `,` and `:` and no other whitespace (Python's json.dumps layout):
            // with free whitespace a small model can spend its whole budget on newlines. A schema
            // that carries its own `x-guidance` options keeps them.
            if !obj.contains_key("x-guidance") {
                obj.insert("x-guidance".into(), json_layout()?);
            }
            Ok(TopLevelGrammar::from_json_schema(schema))
        };
        match self {
            Constraint::JsonObject => json(serde_json::json!({"type": "object"})),
            Constraint::JsonSchema(s) => json(s.clone()),
            Constraint::Regex(r) => {
                // llguidance takes the pattern apart itself; check it with the regex syntax
                // first so a bad one is named as such.
                regex_syntax::parse(r)
                    .map_err(|e| RuntimeError::Constraint(format!("regex: {e}")))?;
                Ok(TopLevelGrammar::from_regex(r))
            }
            Constraint::Lark(g) => {
                if g.trim().is_empty() {
                    return Err(RuntimeError::Constraint("grammar: empty grammar".into()));
                }
                Ok(TopLevelGrammar::from_lark(g.clone()))
            }
        }
    }
}

/// The JSON layout Cinder's grammars write, as llguidance's `x-guidance` options: one space after
/// `,` and `:`, no other whitespace.
pub fn json_layout() -> Result<Value> {
    let opts = JsonCompileOptions {
        item_separator: ", ".into(),
        key_separator: ": ".into(),
        whitespace_flexible: false,
        ..JsonCompileOptions::default()
    };
    serde_json::to_value(&opts).map_err(|e| RuntimeError::Constraint(format!("json_schema: {e}")))
}

/// The tokenizer as llguidance sees it: every token's bytes in a trie. Control tokens are marked
/// special (a leading 0xFF), so a grammar can name them (`<|im_end|>`) but text never matches them.
struct Env {
    trie: TokTrie,
}

impl TokenizerEnv for Env {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.trie.greedy_tokenize(s)
    }

    /// Greedy trie tokenization is not the model's own: llguidance then never forces tokens from
    /// it, it only checks and masks the tokens the model picks.
    fn tokenize_is_canonical(&self) -> bool {
        false
    }
}

/// The grammar compiler of one model's vocabulary (built once, shared by every request).
pub struct Grammars {
    factory: ParserFactory,
    /// Tokens that end generation (the EOS the grammar allows stands for all of them).
    eog: Vec<u32>,
    /// The model's vocabulary size (the logits' width; may exceed the tokenizer's).
    vocab: usize,
}

impl std::fmt::Debug for Grammars {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grammars")
            .field("vocab", &self.vocab)
            .finish_non_exhaustive()
    }
}

impl Grammars {
    /// Builds the token trie of `tok` for a model whose logits have `model_vocab` entries.
    pub fn new(tok: &Tokenizer, model_vocab: usize) -> Result<Self> {
        let n = model_vocab.max(tok.vocab_size);
        let eos = tok
            .eos_id
            .or_else(|| tok.eot_ids.first().copied())
            .ok_or_else(|| {
                RuntimeError::Constraint(
                    "the tokenizer has no end-of-generation token to end a grammar with".into(),
                )
            })?;
        let mut words: Vec<Vec<u8>> = Vec::with_capacity(n);
        for id in 0..n as u32 {
            let w = if (id as usize) >= tok.vocab_size {
                Vec::new() // padding rows of the output head: never allowed
            } else if tok.is_control(id) || tok.is_eog(id) {
                let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                w.extend_from_slice(tok.token_text(id).unwrap_or("").as_bytes());
                w
            } else {
                tok.token_bytes(id)?.to_vec()
            };
            words.push(w);
        }
        let info = TokRxInfo {
            tok_bos: tok.bos_id,
            tok_pad: tok.pad_id,
            tok_unk: tok.unk_id,
            ..TokRxInfo::new(n as u32, eos)
        };
        let env: Arc<dyn TokenizerEnv + Sync> = Arc::new(Env {
            trie: TokTrie::from(&info, &words),
        });
        let mut factory = ParserFactory::new_simple(&env)
            .map_err(|e| RuntimeError::Constraint(format!("building the token trie: {e}")))?;
        factory.quiet();
        Ok(Self {
            factory,
            eog: tok.eot_ids.clone(),
            vocab: n,
        })
    }

    /// Compiles `c` into a fresh matcher; a bad schema, pattern or grammar is a
    /// [`RuntimeError::Constraint`] naming the problem.
    pub fn compile(&self, c: &Constraint) -> Result<TokenMatcher> {
        let grammar = c.grammar()?;
        let parser = self
            .factory
            .create_parser(grammar)
            .map_err(|e| RuntimeError::Constraint(format!("{}: {e}", c.kind())))?;
        let mut m = Matcher::new(Ok(parser));
        if let Some(e) = m.get_error() {
            return Err(RuntimeError::Constraint(format!("{}: {e}", c.kind())));
        }
        // A grammar that admits no text at all (a JSON schema whose `$ref` cycle has no base case)
        // compiles, then fails at its first mask: find that here, so it is refused with the
        // request instead of ending the sequence mid-generation. One mask of the start state.
        let empty = match m.compute_mask() {
            Ok(mask) => mask.is_zero() && !m.is_accepting().unwrap_or(false),
            Err(_) => true,
        };
        if empty {
            return Err(RuntimeError::Constraint(format!(
                "{}: admits no text at all (no token can start it; a $ref cycle without a base \
                 case does this)",
                c.kind()
            )));
        }
        Ok(TokenMatcher {
            m,
            eog: self.eog.clone(),
            vocab: self.vocab,
            cost: GrammarCost::default(),
        })
    }
}

/// What a matcher's work cost: picks checked (and advanced past), full masks computed, and the
/// time each took.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct GrammarCost {
    /// tokens checked against the grammar
    pub checks: u64,
    /// time spent checking and advancing, µs
    pub check_micros: u64,
    /// full vocabulary masks computed (a pick was rejected)
    pub masks: u64,
    /// time spent computing masks, µs
    pub mask_micros: u64,
}

impl std::ops::AddAssign for GrammarCost {
    fn add_assign(&mut self, o: Self) {
        self.checks += o.checks;
        self.check_micros += o.check_micros;
        self.masks += o.masks;
        self.mask_micros += o.mask_micros;
    }
}

/// One sequence's position in its grammar.
#[derive(Clone)]
pub struct TokenMatcher {
    m: Matcher,
    eog: Vec<u32>,
    vocab: usize,
    cost: GrammarCost,
}

impl std::fmt::Debug for TokenMatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenMatcher")
            .field("stopped", &self.m.is_stopped())
            .field("cost", &self.cost)
            .finish_non_exhaustive()
    }
}

impl TokenMatcher {
    /// Whether `tok` may come next. An end-of-generation token may come where the grammar is
    /// complete.
    pub fn check(&mut self, tok: u32) -> Result<bool> {
        let t0 = std::time::Instant::now();
        let ok = if self.eog.contains(&tok) {
            self.accepting()
        } else if self.m.is_stopped() {
            Ok(false) // nothing follows a complete grammar
        } else {
            let n = self.m.validate_tokens(&[tok]).map_err(|e| self.err(e));
            n.map(|n| n == 1)
        };
        self.cost.checks += 1;
        self.cost.check_micros += t0.elapsed().as_micros() as u64;
        ok
    }

    /// How many of `toks` (a speculative draft) the grammar accepts in a row, without advancing.
    pub fn valid_prefix(&mut self, toks: &[u32]) -> Result<usize> {
        let eog = toks.iter().position(|t| self.eog.contains(t));
        let head = &toks[..eog.unwrap_or(toks.len())];
        if self.m.is_stopped() {
            return Ok(0);
        }
        let n = self.m.validate_tokens(head).map_err(|e| self.err(e))?;
        // A draft never ends generation: stop before an end-of-generation token.
        Ok(n)
    }

    /// Advances past `tok` (already checked). End-of-generation tokens leave the state as it is.
    pub fn advance(&mut self, tok: u32) -> Result<()> {
        if self.eog.contains(&tok) {
            return Ok(());
        }
        let t0 = std::time::Instant::now();
        let r = self.m.consume_token(tok).map_err(|e| self.err(e));
        self.cost.check_micros += t0.elapsed().as_micros() as u64;
        r
    }

    /// Sets every logit the grammar forbids now to −∞ (the slow path, after a rejected pick).
    /// Where the grammar is complete every end-of-generation token stays allowed. Fails when no
    /// token is allowed (the grammar cannot go on).
    pub fn mask_logits(&mut self, logits: &mut [f32]) -> Result<()> {
        let t0 = std::time::Instant::now();
        // A complete grammar allows nothing but the end.
        let mask = self.m.compute_mask_or_eos().map_err(|e| self.err(e))?;
        let eos_ok = self.accepting()?;
        self.cost.masks += 1;
        self.cost.mask_micros += t0.elapsed().as_micros() as u64;
        let mut any = false;
        for (i, l) in logits.iter_mut().enumerate().take(self.vocab) {
            let ok = mask.is_allowed(i as u32) || (eos_ok && self.eog.contains(&(i as u32)));
            if !ok {
                *l = f32::NEG_INFINITY;
            } else {
                any |= l.is_finite();
            }
        }
        for l in logits.iter_mut().skip(self.vocab) {
            *l = f32::NEG_INFINITY;
        }
        if !any {
            return Err(RuntimeError::Constraint(
                "no token of the vocabulary can continue the grammar".into(),
            ));
        }
        Ok(())
    }

    /// Whether the grammar is complete and nothing more can follow: the sequence ends here.
    pub fn is_done(&self) -> bool {
        self.m.is_stopped()
    }

    /// What this matcher's work has cost so far.
    pub fn cost(&self) -> GrammarCost {
        self.cost
    }

    fn accepting(&mut self) -> Result<bool> {
        if self.m.is_stopped() && !self.m.is_error() {
            return Ok(true);
        }
        self.m.is_accepting().map_err(|e| self.err(e))
    }

    fn err(&self, e: impl std::fmt::Display) -> RuntimeError {
        RuntimeError::Constraint(format!("matcher: {e}"))
    }
}
