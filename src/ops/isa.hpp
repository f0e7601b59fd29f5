// Which instruction set the hand-written kernels use (src/ops, src/quant), picked per call from the
// CPU's features, so the binary needs no -march flag. The quant kernels are compiled three times, for
// x86-64-v4 (AVX-512), x86-64-v3 (AVX2 + FMA) and the x86-64 baseline (the macros below); the float32
// and FP8 row kernels of ops are written in intrinsics for AVX-512 and AVX2 (none for the baseline).
// Tests lower the cap to run the other versions on the same CPU.
#pragma once

#include <vector>

namespace evalrun::ops {

enum class Isa { baseline = 0, avx2 = 1, avx512 = 2 };

// The best the CPU supports, at most the cap.
Isa kernel_isa();
// Caps kernel_isa() (tests); Isa::avx512 = no cap.
void set_kernel_isa_cap(Isa cap);
const char* to_string(Isa isa);
// Every level this CPU runs, best first, the baseline last (tests run each kernel version on one CPU).
std::vector<Isa> isas_of_this_cpu();
// The same without the baseline: the versions of the row kernels, which have none for it (empty on a
// CPU without AVX2).
std::vector<Isa> vector_isas_of_this_cpu();

// Caps kernel_isa() for its scope, then lifts the cap.
class ScopedIsaCap {
 public:
  explicit ScopedIsaCap(Isa cap) { set_kernel_isa_cap(cap); }
  ~ScopedIsaCap() { set_kernel_isa_cap(Isa::avx512); }
  ScopedIsaCap(const ScopedIsaCap&) = delete;
  ScopedIsaCap& operator=(const ScopedIsaCap&) = delete;
};

}  // namespace evalrun::ops

// Compiles one kernel body (a function template or an inline function taking the same arguments)
// for the three levels; used inside the kernels' .cpp files.
#define EVALRUN_TARGET_V4 __attribute__((target("arch=x86-64-v4")))
#define EVALRUN_TARGET_V3 __attribute__((target("arch=x86-64-v3")))
