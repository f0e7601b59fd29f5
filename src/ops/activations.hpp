// Activations on raw float32 rows.
#pragma once

#include <cstdint>

namespace evalrun::ops {

// The activation of a gated MLP's gate: SiLU (Llama), GELU with the tanh approximation
// (torch's gelu(approximate="tanh"): Gemma's gelu_pytorch_tanh) or exact erf GELU.
enum class GateActivation { silu, gelu_tanh, gelu };

// The gated activation of a Llama-style MLP: out[m, i] = act(gu[m, i]) * gu[m, I + i] for rows of
// gate | up (2 I wide) into rows of I. Parallel over rows and, for few rows, over columns. bf16: as a
// bfloat16 model computes it, act(gate) rounded to bfloat16, then the product rounded.
void gated_activation_rows(const float* gate_up, float* out, std::int64_t rows, std::int64_t I, GateActivation act,
                           bool bf16 = false);

// The tanh approximation of GELU in place on rows of n (row stride ld): x * 0.5 * (1 + tanh(sqrt(2/pi)
// * (x + 0.044715 x^3))), transformers' gelu_pytorch_tanh and gelu_new (the same formula; they
// differ only in float rounding). Parallel over rows and, for few rows, over columns. bf16: each
// result rounded to bfloat16.
void gelu_tanh_rows(float* x, std::int64_t rows, std::int64_t n, std::int64_t ld, bool bf16 = false);

}  // namespace evalrun::ops
