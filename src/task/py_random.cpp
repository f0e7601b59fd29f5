#include "task/py_random.hpp"

#include <cmath>
#include <stdexcept>
#include <unordered_set>

namespace evalrun {

PyRandom::PyRandom(std::uint64_t seed) {
  // init_genrand(19650218), then init_by_array(key) with key = the seed's 32-bit words, low first
  // (CPython's random_seed: at least one word, so seed 0 is key [0]).
  std::vector<std::uint32_t> key{static_cast<std::uint32_t>(seed)};
  if (seed >> 32) key.push_back(static_cast<std::uint32_t>(seed >> 32));
  mt_[0] = 19650218U;
  for (std::size_t i = 1; i < 624; ++i) {
    mt_[i] = 1812433253U * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + static_cast<std::uint32_t>(i);
  }
  std::size_t i = 1, j = 0;
  for (std::size_t k = 624 > key.size() ? 624 : key.size(); k > 0; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525U)) + key[j] + static_cast<std::uint32_t>(j);
    ++i;
    ++j;
    if (i >= 624) {
      mt_[0] = mt_[623];
      i = 1;
    }
    if (j >= key.size()) j = 0;
  }
  for (std::size_t k = 623; k > 0; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941U)) - static_cast<std::uint32_t>(i);
    ++i;
    if (i >= 624) {
      mt_[0] = mt_[623];
      i = 1;
    }
  }
  mt_[0] = 0x80000000U;
  mti_ = 624;
}

std::uint32_t PyRandom::genrand_uint32() {
  constexpr std::uint32_t kMatrixA = 0x9908b0dfU, kUpper = 0x80000000U, kLower = 0x7fffffffU;
  if (mti_ >= 624) {
    for (std::size_t kk = 0; kk < 624; ++kk) {
      const std::uint32_t y = (mt_[kk] & kUpper) | (mt_[(kk + 1) % 624] & kLower);
      mt_[kk] = mt_[(kk + 397) % 624] ^ (y >> 1) ^ ((y & 1U) ? kMatrixA : 0U);
    }
    mti_ = 0;
  }
  std::uint32_t y = mt_[mti_++];
  y ^= (y >> 11);
  y ^= (y << 7) & 0x9d2c5680U;
  y ^= (y << 15) & 0xefc60000U;
  y ^= (y >> 18);
  return y;
}

std::uint32_t PyRandom::getrandbits(int k) {
  if (k <= 0 || k > 32) throw std::logic_error("PyRandom::getrandbits: k must be in 1..32");
  return genrand_uint32() >> (32 - k);
}

std::uint64_t PyRandom::randbelow(std::uint64_t n) {
  if (n == 0 || n > 0xffffffffULL) throw std::logic_error("PyRandom::randbelow: n must be in 1..2**32-1");
  int k = 0;  // n.bit_length()
  while (k < 64 && (n >> k) != 0) ++k;
  std::uint64_t r = getrandbits(k);
  while (r >= n) r = getrandbits(k);
  return r;
}

double PyRandom::random() {
  // CPython's genrand_res53: a 27-bit and a 26-bit part, (a * 2**26 + b) / 2**53.
  const std::uint32_t a = genrand_uint32() >> 5, b = genrand_uint32() >> 6;
  return (static_cast<double>(a) * 67108864.0 + static_cast<double>(b)) * (1.0 / 9007199254740992.0);
}

std::vector<std::size_t> PyRandom::sample(std::size_t n, std::size_t k) {
  if (k > n) throw std::logic_error("PyRandom::sample: sample larger than population");
  std::vector<std::size_t> out(k);
  // CPython picks a pool (partial Fisher-Yates) or a set of seen indices by this size rule; the two
  // consume the generator differently, so the rule is part of the result.
  std::size_t setsize = 21;
  if (k > 5) setsize += static_cast<std::size_t>(std::pow(4.0, std::ceil(std::log(static_cast<double>(k * 3)) / std::log(4.0))));
  if (n <= setsize) {
    std::vector<std::size_t> pool(n);
    for (std::size_t i = 0; i < n; ++i) pool[i] = i;
    for (std::size_t i = 0; i < k; ++i) {
      const auto j = static_cast<std::size_t>(randbelow(n - i));
      out[i] = pool[j];
      pool[j] = pool[n - i - 1];
    }
  } else {
    std::unordered_set<std::size_t> selected;
    for (std::size_t i = 0; i < k; ++i) {
      auto j = static_cast<std::size_t>(randbelow(n));
      while (selected.count(j)) j = static_cast<std::size_t>(randbelow(n));
      selected.insert(j);
      out[i] = j;
    }
  }
  return out;
}

}  // namespace evalrun
