//! `pocketperf::fuzz_bodies::gate_rules` as a cargo-fuzz target (body and what it checks:
//! `harness/src/fuzz_bodies.rs`; CI runs the same body as a bounded property test,
//! `harness/tests/fuzz_parsers.rs`). From `fuzz/`: `cargo +nightly fuzz run gate_rules`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    pocketperf::fuzz_bodies::gate_rules(data);
});
