//! Approximate search on usearch's HNSW graph (Malkov & Yashunin, 2016, "Efficient and robust
//! approximate nearest neighbor search using Hierarchical Navigable Small World graphs").
//!
//! Cosine and dot indexes hold normalized vectors, so both use usearch's inner-product metric
//! (`1 - a·b`); L2 uses squared Euclidean distance and reports its square root.

use usearch::{Index, IndexOptions as UOptions, MetricKind, ScalarKind};

use crate::error::{IndexError, Result};
use crate::{HnswParams, Metric};

pub(crate) struct HnswStore {
    index: Index,
    metric: Metric,
}

fn hnsw_err(e: impl std::fmt::Display) -> IndexError {
    IndexError::Hnsw(e.to_string())
}

impl HnswStore {
    pub(crate) fn new(dim: usize, metric: Metric, p: HnswParams) -> Result<Self> {
        if p.connectivity < 2 || p.expansion_add == 0 || p.expansion_search == 0 {
            return Err(IndexError::Invalid(format!(
                "HNSW parameters {p:?}: connectivity must be ≥ 2 and expansions ≥ 1"
            )));
        }
        let options = UOptions {
            dimensions: dim,
            metric: match metric {
                Metric::Cosine | Metric::Dot => MetricKind::IP,
                Metric::L2 => MetricKind::L2sq,
            },
            quantization: ScalarKind::F32,
            connectivity: p.connectivity,
            expansion_add: p.expansion_add,
            expansion_search: p.expansion_search,
            multi: false,
        };
        let index = Index::new(&options).map_err(hnsw_err)?;
        Ok(Self { index, metric })
    }

    /// Grows capacity geometrically so single inserts stay amortized O(1) in reallocation.
    fn ensure_capacity(&self, extra: usize, threads: usize) -> Result<()> {
        let need = self.index.size() + extra;
        if need > self.index.capacity() {
            let cap = need.max(self.index.capacity() * 2).max(64);
            self.index
                .reserve_capacity_and_threads(cap, threads)
                .map_err(hnsw_err)?;
        }
        Ok(())
    }

    pub(crate) fn add(&mut self, key: u64, v: &[f32]) -> Result<()> {
        self.ensure_capacity(1, threads())?;
        self.index.add(key, v).map_err(hnsw_err)
    }

    /// Inserts from all cores: usearch allows concurrent `add` once capacity and thread slots are
    /// reserved.
    pub(crate) fn add_parallel(&mut self, items: &[(u64, &[f32])]) -> Result<()> {
        let threads = threads();
        self.ensure_capacity(items.len(), threads)?;
        let chunk = items.len().div_ceil(threads).max(1);
        let index = &self.index;
        let results: Vec<Result<()>> = std::thread::scope(|s| {
            let handles: Vec<_> = items
                .chunks(chunk)
                .map(|part| {
                    s.spawn(move || {
                        for (k, v) in part {
                            index.add(*k, v).map_err(hnsw_err)?;
                        }
                        Ok(())
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(IndexError::Hnsw("an insert thread panicked".into()))
                    })
                })
                .collect()
        });
        results.into_iter().collect()
    }

    pub(crate) fn remove(&mut self, key: u64) -> Result<()> {
        self.index.remove(key).map(|_| ()).map_err(hnsw_err)
    }

    pub(crate) fn search(&self, q: &[f32], k: usize) -> Result<Vec<(u64, f32)>> {
        let m = self.index.search(q, k).map_err(hnsw_err)?;
        Ok(m.keys
            .into_iter()
            .zip(m.distances)
            .map(|(key, d)| match self.metric {
                Metric::Cosine | Metric::Dot => (key, 1.0 - d),
                Metric::L2 => (key, d.max(0.0).sqrt()),
            })
            .collect())
    }

    /// The graph and its vectors as usearch serializes them.
    pub(crate) fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; self.index.serialized_length()];
        self.index.save_to_buffer(&mut buf).map_err(hnsw_err)?;
        Ok(buf)
    }

    /// Restores a graph saved by [`Self::to_bytes`] (the caller has verified the file's checksum, so
    /// the bytes are the ones written). Checks the restored graph against the file's header.
    pub(crate) fn from_bytes(
        dim: usize,
        metric: Metric,
        p: HnswParams,
        bytes: &[u8],
        expect_len: usize,
    ) -> Result<Self> {
        let s = Self::new(dim, metric, p)?;
        s.index.load_from_buffer(bytes).map_err(hnsw_err)?;
        if s.index.dimensions() != dim || s.index.size() != expect_len {
            return Err(IndexError::Hnsw(format!(
                "graph holds {} vectors of {} dimensions, the header says {expect_len} of {dim}",
                s.index.size(),
                s.index.dimensions()
            )));
        }
        s.index.change_expansion_search(p.expansion_search);
        Ok(s)
    }

    pub(crate) fn set_expansion_search(&self, ef: usize) {
        self.index.change_expansion_search(ef.max(1));
    }

    pub(crate) fn contains(&self, key: u64) -> bool {
        self.index.contains(key)
    }
}

fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
