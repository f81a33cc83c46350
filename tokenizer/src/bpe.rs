//! Byte-level BPE (GPT-2, Llama 3, Qwen2, SmolLM) on one pre-token, as llama.cpp's `llm_tokenizer_bpe`
//! and Hugging Face's `BPE` model compute it.
//!
//! The pre-token's bytes start as one symbol each (the token of the byte's GPT-2 character; a byte
//! without one is dropped, as Hugging Face does). Every adjacent pair with a merge rule goes into a
//! priority queue keyed by the rule's rank (ties: the leftmost pair); the best pair is merged into the
//! rule's result token, its new neighbour pairs are queued, and stale entries are skipped. With
//! `ignore_merges` (Llama 3) a pre-token that is itself a token is emitted whole.
//!
//! Cinder runs this itself rather than through the Hugging Face model because that model keeps two
//! more copies of the vocabulary (text -> id and id -> text hash maps, ~5 MB for 49k tokens): the
//! rules here are ids only, ([left, right] -> rank, result) sorted for binary search, 16 bytes each.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::gguf::KEY_MERGES;
use super::vocab::Vocab;
use super::{gpt2_byte_char, tok_err};
use crate::error::Result;
use cinder_gguf::Value;

/// One merge rule: the pair `(left << 32) | right`, its rank (lower merges first) and the result token.
#[derive(Debug, Clone, Copy)]
struct Rule {
    pair: u64,
    rank: u32,
    result: u32,
}

/// A byte-level BPE vocabulary's merge rules and byte tokens.
#[derive(Debug)]
pub(super) struct Bpe {
    /// Sorted by `pair`; one rule per pair (the first listed, as llama.cpp keeps).
    rules: Vec<Rule>,
    /// The token of each byte's GPT-2 character.
    byte_ids: [Option<u32>; 256],
    /// Emit a pre-token that is a vocabulary token whole (Llama 3's `ignore_merges`).
    pub(super) ignore_merges: bool,
}

/// A queued merge: (rank, left position, left id, right id, result id). The heap pops the lowest
/// rank, then the leftmost position; the two ids detect an entry made stale by an earlier merge.
type Candidate = (u32, usize, u32, u32, u32);

fn key(left: u32, right: u32) -> u64 {
    (u64::from(left) << 32) | u64::from(right)
}

impl Bpe {
    /// Reads `tokenizer.ggml.merges` (`"left right"` lines, highest priority first). A line that is not
    /// two non-empty sides is an error; a rule whose sides or result are not tokens, or that repeats an
    /// earlier pair, is skipped (llama.cpp would never apply it either).
    pub(super) fn from_merges(vocab: &Vocab, lines: &[Value], ignore_merges: bool) -> Result<Self> {
        let mut rules = Vec::with_capacity(lines.len());
        let mut joined = String::new();
        let mut dropped = 0usize;
        for (i, v) in lines.iter().enumerate() {
            let line = v
                .as_str()
                .ok_or_else(|| tok_err(format!("{KEY_MERGES}[{i}] must be a string, found {v}")))?;
            // llama.cpp splits at the first space after the first byte
            let pos = line
                .as_bytes()
                .iter()
                .skip(1)
                .position(|&c| c == b' ')
                .map(|p| p + 1)
                .ok_or_else(|| {
                    tok_err(format!(
                        "{KEY_MERGES}[{i}] = {line:?} is not two tokens separated by a space"
                    ))
                })?;
            let (a, b) = (&line[..pos], &line[pos + 1..]);
            if a.is_empty() || b.is_empty() {
                return Err(tok_err(format!(
                    "{KEY_MERGES}[{i}] = {line:?} has an empty side"
                )));
            }
            joined.clear();
            joined.push_str(a);
            joined.push_str(b);
            match (vocab.id(a), vocab.id(b), vocab.id(&joined)) {
                (Some(l), Some(r), Some(result)) => rules.push(Rule {
                    pair: key(l, r),
                    rank: i as u32,
                    result,
                }),
                _ => dropped += 1,
            }
        }
        // stable: among repeats of a pair the first listed (lowest rank) stays first
        rules.sort_by_key(|r| r.pair);
        let before = rules.len();
        rules.dedup_by_key(|r| r.pair);
        dropped += before - rules.len();
        rules.shrink_to_fit();
        if dropped > 0 {
            tracing::debug!(
                dropped,
                "BPE merges skipped (duplicate, or a side or the result not in the vocabulary)"
            );
        }
        let mut byte_ids = [None; 256];
        for (b, slot) in byte_ids.iter_mut().enumerate() {
            let c = gpt2_byte_char(b as u8);
            *slot = vocab.id(c.encode_utf8(&mut [0; 4]));
        }
        Ok(Self {
            rules,
            byte_ids,
            ignore_merges,
        })
    }

    /// The rules as `(left, right)` token pairs in rank order (to write a Hugging Face tokenizer).
    pub(super) fn ranked_pairs(&self) -> Vec<(u32, u32)> {
        let mut by_rank: Vec<&Rule> = self.rules.iter().collect();
        by_rank.sort_by_key(|r| r.rank);
        by_rank
            .into_iter()
            .map(|r| ((r.pair >> 32) as u32, r.pair as u32))
            .collect()
    }

    fn rule(&self, left: u32, right: u32) -> Option<Rule> {
        let k = key(left, right);
        self.rules
            .binary_search_by_key(&k, |r| r.pair)
            .ok()
            .map(|i| self.rules[i])
    }

    /// Appends the tokens of one pre-token (raw bytes, before the GPT-2 character mapping) to `out`.
    pub(super) fn word(&self, vocab: &Vocab, word: &[u8], out: &mut Vec<u32>) {
        if word.is_empty() {
            return;
        }
        if self.ignore_merges {
            let text: String = word.iter().map(|&b| gpt2_byte_char(b)).collect();
            if let Some(id) = vocab.id(&text) {
                out.push(id);
                return;
            }
        }
        // symbols as a linked list over the dropped-bytes-removed sequence
        let mut ids: Vec<u32> = word
            .iter()
            .filter_map(|&b| self.byte_ids[b as usize])
            .collect();
        let n = ids.len();
        if n < 2 {
            out.extend_from_slice(&ids);
            return;
        }
        let mut next: Vec<usize> = (1..=n).collect(); // n = end
        let mut prev: Vec<usize> = (0..n).map(|i| i.wrapping_sub(1)).collect(); // usize::MAX = none
        let mut alive = vec![true; n];
        let mut queue: BinaryHeap<Reverse<Candidate>> = BinaryHeap::new();
        let push = |queue: &mut BinaryHeap<_>, ids: &[u32], l: usize, r: usize| {
            if let Some(rule) = self.rule(ids[l], ids[r]) {
                queue.push(Reverse((rule.rank, l, ids[l], ids[r], rule.result)));
            }
        };
        for i in 0..n - 1 {
            push(&mut queue, &ids, i, i + 1);
        }
        while let Some(Reverse((_, l, lid, rid, result))) = queue.pop() {
            let r = next[l];
            if !alive[l] || r >= n || ids[l] != lid || ids[r] != rid {
                continue; // a side was merged away or grew since this entry was queued
            }
            ids[l] = result;
            alive[r] = false;
            next[l] = next[r];
            if next[l] < n {
                prev[next[l]] = l;
            }
            if prev[l] != usize::MAX {
                push(&mut queue, &ids, prev[l], l);
            }
            if next[l] < n {
                push(&mut queue, &ids, l, next[l]);
            }
        }
        let mut i = 0;
        while i < n {
            out.push(ids[i]);
            i = next[i];
        }
    }
}
