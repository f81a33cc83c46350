//! [`Embedder`]: a sentence-embedding model on a backend chosen at run time, as a cheap
//! `Clone + Send + Sync` handle, and [`TextIndex`]: texts embedded into a vector index.

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use cinder_backends::{BackendKind, BackendTask, InferenceBackend};
use cinder_index::{Hit, IndexKind, IndexOptions, Metric, VectorIndex};

use crate::error::Result;

/// The backend-erased model: one forward at a time (the lock), whatever the backend's tensors.
trait DynEmbed: Send + Sync {
    fn embed(&self, texts: &[&str], normalize: bool) -> Result<Vec<Vec<f32>>>;
}

struct OnBackend<B: InferenceBackend>(Mutex<cinder_models::decoder_embed::Embedder<B>>);

impl<B: InferenceBackend> DynEmbed for OnBackend<B> {
    fn embed(&self, texts: &[&str], normalize: bool) -> Result<Vec<Vec<f32>>> {
        // A poisoned lock only means an earlier call panicked; the weights are unchanged.
        let m = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(m.embed(texts, normalize)?)
    }
}

struct Load {
    name: String,
    path: std::path::PathBuf,
}

impl BackendTask for Load {
    /// the model and its vectors' length (read once: asking the model takes its lock)
    type Output = Result<(Box<dyn DynEmbed>, usize)>;
    fn run<B: InferenceBackend>(self, device: B::Device) -> Self::Output {
        let e = cinder_importer::load_text_embedder::<B>(&self.name, &self.path, &device)?;
        let dim = e.dim();
        Ok((Box::new(OnBackend(Mutex::new(e))), dim))
    }
}

/// A text-embedding model: all-MiniLM (SafeTensors or ONNX), EmbeddingGemma, or a GGUF decoder
/// with a pooling type. `Clone` shares the one model.
///
/// # Examples
///
/// ```no_run
/// let e = cinder::Embedder::load("all-minilm-l6-v2")?;
/// let v = e.embed(&["a cat sat on the mat", "a feline rested on the rug"])?;
/// let cos: f32 = v[0].iter().zip(&v[1]).map(|(a, b)| a * b).sum();
/// println!("dim {}, cosine {cos:.3}", e.dim());
/// # Ok::<(), cinder::Error>(())
/// ```
#[derive(Clone)]
pub struct Embedder {
    model: Arc<dyn DynEmbed>,
    dim: usize,
    name: String,
    backend: BackendKind,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("model", &self.name)
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

impl Embedder {
    /// Loads an embedding model (catalog name or path) on the automatically chosen backend.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let e = cinder::Embedder::load("all-minilm-l6-v2")?;
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn load(model: impl AsRef<Path>) -> Result<Self> {
        Self::load_on(model, BackendKind::Auto)
    }

    /// Loads an embedding model on `backend`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let e = cinder::Embedder::load_on("all-minilm-l6-v2", cinder::BackendKind::Flex)?;
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn load_on(model: impl AsRef<Path>, backend: BackendKind) -> Result<Self> {
        let name = model.as_ref().to_string_lossy().into_owned();
        let path = crate::resolve_model(&name)?;
        let backend = backend.resolve()?;
        let task = Load {
            name: name.clone(),
            path,
        };
        let (model, dim) = cinder_backends::dispatch(backend, task)??;
        Ok(Self {
            model: Arc::from(model),
            dim,
            name,
            backend,
        })
    }

    /// The vectors' length.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// assert_eq!(cinder::Embedder::load("all-minilm-l6-v2")?.dim(), 384);
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The backend the model runs on.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// println!("{}", cinder::Embedder::load("all-minilm-l6-v2")?.backend());
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn backend(&self) -> BackendKind {
        self.backend
    }

    /// L2-normalized embeddings of `texts`, in order.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let v = cinder::Embedder::load("all-minilm-l6-v2")?.embed(&["a", "b"])?;
    /// assert_eq!(v.len(), 2);
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn embed<S: AsRef<str>>(&self, texts: &[S]) -> Result<Vec<Vec<f32>>> {
        let refs: Vec<&str> = texts.iter().map(AsRef::as_ref).collect();
        self.model.embed(&refs, true)
    }

    /// The pooled embeddings as the model gives them (not normalized).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let v = cinder::Embedder::load("all-minilm-l6-v2")?.embed_raw(&["a"])?;
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn embed_raw<S: AsRef<str>>(&self, texts: &[S]) -> Result<Vec<Vec<f32>>> {
        let refs: Vec<&str> = texts.iter().map(AsRef::as_ref).collect();
        self.model.embed(&refs, false)
    }

    /// An empty in-memory index of texts embedded by this model (exact cosine search; see
    /// [`TextIndex::with_index`] for HNSW or a saved index).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let e = cinder::Embedder::load("all-minilm-l6-v2")?;
    /// let mut idx = e.index()?;
    /// idx.add("paris", "Paris is the capital of France.")?;
    /// let hits = idx.search("French capital", 1)?;
    /// assert_eq!(hits[0].id, "paris");
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn index(&self) -> Result<TextIndex> {
        let opts = IndexOptions::new(self.dim(), Metric::Cosine, IndexKind::Flat);
        TextIndex::with_index(self.clone(), VectorIndex::new(opts)?)
    }
}

/// Texts in a [`VectorIndex`], embedded by an [`Embedder`]: add texts, search with a query text.
/// Each point's payload keeps its text (`{"text": …}`).
///
/// # Examples
///
/// ```no_run
/// let e = cinder::Embedder::load("all-minilm-l6-v2")?;
/// let mut idx = e.index()?;
/// idx.add_all([("a", "Rust is a systems language."), ("b", "Bread needs yeast.")])?;
/// for hit in idx.search("programming", 1)? {
///     println!("{} {:.3} {}", hit.id, hit.score, hit.payload["text"]);
/// }
/// # Ok::<(), cinder::Error>(())
/// ```
#[derive(Debug)]
pub struct TextIndex {
    embedder: Embedder,
    index: VectorIndex,
}

impl TextIndex {
    /// Wraps an existing index (for example one opened with [`VectorIndex::open`]); its
    /// dimension must be the embedder's.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use cinder::index::{IndexKind, IndexOptions, Metric, VectorIndex};
    /// let e = cinder::Embedder::load("all-minilm-l6-v2")?;
    /// let hnsw = VectorIndex::new(IndexOptions::new(e.dim(), Metric::Cosine, IndexKind::Hnsw))?;
    /// let idx = cinder::TextIndex::with_index(e, hnsw)?;
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn with_index(embedder: Embedder, index: VectorIndex) -> Result<Self> {
        if index.options().dim != embedder.dim() {
            return Err(crate::Error::InvalidOption(format!(
                "the index holds {}-dimensional vectors; the embedder makes {}",
                index.options().dim,
                embedder.dim()
            )));
        }
        Ok(Self { embedder, index })
    }

    /// Embeds `text` and stores it under `id` (replacing an earlier one).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let mut idx = cinder::Embedder::load("all-minilm-l6-v2")?.index()?;
    /// idx.add("1", "The sky is blue.")?;
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn add(&mut self, id: &str, text: &str) -> Result<()> {
        self.add_all([(id, text)])
    }

    /// Embeds and stores many `(id, text)` pairs in one batch.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let mut idx = cinder::Embedder::load("all-minilm-l6-v2")?.index()?;
    /// idx.add_all([("1", "The sky is blue."), ("2", "Grass is green.")])?;
    /// assert_eq!(idx.len(), 2);
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn add_all<'a>(
        &mut self,
        docs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<()> {
        let docs: Vec<(&str, &str)> = docs.into_iter().collect();
        let texts: Vec<&str> = docs.iter().map(|d| d.1).collect();
        let vectors = self.embedder.embed(&texts)?;
        for ((id, text), v) in docs.iter().zip(&vectors) {
            self.index
                .upsert(id, v, serde_json::json!({ "text": text }))?;
        }
        Ok(())
    }

    /// The `k` texts closest to `query`, closest first.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let mut idx = cinder::Embedder::load("all-minilm-l6-v2")?.index()?;
    /// idx.add("1", "The sky is blue.")?;
    /// let hits = idx.search("colour of the sky", 1)?;
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn search(&self, query: &str, k: usize) -> Result<Vec<Hit>> {
        let q = self.embedder.embed(&[query])?;
        Ok(self.index.search(&q[0], k, None)?)
    }

    /// The text stored under `id`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let mut idx = cinder::Embedder::load("all-minilm-l6-v2")?.index()?;
    /// idx.add("1", "The sky is blue.")?;
    /// assert_eq!(idx.text("1"), Some("The sky is blue."));
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn text(&self, id: &str) -> Option<&str> {
        self.index.payload(id)?.get("text")?.as_str()
    }

    /// Points stored.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let idx = cinder::Embedder::load("all-minilm-l6-v2")?.index()?;
    /// assert!(idx.is_empty());
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether nothing is stored.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let idx = cinder::Embedder::load("all-minilm-l6-v2")?.index()?;
    /// assert_eq!(idx.is_empty(), idx.len() == 0);
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The index underneath (to save it, or tune its search).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let idx = cinder::Embedder::load("all-minilm-l6-v2")?.index()?;
    /// idx.inner().save(std::path::Path::new("docs.idx"))?;
    /// # Ok::<(), cinder::Error>(())
    /// ```
    pub fn inner(&self) -> &VectorIndex {
        &self.index
    }
}
