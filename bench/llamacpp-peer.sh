#!/usr/bin/env bash
# Build the llama.cpp peer that `docs/PERFORMANCE.md` compares against: llama.cpp as vendored
# in the PyPI source package llama-cpp-python==0.3.36, built with explicit CPU options (no
# -march=native, AMX off: on the reference VM llama.cpp's AMX path dies with SIGILL on
# multi-token batches). AVX-512 (F, VBMI, VNNI, BF16) and AVX-VNNI are switched on only where
# /proc/cpuinfo lists them: a peer built with AVX-VNNI dies with SIGILL on a Zen 4 VM, which
# has AVX-512 VNNI but not AVX-VNNI. The build stamp names the options, so a cached build made
# with other options is rebuilt. It builds llama-bench, llama-server (the HTTP side-by-side,
# bench/http-side-by-side.sh) and the shared libllama (bench/cold-start-peer.sh links its
# cold-start probe against it). The result is cached; a second call only prints the path of
# llama-bench.
#
#   bench/llamacpp-peer.sh            build if needed, print the llama-bench path
#   POCKETPERF_PEER_DIR=DIR           cache directory (default: $XDG_CACHE_HOME/pocketperf/llamacpp-peer)
#
# Takes about 20 minutes on 2 cores. Not part of CI.
set -euo pipefail

version=0.3.36
cache="${XDG_CACHE_HOME:-$HOME/.cache}"
dir="${POCKETPERF_PEER_DIR:-$cache/pocketperf/llamacpp-peer}"
venv="$dir/venv"
src="$dir/src"
build="$dir/build"
bin="$build/bin/llama-bench"

# ON where the CPU lists the flag (a word of /proc/cpuinfo's flags line), OFF otherwise.
cpu_has() {
  if grep -qw -- "$1" /proc/cpuinfo 2> /dev/null; then echo ON; else echo OFF; fi
}
export CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=$(cpu_has avx512f) -DGGML_AVX512_VBMI=$(cpu_has avx512vbmi) -DGGML_AVX512_VNNI=$(cpu_has avx512_vnni) -DGGML_AVX512_BF16=$(cpu_has avx512_bf16) -DGGML_AVX_VNNI=$(cpu_has avx_vnni) -DGGML_AMX_INT8=OFF"
stamp="$dir/built-$version-server-$(printf %s "$CMAKE_ARGS" | sha256sum | cut -c1-12)"

if [[ -f "$stamp" && -x "$bin" ]]; then
  echo "$bin"
  exit 0
fi

mkdir -p "$dir"
log() { echo "llamacpp-peer: $*" >&2; }

if [[ ! -x "$venv/bin/python" ]]; then
  log "creating venv $venv"
  python3 -m venv "$venv"
fi
# cmake and ninja come from PyPI so the host needs only a C/C++ compiler; scikit-build-core
# lets pip read the source package's metadata without building it.
"$venv/bin/pip" install -q "cmake>=3.21" ninja scikit-build-core >&2

if [[ ! -f "$src/vendor/llama.cpp/CMakeLists.txt" ]]; then
  log "fetching the llama-cpp-python==$version source package"
  rm -rf "$dir/sdist" "$src"
  mkdir -p "$dir/sdist"
  "$venv/bin/pip" download -q --no-deps --no-binary :all: --no-build-isolation \
    "llama-cpp-python==$version" -d "$dir/sdist" >&2
  tarball=$(ls "$dir/sdist"/llama_cpp_python-"$version".tar.gz)
  mkdir -p "$src"
  tar -xzf "$tarball" -C "$src" --strip-components=1
fi

log "configuring ($CMAKE_ARGS)"
# shellcheck disable=SC2086 # CMAKE_ARGS is a list of options
"$venv/bin/cmake" -S "$src/vendor/llama.cpp" -B "$build" -G Ninja \
  -DCMAKE_MAKE_PROGRAM="$venv/bin/ninja" -DCMAKE_BUILD_TYPE=Release \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
  -DLLAMA_BUILD_SERVER=ON -DBUILD_SHARED_LIBS=ON $CMAKE_ARGS >&2
log "building llama-bench and llama-server (about 20 minutes on 2 cores)"
"$venv/bin/cmake" --build "$build" --target llama-bench llama-server -j "$(nproc)" >&2
touch "$stamp"
echo "$bin"
