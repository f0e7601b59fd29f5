// Fuzz target: pytorch_model.bin, torch.save's zip archive (src/io/torch_bin.hpp): the zip directory,
// the pickle machine and the tensors it assembles. Input: raw bytes written as pytorch_model.bin.
// Accepted files must give views that lie inside the mapping, whose size is numel * element size.
#include <cstddef>
#include <cstdint>

#include "fuzz_util.hpp"
#include "io/torch_bin.hpp"
#include "tensor_view_check.hpp"

using namespace evalrun;

namespace {

void check_file(const TorchBinFile& f) {
  const std::byte* begin = f.mapped_data();
  const std::byte* end = begin + f.mapped_size();
  for (const auto& [name, v] : f.tensors()) {
    FUZZ_CHECK(name == v.name);
    fuzz::check_view(v, begin, end);
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
