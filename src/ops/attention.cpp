#include "ops/attention.hpp"

#include <ATen/Parallel.h>

#include <algorithm>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "ops/bf16_rows.hpp"
#include "ops/bfloat16.hpp"
#include "ops/gemm.hpp"
#include "ops/softmax.hpp"

namespace evalrun::ops {

namespace {

// Rows [0, T) of (batch row b, kv head j) as float32 and their row stride: in place for float32
// storage, widened into `buffer` (T x d) for bfloat16.
struct FloatRows {
  const float* at;
  std::int64_t stride;
};
FloatRows rows_of(const HeadRows& t, std::int64_t b, std::int64_t j, std::int64_t, std::int64_t, std::vector<float>&) {
  return {t.at(b, j), t.row_stride};
}
FloatRows rows_of(const HeadRowsBf16& t, std::int64_t b, std::int64_t j, std::int64_t T, std::int64_t d,
                  std::vector<float>& buffer) {
  if (buffer.size() < static_cast<std::size_t>(T * d)) buffer.resize(static_cast<std::size_t>(T * d));
  const std::uint16_t* src = t.at(b, j);
  for (std::int64_t r = 0; r < T; ++r) {
    for (std::int64_t i = 0; i < d; ++i) buffer[r * d + i] = float_of_bf16(src[r * t.row_stride + i]);
  }
  return {buffer.data(), d};
}

// Rows [0, n) of (batch row b, head j) as bfloat16 operands of gemm_bf16 and their row stride: rounded
// into `buffer` (n x d) from float32 storage, in place for bfloat16 storage.
struct Bf16Operand {
  const std::uint16_t* at;
  std::int64_t stride;
};
Bf16Operand bf16_rows_of(const HeadRows& t, std::int64_t b, std::int64_t j, std::int64_t n, std::int64_t d,
                         std::int64_t ld, std::vector<std::uint16_t>& buffer) {
  if (buffer.size() < static_cast<std::size_t>(n * d)) buffer.resize(static_cast<std::size_t>(n * d));
  const float* src = t.at(b, j);
  if (ld == d) {
    bf16_of_floats(src, n * d, buffer.data());
  } else {
    for (std::int64_t r = 0; r < n; ++r) bf16_of_floats(src + r * ld, d, buffer.data() + r * d);
  }
  return {buffer.data(), d};
}
Bf16Operand bf16_rows_of(const HeadRowsBf16& t, std::int64_t b, std::int64_t j, std::int64_t, std::int64_t,
                         std::int64_t ld, std::vector<std::uint16_t>&) {
  return {t.at(b, j), ld};
}

template <class QueryRows, class KeyValueRows>
void attention(const AttentionShape& a, const QueryRows& q, const KeyValueRows& k, const KeyValueRows& v,
               const std::int64_t* key_mask, float* out, std::int64_t out_batch_stride, std::int64_t out_row_stride) {
  const std::int64_t nh = a.heads, nkv = a.kv_heads, d = a.head_dim, groups = nh / nkv, T = a.keys;
  // One decode step of a grouped-query model: the `groups` query heads of a kv head are adjacent in
  // the row (head stride d), so each (row, kv head) is one [groups, d] x [d, T] product.
  const bool grouped = a.queries == 1 && groups > 1 && q.head_stride == d;
  const std::int64_t rows = grouped ? groups : a.queries;
  const std::int64_t tasks = grouped ? a.batch * nkv : a.batch * nh;
  const std::int64_t ldq = grouped ? d : q.row_stride, ldo = grouped ? d : out_row_stride;
  // A task is at least ~32K multiply-adds (its two products): a tiny model's heads stay on one
  // thread, where a parallel region would cost more than they do.
  const std::int64_t grain = std::max<std::int64_t>(1, 32768 / std::max<std::int64_t>(1, 2 * rows * T * d));
  if (a.bf16_products && !have_bf16_gemm()) {
    throw std::logic_error("attention: bfloat16 products need a CPU with AVX512-BF16 (ops::have_bf16_gemm)");
  }
  constexpr bool bf16_queries = std::is_same_v<QueryRows, HeadRowsBf16>;
  if (bf16_queries && !a.bf16_products) throw std::logic_error("attention: bfloat16 queries need bf16_products");
  at::parallel_for(0, tasks, grain, [&](std::int64_t t0, std::int64_t t1) {
    // Per-thread scores (and widened keys / values), reused across calls (they grow, never shrink:
    // no allocation per decode step).
    thread_local std::vector<float> scratch, keys, values;
    thread_local std::vector<std::uint16_t> q16, k16, v16, p16;  // bf16_products' operands
    if (scratch.size() < static_cast<std::size_t>(rows * T)) scratch.resize(static_cast<std::size_t>(rows * T));
    float* s = scratch.data();
    if (a.bf16_products && p16.size() < static_cast<std::size_t>(rows * T)) p16.resize(static_cast<std::size_t>(rows * T));
    for (std::int64_t task = t0; task < t1; ++task) {
      std::int64_t b, h, j;
      if (grouped) {
        b = task / nkv, j = task % nkv, h = j * groups;
      } else {
        b = task / nh, h = task % nh, j = h / groups;
      }
      const std::int64_t* km = key_mask + b * T;
      const float alpha = a.bf16 ? 1.0f : a.scale;
      if (a.bf16_products) {
        const Bf16Operand qr = bf16_rows_of(q, b, h, rows, d, ldq, q16), kr = bf16_rows_of(k, b, j, T, d, k.row_stride, k16);
        gemm_bf16('T', rows, T, d, alpha, qr.at, qr.stride, kr.at, kr.stride, s, T);
      } else if constexpr (!bf16_queries) {
        const FloatRows kr = rows_of(k, b, j, T, d, keys);
        sgemm('N', 'T', rows, T, d, alpha, q.at(b, h), ldq, kr.at, kr.stride, 0.0f, s, T);
      }
      if (a.bf16) round_scaled_to_bf16(s, rows * T, a.score_divisor, a.scale);
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t last = !a.causal ? T - 1 : grouped ? a.first_query : a.first_query + r;
        const std::int64_t first = a.causal && a.window > 0 ? std::max<std::int64_t>(0, last - a.window) : 0;
        if (a.bf16_products) {
          causal_masked_softmax_row_bf16(s + r * T, T, km, first, last, p16.data() + r * T);
        } else {
          causal_masked_softmax_row(s + r * T, T, km, first, last);
          if (a.bf16) round_to_bf16(s + r * T, T);
        }
      }
      float* o = out + b * out_batch_stride + h * d;
      if (a.bf16_products) {
        const Bf16Operand vr = bf16_rows_of(v, b, j, T, d, v.row_stride, v16);
        gemm_bf16('N', rows, d, T, 1.0f, p16.data(), T, vr.at, vr.stride, o, ldo);
      } else if constexpr (!bf16_queries) {
        const FloatRows vr = rows_of(v, b, j, T, d, values);
        sgemm('N', 'N', rows, d, T, 1.0f, s, T, vr.at, vr.stride, 0.0f, o, ldo);
      }
      if (a.bf16) {
        for (std::int64_t r = 0; r < rows; ++r) round_to_bf16(o + r * ldo, d);
      }
    }
  });
}

}  // namespace

void attention_f32(const AttentionShape& shape, const HeadRows& q, const HeadRows& k, const HeadRows& v,
                   const std::int64_t* key_mask, float* out, std::int64_t out_batch_stride,
                   std::int64_t out_row_stride) {
  attention(shape, q, k, v, key_mask, out, out_batch_stride, out_row_stride);
}

void attention_bf16_cache(const AttentionShape& shape, const HeadRows& q, const HeadRowsBf16& k, const HeadRowsBf16& v,
                          const std::int64_t* key_mask, float* out, std::int64_t out_batch_stride,
                          std::int64_t out_row_stride) {
  attention(shape, q, k, v, key_mask, out, out_batch_stride, out_row_stride);
}

void attention_bf16(const AttentionShape& shape, const HeadRowsBf16& q, const HeadRowsBf16& k, const HeadRowsBf16& v,
                    const std::int64_t* key_mask, float* out, std::int64_t out_batch_stride, std::int64_t out_row_stride) {
  attention(shape, q, k, v, key_mask, out, out_batch_stride, out_row_stride);
}

}  // namespace evalrun::ops
