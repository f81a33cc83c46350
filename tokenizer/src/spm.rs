//! SentencePiece (BPE by scores) tokenization of one text fragment, as llama.cpp's `llm_tokenizer_spm`.
//!
//! The fragment (spaces already escaped to `▁`) is split into UTF-8 characters; every adjacent pair whose
//! concatenation is a vocabulary token goes into a priority queue keyed by that token's score (ties: the
//! leftmost pair). The best pair is merged, its neighbours' pairs are queued, and stale entries (a side
//! already merged away or grown) are skipped. Final symbols that are not tokens become byte tokens.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::{Vocab, tok_err};
use crate::error::Result;

#[derive(Clone, Copy)]
struct Symbol {
    prev: i32,
    next: i32,
    start: usize,
    len: usize,
}

struct Bigram {
    score: f32,
    left: i32,
    right: i32,
    size: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    /// Higher score first; on equal scores the leftmost pair first.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.left.cmp(&self.left))
    }
}

/// Appends the SentencePiece tokens of `text` (already `▁`-escaped) to `out`.
pub(super) fn tokenize(vocab: &Vocab, text: &str, out: &mut Vec<u32>) -> Result<()> {
    if text.is_empty() {
        return Ok(());
    }
    let mut syms: Vec<Symbol> = Vec::with_capacity(text.len());
    for (i, (start, ch)) in text.char_indices().enumerate() {
        syms.push(Symbol {
            prev: i as i32 - 1,
            next: i as i32 + 1,
            start,
            len: ch.len_utf8(),
        });
    }
    if let Some(last) = syms.last_mut() {
        last.next = -1;
    }

    let mut queue = BinaryHeap::new();
    let try_add = |syms: &[Symbol], queue: &mut BinaryHeap<Bigram>, left: i32, right: i32| {
        if left < 0 || right < 0 {
            return;
        }
        let (l, r) = (syms[left as usize], syms[right as usize]);
        let piece = &text[l.start..l.start + l.len + r.len];
        if let Some(id) = vocab.id(piece) {
            queue.push(Bigram {
                score: vocab.scores[id as usize],
                left,
                right,
                size: piece.len(),
            });
        }
    };
    for i in 1..syms.len() as i32 {
        try_add(&syms, &mut queue, i - 1, i);
    }

    while let Some(b) = queue.pop() {
        let (l, r) = (syms[b.left as usize], syms[b.right as usize]);
        if l.len == 0 || r.len == 0 || l.len + r.len != b.size {
            continue; // stale
        }
        // merge the right symbol into the left one
        syms[b.left as usize].len += r.len;
        syms[b.right as usize].len = 0;
        syms[b.left as usize].next = r.next;
        if r.next >= 0 {
            syms[r.next as usize].prev = b.left;
        }
        let prev = syms[b.left as usize].prev;
        let next = syms[b.left as usize].next;
        try_add(&syms, &mut queue, prev, b.left);
        try_add(&syms, &mut queue, b.left, next);
    }

    let mut i = 0i32;
    while i >= 0 {
        let s = syms[i as usize];
        let piece = &text[s.start..s.start + s.len];
        if let Some(id) = vocab.id(piece) {
            out.push(id);
        } else {
            for &byte in piece.as_bytes() {
                let id = vocab.byte_tokens[byte as usize].ok_or_else(|| {
                    tok_err(format!(
                        "SentencePiece vocabulary has no byte token <0x{byte:02X}> for {piece:?}"
                    ))
                })?;
                out.push(id);
            }
        }
        i = s.next;
    }
    Ok(())
}
