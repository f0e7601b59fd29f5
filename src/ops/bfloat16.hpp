// bfloat16 values as raw 16-bit patterns, and the rounding a bfloat16 model applies after each
// operation. The raw-buffer bfloat16 path keeps its activations in float32 buffers that hold bfloat16
// values: each operation computes in float32, as torch's CPU kernels do for bfloat16 tensors, and
// rounds its result with round_to_bf16 where torch would store a bfloat16 tensor.
#pragma once

#include <bit>
#include <cstdint>

namespace evalrun::ops {

// bfloat16 -> float32 (exact).
inline float float_of_bf16(std::uint16_t h) { return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16); }

// float32 -> bfloat16, round to nearest, ties to even (torch's conversion); NaN stays NaN.
inline std::uint16_t bf16_of(float x) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  return static_cast<std::uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// x rounded to the nearest bfloat16, as a float32.
inline float round_to_bf16(float x) { return float_of_bf16(bf16_of(x)); }

// The same in place over n values.
inline void round_to_bf16(float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) x[i] = round_to_bf16(x[i]);
}

}  // namespace evalrun::ops
