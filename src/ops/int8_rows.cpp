#include "ops/int8_rows.hpp"

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>

namespace evalrun::ops {
namespace {

// Output columns j0 .. j1 of M rows: two accumulators per row, 128 bytes per step of p; the tail with
// masked loads (the masked weights are 0, so whatever the activation lanes hold adds nothing). flip:
// 0x80 turns a signed byte into its value + 128 as an unsigned byte. The sums wrap modulo 2^32 (past
// k ~ 65K the offset sum can exceed int32), and so does taking off * colsum back: the exact result
// fits int32, so the wrapped arithmetic gives it.
template <int M>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void columns(const std::uint8_t* a, std::uint8_t flip,
                                                                   std::int64_t lda, const std::int8_t* w,
                                                                   const std::int32_t* colsum, std::int32_t off,
                                                                   std::int64_t k, std::int64_t j0, std::int64_t j1,
                                                                   std::int32_t* c, std::int64_t ldc) {
  const std::int64_t full = k / 128 * 128;
  const std::int64_t left0 = std::clamp<std::int64_t>(k - full, 0, 64), left1 = std::clamp<std::int64_t>(k - full - 64, 0, 64);
  const __mmask64 tail0 = left0 == 64 ? ~0ull : (1ull << left0) - 1ull;
  const __mmask64 tail1 = left1 == 64 ? ~0ull : (1ull << left1) - 1ull;
  const __m512i vflip = _mm512_set1_epi8(static_cast<char>(flip));
  for (std::int64_t j = j0; j < j1; ++j) {
    const std::int8_t* wr = w + j * k;
    __m512i acc0[M], acc1[M];
    for (int r = 0; r < M; ++r) acc0[r] = acc1[r] = _mm512_setzero_si512();
    for (std::int64_t p = 0; p < full; p += 128) {
      const __m512i w0 = _mm512_loadu_si512(wr + p), w1 = _mm512_loadu_si512(wr + p + 64);
      for (int r = 0; r < M; ++r) {
        const std::uint8_t* ar = a + r * lda + p;
        acc0[r] = _mm512_dpbusd_epi32(acc0[r], _mm512_xor_si512(_mm512_loadu_si512(ar), vflip), w0);
        acc1[r] = _mm512_dpbusd_epi32(acc1[r], _mm512_xor_si512(_mm512_loadu_si512(ar + 64), vflip), w1);
      }
    }
    if (full < k) {
      const __m512i w0 = _mm512_maskz_loadu_epi8(tail0, wr + full), w1 = _mm512_maskz_loadu_epi8(tail1, wr + full + 64);
      for (int r = 0; r < M; ++r) {
        const std::uint8_t* ar = a + r * lda + full;
        acc0[r] = _mm512_dpbusd_epi32(acc0[r], _mm512_xor_si512(_mm512_maskz_loadu_epi8(tail0, ar), vflip), w0);
        acc1[r] = _mm512_dpbusd_epi32(acc1[r], _mm512_xor_si512(_mm512_maskz_loadu_epi8(tail1, ar + 64), vflip), w1);
      }
    }
    for (int r = 0; r < M; ++r) {
      const auto raw = static_cast<std::uint32_t>(_mm512_reduce_add_epi32(_mm512_add_epi32(acc0[r], acc1[r])));
      c[r * ldc + j] = static_cast<std::int32_t>(raw - static_cast<std::uint32_t>(off) * static_cast<std::uint32_t>(colsum[j]));
    }
  }
}

using Columns = void (*)(const std::uint8_t*, std::uint8_t, std::int64_t, const std::int8_t*, const std::int32_t*,
                         std::int32_t, std::int64_t, std::int64_t, std::int64_t, std::int32_t*, std::int64_t);
constexpr Columns kColumns[kInt8RowsMax] = {columns<1>, columns<2>, columns<3>, columns<4>};

std::atomic<std::int64_t> g_limit{kInt8RowsMax};

}  // namespace

void set_int8_rows_limit(std::int64_t rows) { g_limit = std::clamp<std::int64_t>(rows, 0, kInt8RowsMax); }
std::int64_t int8_rows_limit() { return g_limit.load(); }

bool have_int8_rows_kernel() {
  static const bool yes = __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
  return yes;
}

void int8_row_sums(const std::int8_t* w, std::int64_t n, std::int64_t k, std::int32_t* colsum) {
  for (std::int64_t j = 0; j < n; ++j) {
    std::int32_t s = 0;
    for (std::int64_t p = 0; p < k; ++p) s += w[j * k + p];
    colsum[j] = s;
  }
}

void int8_rows(const void* a, bool a_signed, std::int32_t zero, std::int64_t m, std::int64_t lda, const std::int8_t* w,
               const std::int32_t* colsum, std::int64_t n, std::int64_t k, std::int32_t* c, std::int64_t ldc) {
  if (m < 1 || m > kInt8RowsMax) throw std::invalid_argument("int8_rows: 1 to 4 rows");
  if (a_signed && zero != 0) throw std::invalid_argument("int8_rows: signed activations have no zero point");
  if (!have_int8_rows_kernel()) throw std::logic_error("int8_rows: this CPU has no AVX512-VNNI");
  const Columns run = kColumns[m - 1];
  const std::uint8_t flip = a_signed ? 0x80 : 0x00;
  const std::int32_t off = a_signed ? 128 : zero;
  // Blocks of 64 columns, each thread streaming its own; a task is at least 256 KB of weights.
  const std::int64_t grain = std::max<std::int64_t>(1, 262144 / (64 * k));
  at::parallel_for(0, (n + 63) / 64, grain, [&](std::int64_t b0, std::int64_t b1) {
    run(static_cast<const std::uint8_t*>(a), flip, lda, w, colsum, off, k, b0 * 64, std::min(n, b1 * 64), c, ldc);
  });
}

}  // namespace evalrun::ops
