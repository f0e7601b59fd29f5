#include "ops/int8_rows.hpp"

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <vector>

#include "ops/isa.hpp"
#include "ops/row_dot_avx2.hpp"

namespace evalrun::ops {
namespace {

// Output columns j0 .. j1 of M rows: two accumulators per row, 128 bytes per step of p; the tail with
// masked loads (the masked weights are 0, so whatever the activation lanes hold adds nothing). flip:
// 0x80 turns a signed byte into its value + 128 as an unsigned byte. The sums wrap modulo 2^32 (past
// k ~ 65K the offset sum can exceed int32), and so does taking off * colsum back: the exact result
// fits int32, so the wrapped arithmetic gives it.
template <int M>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void columns_vnni(const std::uint8_t* a, std::uint8_t flip,
                                                                   std::int64_t lda, const std::int8_t* w,
                                                                   std::int64_t ldw, const std::int32_t* colsum, std::int32_t off,
                                                                   std::int64_t k, std::int64_t j0, std::int64_t j1,
                                                                   std::int32_t* c, std::int64_t ldc) {
  const std::int64_t full = k / 128 * 128;
  const std::int64_t left0 = std::clamp<std::int64_t>(k - full, 0, 64), left1 = std::clamp<std::int64_t>(k - full - 64, 0, 64);
  const __mmask64 tail0 = left0 == 64 ? ~0ull : (1ull << left0) - 1ull;
  const __mmask64 tail1 = left1 == 64 ? ~0ull : (1ull << left1) - 1ull;
  const __m512i vflip = _mm512_set1_epi8(static_cast<char>(flip));
  for (std::int64_t j = j0; j < j1; ++j) {
    const std::int8_t* wr = w + j * ldw;
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

using Columns = void (*)(const std::uint8_t*, std::uint8_t, std::int64_t, const std::int8_t*, std::int64_t,
                         const std::int32_t*, std::int32_t, std::int64_t, std::int64_t, std::int64_t, std::int32_t*,
                         std::int64_t);
constexpr Columns kColumnsVnni[kInt8RowsMax] = {columns_vnni<1>, columns_vnni<2>, columns_vnni<3>, columns_vnni<4>};

// The AVX2 version (no VNNI): the activations, zero point taken off, widened once per call to 16-bit
// rows padded with zeros to a multiple of 32; each weight row sign-extended to 16 bits in registers
// and multiplied with vpmaddwd (pairs of 16 x 16-bit products summed into 32 bits: at most 2 x 255 x
// 128 in magnitude, no saturation, unlike vpmaddubsw's 16-bit sums), so the sums are exact as the
// VNNI kernel's. 32 weights a step in two accumulators per row; the last partial step's weights from
// a zero-padded copy (avx2_rows::LastStep).
template <int M>
EVALRUN_AVX2_ROWS_TARGET inline void step_avx2(const std::int8_t* w32, const std::int16_t* a16, std::int64_t kp,
                                                      __m256i (&acc0)[M], __m256i (&acc1)[M]) {
  const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w32)));
  const __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w32 + 16)));
  for (int r = 0; r < M; ++r) {
    const std::int16_t* ar = a16 + r * kp;
    acc0[r] = _mm256_add_epi32(acc0[r], _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ar)), w0));
    acc1[r] = _mm256_add_epi32(acc1[r], _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ar + 16)), w1));
  }
}

template <int M>
EVALRUN_AVX2_ROWS_TARGET void columns_avx2(const std::int16_t* a16, std::int64_t kp, const std::int8_t* w,
                                                  std::int64_t ldw, std::int64_t k, std::int64_t j0, std::int64_t j1,
                                                  std::int32_t* c, std::int64_t ldc) {
  const avx2_rows::Tail tail(k);
  for (std::int64_t j = j0; j < j1; ++j) {
    const std::int8_t* wr = w + j * ldw;
    __m256i acc0[M], acc1[M];
    for (int r = 0; r < M; ++r) acc0[r] = acc1[r] = _mm256_setzero_si256();
    for (std::int64_t p = 0; p < tail.full; p += 32) step_avx2<M>(wr + p, a16 + p, kp, acc0, acc1);
    if (tail.partial) {
      const avx2_rows::LastStep<std::int8_t> last(wr, tail, k);
      step_avx2<M>(last.codes, a16 + tail.full, kp, acc0, acc1);
    }
    for (int r = 0; r < M; ++r) {
      const __m256i sum = _mm256_add_epi32(acc0[r], acc1[r]);
      __m128i v = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
      v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0x4e));
      v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0xb1));
      c[r * ldc + j] = _mm_cvtsi128_si32(v);
    }
  }
}

using ColumnsAvx2 = void (*)(const std::int16_t*, std::int64_t, const std::int8_t*, std::int64_t, std::int64_t,
                             std::int64_t, std::int64_t, std::int32_t*, std::int64_t);
constexpr ColumnsAvx2 kColumnsAvx2[kInt8RowsMax] = {columns_avx2<1>, columns_avx2<2>, columns_avx2<3>, columns_avx2<4>};

bool cpu_has_vnni() {
  static const bool yes = __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
  return yes;
}

std::atomic<std::int64_t> g_limit{kInt8RowsMax};

}  // namespace

void set_int8_rows_limit(std::int64_t rows) { g_limit = std::clamp<std::int64_t>(rows, 0, kInt8RowsMax); }
std::int64_t int8_rows_limit() { return g_limit.load(); }

bool have_int8_rows_kernel() { return kernel_isa() != Isa::baseline; }
bool int8_rows_need_row_sums() { return kernel_isa() == Isa::avx512 && cpu_has_vnni(); }

void int8_row_sums(const std::int8_t* w, std::int64_t ldw, std::int64_t n, std::int64_t k, std::int32_t* colsum) {
  for (std::int64_t j = 0; j < n; ++j) {
    std::int32_t s = 0;
    for (std::int64_t p = 0; p < k; ++p) s += w[j * ldw + p];
    colsum[j] = s;
  }
}

void int8_rows(const void* a, bool a_signed, std::int32_t zero, std::int64_t m, std::int64_t lda, const std::int8_t* w,
               std::int64_t ldw, const std::int32_t* colsum, std::int64_t n, std::int64_t k, std::int32_t* c,
               std::int64_t ldc) {
  if (m < 1 || m > kInt8RowsMax) throw std::invalid_argument("int8_rows: 1 to 4 rows");
  if (ldw < k) throw std::invalid_argument("int8_rows: weight rows overlap (ldw < k)");
  if (a_signed && zero != 0) throw std::invalid_argument("int8_rows: signed activations have no zero point");
  const Isa isa = kernel_isa();
  if (isa == Isa::baseline) throw std::logic_error("int8_rows: this CPU has neither AVX512-VNNI nor AVX2");
  if (int8_rows_need_row_sums()) {
    const Columns run = kColumnsVnni[m - 1];
    const std::uint8_t flip = a_signed ? 0x80 : 0x00;
    const std::int32_t off = a_signed ? 128 : zero;
    // Blocks of 64 columns, each thread streaming its own; a task is at least 256 KB of weights.
    const std::int64_t grain = std::max<std::int64_t>(1, 262144 / (64 * k));
    at::parallel_for(0, (n + 63) / 64, grain, [&](std::int64_t b0, std::int64_t b1) {
      run(static_cast<const std::uint8_t*>(a), flip, lda, w, ldw, colsum, off, k, b0 * 64, std::min(n, b1 * 64), c, ldc);
    });
    return;
  }
  // Reused between calls (a decode step allocates nothing); the worker threads get the pointer.
  thread_local std::vector<std::int16_t> a_buffer;
  const std::int64_t kp = (k + 31) / 32 * 32;
  a_buffer.assign(static_cast<std::size_t>(m * kp), 0);
  std::int16_t* const a16 = a_buffer.data();
  for (std::int64_t r = 0; r < m; ++r) {
    const auto* row = static_cast<const std::uint8_t*>(a) + r * lda;
    for (std::int64_t p = 0; p < k; ++p) {
      a16[r * kp + p] = static_cast<std::int16_t>(a_signed ? static_cast<std::int8_t>(row[p]) : row[p] - zero);
    }
  }
  const ColumnsAvx2 run = kColumnsAvx2[m - 1];
  const std::int64_t grain = std::max<std::int64_t>(1, 262144 / (64 * k));
  at::parallel_for(0, (n + 63) / 64, grain, [&](std::int64_t b0, std::int64_t b1) {
    run(a16, kp, w, ldw, k, b0 * 64, std::min(n, b1 * 64), c, ldc);
  });
}

}  // namespace evalrun::ops
