//! # cinder-index
//!
//! Nearest-neighbour search over embeddings, with the metric of every index stated and enforced.
//!
//! - [`Metric`]: cosine, dot or L2. For cosine and dot every vector is L2-normalized on insert *and*
//!   on query (so both rank by the cosine of the angle; `dot` exists so an index built for a model
//!   documented as "dot product" says so); for L2 vectors are stored and compared as given.
//! - [`IndexKind`]: `flat` (exact, brute force) or `hnsw` (approximate, the `usearch` crate's HNSW
//!   graph; see the book's "Embeddings and search" chapter for why usearch).
//! - [`VectorIndex`]: string ids, a JSON payload per point, upsert, delete, top-k search. A query of
//!   the wrong dimension, a non-finite vector or a query stating another metric is refused.
//! - Persistence ([`VectorIndex::save`], [`VectorIndex::open`]): one file, written to a temp file,
//!   fsynced and renamed, with a sha256 over its contents checked before anything in it is used.
//!
//! ```
//! use cinder_index::{IndexKind, IndexOptions, Metric, VectorIndex};
//! let mut ix = VectorIndex::new(IndexOptions::new(3, Metric::Cosine, IndexKind::Flat))?;
//! ix.upsert("a", &[1.0, 0.0, 0.0], serde_json::json!({"title": "x axis"}))?;
//! ix.upsert("b", &[0.0, 1.0, 0.0], serde_json::Value::Null)?;
//! let hits = ix.search(&[0.9, 0.1, 0.0], 1, None)?;
//! assert_eq!(hits[0].id, "a");
//! # Ok::<(), cinder_index::IndexError>(())
//! ```
#![warn(missing_docs)]

mod error;
mod file;
mod flat;
mod hnsw;

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub use error::{IndexError, Result};

use flat::FlatStore;
use hnsw::HnswStore;

/// How vectors are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Metric {
    /// Cosine similarity (vectors L2-normalized on insert and query); higher is closer.
    Cosine,
    /// Dot product of L2-normalized vectors (equal to cosine; kept as its own name so an index says
    /// what its model was trained for); higher is closer.
    Dot,
    /// Euclidean distance of the vectors as given (never normalized); lower is closer.
    L2,
}

impl Metric {
    /// Whether vectors are L2-normalized on insert and query.
    pub fn normalizes(self) -> bool {
        matches!(self, Metric::Cosine | Metric::Dot)
    }

    /// Whether a higher score is closer (similarities) or a lower one (distances).
    pub fn higher_is_closer(self) -> bool {
        self.normalizes()
    }

    /// The name used in files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Metric::Cosine => "cosine",
            Metric::Dot => "dot",
            Metric::L2 => "l2",
        }
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Metric {
    type Err = IndexError;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "cosine" | "cos" => Ok(Metric::Cosine),
            "dot" | "ip" | "inner-product" => Ok(Metric::Dot),
            "l2" | "euclidean" => Ok(Metric::L2),
            _ => Err(IndexError::Invalid(format!(
                "unknown metric {s:?} (expected cosine, dot or l2)"
            ))),
        }
    }
}

/// The search structure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IndexKind {
    /// Exact search over every vector.
    Flat,
    /// Approximate search on an HNSW graph (usearch).
    Hnsw,
}

impl FromStr for IndexKind {
    type Err = IndexError;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "flat" | "exact" => Ok(IndexKind::Flat),
            "hnsw" => Ok(IndexKind::Hnsw),
            _ => Err(IndexError::Invalid(format!(
                "unknown index kind {s:?} (expected flat or hnsw)"
            ))),
        }
    }
}

impl fmt::Display for IndexKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IndexKind::Flat => "flat",
            IndexKind::Hnsw => "hnsw",
        })
    }
}

/// HNSW graph parameters (ignored by flat indexes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HnswParams {
    /// Links per node (`M`).
    pub connectivity: usize,
    /// Candidate list size while inserting (`ef_construction`).
    pub expansion_add: usize,
    /// Candidate list size while searching (`ef`); raised to `k` when a query asks for more.
    pub expansion_search: usize,
}

impl Default for HnswParams {
    fn default() -> Self {
        // M 16 / efC 128 / ef 64: usearch's own defaults' order of magnitude, recall@10 ≈ 1 on
        // clustered data such as sentence embeddings. Uniform random 384-d vectors (no structure)
        // need ef in the thousands for 0.9 (docs/perf.md); `cinder bench-index` measures a sweep.
        Self {
            connectivity: 16,
            expansion_add: 128,
            expansion_search: 64,
        }
    }
}

/// What an index is: fixed at creation and stored in its file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IndexOptions {
    /// Vector dimension.
    pub dim: usize,
    /// Comparison metric.
    pub metric: Metric,
    /// Search structure.
    pub kind: IndexKind,
    /// HNSW parameters.
    #[serde(default)]
    pub hnsw: HnswParams,
    /// The embedding model the vectors come from (informational; the CLI embeds queries with it).
    #[serde(default)]
    pub model: Option<String>,
}

impl IndexOptions {
    /// Options with default HNSW parameters and no model recorded.
    pub fn new(dim: usize, metric: Metric, kind: IndexKind) -> Self {
        Self {
            dim,
            metric,
            kind,
            hnsw: HnswParams::default(),
            model: None,
        }
    }
}

/// One search result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hit {
    /// The point's id.
    pub id: String,
    /// Similarity (cosine/dot, higher is closer) or Euclidean distance (l2, lower is closer).
    pub score: f32,
    /// The point's payload.
    pub payload: serde_json::Value,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Point {
    key: u64,
    id: String,
    payload: serde_json::Value,
}

/// The vectors behind an index, by kind. Keys are the index's own `u64` handles of points.
enum Store {
    Flat(FlatStore),
    Hnsw(HnswStore),
}

impl Store {
    fn add(&mut self, key: u64, v: &[f32]) -> Result<()> {
        match self {
            Store::Flat(s) => {
                s.add(key, v);
                Ok(())
            }
            Store::Hnsw(s) => s.add(key, v),
        }
    }

    fn remove(&mut self, key: u64) -> Result<()> {
        match self {
            Store::Flat(s) => {
                s.remove(key);
                Ok(())
            }
            Store::Hnsw(s) => s.remove(key),
        }
    }

    /// `(key, score)` best first.
    fn search(&self, q: &[f32], k: usize) -> Result<Vec<(u64, f32)>> {
        match self {
            Store::Flat(s) => Ok(s.search(q, k)),
            Store::Hnsw(s) => s.search(q, k),
        }
    }
}

/// A vector index: points with string ids and JSON payloads, searchable by vector.
pub struct VectorIndex {
    options: IndexOptions,
    points: HashMap<u64, Point>,
    by_id: HashMap<String, u64>,
    next_key: u64,
    store: Store,
}

impl fmt::Debug for VectorIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VectorIndex")
            .field("options", &self.options)
            .field("len", &self.len())
            .finish()
    }
}

impl VectorIndex {
    /// An empty index. Refuses a zero dimension.
    pub fn new(options: IndexOptions) -> Result<Self> {
        if options.dim == 0 || options.dim > 65_536 {
            return Err(IndexError::Invalid(format!(
                "dimension {} is out of range 1..=65536",
                options.dim
            )));
        }
        let store = match options.kind {
            IndexKind::Flat => Store::Flat(FlatStore::new(options.dim, options.metric)),
            IndexKind::Hnsw => {
                Store::Hnsw(HnswStore::new(options.dim, options.metric, options.hnsw)?)
            }
        };
        Ok(Self {
            options,
            points: HashMap::new(),
            by_id: HashMap::new(),
            next_key: 0,
            store,
        })
    }

    /// What the index is.
    pub fn options(&self) -> &IndexOptions {
        &self.options
    }

    /// Records the embedding model the vectors come from.
    pub fn set_model(&mut self, model: Option<String>) {
        self.options.model = model;
    }

    /// Sets the HNSW search candidate list (`ef`): higher is slower and finds more true neighbours.
    /// Recorded in the options, so it is saved with the index. No effect on flat indexes.
    pub fn set_ef_search(&mut self, ef: usize) {
        self.options.hnsw.expansion_search = ef.max(1);
        if let Store::Hnsw(s) = &self.store {
            s.set_expansion_search(ef);
        }
    }

    /// Number of points.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// Whether the index holds no points.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// Whether a point with this id exists.
    pub fn contains(&self, id: &str) -> bool {
        self.by_id.contains_key(id)
    }

    /// The payload of a point.
    pub fn payload(&self, id: &str) -> Option<&serde_json::Value> {
        self.by_id
            .get(id)
            .and_then(|k| self.points.get(k))
            .map(|p| &p.payload)
    }

    /// Checks a vector's dimension and values and returns it as stored (normalized for cosine/dot).
    fn prepare(&self, what: &str, v: &[f32]) -> Result<Vec<f32>> {
        if v.len() != self.options.dim {
            return Err(IndexError::Dimension {
                what: what.to_string(),
                got: v.len(),
                want: self.options.dim,
            });
        }
        if let Some(i) = v.iter().position(|x| !x.is_finite()) {
            return Err(IndexError::Invalid(format!(
                "{what}: element {i} is {} (vectors must be finite)",
                v[i]
            )));
        }
        let mut out = v.to_vec();
        if self.options.metric.normalizes() {
            let norm = out
                .iter()
                .map(|x| f64::from(*x).powi(2))
                .sum::<f64>()
                .sqrt();
            if norm == 0.0 {
                return Err(IndexError::Invalid(format!(
                    "{what}: a zero vector has no direction under the {} metric",
                    self.options.metric
                )));
            }
            let inv = (1.0 / norm) as f32;
            out.iter_mut().for_each(|x| *x *= inv);
        }
        Ok(out)
    }

    /// Inserts a point, replacing any point with the same id.
    pub fn upsert(&mut self, id: &str, vector: &[f32], payload: serde_json::Value) -> Result<()> {
        if id.is_empty() {
            return Err(IndexError::Invalid("a point id must not be empty".into()));
        }
        let v = self.prepare(&format!("vector of point {id:?}"), vector)?;
        if self.by_id.contains_key(id) {
            self.delete(id)?;
        }
        let key = self.next_key;
        self.store.add(key, &v)?;
        self.next_key += 1;
        self.by_id.insert(id.to_string(), key);
        self.points.insert(
            key,
            Point {
                key,
                id: id.to_string(),
                payload,
            },
        );
        Ok(())
    }

    /// Inserts many points (HNSW inserts run on all cores). Every vector is checked before any is
    /// inserted, so a bad one leaves the index unchanged.
    pub fn upsert_batch(
        &mut self,
        items: Vec<(String, Vec<f32>, serde_json::Value)>,
    ) -> Result<()> {
        let mut prepared = Vec::with_capacity(items.len());
        let mut seen = std::collections::HashSet::new();
        for (id, v, payload) in items {
            if id.is_empty() {
                return Err(IndexError::Invalid("a point id must not be empty".into()));
            }
            if !seen.insert(id.clone()) {
                return Err(IndexError::Invalid(format!(
                    "id {id:?} appears twice in one batch"
                )));
            }
            let v = self.prepare(&format!("vector of point {id:?}"), &v)?;
            prepared.push((id, v, payload));
        }
        for (id, _, _) in &prepared {
            if self.by_id.contains_key(id) {
                self.delete(id)?;
            }
        }
        let first = self.next_key;
        let keyed: Vec<(u64, &[f32])> = prepared
            .iter()
            .enumerate()
            .map(|(i, (_, v, _))| (first + i as u64, v.as_slice()))
            .collect();
        match &mut self.store {
            Store::Flat(s) => keyed.iter().for_each(|(k, v)| s.add(*k, v)),
            Store::Hnsw(s) => s.add_parallel(&keyed)?,
        }
        self.next_key += prepared.len() as u64;
        for (i, (id, _, payload)) in prepared.into_iter().enumerate() {
            let key = first + i as u64;
            self.by_id.insert(id.clone(), key);
            self.points.insert(key, Point { key, id, payload });
        }
        Ok(())
    }

    /// Deletes a point; `Ok(false)` when no point has this id.
    pub fn delete(&mut self, id: &str) -> Result<bool> {
        let Some(key) = self.by_id.remove(id) else {
            return Ok(false);
        };
        self.points.remove(&key);
        self.store.remove(key)?;
        Ok(true)
    }

    /// The `k` nearest points to `query`, closest first. `metric`, when given, must be the index's
    /// own: a query built for another metric is refused rather than silently mis-ranked.
    pub fn search(&self, query: &[f32], k: usize, metric: Option<Metric>) -> Result<Vec<Hit>> {
        if let Some(m) = metric
            && m != self.options.metric
        {
            return Err(IndexError::MetricMismatch {
                index: self.options.metric,
                query: m,
            });
        }
        let q = self.prepare("query", query)?;
        if k == 0 || self.is_empty() {
            return Ok(Vec::new());
        }
        let found = self.store.search(&q, k.min(self.len()))?;
        Ok(found
            .into_iter()
            .filter_map(|(key, score)| {
                self.points.get(&key).map(|p| Hit {
                    id: p.id.clone(),
                    score,
                    payload: p.payload.clone(),
                })
            })
            .collect())
    }
}

#[cfg(test)]
mod tests;
