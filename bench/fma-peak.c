// One core's peak rate of the vector instructions the runtime's x86 kernels are built from:
// 512-bit and 256-bit FMAs (`vfmadd231ps`) and 512-bit `vpdpbusd` (AVX512-VNNI), each over 16
// (or 12) independent accumulator chains so that neither latency nor memory limits the loop.
// The kernels' efficiency in docs/PERFORMANCE.md is their measured instruction rate over
// these. Not part of CI; x86-64 only:
//
//   gcc -O3 -funroll-all-loops bench/fma-peak.c -o /tmp/fma-peak && /tmp/fma-peak
//
// Prints, for two rounds, giga-instructions per second of each kind the CPU has. The
// unrolled loop must keep the accumulators in registers (`objdump -d` shows no stores in
// it); -O2 without unrolling keeps them on the stack and measures store forwarding instead.
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

__attribute__((target("avx512f"))) static float fma512(long n) {
  __m512 a[16];
  for (int i = 0; i < 16; i++) a[i] = _mm512_set1_ps(i * 0.001f);
  __m512 b = _mm512_set1_ps(0.9999f), c = _mm512_set1_ps(0.0001f);
  for (long k = 0; k < n; k++) {
    for (int i = 0; i < 16; i++) a[i] = _mm512_fmadd_ps(a[i], b, c);
    __asm__ volatile("" : : "v"(a[0]));
  }
  __m512 s = a[0];
  for (int i = 1; i < 16; i++) s = _mm512_add_ps(s, a[i]);
  return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) static float fma256(long n) {
  __m256 a[12];
  for (int i = 0; i < 12; i++) a[i] = _mm256_set1_ps(i * 0.001f);
  __m256 b = _mm256_set1_ps(0.9999f), c = _mm256_set1_ps(0.0001f);
  for (long k = 0; k < n; k++) {
    for (int i = 0; i < 12; i++) a[i] = _mm256_fmadd_ps(a[i], b, c);
    __asm__ volatile("" : : "v"(a[0]));
  }
  __m256 s = a[0];
  for (int i = 1; i < 12; i++) s = _mm256_add_ps(s, a[i]);
  float o[8];
  _mm256_storeu_ps(o, s);
  return o[0];
}

__attribute__((target("avx512f,avx512vnni"))) static int vnni512(long n) {
  __m512i a[16];
  for (int i = 0; i < 16; i++) a[i] = _mm512_set1_epi32(i);
  __m512i b = _mm512_set1_epi32(0x01010101), c = _mm512_set1_epi32(0x02020202);
  for (long k = 0; k < n; k++) {
    for (int i = 0; i < 16; i++) a[i] = _mm512_dpbusd_epi32(a[i], b, c);
    __asm__ volatile("" : : "v"(a[0]));
  }
  __m512i s = a[0];
  for (int i = 1; i < 16; i++) s = _mm512_add_epi32(s, a[i]);
  return _mm512_reduce_add_epi32(s);
}

int main(void) {
  const long n = 200000000;
  __builtin_cpu_init();
  int has512 = __builtin_cpu_supports("avx512f");
  int hasvnni = has512 && __builtin_cpu_supports("avx512vnni");
  int has256 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  for (int r = 0; r < 2; r++) {
    double t, d;
    if (has512) {
      t = now();
      float x = fma512(n);
      d = now() - t;
      printf("512-bit FMA: %.2f G/s (checksum %g)\n", 16.0 * n / d / 1e9, x);
    }
    if (has256) {
      t = now();
      float x = fma256(n);
      d = now() - t;
      printf("256-bit FMA: %.2f G/s (checksum %g)\n", 12.0 * n / d / 1e9, x);
    }
    if (hasvnni) {
      t = now();
      int q = vnni512(n);
      d = now() - t;
      printf("512-bit vpdpbusd: %.2f G/s (checksum %d)\n", 16.0 * n / d / 1e9, q);
    }
  }
  return 0;
}
