// Activations on raw float32 rows.
#pragma once

#include <cstdint>

namespace evalrun::ops {

// The gated SiLU of a Llama-style MLP: out[m, i] = silu(gu[m, i]) * gu[m, I + i] for rows of
// gate | up (2 I wide) into rows of I. Parallel over rows.
void silu_gate_rows(const float* gate_up, float* out, std::int64_t rows, std::int64_t I);

}  // namespace evalrun::ops
