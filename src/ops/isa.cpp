#include "ops/isa.hpp"

#include <atomic>

namespace evalrun::ops {

namespace {

Isa detect() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512cd") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx2") &&
      __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2")) {
    return Isa::avx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2") &&
      __builtin_cpu_supports("f16c")) {
    return Isa::avx2;
  }
  return Isa::baseline;
}

Isa detected() {
  static const Isa isa = detect();
  return isa;
}

std::atomic<int> g_cap{static_cast<int>(Isa::avx512)};

}  // namespace

Isa kernel_isa() {
  const int cap = g_cap.load(std::memory_order_relaxed);
  return static_cast<int>(detected()) < cap ? detected() : static_cast<Isa>(cap);
}

void set_kernel_isa_cap(Isa cap) { g_cap.store(static_cast<int>(cap)); }

std::vector<Isa> isas_of_this_cpu() {
  std::vector<Isa> out;
  for (int level = static_cast<int>(detected()); level >= 0; --level) out.push_back(static_cast<Isa>(level));
  return out;
}

std::vector<Isa> vector_isas_of_this_cpu() {
  std::vector<Isa> out = isas_of_this_cpu();
  out.pop_back();  // the baseline
  return out;
}

const char* to_string(Isa isa) {
  switch (isa) {
    case Isa::baseline: return "x86-64";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
  }
  return "?";
}

}  // namespace evalrun::ops
