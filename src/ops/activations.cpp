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

}  // namespace evalrun::ops
