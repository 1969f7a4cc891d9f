//! Opens arbitrary bytes as GGUF and touches every metadata value and tensor view, then
//! builds the tokenizer and the model from whatever parsed (body: `testkit/src/fuzz.rs`,
//! compiled into `src/lib.rs`).
//!
//! Seeds: `POCKETPERF_FUZZ_CORPUS=$PWD/fuzz/corpus/gguf_open cargo test -p pocketperf-runtime
//! --test gguf_corrupt synthetic_files` from the repository root; then, from `fuzz/`,
//! `cargo fuzz run --sanitizer none gguf_open corpus/gguf_open` (stable toolchain).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    pocketperf_fuzz::open_and_touch(data);
});
