//! Fuzz target: any byte string must parse to `Ok` or `Err` (and, when `Ok`, dequantize every tensor)
//! without panicking, overflowing or allocating beyond a small multiple of its length.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = cinder_gguf_fuzz::parse_and_dequantize(data);
});
