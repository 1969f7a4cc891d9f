#!/usr/bin/env bash
# The handsets' architecture on this x86 machine: the workspace's libraries and binary linted
# for aarch64-unknown-linux-gnu (clippy, warnings as errors, so code behind
# cfg(target_arch = "aarch64") is compiled at all), and the kernel property tests run under
# user-mode QEMU, where the NEON tier is checked against the scalar reference as the x86
# tiers are. Needs the target and the cross tools from scripts/setup.sh (tests mode).
#
# Not run here, to keep CI short: the model-level tests (a real model under QEMU takes
# minutes per test; `--test model_reference -- --skip perplexity`, SmolLM2 on the NEON tier
# against llama.cpp's logits and greedy tokens, passes in about two minutes) and the
# runtime's unit tests (`kv::tests::mapping_asks_for_huge_pages` reads the
# huge-page advice back from /proc/self/smaps, which QEMU's user mode does not pass on).
set -euo pipefail
cd "$(dirname "$0")/.."

target=aarch64-unknown-linux-gnu
sysroot=/usr/aarch64-linux-gnu
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L $sysroot"
# C code in build dependencies (criterion's `alloca`) is compiled for the target too.
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc

cargo clippy --workspace --target "$target" -q -- -D warnings
cargo test -q -p pocketperf-runtime --target "$target" \
  --test quant_props --test quant_props_k --test kquant_tiles
