//! Cinder's serving layer. The OpenAI-compatible HTTP/SSE and gRPC server lands with the serving issue;
//! the crate exists now so the dependency graph (backends <- runtime <- models <- importer <- server) is fixed.
