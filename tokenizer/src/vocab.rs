//! The vocabulary as the tokenizer holds it for its lifetime: every token's text and decoded bytes
//! stored back to back ([`Pool`]), a hash index from text to id, attributes and scores, and
//! llama.cpp's special-token partition of the raw input.
//!
//! Why pools: a `String` per token costs a 24-byte header plus a heap block with its allocator
//! overhead, for texts that average under 8 bytes. Held that way (texts, decoded bytes, and the
//! Hugging Face model's two maps), SmolLM2's 49k-token vocabulary was most of the ~15 MiB of peak RSS
//! that `cinder run` had above the weights and the code (`docs/perf.md`, Memory).

use super::{attr, tok_err};
use crate::error::Result;

/// Variable-length byte strings stored back to back: item `i` is `data[ends[i-1]..ends[i]]`.
#[derive(Debug, Default)]
pub(crate) struct Pool {
    data: Vec<u8>,
    ends: Vec<u32>,
}

impl Pool {
    /// An empty pool with room for `n` items.
    pub(crate) fn with_capacity(n: usize) -> Self {
        Self {
            data: Vec::with_capacity(n * 8),
            ends: Vec::with_capacity(n),
        }
    }

    /// Appends one item. A pool is limited to 4 GiB of data (a vocabulary is a few MB).
    pub(crate) fn push(&mut self, item: &[u8]) -> Result<()> {
        let end = u32::try_from(self.data.len() + item.len())
            .map_err(|_| tok_err("the vocabulary's texts exceed 4 GiB"))?;
        self.data.extend_from_slice(item);
        self.ends.push(end);
        Ok(())
    }

    /// Number of items.
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    /// Item `i`'s bytes.
    pub(crate) fn bytes(&self, i: usize) -> Option<&[u8]> {
        let end = *self.ends.get(i)? as usize;
        let start = match i {
            0 => 0,
            _ => self.ends[i - 1] as usize,
        };
        self.data.get(start..end)
    }

    /// Item `i` as text. Pools of texts are filled from `&str` only, so this never sees invalid
    /// UTF-8; a pool of raw bytes (token pieces) is read with [`Pool::bytes`].
    pub(crate) fn str(&self, i: usize) -> Option<&str> {
        std::str::from_utf8(self.bytes(i)?).ok()
    }

    /// Frees unused capacity (the pools are filled once and kept).
    pub(crate) fn shrink(&mut self) {
        self.data.shrink_to_fit();
        self.ends.shrink_to_fit();
    }
}

/// Token ids by text: open addressing with linear probing over a power-of-two table at least 1.5×
/// the vocabulary (4 bytes a slot; Gemma's 262k tokens: 2 MiB). The hash is keyed at random per
/// table (std's SipHash), so a crafted vocabulary cannot pile its texts into one probe chain and
/// make building or lookups quadratic. A lookup is one hash and, typically, one text compare; a
/// binary search over sorted ids took ~18 compares on scattered texts.
struct TextIndex {
    slots: Vec<u32>,
    keys: std::collections::hash_map::RandomState,
}

/// A free slot (token ids stay below it: a vocabulary has fewer than `u32::MAX` tokens).
const EMPTY: u32 = u32::MAX;

impl TextIndex {
    /// Indexes every item of `texts`; the lowest id keeps a repeated text, and the first repeat (in
    /// id order) is returned beside the index as `(earlier id, id)`.
    fn build(texts: &Pool) -> (Self, Option<(u32, u32)>) {
        let cap = (texts.len() + texts.len() / 2 + 1).next_power_of_two();
        let mut index = Self {
            slots: vec![EMPTY; cap],
            keys: std::collections::hash_map::RandomState::new(),
        };
        let mut duplicate = None;
        for id in 0..texts.len() as u32 {
            let text = texts.bytes(id as usize).unwrap_or_default();
            match index.probe(texts, text) {
                Ok(prev) => {
                    duplicate.get_or_insert((prev, id));
                }
                Err(slot) => index.slots[slot] = id,
            }
        }
        (index, duplicate)
    }

    /// `Ok(id)` of the token with this text, or `Err(slot)`: the free slot where it would go.
    fn probe(&self, texts: &Pool, text: &[u8]) -> std::result::Result<u32, usize> {
        use std::hash::BuildHasher;
        let mask = self.slots.len() - 1;
        let mut at = self.keys.hash_one(text) as usize & mask;
        loop {
            match self.slots[at] {
                EMPTY => return Err(at),
                id if texts.bytes(id as usize) == Some(text) => return Ok(id),
                _ => at = (at + 1) & mask,
            }
        }
    }

    fn get(&self, texts: &Pool, text: &[u8]) -> Option<u32> {
        self.probe(texts, text).ok()
    }
}

/// The vocabulary as llama.cpp sees it: texts, attributes, scores and the decoded bytes of every token.
pub(crate) struct Vocab {
    /// Each token's stored text (`Ġthe`, `▁the`, `<|im_end|>`).
    pub(crate) texts: Pool,
    pub(crate) attrs: Vec<u16>,
    pub(crate) scores: Vec<f32>,
    /// Token ids hashed by text, for [`Vocab::id`].
    index: TextIndex,
    /// The first token (in id order) whose text an earlier one has, with that earlier id.
    duplicate: Option<(u32, u32)>,
    /// Tokens cut out of the raw text before tokenization (control, unknown, user-defined), longest first.
    pub(crate) partition: Vec<u32>,
    /// What each token decodes to (llama.cpp `token_to_piece(.., special = true)`).
    pub(crate) pieces: Pool,
    /// SentencePiece byte-fallback token for each byte.
    pub(crate) byte_tokens: Vec<Option<u32>>,
}

/// A piece of the input after special-token partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fragment<'a> {
    Text(&'a str),
    Token(u32),
}

/// C `isspace` on one byte (what llama.cpp uses for lstrip/rstrip).
fn c_isspace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

impl Vocab {
    /// A vocabulary of `texts.len()` tokens; `partition` lists the tokens cut out of raw text (sorted
    /// here, longest first). Byte-fallback tokens start unset.
    pub(crate) fn new(
        mut texts: Pool,
        attrs: Vec<u16>,
        scores: Vec<f32>,
        mut pieces: Pool,
        partition: Vec<u32>,
    ) -> Self {
        texts.shrink();
        pieces.shrink();
        let (index, duplicate) = TextIndex::build(&texts);
        let mut v = Self {
            texts,
            attrs,
            scores,
            index,
            duplicate,
            partition,
            pieces,
            byte_tokens: vec![None; 256],
        };
        v.sort_partition();
        v
    }

    /// The text of token `id` ("" outside the vocabulary).
    pub(crate) fn text(&self, id: u32) -> &str {
        self.texts.str(id as usize).unwrap_or("")
    }

    /// The id of the token whose text is `text` (the lowest id if several share it).
    pub(crate) fn id(&self, text: &str) -> Option<u32> {
        self.index.get(&self.texts, text.as_bytes())
    }

    /// The first token (in id order) whose text an earlier token already has, with that earlier id.
    pub(crate) fn first_duplicate(&self) -> Option<(u32, u32)> {
        self.duplicate
    }

    /// Splits `text` around the partition tokens exactly as llama.cpp's `tokenizer_st_partition`: each token
    /// (longest first) is cut out of every remaining text fragment, left to right.
    pub(super) fn partition<'a>(&self, text: &'a str, parse_special: bool) -> Vec<Fragment<'a>> {
        let mut frags = Vec::new();
        if text.is_empty() {
            return frags;
        }
        // Fragments as byte ranges of `text`, or tokens.
        let mut cur: Vec<std::result::Result<(usize, usize), u32>> = vec![Ok((0, text.len()))];
        for &id in &self.partition {
            let a = self.attrs[id as usize];
            if !parse_special && a & (attr::CONTROL | attr::UNKNOWN) != 0 {
                continue;
            }
            let tok = self.text(id);
            if tok.is_empty() || !text.contains(tok) {
                continue;
            }
            let mut next = Vec::with_capacity(cur.len() + 2);
            for frag in cur {
                let Ok((mut start, end)) = frag else {
                    next.push(frag);
                    continue;
                };
                while let Some(rel) = text[start..end].find(tok) {
                    let m = start + rel;
                    let mut left_end = m;
                    if a & attr::LSTRIP != 0 {
                        while left_end > start && c_isspace(text.as_bytes()[left_end - 1]) {
                            left_end -= 1;
                        }
                    }
                    if left_end > start {
                        next.push(Ok((start, left_end)));
                    }
                    next.push(Err(id));
                    start = m + tok.len();
                    if a & attr::RSTRIP != 0 {
                        while start < end && c_isspace(text.as_bytes()[start]) {
                            start += 1;
                        }
                    }
                }
                if start < end {
                    next.push(Ok((start, end)));
                }
            }
            cur = next;
        }
        for f in cur {
            frags.push(match f {
                Ok((s, e)) => Fragment::Text(&text[s..e]),
                Err(id) => Fragment::Token(id),
            });
        }
        frags
    }

    /// Sorts the partition list as llama.cpp does (longest text first; ties by id for determinism).
    pub(crate) fn sort_partition(&mut self) {
        let len = |id: u32| self.texts.bytes(id as usize).map_or(0, <[u8]>::len);
        let mut p = std::mem::take(&mut self.partition);
        p.sort_by(|&a, &b| len(b).cmp(&len(a)).then(a.cmp(&b)));
        self.partition = p;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(items: &[&str]) -> Pool {
        let mut p = Pool::with_capacity(items.len());
        for s in items {
            p.push(s.as_bytes()).unwrap();
        }
        p
    }

    #[test]
    fn pool_items_round_trip() {
        let p = pool(&["", "ab", "ĠÃ©", "", "x"]);
        assert_eq!(p.len(), 5);
        let got: Vec<_> = (0..5).map(|i| p.str(i).unwrap()).collect();
        assert_eq!(got, ["", "ab", "ĠÃ©", "", "x"]);
        assert_eq!(p.bytes(5), None);
    }

    #[test]
    fn ids_and_duplicates() {
        let texts = ["b", "a", "c", "a", "b", "a"];
        let v = Vocab::new(pool(&texts), vec![0; 6], vec![0.0; 6], pool(&texts), vec![]);
        assert_eq!(v.id("a"), Some(1));
        assert_eq!(v.id("b"), Some(0));
        assert_eq!(v.id("c"), Some(2));
        assert_eq!(v.id("d"), None);
        assert_eq!(v.id(""), None);
        // id 3 repeats id 1's text before id 4 repeats id 0's
        assert_eq!(v.first_duplicate(), Some((1, 3)));
        let unique = Vocab::new(
            pool(&["x", "y"]),
            vec![0; 2],
            vec![0.0; 2],
            pool(&[]),
            vec![],
        );
        assert_eq!(unique.first_duplicate(), None);
    }
}
