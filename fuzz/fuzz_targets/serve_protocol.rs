//! `pocketperf::fuzz_bodies::serve_protocol` as a cargo-fuzz target (body and what it checks:
//! `harness/src/fuzz_bodies.rs`; CI runs the same body as a bounded property test,
//! `harness/tests/fuzz_parsers.rs`). From `fuzz/`: `cargo +nightly fuzz run serve_protocol`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    pocketperf::fuzz_bodies::serve_protocol(data);
});
