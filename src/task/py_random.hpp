// CPython's random.Random, the part lm-evaluation-harness's few-shot sampler uses: seeding from an
// integer (init_by_array over the seed's 32-bit words), MT19937, getrandbits, _randbelow and
// random.sample's index choices, random() (random.choices draws with it). The same seed draws the same few-shot examples as lm-eval.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace evalrun {

class PyRandom {
 public:
  explicit PyRandom(std::uint64_t seed);  // random.Random(seed), seed >= 0

  std::uint32_t genrand_uint32();
  std::uint32_t getrandbits(int k);     // 0 < k <= 32
  std::uint64_t randbelow(std::uint64_t n);  // Random._randbelow_with_getrandbits, 0 < n < 2**32
  double random();  // random.random(): 53 bits from two outputs, in [0, 1)
  // The positions random.sample(range(n), k) picks, in order (0 <= k <= n).
  std::vector<std::size_t> sample(std::size_t n, std::size_t k);

 private:
  std::array<std::uint32_t, 624> mt_{};
  std::size_t mti_ = 625;
};

}  // namespace evalrun
