//! Exact search: every stored vector is scored against the query.

use std::collections::HashMap;

use crate::Metric;

/// Vectors in one dense row-major buffer (`[len, dim]`); deletes swap the last row in.
pub(crate) struct FlatStore {
    dim: usize,
    metric: Metric,
    data: Vec<f32>,
    keys: Vec<u64>,
    row_of: HashMap<u64, usize>,
}

/// Dot product with eight independent accumulators so the compiler vectorizes it.
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

/// Squared Euclidean distance, vectorizable like [`dot`].
pub(crate) fn l2sq(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            let d = x[i] - y[i];
            acc[i] += d * d;
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| (x - y) * (x - y)).sum();
    acc.iter().sum::<f32>() + tail
}

impl FlatStore {
    pub(crate) fn new(dim: usize, metric: Metric) -> Self {
        Self {
            dim,
            metric,
            data: Vec::new(),
            keys: Vec::new(),
            row_of: HashMap::new(),
        }
    }

    pub(crate) fn add(&mut self, key: u64, v: &[f32]) {
        self.row_of.insert(key, self.keys.len());
        self.keys.push(key);
        self.data.extend_from_slice(v);
    }

    pub(crate) fn remove(&mut self, key: u64) {
        let Some(row) = self.row_of.remove(&key) else {
            return;
        };
        let last = self.keys.len() - 1;
        if row != last {
            let (head, tail) = self.data.split_at_mut(last * self.dim);
            head[row * self.dim..(row + 1) * self.dim].copy_from_slice(&tail[..self.dim]);
            let moved = self.keys[last];
            self.keys[row] = moved;
            self.row_of.insert(moved, row);
        }
        self.keys.pop();
        self.data.truncate(last * self.dim);
    }

    /// Stored rows with their keys (for saving).
    pub(crate) fn rows(&self) -> impl Iterator<Item = (u64, &[f32])> {
        self.keys
            .iter()
            .copied()
            .zip(self.data.chunks_exact(self.dim))
    }

    /// `(key, score)` of the `k` closest rows, closest first: similarity for cosine/dot, Euclidean
    /// distance for l2.
    pub(crate) fn search(&self, q: &[f32], k: usize) -> Vec<(u64, f32)> {
        // Scores as "higher is closer" for one selection path.
        let scored = self
            .data
            .chunks_exact(self.dim)
            .map(|row| match self.metric {
                Metric::Cosine | Metric::Dot => dot(q, row),
                Metric::L2 => -l2sq(q, row),
            });
        let mut all: Vec<(f32, u64)> = scored.zip(self.keys.iter().copied()).collect();
        let k = k.min(all.len());
        if k == 0 {
            return Vec::new();
        }
        let by_score = |a: &(f32, u64), b: &(f32, u64)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
        all.select_nth_unstable_by(k - 1, by_score);
        all.truncate(k);
        all.sort_by(by_score);
        all.into_iter()
            .map(|(s, key)| match self.metric {
                Metric::L2 => (key, (-s).max(0.0).sqrt()),
                _ => (key, s),
            })
            .collect()
    }
}
