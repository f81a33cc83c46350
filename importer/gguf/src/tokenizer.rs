//! Tokenizer construction from GGUF metadata (see lib docs).
