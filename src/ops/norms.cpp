#include "ops/norms.hpp"

#include <ATen/Parallel.h>

#include <cmath>
#include <vector>

#include "ops/bfloat16.hpp"

namespace evalrun::ops {

void rms_norm_rows(const float* x, const float* w, float* out, std::int64_t rows, std::int64_t n, float eps,
                   float weight_offset, bool bf16) {
  at::parallel_for(0, rows, 16, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * n;
      float* o = out + r * n;
      double sum = 0;
      for (std::int64_t i = 0; i < n; ++i) sum += static_cast<double>(xr[i]) * xr[i];
      const float variance = static_cast<float>(sum / static_cast<double>(n));
      const float inv = 1.0f / std::sqrt(variance + eps);
      if (!bf16) {
        for (std::int64_t i = 0; i < n; ++i) o[i] = (w[i] + weight_offset) * (xr[i] * inv);
      } else if (weight_offset == 0.0f) {
        for (std::int64_t i = 0; i < n; ++i) o[i] = round_to_bf16(w[i] * round_to_bf16(xr[i] * inv));
      } else {
        for (std::int64_t i = 0; i < n; ++i) o[i] = round_to_bf16((w[i] + weight_offset) * (xr[i] * inv));
      }
    }
  });
}

namespace {

// One row of layer_norm_rows (mean and variance accumulated in double).
void layer_norm_row(const float* xr, const float* w, const float* b, float* o, std::int64_t n, float eps) {
  double sum = 0;
  for (std::int64_t i = 0; i < n; ++i) sum += xr[i];
  const double mean = sum / static_cast<double>(n);
  double sq = 0;
  for (std::int64_t i = 0; i < n; ++i) sq += (xr[i] - mean) * (xr[i] - mean);
  const float inv = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(n) + eps));
  const float mu = static_cast<float>(mean);
  for (std::int64_t i = 0; i < n; ++i) o[i] = (xr[i] - mu) * inv * w[i] + b[i];
}

}  // namespace

void layer_norm_rows(const float* x, const float* w, const float* b, float* out, std::int64_t rows, std::int64_t n,
                     float eps, bool bf16) {
  at::parallel_for(0, rows, 16, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      layer_norm_row(x + r * n, w, b, out + r * n, n, eps);
      if (bf16) round_to_bf16(out + r * n, n);
    }
  });
}

void layer_norm_rows_bf16(const std::uint16_t* x, const std::uint16_t* residual, const float* w, const float* b,
                          std::uint16_t* out, std::int64_t rows, std::int64_t n, float eps) {
  at::parallel_for(0, rows, 16, [&](std::int64_t r0, std::int64_t r1) {
    // The row widened to float32 and its normalised values: per thread, reused (no allocation per call).
    thread_local std::vector<float> row, normed;
    row.resize(static_cast<std::size_t>(n));
    normed.resize(static_cast<std::size_t>(n));
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::uint16_t* xr = x + r * n;
      if (residual == nullptr) {
        for (std::int64_t i = 0; i < n; ++i) row[i] = float_of_bf16(xr[i]);
      } else {
        const std::uint16_t* rr = residual + r * n;
        for (std::int64_t i = 0; i < n; ++i) row[i] = round_to_bf16(float_of_bf16(xr[i]) + float_of_bf16(rr[i]));
      }
      layer_norm_row(row.data(), w, b, normed.data(), n, eps);
      std::uint16_t* o = out + r * n;
      for (std::int64_t i = 0; i < n; ++i) o[i] = bf16_of(normed[i]);
    }
  });
}

}  // namespace evalrun::ops
