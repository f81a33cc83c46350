//! How a sequence ends: [`FinishReason`], and the stop-string matcher the engine runs over each
//! sequence's detokenized text.

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// `max_tokens` reached.
    Length,
    /// The model produced an end-of-generation token.
    Eos,
    /// A stop string appeared.
    Stop,
    /// The caller asked to stop (or dropped the request's stream).
    Cancelled,
    /// The request's deadline passed.
    Timeout,
    /// The engine failed while running it (logged; the engine goes on with other requests).
    Error,
}

/// Finds stop strings across piece boundaries, holding back text that could be the start of one.
#[derive(Debug)]
pub(crate) struct StopMatcher {
    stops: Vec<String>,
    pending: String,
    done: bool,
    /// index in `stops` of the string found
    hit: Option<usize>,
}

impl StopMatcher {
    pub(crate) fn new(stops: &[String]) -> Self {
        Self {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            pending: String::new(),
            done: false,
            hit: None,
        }
    }

    /// Adds `piece`; returns the text safe to emit and whether a stop string was found.
    pub(crate) fn feed(&mut self, piece: &str) -> (String, bool) {
        if self.done {
            return (String::new(), true);
        }
        self.pending.push_str(piece);
        // The earliest match; of two at one place, the longer (it holds the other).
        if let Some((pos, _, k)) = self
            .stops
            .iter()
            .enumerate()
            .filter_map(|(k, s)| {
                self.pending
                    .find(s.as_str())
                    .map(|p| (p, usize::MAX - s.len(), k))
            })
            .min()
        {
            self.hit = Some(k);
            let emit = self.pending[..pos].to_string();
            self.pending.clear();
            self.done = true;
            return (emit, true);
        }
        // Hold back the longest suffix that is a prefix of some stop string.
        let mut hold = 0;
        for s in &self.stops {
            for k in (1..s.len()).filter(|&k| s.is_char_boundary(k)) {
                if k > hold && self.pending.ends_with(&s[..k]) {
                    hold = k;
                }
            }
        }
        let cut = self.pending.len() - hold;
        let emit = self.pending[..cut].to_string();
        self.pending.drain(..cut);
        (emit, false)
    }

    /// The stop string found, once one is.
    pub(crate) fn matched(&self) -> Option<&str> {
        self.hit.map(|k| self.stops[k].as_str())
    }

    pub(crate) fn finish(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }
}

#[cfg(test)]
mod tests {
    use super::StopMatcher;

    #[test]
    fn stop_strings_across_pieces() {
        let mut m = StopMatcher::new(&["</s>".to_string(), "\n\n".to_string()]);
        assert_eq!(m.feed("Hello <"), ("Hello ".to_string(), false));
        assert_eq!(m.feed("/"), (String::new(), false));
        assert_eq!(m.feed("s> world"), (String::new(), true));
        let mut m = StopMatcher::new(&["\n\n".to_string()]);
        assert_eq!(m.feed("a\n"), ("a".to_string(), false));
        assert_eq!(m.feed("b"), ("\nb".to_string(), false));
        assert_eq!(m.feed("\n\nc"), (String::new(), true));
        let mut m = StopMatcher::new(&["xyz".to_string()]);
        assert_eq!(m.feed("abx"), ("ab".to_string(), false));
        assert_eq!(m.finish(), "x");
    }
}
