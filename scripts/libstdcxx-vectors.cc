// Prints, as JSON, reference outputs of std::mt19937 and of GNU libstdc++'s
// uniform_int_distribution, shuffle, generate_canonical, uniform_real_distribution and
// exponential_distribution over it. The scenarios crate's tests compare its own
// implementation of these algorithms with this output (scenarios/tests/data/README.md).
// Build and run: g++ -O2 -std=c++17 scripts/libstdcxx-vectors.cc -o libstdcxx-vectors && ./libstdcxx-vectors
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

static void list_u64(const std::vector<uint64_t>& v) {
  std::printf("[");
  for (size_t i = 0; i < v.size(); ++i) std::printf("%s%llu", i ? "," : "", (unsigned long long)v[i]);
  std::printf("]");
}

static uint64_t bits(double d) {
  uint64_t b;
  std::memcpy(&b, &d, sizeof b);
  return b;
}

int main() {
  std::printf("{\"mt19937\":[");
  const uint64_t seeds[] = {0, 5489, 2085463073848966840ull, 0xffffffffull};
  for (size_t k = 0; k < 4; ++k) {
    std::mt19937 g(seeds[k]);
    std::vector<uint64_t> out;
    for (int i = 0; i < 8; ++i) out.push_back(g());
    std::printf("%s{\"seed\":%llu,\"out\":", k ? "," : "", (unsigned long long)seeds[k]);
    list_u64(out);
    std::printf("}");
  }
  std::printf("],\"uniform_int\":[");
  const uint64_t highs[] = {0, 1, 2, 9, 63, 499, 999, 2147483646ull, 4294967294ull,
                            4294967295ull, 4294967296ull, 1099511627783ull, UINT64_MAX};
  for (size_t k = 0; k < sizeof highs / sizeof *highs; ++k) {
    std::mt19937 g(42);
    std::vector<uint64_t> out;
    std::uniform_int_distribution<uint64_t> d(0, highs[k]);
    for (int i = 0; i < 12; ++i) out.push_back(d(g));
    std::printf("%s{\"b\":%llu,\"out\":", k ? "," : "", (unsigned long long)highs[k]);
    list_u64(out);
    std::printf("}");
  }
  std::printf("],\"shuffle\":[");
  const size_t sizes[] = {1, 2, 3, 4, 5, 10, 11, 65535, 65536, 70000};
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; ++k) {
    std::mt19937 g(7);
    std::vector<uint64_t> v(sizes[k]);
    std::iota(v.begin(), v.end(), 0);
    std::shuffle(v.begin(), v.end(), g);
    std::vector<uint64_t> head(v.begin(), v.begin() + std::min<size_t>(v.size(), 16));
    std::vector<uint64_t> tail(v.end() - std::min<size_t>(v.size(), 16), v.end());
    std::printf("%s{\"n\":%zu,\"head\":", k ? "," : "", sizes[k]);
    list_u64(head);
    std::printf(",\"tail\":");
    list_u64(tail);
    std::printf(",\"next\":%llu}", (unsigned long long)g());
  }
  std::vector<uint64_t> canon, real, expo;
  {
    std::mt19937 g(2024);
    for (int i = 0; i < 16; ++i) canon.push_back(bits(std::generate_canonical<double, 53>(g)));
    std::uniform_real_distribution<double> ur(2.5, 7.0);
    for (int i = 0; i < 16; ++i) real.push_back(bits(ur(g)));
    std::exponential_distribution<double> ex(1000.0);
    for (int i = 0; i < 16; ++i) expo.push_back(bits(ex(g)));
  }
  std::printf("],\"canonical_seed\":2024,\"canonical_bits\":");
  list_u64(canon);
  std::printf(",\"uniform_real_2_5_to_7_bits\":");
  list_u64(real);
  std::printf(",\"exponential_1000_bits\":");
  list_u64(expo);
  std::printf("}\n");
  return 0;
}
