// The GPTQ product kernels (internal to src/quant). The packed layout they read is built by
// GptqLinear at load:
//   * rows are in "sorted" order: the input rows of group 0, then of group 1, ... (the identity
//     unless act-order), group g spanning rows [group_start[g], group_start[g+1]);
//   * output columns in blocks of 16 (the last one padded with zeros), each block's 4-bit weights
//     contiguous: q[(b * kwords + k / 8) * 16 + j] holds rows k..k+7 (k % 8 == 0) of column 16 b + j,
//     row k + r in bits 4r..4r+3, so one decode step streams each block's bytes once;
//   * zero points 4-bit, two words per (block, group): z[(b * groups + g) * 2 + w] holds columns
//     16 b + 8 w .. + 7; the value used is nibble + zero_offset (1 for the v1 format);
//   * scales per (block, group), 16 each: float16 bits (s16) or float32 (s32), one of the two set.
#pragma once

#include <cstdint>

namespace evalrun::quant::gptq_kernels {

constexpr std::int64_t kBlock = 16;

struct Packed {
  std::int64_t in = 0, out = 0, blocks = 0, kwords = 0, groups = 0;
  const std::uint32_t* q = nullptr;
  const std::uint32_t* z = nullptr;
  const std::uint16_t* s16 = nullptr;
  const float* s32 = nullptr;
  const std::int32_t* group_start = nullptr;  // [groups + 1]
  int zero_offset = 0;
};

// For rows m in [0, M) and blocks [b0, b1): y[m, cols] = beta * y + alpha * (x[m, :] W^T + bias) with x
// in sorted row order (row stride ldx). bias may be null. xsum[m * groups + g] = the sum of row m of x
// over group g. Per group: y += s[g] * (sum_{k in g} x[k] q[k] - z[g] xsum[g]), the 4-bit values
// turned into floats by a 16-entry table.
void gemv_blocks(const Packed& p, const float* x, std::int64_t M, std::int64_t ldx, const float* xsum, std::int64_t b0,
                 std::int64_t b1, float* y, std::int64_t ldy, float alpha, float beta, const float* bias);

// The exact float weights of sorted rows [k0, k1) and blocks [b0, b1): dst[(k - k0) * ldd + 16 b + j]
// = s[g(k), col] * (q[k, col] - z[g(k), col]) (padding columns of the last block get 0).
void dequantize_blocks(const Packed& p, std::int64_t k0, std::int64_t k1, std::int64_t b0, std::int64_t b1, float* dst,
                       std::int64_t ldd);

}  // namespace evalrun::quant::gptq_kernels
