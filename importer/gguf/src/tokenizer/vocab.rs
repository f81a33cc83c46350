//! The vocabulary as the tokenizer holds it for its lifetime: every token's text and decoded bytes
//! stored back to back ([`Pool`]), ids sorted by text for lookups, attributes and scores, and
//! llama.cpp's special-token partition of the raw input.
//!
//! Why pools: a `String` per token costs its 24-byte header plus a heap block of at least 24 bytes, so
//! a 49k vocabulary held as texts + pieces + a text -> id hash map took ~10 MB, more than the 135M
//! model's activations; pooled, the same data is ~1.3 MB (Gemma's 262k tokens: ~7 MB instead of ~50).

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

/// The vocabulary as llama.cpp sees it: texts, attributes, scores and the decoded bytes of every token.
pub(crate) struct Vocab {
    /// Each token's stored text (`Ġthe`, `▁the`, `<|im_end|>`).
    pub(crate) texts: Pool,
    pub(crate) attrs: Vec<u16>,
    pub(crate) scores: Vec<f32>,
    /// Ids sorted by text (then id): [`Vocab::id`] binary-searches it.
    by_text: Vec<u32>,
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
        let mut by_text: Vec<u32> = (0..texts.len() as u32).collect();
        by_text.sort_unstable_by(|&a, &b| {
            texts
                .bytes(a as usize)
                .cmp(&texts.bytes(b as usize))
                .then(a.cmp(&b))
        });
        let mut v = Self {
            texts,
            attrs,
            scores,
            by_text,
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
        let at = self
            .by_text
            .partition_point(|&i| self.texts.bytes(i as usize) < Some(text.as_bytes()));
        let id = *self.by_text.get(at)?;
        (self.texts.bytes(id as usize) == Some(text.as_bytes())).then_some(id)
    }

    /// The first token (in id order) whose text an earlier token already has, with that earlier id.
    pub(crate) fn first_duplicate(&self) -> Option<(u32, u32)> {
        self.by_text
            .windows(2)
            .filter(|w| self.texts.bytes(w[0] as usize) == self.texts.bytes(w[1] as usize))
            // ids ascend within a run of equal texts, so the least later id names the earliest clash
            .map(|w| (w[0], w[1]))
            .min_by_key(|&(_, later)| later)
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
