#!/usr/bin/env bash
# One-time (idempotent) set-up of a fresh Debian machine as root: system packages the tests
# and the harness need (PoCL OpenCL runtime, adb, pip, Chromium for the report check, xmllint
# for the JUnit schema check), the Jenkins xunit JUnit schema (from pytest's source package), the
# Python package `gguf` (llama.cpp's own GGUF reader, for the `model align` read-back test),
# the Rust components (and, for the tests, the aarch64 target with a cross linker and QEMU),
# and the catalog models in the cache (smollm2-135m, gemma3-270m,
# qwen2.5-coder-0.5b: downloaded from PyPI and sha256-checked by `pocketperf model fetch --all`).
set -euo pipefail
cd "$(dirname "$0")/.."

# Installs those of the named Debian packages that are missing (as root, with apt-get).
apt_install() {
  local need=() pkg
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || need+=("$pkg")
  done
  [ "${#need[@]}" -gt 0 ] || return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    echo "setup: missing packages ${need[*]} (run as root, or install them)" >&2
    exit 2
  fi
}

pkgs=(ocl-icd-libopencl1 pocl-opencl-icd clinfo adb chromium libxml2-utils)
# python3 -m pip may come from a non-Debian Python; only install Debian's pip if none works.
python3 -m pip --version >/dev/null 2>&1 || pkgs+=(python3-pip)
apt_install "${pkgs[@]}"

if ! python3 -c "import gguf" 2>/dev/null; then
  echo "setup: installing the python package gguf==0.19.0"
  python3 -m pip install -q gguf==0.19.0 2>/dev/null ||
    python3 -m pip install -q --break-system-packages gguf==0.19.0
fi

# The JUnit schema the gate's XML is validated against (reports/tests/junit_schema.rs): the
# Jenkins xunit plugin's junit-10.xsd, as carried by pytest 8.3.4's source package (MIT).
xsd="${XDG_CACHE_HOME:-$HOME/.cache}/pocketperf/schemas/junit-10.xsd"
if [ ! -f "$xsd" ]; then
  echo "setup: fetching junit-10.xsd (pytest-8.3.4.tar.gz from PyPI)"
  tmp="$(mktemp -d)"
  python3 -m pip download -q --no-deps --no-binary :all: pytest==8.3.4 -d "$tmp"
  echo "965370d062bce11e73868e0335abac31b4d3de0e82f4007408d242b4f8610761  $tmp/pytest-8.3.4.tar.gz" |
    sha256sum -c --quiet
  mkdir -p "$(dirname "$xsd")"
  tar -xzf "$tmp/pytest-8.3.4.tar.gz" -O pytest-8.3.4/testing/example_scripts/junit-10.xsd >"$xsd.part"
  mv "$xsd.part" "$xsd"
  rm -rf "$tmp"
fi

rustup component add rustfmt clippy >/dev/null 2>&1 || true

# For the test suite: the aarch64 target, a cross linker and user-mode QEMU, with which
# scripts/test-aarch64.sh lints the handsets' architecture and runs the kernel tests there.
if [ "${POCKETPERF_SETUP_BUILD:-release}" = tests ]; then
  apt_install gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
  rustup target list --installed | grep -qx aarch64-unknown-linux-gnu ||
    rustup target add aarch64-unknown-linux-gnu >/dev/null
fi

# The binary that fetches the models: the release build for the main job; for the test suite
# (`POCKETPERF_SETUP_BUILD=tests`, set by scripts/test.sh) the test build, which `cargo test`
# then reuses as it is, so CI compiles the workspace once for tests instead of twice.
if [ "${POCKETPERF_SETUP_BUILD:-release}" = tests ]; then
  cargo test --workspace --no-run -q
  bin=./target/debug/pocketperf
else
  cargo build --release -q -p pocketperf
  bin=./target/release/pocketperf
fi
"$bin" model fetch --all >/dev/null
