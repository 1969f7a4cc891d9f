#!/usr/bin/env bash
# The full test suite: set-up, formatting, lints, every test, and the model-level tests again
# under every other SIMD tier this CPU supports (POCKETPERF_ISA forces a tier).
set -euo pipefail
cd "$(dirname "$0")/.."
export POCL_CACHE_DIR="${POCL_CACHE_DIR:-$(mktemp -d)}"

bash scripts/setup.sh

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -q -- -D warnings
cargo test --workspace -q

tiers="scalar"
grep -qw avx2 /proc/cpuinfo && tiers="$tiers avx2"
grep -qw avx512bw /proc/cpuinfo && grep -qw avx512vl /proc/cpuinfo && tiers="$tiers avx512"
# `cargo test --workspace` above already ran them on the best tier (the automatic choice).
best="${tiers##* }"
for isa in $tiers; do
  [ "$isa" = "$best" ] && [ -z "${POCKETPERF_ISA:-}" ] && continue
  echo "== model tests under POCKETPERF_ISA=$isa"
  POCKETPERF_ISA=$isa cargo test -q -p pocketperf-runtime --test model_reference
  # Gemma 3 and Qwen2.5: logits, greedy continuations and the perplexity of the text's first
  # two chunks (against llama.cpp's running perplexity there) under this tier. The whole
  # text's perplexity runs under the best tier (above): under the scalar tier it alone would
  # take most of CI's time.
  POCKETPERF_ISA=$isa cargo test -q -p pocketperf-runtime --test arch_reference -- logits_and_greedy first_chunks
done
