//! The Responses API's store of past responses: each stored response with the conversation it
//! ends (for `previous_response_id`), bounded in count (the oldest goes first) and in age (an
//! entry older than the retention is gone). In memory, per replica: a follow-up must reach the
//! replica that answered (the sticky routing of a load balancer, or one replica).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cinder_runtime::tokenizer::ChatMessage;
use serde_json::Value;

/// One stored response.
#[derive(Debug, Clone)]
pub struct Stored {
    /// the response object as it was returned
    pub response: Value,
    /// the conversation up to and including this response's output (without `instructions`,
    /// which a follow-up does not inherit)
    pub conversation: Vec<ChatMessage>,
}

/// Past responses by id.
///
/// ```
/// use std::time::Duration;
/// use cinder_server::store::{ResponseStore, Stored};
/// let store = ResponseStore::new(1000, Duration::from_secs(3600));
/// store.put("resp_1".into(), Stored { response: serde_json::json!({}), conversation: vec![] });
/// assert!(store.get("resp_1").is_some());
/// assert!(store.delete("resp_1") && store.get("resp_1").is_none());
/// ```
#[derive(Debug)]
pub struct ResponseStore {
    capacity: usize,
    retention: Duration,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    map: HashMap<String, (Instant, Stored)>,
    order: VecDeque<String>,
}

impl ResponseStore {
    /// A store of at most `capacity` responses, each kept `retention` long (0 capacity: none).
    pub fn new(capacity: usize, retention: Duration) -> Self {
        Self {
            capacity,
            retention,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain data behind; keep serving it.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stores `s` under `id`, dropping expired entries and, over capacity, the oldest.
    pub fn put(&self, id: String, s: Stored) {
        if self.capacity == 0 {
            return;
        }
        let mut g = self.lock();
        let now = Instant::now();
        g.sweep(now, self.retention);
        while g.order.len() >= self.capacity {
            if let Some(old) = g.order.pop_front() {
                g.map.remove(&old);
            }
        }
        g.order.push_back(id.clone());
        g.map.insert(id, (now, s));
    }

    /// The response `id`, unless it is unknown or expired.
    pub fn get(&self, id: &str) -> Option<Stored> {
        let g = self.lock();
        g.map
            .get(id)
            .filter(|(t, _)| t.elapsed() <= self.retention)
            .map(|(_, s)| s.clone())
    }

    /// Removes `id`; whether it was there.
    pub fn delete(&self, id: &str) -> bool {
        let mut g = self.lock();
        let found = g
            .map
            .remove(id)
            .is_some_and(|(t, _)| t.elapsed() <= self.retention);
        g.order.retain(|k| k != id);
        found
    }

    /// How many responses are held.
    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Inner {
    /// Drops the entries older than `retention` (the oldest are first in `order`).
    fn sweep(&mut self, now: Instant, retention: Duration) {
        while let Some(id) = self.order.front() {
            match self.map.get(id) {
                Some((t, _)) if now.duration_since(*t) <= retention => break,
                _ => {
                    if let Some(id) = self.order.pop_front() {
                        self.map.remove(&id);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(n: i64) -> Stored {
        Stored {
            response: serde_json::json!({"n": n}),
            conversation: Vec::new(),
        }
    }

    #[test]
    fn bounded_by_count_and_age() {
        let s = ResponseStore::new(2, Duration::from_secs(60));
        s.put("a".into(), stored(1));
        s.put("b".into(), stored(2));
        s.put("c".into(), stored(3));
        assert!(s.get("a").is_none(), "the oldest goes first");
        assert_eq!(s.get("c").map(|x| x.response["n"].clone()), Some(3.into()));
        assert!(s.delete("b"));
        assert!(!s.delete("b"));
        assert_eq!(s.len(), 1);
        let s = ResponseStore::new(4, Duration::ZERO);
        s.put("a".into(), stored(1));
        std::thread::sleep(Duration::from_millis(2));
        assert!(s.get("a").is_none(), "expired");
        s.put("b".into(), stored(2));
        assert_eq!(s.len(), 1, "the expired entry was swept");
    }
}
