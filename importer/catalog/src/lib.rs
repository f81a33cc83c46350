//! Model catalog (see crate description).
