// Fuzz target: safetensors files and checkpoint directories (src/io/safetensors.hpp).
//
// Input: either raw bytes, written as model.safetensors (the header length, header JSON and data
// buffer are all fuzzed), or a "@@ NAME" container (fuzz_util.hpp) whose files form a checkpoint
// directory, typically model.safetensors.index.json plus shards.
// Accepted files must give views that lie inside the mapped file's data buffer, do not overlap, and
// whose size is numel * element size.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "fuzz_util.hpp"
#include "tensor_view_check.hpp"
#include "io/safetensors.hpp"

using namespace evalrun;

namespace {

void check_file(const SafetensorsFile& f) {
  const std::byte* base = f.mapped_data();
  const std::size_t size = f.mapped_size();
  FUZZ_CHECK(size >= 8);
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<std::uint8_t>(base[i]);
  FUZZ_CHECK(header_len <= size - 8);
  const std::byte* buf_begin = base + 8 + header_len;
  const std::byte* buf_end = base + size;
  std::vector<std::pair<const std::byte*, const std::byte*>> ranges;
  for (const auto& [name, v] : f.tensors()) {
    FUZZ_CHECK(name == v.name);
    FUZZ_CHECK(f.find(name) == &v);
    fuzz::check_view(v, buf_begin, buf_end);
    if (v.nbytes > 0) ranges.emplace_back(v.data, v.data + v.nbytes);
  }
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i) FUZZ_CHECK(ranges[i].first >= ranges[i - 1].second);
}

void check_checkpoint(const Checkpoint& c) {
  for (const auto& name : c.names()) {
    const TensorView& v = c.get(name);
    FUZZ_CHECK(v.name == name);
    fuzz::check_view(v, v.data, v.data + v.nbytes);
  }
  (void)c.files();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  auto& scratch = fuzz::Scratch::get();
  scratch.reset();
  const auto sections = fuzz::split_sections(in);
  if (sections.container) {
    for (const auto& [name, body] : sections.files) scratch.write(name, body);
    for (const auto& entry : sections.files) {
      const std::string path = (scratch.dir() / entry.first).string();
      if (path.size() > 12 && path.substr(path.size() - 12) == ".safetensors") {
        fuzz::expect_clean([&] { check_file(SafetensorsFile(path)); });
      }
    }
  } else {
    const std::string path = scratch.write("model.safetensors", in);
    fuzz::expect_clean([&] { check_file(SafetensorsFile(path)); });
  }
  fuzz::expect_clean([&] { check_checkpoint(Checkpoint(scratch.dir().string())); });
  return 0;
}
