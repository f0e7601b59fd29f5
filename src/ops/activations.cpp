#include "ops/activations.hpp"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>

#include "ops/bfloat16.hpp"

namespace evalrun::ops {
namespace {

// Each in float32, as torch's CPU kernels compute them.
float silu(float x) { return x / (1.0f + std::exp(-x)); }
// 0.5 x (1 + tanh(u)) written as x / (1 + exp(-2u)), the same function: glibc's tanhf costs three
// times expf, which made GPT-2's and StarCoder2's activation a tenth of a decode step. The two
// forms differ by float rounding only (a few 1e-7 over the range an MLP sees).
float gelu_tanh(float x) {
  const float beta = static_cast<float>(M_SQRT2 * M_2_SQRTPI * 0.5);  // sqrt(2 / pi)
  const float kappa = 0.044715f;
  const float u = beta * (x + kappa * (x * x * x));
  return x / (1.0f + std::exp(-2.0f * u));
}
float gelu(float x) { return x * 0.5f * (1.0f + std::erf(x * static_cast<float>(M_SQRT1_2))); }

// fn(row, begin, end) over every row's columns [0, n), split into pieces of at least kGrain
// elements so that the one or few rows of a decode step spread over the threads too.
constexpr std::int64_t kGrain = 1024;
template <class Fn>
void for_row_pieces(std::int64_t rows, std::int64_t n, const Fn& fn) {
  const std::int64_t per_row = std::max<std::int64_t>(1, n / kGrain), width = (n + per_row - 1) / per_row;
  at::parallel_for(0, rows * per_row, 1, [&](std::int64_t p0, std::int64_t p1) {
    for (std::int64_t p = p0; p < p1; ++p) {
      const std::int64_t b = p % per_row * width;
      fn(p / per_row, b, std::min(n, b + width));
    }
  });
}

template <float (*Act)(float)>
void gated(const float* gate_up, float* out, std::int64_t rows, std::int64_t I, bool bf16) {
  for_row_pieces(rows, I, [&](std::int64_t m, std::int64_t i0, std::int64_t i1) {
    const float* g = gate_up + m * 2 * I;
    const float* u = g + I;
    float* o = out + m * I;
    if (bf16) {
      for (std::int64_t i = i0; i < i1; ++i) o[i] = round_to_bf16(round_to_bf16(Act(g[i])) * u[i]);
    } else {
      for (std::int64_t i = i0; i < i1; ++i) o[i] = Act(g[i]) * u[i];
    }
  });
}

}  // namespace

void gated_activation_rows(const float* gate_up, float* out, std::int64_t rows, std::int64_t I, GateActivation act,
                           bool bf16) {
  switch (act) {
    case GateActivation::silu: return gated<silu>(gate_up, out, rows, I, bf16);
    case GateActivation::gelu_tanh: return gated<gelu_tanh>(gate_up, out, rows, I, bf16);
    case GateActivation::gelu: return gated<gelu>(gate_up, out, rows, I, bf16);
  }
}

void gelu_tanh_rows(float* x, std::int64_t rows, std::int64_t n, std::int64_t ld, bool bf16) {
  for_row_pieces(rows, n, [&](std::int64_t m, std::int64_t i0, std::int64_t i1) {
    float* r = x + m * ld;
    for (std::int64_t i = i0; i < i1; ++i) r[i] = gelu_tanh(r[i]);
    if (bf16) round_to_bf16(r + i0, i1 - i0);
  });
}

}  // namespace evalrun::ops
