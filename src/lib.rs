//! cinder
