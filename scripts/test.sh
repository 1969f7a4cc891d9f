#!/usr/bin/env bash
# The full test suite: set-up, formatting, lints, every test, and the model-level tests again
# under every other SIMD tier this CPU supports (POCKETPERF_ISA forces a tier).
set -euo pipefail
cd "$(dirname "$0")/.."
export POCL_CACHE_DIR="${POCL_CACHE_DIR:-$(mktemp -d)}"

POCKETPERF_SETUP_BUILD=tests bash scripts/setup.sh

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -q -- -D warnings
cargo test --workspace -q
# The handsets' architecture: aarch64 lints and the kernel tests under QEMU.
bash scripts/test-aarch64.sh

tiers="scalar"
grep -qw avx2 /proc/cpuinfo && tiers="$tiers avx2"
grep -qw avx512bw /proc/cpuinfo && grep -qw avx512vl /proc/cpuinfo && tiers="$tiers avx512"
# `cargo test --workspace` above already ran them on the best tier (the automatic choice).
best="${tiers##* }"
for isa in $tiers; do
  [ "$isa" = "$best" ] && [ -z "${POCKETPERF_ISA:-}" ] && continue
  echo "== model tests under POCKETPERF_ISA=$isa"
  if [ "$isa" = avx2 ]; then
    # The AVX2 tier returns the scalar tier's bits on every model (tests/tier_identity.rs, in
    # the workspace run above), so the scalar tier's logit and greedy checks below hold for it
    # too; what runs here is perplexity on the shared text, which then stands for both tiers
    # (the scalar tier alone would need about ten minutes for it on this 2-core machine).
    POCKETPERF_ISA=$isa cargo test -q -p pocketperf-runtime --test model_reference -- perplexity
    POCKETPERF_ISA=$isa cargo test -q -p pocketperf-runtime --test arch_reference -- perplexity
    # The Q8_0 KV cache's scalar attention kernels (the AVX2 tier runs them) on SmolLM2
    # (the other two models' run takes minutes here; their head shapes are in the unit
    # tests, which compare the scalar and SIMD kernels).
    POCKETPERF_ISA=$isa cargo test -q -p pocketperf-runtime --test kv_q8_0 -- smollm2
    continue
  fi
  # SmolLM2: logits, greedy and prefill checks under this tier (its perplexity runs under
  # AVX2 above, which returns the scalar tier's bits, and under the best tier).
  POCKETPERF_ISA=$isa cargo test -q -p pocketperf-runtime --test model_reference -- --skip perplexity
  # Gemma 3 and Qwen2.5: logits and greedy continuations under this tier.
  POCKETPERF_ISA=$isa cargo test -q -p pocketperf-runtime --test arch_reference -- logits_and_greedy
done
