#include "ops/bf16_rows.hpp"

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace evalrun::ops {
namespace {

float float_of(std::uint16_t h) {
  const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

std::uint16_t bf16_of(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN stays NaN
  return static_cast<std::uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// Output columns j0 .. j1 of M rows (M a template argument: the accumulators stay in registers).
// Two accumulators per row, 64 bfloat16 per step of k, whatever M is (a row sums in the same order
// alone or beside others; two chains keep vdpbf16ps' latency off the weight stream); the tail in
// masked 32-value pieces (zeros add nothing).
template <int M>
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void columns(const std::uint16_t* x, std::int64_t k,
                                                                   const std::uint16_t* w, const std::uint16_t* bias,
                                                                   std::int64_t n, std::int64_t j0, std::int64_t j1,
                                                                   std::uint16_t* y) {
  const std::int64_t full = k / 64 * 64;
  const std::int64_t left0 = std::clamp<std::int64_t>(k - full, 0, 32), left1 = std::clamp<std::int64_t>(k - full - 32, 0, 32);
  const __mmask32 tail0 = static_cast<__mmask32>((1ull << left0) - 1ull), tail1 = static_cast<__mmask32>((1ull << left1) - 1ull);
  for (std::int64_t j = j0; j < j1; ++j) {
    const std::uint16_t* wr = w + j * k;
    __m512 acc0[M], acc1[M];
    for (int r = 0; r < M; ++r) acc0[r] = acc1[r] = _mm512_setzero_ps();
    for (std::int64_t p = 0; p < full; p += 64) {
      const __m512bh w0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(wr + p));
      const __m512bh w1 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(wr + p + 32));
      for (int r = 0; r < M; ++r) {
        acc0[r] = _mm512_dpbf16_ps(acc0[r], reinterpret_cast<__m512bh>(_mm512_loadu_si512(x + r * k + p)), w0);
        acc1[r] = _mm512_dpbf16_ps(acc1[r], reinterpret_cast<__m512bh>(_mm512_loadu_si512(x + r * k + p + 32)), w1);
      }
    }
    if (full < k) {
      const __m512bh w0 = reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(tail0, wr + full));
      const __m512bh w1 = reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(tail1, wr + full + 32));
      for (int r = 0; r < M; ++r) {
        acc0[r] = _mm512_dpbf16_ps(acc0[r], reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(tail0, x + r * k + full)), w0);
        acc1[r] = _mm512_dpbf16_ps(acc1[r], reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(tail1, x + r * k + full + 32)),
                                   w1);
      }
    }
    const float b = bias != nullptr ? float_of(bias[j]) : 0.0f;
    for (int r = 0; r < M; ++r) y[r * n + j] = bf16_of(_mm512_reduce_add_ps(_mm512_add_ps(acc0[r], acc1[r])) + b);
  }
}

using Columns = void (*)(const std::uint16_t*, std::int64_t, const std::uint16_t*, const std::uint16_t*, std::int64_t,
                         std::int64_t, std::int64_t, std::uint16_t*);
constexpr Columns kColumns[kBf16RowsMax] = {columns<1>, columns<2>, columns<3>, columns<4>,
                                            columns<5>, columns<6>, columns<7>, columns<8>};

}  // namespace

bool have_bf16_rows_kernel() {
  static const bool yes = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
  return yes;
}

void linear_bf16_rows(const std::uint16_t* x, std::int64_t m, std::int64_t k, const std::uint16_t* w,
                      const std::uint16_t* bias, std::int64_t n, std::uint16_t* y) {
  if (m < 1 || m > kBf16RowsMax) throw std::invalid_argument("linear_bf16_rows: 1 to 8 rows");
  if (!have_bf16_rows_kernel()) throw std::logic_error("linear_bf16_rows: this CPU has no AVX512-BF16");
  const Columns run = kColumns[m - 1];
  // Blocks of 64 columns (64 x k weights: 96 KB at k = 768) so both threads stream their own rows;
  // a task is at least 64K weights, so a tiny model's products stay on one thread.
  const std::int64_t grain = std::max<std::int64_t>(1, 65536 / (64 * k));
  at::parallel_for(0, (n + 63) / 64, grain, [&](std::int64_t b0, std::int64_t b1) {
    run(x, k, w, bias, n, b0 * 64, std::min(n, b1 * 64), y);
  });
}

}  // namespace evalrun::ops
