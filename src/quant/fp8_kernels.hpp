// The FP8 e4m3 kernels (internal to src/quant): weight rows decoded to float32 and activations rounded
// to e4m3, vectorized by the compiler for AVX-512, AVX2 or the x86-64 baseline (see ops/isa.hpp). Both give
// exactly the values of the scalar definitions in fp8.cpp (e4m3_to_float, round_to_e4m3).
#pragma once

#include <cstdint>

namespace evalrun::quant::fp8_kernels {

// dst[r * in + k] = e4m3(w[r * in + k]) * scale[r * scale_stride] for r in [0, rows). NaN codes must
// have been refused before (they decode to garbage here).
void dequantize_rows(const std::uint8_t* w, std::int64_t rows, std::int64_t in, const float* scale,
                     std::int64_t scale_stride, float* dst);

// dst[m * in + k] = round_to_e4m3(x[m * ldx + k] / s) * s with s = scale, or, when scale is 0, per row
// s = max_k |x[m * ldx + k]| / 448 (a row of zeros is copied as it is).
void round_rows(const float* x, std::int64_t rows, std::int64_t in, std::int64_t ldx, float scale, float* dst);

}  // namespace evalrun::quant::fp8_kernels
