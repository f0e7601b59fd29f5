// The checks every fuzz target over tensor files makes on an accepted view (safetensors_fuzz,
// torch_bin_fuzz): it lies inside [begin, end), its numel fits int64 and equals its bytes, and every
// byte can be read (a view past the mapping faults here rather than in a model loader).
#pragma once

#include <cstddef>
#include <cstdint>

#include "fuzz_util.hpp"
#include "io/safetensors.hpp"

namespace evalrun::fuzz {

inline void check_view(const TensorView& v, const std::byte* begin, const std::byte* end) {
  FUZZ_CHECK(v.data >= begin && v.data <= end);
  FUZZ_CHECK(v.nbytes <= static_cast<std::size_t>(end - v.data));
  std::int64_t n = 1;
  for (auto d : v.shape) {
    FUZZ_CHECK(d >= 0);
    FUZZ_CHECK(!__builtin_mul_overflow(n, d, &n));
  }
  FUZZ_CHECK(v.numel() == n);
  FUZZ_CHECK(static_cast<std::size_t>(n) * element_size(v.dtype) == v.nbytes);
  std::uint8_t acc = 0;
  for (std::size_t i = 0; i < v.nbytes; ++i) acc ^= static_cast<std::uint8_t>(v.data[i]);
  (void)acc;
}

}  // namespace evalrun::fuzz
