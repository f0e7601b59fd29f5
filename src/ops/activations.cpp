#include "ops/activations.hpp"

#include <ATen/Parallel.h>

#include <cmath>

namespace evalrun::ops {

void silu_gate_rows(const float* gate_up, float* out, std::int64_t rows, std::int64_t I) {
  at::parallel_for(0, rows, 16, [&](std::int64_t m0, std::int64_t m1) {
    for (std::int64_t m = m0; m < m1; ++m) {
      const float* g = gate_up + m * 2 * I;
      const float* u = g + I;
      float* o = out + m * I;
      for (std::int64_t i = 0; i < I; ++i) o[i] = (g[i] / (1.0f + std::exp(-g[i]))) * u[i];
    }
  });
}

void gelu_tanh_rows(float* x, std::int64_t rows, std::int64_t n, std::int64_t ld) {
  const float k = 0.7978845608028654f;  // sqrt(2 / pi)
  at::parallel_for(0, rows, 16, [&](std::int64_t m0, std::int64_t m1) {
    for (std::int64_t m = m0; m < m1; ++m) {
      float* r = x + m * ld;
      for (std::int64_t i = 0; i < n; ++i) {
        const float v = r[i];
        r[i] = 0.5f * v * (1.0f + std::tanh(k * (v + 0.044715f * v * v * v)));
      }
    }
  });
}

}  // namespace evalrun::ops
