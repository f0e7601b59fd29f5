// The CPU a benchmark runs on, printed before its figures: a speed ratio measured with one instruction
// set does not carry over to another (the VNNI, BF16 and AVX-512 row kernels fall back to GEMMs or to
// AVX2 versions on CPUs without them, and the machines this project runs on differ from session to
// session). OMP_WAIT_POLICY is printed too: with PASSIVE, OpenMP's threads sleep at the end of every
// parallel region and are woken by the next, which halves the speed of a decode step (dozens of short
// regions) while leaving an encoder's forward pass (few long ones) as it was.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "ops/isa.hpp"

namespace evalrun::bench {

inline void print_cpu() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, model = "unknown";
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      model = line.substr(line.find(':') + 1);
      model.erase(0, model.find_first_not_of(" \t"));
      break;
    }
  }
  __builtin_cpu_init();
  auto has = [](bool yes) { return yes ? "yes" : "no"; };
  std::printf("cpu: %s; avx2 %s, avx512f %s, avx512_vnni %s, avx512_bf16 %s; evalrun's kernels: %s\n", model.c_str(),
              has(__builtin_cpu_supports("avx2")), has(__builtin_cpu_supports("avx512f")),
              has(__builtin_cpu_supports("avx512vnni")), has(__builtin_cpu_supports("avx512bf16")),
              ops::to_string(ops::kernel_isa()));
  const char* wait = std::getenv("OMP_WAIT_POLICY");
  std::printf("OMP_WAIT_POLICY: %s\n", wait != nullptr ? wait : "(unset: OpenMP's default, threads spin a while)");
}

}  // namespace evalrun::bench
