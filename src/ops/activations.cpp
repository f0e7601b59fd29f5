#include "ops/activations.hpp"

#include <ATen/Parallel.h>

#include <cmath>

namespace evalrun::ops {
namespace {

// Each written in float32 as torch's CPU kernels compute it.
float silu(float x) { return x / (1.0f + std::exp(-x)); }
float gelu_tanh(float x) {
  const float beta = static_cast<float>(M_SQRT2 * M_2_SQRTPI * 0.5);  // sqrt(2 / pi)
  const float kappa = 0.044715f;
  return 0.5f * x * (1.0f + std::tanh(beta * (x + kappa * (x * x * x))));
}
float gelu(float x) { return x * 0.5f * (1.0f + std::erf(x * static_cast<float>(M_SQRT1_2))); }

template <float (*Act)(float)>
void gated(const float* gate_up, float* out, std::int64_t rows, std::int64_t I) {
  at::parallel_for(0, rows, 16, [&](std::int64_t m0, std::int64_t m1) {
    for (std::int64_t m = m0; m < m1; ++m) {
      const float* g = gate_up + m * 2 * I;
      const float* u = g + I;
      float* o = out + m * I;
      for (std::int64_t i = 0; i < I; ++i) o[i] = Act(g[i]) * u[i];
    }
  });
}

}  // namespace

void gated_activation_rows(const float* gate_up, float* out, std::int64_t rows, std::int64_t I, GateActivation act) {
  switch (act) {
    case GateActivation::silu: return gated<silu>(gate_up, out, rows, I);
    case GateActivation::gelu_tanh: return gated<gelu_tanh>(gate_up, out, rows, I);
    case GateActivation::gelu: return gated<gelu>(gate_up, out, rows, I);
  }
}

void gelu_tanh_rows(float* x, std::int64_t rows, std::int64_t n, std::int64_t ld) {
  at::parallel_for(0, rows, 16, [&](std::int64_t m0, std::int64_t m1) {
    for (std::int64_t m = m0; m < m1; ++m) {
      float* r = x + m * ld;
      for (std::int64_t i = 0; i < n; ++i) r[i] = gelu_tanh(r[i]);
    }
  });
}

}  // namespace evalrun::ops
