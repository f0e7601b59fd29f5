#include "ops/rotary.hpp"

#include <cmath>

namespace evalrun::ops {

void rope_angles(const float* inv_freq, std::int64_t half, const std::int64_t* positions, std::int64_t M, float* cos,
                 float* sin, float position_divisor) {
  for (std::int64_t m = 0; m < M; ++m) {
    const float p = static_cast<float>(positions[m]) / position_divisor;
    for (std::int64_t i = 0; i < half; ++i) {
      const float angle = inv_freq[i] * p;
      cos[m * half + i] = std::cos(angle);
      sin[m * half + i] = std::sin(angle);
    }
  }
}

}  // namespace evalrun::ops
