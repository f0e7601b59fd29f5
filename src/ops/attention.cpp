#include "ops/attention.hpp"

#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

#include "ops/bfloat16.hpp"
#include "ops/gemm.hpp"
#include "ops/softmax.hpp"

namespace evalrun::ops {

void attention_f32(const AttentionShape& a, const HeadRows& q, const HeadRows& k, const HeadRows& v,
                   const std::int64_t* key_mask, float* out, std::int64_t out_batch_stride,
                   std::int64_t out_row_stride) {
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
  at::parallel_for(0, tasks, grain, [&](std::int64_t t0, std::int64_t t1) {
    // Per-thread scores, reused across calls (grows, never shrinks: no allocation per decode step).
    thread_local std::vector<float> scratch;
    if (scratch.size() < static_cast<std::size_t>(rows * T)) scratch.resize(static_cast<std::size_t>(rows * T));
    float* s = scratch.data();
    for (std::int64_t task = t0; task < t1; ++task) {
      std::int64_t b, h, j;
      if (grouped) {
        b = task / nkv, j = task % nkv, h = j * groups;
      } else {
        b = task / nh, h = task % nh, j = h / groups;
      }
      const std::int64_t* km = key_mask + b * T;
      sgemm('N', 'T', rows, T, d, a.bf16 ? 1.0f : a.scale, q.at(b, h), ldq, k.at(b, j), k.row_stride, 0.0f, s, T);
      if (a.bf16) {
        for (std::int64_t i = 0; i < rows * T; ++i) {
          const float dot = round_to_bf16(s[i]);
          s[i] = round_to_bf16(a.score_divisor != 0.0f ? dot / a.score_divisor : dot * a.scale);
        }
      }
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t last = !a.causal ? T - 1 : grouped ? a.first_query : a.first_query + r;
        const std::int64_t first = a.causal && a.window > 0 ? std::max<std::int64_t>(0, last - a.window) : 0;
        causal_masked_softmax_row(s + r * T, T, km, first, last);
        if (a.bf16) round_to_bf16(s + r * T, T);
      }
      float* o = out + b * out_batch_stride + h * d;
      sgemm('N', 'N', rows, d, T, 1.0f, s, T, v.at(b, j), v.row_stride, 0.0f, o, ldo);
      if (a.bf16) {
        for (std::int64_t r = 0; r < rows; ++r) round_to_bf16(o + r * ldo, d);
      }
    }
  });
}

}  // namespace evalrun::ops
