// The inner step of an 8-bit weight tile (one weight row against 16 activation rows, Q5_0 /
// Q8_0 style: 32-value blocks, one float scale per block on each side) in two layouts, timed
// alone on one core:
//
// - quarter-block lanes, the layout of the runtime's AVX-512 tiles (quant::gemm512): a group
//   of four blocks is two 512-bit registers; each 32-bit lane of the two `vpdpbusd` sums 8 of
//   a block's 32 products, so every 128 products take the float step (convert, the two
//   blocks' scales multiplied, FMA into the row's sum): 2 + 3 instructions;
// - block lanes: sixteen blocks are eight registers, 4 bytes of each block per register, so
//   each lane of eight chained `vpdpbusd` holds a whole block's dot before one float step for
//   512 products: 8 + 3 instructions.
//
// The integers and the float step per block are those of the runtime; only the grouping of
// lanes differs. Not part of CI; x86-64 with AVX512-VNNI only:
//
//   gcc -O3 bench/tile-layout.c -o /tmp/tile-layout && /tmp/tile-layout 1024 300000
//
// Arguments: the row length K (a multiple of 512) and the repetitions. Prints five rounds of
// both layouts' rate in G byte multiply-adds per second and their ratio.
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ROWS 16

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

// Quarter-block lanes: `ng` groups of four blocks; activation row j's group g at
// a + (j·ng + g)·128, its four block scales at da + (j·ng + g)·4.
__attribute__((target("avx512f,avx512bw,avx512vnni"), noinline)) static void quarter(
    const unsigned char *wlo, const unsigned char *whi, const float *dw, int ng,
    const unsigned char *a, const float *da, const int *neg, float *out) {
  __m512 acc[ROWS];
  for (int j = 0; j < ROWS; j++) acc[j] = _mm512_setzero_ps();
  for (int g = 0; g < ng; g++) {
    __m512i lo = _mm512_loadu_si512(wlo + 64 * g), hi = _mm512_loadu_si512(whi + 64 * g);
    __m512 d = _mm512_loadu_ps(dw + 16 * g);
    for (int j = 0; j < ROWS; j++) {
      const unsigned char *ap = a + ((size_t)j * ng + g) * 128;
      __m512i t = _mm512_loadu_si512(neg + 16 * (g * ROWS + j));
      t = _mm512_dpbusd_epi32(t, lo, _mm512_loadu_si512(ap));
      t = _mm512_dpbusd_epi32(t, hi, _mm512_loadu_si512(ap + 64));
      __m512 s = _mm512_mul_ps(d, _mm512_broadcast_f32x4(_mm_loadu_ps(da + ((size_t)j * ng + g) * 4)));
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), s, acc[j]);
    }
  }
  for (int j = 0; j < ROWS; j++) out[j] = _mm512_reduce_add_ps(acc[j]);
}

// Block lanes: `nu` units of sixteen blocks; activation row j's unit u at a + (j·nu + u)·512,
// its sixteen block scales at da + (j·nu + u)·16.
__attribute__((target("avx512f,avx512bw,avx512vnni"), noinline)) static void whole(
    const unsigned char *w, const float *dw, int nu, const unsigned char *a, const float *da,
    const int *neg, float *out) {
  __m512 acc[ROWS];
  for (int j = 0; j < ROWS; j++) acc[j] = _mm512_setzero_ps();
  for (int u = 0; u < nu; u++) {
    __m512 d = _mm512_loadu_ps(dw + 16 * u);
    for (int j = 0; j < ROWS; j++) {
      const unsigned char *ap = a + ((size_t)j * nu + u) * 512;
      __m512i t = _mm512_loadu_si512(neg + 16 * (u * ROWS + j));
      for (int k = 0; k < 8; k++)
        t = _mm512_dpbusd_epi32(t, _mm512_loadu_si512(w + 64 * (8 * u + k)), _mm512_loadu_si512(ap + 64 * k));
      __m512 s = _mm512_mul_ps(d, _mm512_loadu_ps(da + ((size_t)j * nu + u) * 16));
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), s, acc[j]);
    }
  }
  for (int j = 0; j < ROWS; j++) out[j] = _mm512_reduce_add_ps(acc[j]);
}

static void *zalloc(size_t n) {
  void *p = aligned_alloc(64, (n + 63) / 64 * 64);
  if (!p) {
    fprintf(stderr, "tile-layout: out of memory\n");
    exit(2);
  }
  memset(p, 0, n);
  return p;
}

int main(int argc, char **argv) {
  int k = argc > 1 ? atoi(argv[1]) : 1024;
  long reps = argc > 2 ? atol(argv[2]) : 300000;
  if (k <= 0 || k % 512 != 0 || reps <= 0) {
    fprintf(stderr, "tile-layout: K must be a positive multiple of 512 (got %d), reps positive\n", k);
    return 2;
  }
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512vnni")) {
    fprintf(stderr, "tile-layout: this CPU lacks AVX-512 F, BW or VNNI\n");
    return 2;
  }
  int nb = k / 32, ng = nb / 4, nu = nb / 16;
  unsigned char *a = zalloc((size_t)ROWS * k), *w = zalloc(k);
  unsigned char *wlo = zalloc(64 * ng), *whi = zalloc(64 * ng);
  float *da = zalloc(sizeof(float) * ROWS * nb * 4), *dw = zalloc(sizeof(float) * 16 * ng);
  int *neg = zalloc(sizeof(int) * 16 * ROWS * ng);
  srand(1);
  for (long i = 0; i < (long)ROWS * k; i++) a[i] = rand() & 0x7f;
  for (int i = 0; i < k; i++) w[i] = 1 + i % 31;
  for (int i = 0; i < 64 * ng; i++) wlo[i] = w[i % k], whi[i] = w[(i + 7) % k];
  for (int i = 0; i < ROWS * nb * 4; i++) da[i] = 0.01f * (i % 7 + 1);
  for (int i = 0; i < 16 * ng; i++) dw[i] = 0.5f;
  for (int i = 0; i < 16 * ROWS * ng; i++) neg[i] = -16;
  float out[ROWS];
  double macs = (double)reps * ROWS * k;
  for (int r = 0; r < 5; r++) {
    double t = now();
    for (long i = 0; i < reps; i++) {
      quarter(wlo, whi, dw, ng, a, da, neg, out);
      __asm__ volatile("" : : "r"(out) : "memory");
    }
    double d1 = now() - t;
    t = now();
    for (long i = 0; i < reps; i++) {
      whole(w, dw, nu, a, da, neg, out);
      __asm__ volatile("" : : "r"(out) : "memory");
    }
    double d2 = now() - t;
    printf("K=%d quarter-block lanes: %.1f G/s, block lanes: %.1f G/s, ratio %.2f\n", k,
           macs / d1 / 1e9, macs / d2 / 1e9, d1 / d2);
  }
  return 0;
}
