//! Opens arbitrary bytes as GGUF and touches every metadata value and tensor view, then
//! builds the tokenizer and the model configuration from whatever parsed.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    pocketperf_fuzz::open_and_touch(data);
});
