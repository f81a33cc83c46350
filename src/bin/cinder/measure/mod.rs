//! The measuring commands, apart from the ones a user runs a model with: speed (`bench`,
//! `bench-embed`, `bench-index`) and quality (`perplexity`, `eval-quant`). They drive the same
//! library calls as the user-facing commands and add only timing, scoring and reporting; the
//! scoring itself is `cinder::eval`, not the serving runtime.

pub mod bench;
pub mod embed;
mod engine;
pub mod eval_quant;
mod grammar;
pub mod perplexity;
mod spec;
