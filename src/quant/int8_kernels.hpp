// The row kernels of Int8Linear (internal to src/quant): activation quantization and int32 -> float
// dequantization. The build targets baseline x86-64, so each has an AVX-512 version chosen at run
// time; both versions do the same float operations in the same order (no FMA), so they give
// identical bytes. These passes are memory-bound next to the integer product.
#pragma once

#include <cstdint>

namespace evalrun::quant::kernels {

// max_k |x_k * inv_s_k| (inv_s null: max_k |x_k|).
float row_absmax(const float* x, const float* inv_s, std::int64_t K);

// q_k = round_half_even(clamp(x_k * inv_s_k * mult, lo, hi)) + offset, as 8 bits. NaN maps to lo.
void quantize_row(const float* x, const float* inv_s, std::int64_t K, float mult, float lo, float hi,
                  std::int32_t offset, std::int8_t* q);
void quantize_row(const float* x, const float* inv_s, std::int64_t K, float mult, float lo, float hi,
                  std::int32_t offset, std::uint8_t* q);

// y_n = [y_n +] alpha * (acc_n * rs * ws_n + b_n)   (b null: no bias; accumulate false: y not read)
void dequant_row(const std::int32_t* acc, std::int64_t N, float rs, const float* ws, const float* b, float alpha,
                 bool accumulate, float* y);

}  // namespace evalrun::quant::kernels
