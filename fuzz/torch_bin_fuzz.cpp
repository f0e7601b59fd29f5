// Fuzz target: pytorch_model.bin, torch.save's zip archive (src/io/torch_bin.hpp): the zip directory,
// the pickle machine and the tensors it assembles. Input: raw bytes written as pytorch_model.bin.
// Accepted files must give views that lie inside the mapping, whose size is numel * element size.
#include <cstddef>
#include <cstdint>

#include "fuzz_util.hpp"
#include "io/torch_bin.hpp"

using namespace evalrun;

namespace {

void check_file(const TorchBinFile& f) {
  const std::byte* begin = f.mapped_data();
  const std::byte* end = begin + f.mapped_size();
  for (const auto& [name, v] : f.tensors()) {
    FUZZ_CHECK(name == v.name);
    FUZZ_CHECK(v.data >= begin && v.data <= end);
    FUZZ_CHECK(v.nbytes <= static_cast<std::size_t>(end - v.data));
    std::int64_t n = 1;
    for (auto d : v.shape) {
      FUZZ_CHECK(d >= 0);
      FUZZ_CHECK(!__builtin_mul_overflow(n, d, &n));
    }
    FUZZ_CHECK(static_cast<std::size_t>(n) * element_size(v.dtype) == v.nbytes);
    std::uint8_t acc = 0;  // touches every byte: a view past the mapping faults here
    for (std::size_t i = 0; i < v.nbytes; ++i) acc ^= static_cast<std::uint8_t>(v.data[i]);
    (void)acc;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto& scratch = fuzz::Scratch::get();
  scratch.reset();
  const std::string path =
      scratch.write("pytorch_model.bin", std::string_view(reinterpret_cast<const char*>(data), size));
  fuzz::expect_clean([&] { check_file(TorchBinFile(path)); });
  return 0;
}
