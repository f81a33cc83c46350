//! The one error type of the GGUF crate. Every variant names what was wrong and where.

/// Errors from reading, validating or decoding a GGUF file.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// The file could not be opened or mapped.
    #[error("cannot read {path}: {source}")]
    Io {
        /// file path
        path: String,
        /// underlying error
        #[source]
        source: std::io::Error,
    },
    /// The first four bytes are not `GGUF`.
    #[error("not a GGUF file: bad magic {found:02x?} at offset 0 (expected \"GGUF\")")]
    BadMagic {
        /// the bytes found
        found: [u8; 4],
    },
    /// Only versions 2 and 3 are read.
    #[error("unsupported GGUF version {0} at offset 4 (supported: 2, 3)")]
    UnsupportedVersion(u32),
    /// The file ends before a field it must contain.
    #[error("truncated GGUF: need {needed} bytes for {what} at offset {offset}, file has {len}")]
    Truncated {
        /// what was being read
        what: String,
        /// where
        offset: u64,
        /// bytes needed
        needed: u64,
        /// file length
        len: u64,
    },
    /// A count in the header cannot fit in the file.
    #[error(
        "implausible {what} {count} at offset {offset}: the remaining {remaining} bytes cannot hold it"
    )]
    CountTooLarge {
        /// which count
        what: String,
        /// the count found
        count: u64,
        /// where
        offset: u64,
        /// bytes left in the file
        remaining: u64,
    },
    /// A string is not valid UTF-8.
    #[error("invalid UTF-8 in {what} at offset {offset}")]
    BadUtf8 {
        /// which string
        what: String,
        /// where
        offset: u64,
    },
    /// A metadata value type id is unknown.
    #[error("unknown metadata value type {type_id} for key {key:?} at offset {offset}")]
    UnknownValueType {
        /// key being read
        key: String,
        /// type id found
        type_id: u32,
        /// where
        offset: u64,
    },
    /// Arrays nested deeper than the reader allows.
    #[error("metadata key {key:?}: arrays nested deeper than {max} at offset {offset}")]
    NestingTooDeep {
        /// key being read
        key: String,
        /// limit
        max: usize,
        /// where
        offset: u64,
    },
    /// A key appears twice.
    #[error("duplicate metadata key {key:?} at offset {offset}")]
    DuplicateKey {
        /// the key
        key: String,
        /// where
        offset: u64,
    },
    /// A tensor name appears twice.
    #[error("duplicate tensor name {name:?} at offset {offset}")]
    DuplicateTensor {
        /// the tensor
        name: String,
        /// where
        offset: u64,
    },
    /// A tensor's type id is not one Cinder reads.
    #[error("tensor {name:?}: unknown or unsupported ggml type id {type_id} at offset {offset}")]
    UnknownTensorType {
        /// the tensor
        name: String,
        /// type id found
        type_id: u32,
        /// where
        offset: u64,
    },
    /// A tensor header is inconsistent (dimension count, zero or overflowing dims, partial blocks).
    #[error("tensor {name:?}: {reason} (header at offset {offset})")]
    BadTensorShape {
        /// the tensor
        name: String,
        /// what is wrong
        reason: String,
        /// where
        offset: u64,
    },
    /// A tensor's data lies outside the data section, is misaligned, or overlaps another tensor.
    #[error("tensor {name:?}: {reason}")]
    BadTensorData {
        /// the tensor
        name: String,
        /// what is wrong
        reason: String,
    },
    /// `general.alignment` is not a power of two or has the wrong type.
    #[error("bad general.alignment {0}: must be a non-zero power of two u32")]
    BadAlignment(String),
    /// A requested metadata key is missing.
    #[error("missing metadata key {0:?}")]
    MissingKey(String),
    /// A metadata key has an unexpected type or value.
    #[error("metadata key {key:?}: {reason}")]
    BadKey {
        /// the key
        key: String,
        /// what is wrong
        reason: String,
    },
    /// A requested tensor is missing.
    #[error("missing tensor {0:?}")]
    MissingTensor(String),
    /// Dequantization was asked for a type it does not cover or with a wrong buffer size.
    #[error("cannot dequantize {ty}: {reason}")]
    Dequant {
        /// the type
        ty: String,
        /// what is wrong
        reason: String,
    },
    /// Quantization was asked for a type it does not produce, or for values it cannot take.
    #[error("cannot quantize to {ty}: {reason}")]
    Quantize {
        /// the target type
        ty: String,
        /// what is wrong
        reason: String,
    },
}

/// Result alias for this crate.
pub type Result<T, E = GgufError> = std::result::Result<T, E>;
