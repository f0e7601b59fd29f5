// Fuzz target: reading result files (src/io/hdf5_file.hpp H5Reader), as inspect and compare do: the
// input is written as a .h5 file, opened, and every group, dataset and attribute reachable from the
// root (at most 200 objects, 8 levels) is listed and read with each reader that fits its class. Bad
// files must be InputErrors; what is read must agree with the shape it reported.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.hpp"
#include "io/hdf5_file.hpp"

using namespace evalrun;

namespace {

void walk(const H5Reader& r, const std::string& path, int depth, int& budget) {
  if (depth > 8 || --budget < 0) return;
  fuzz::expect_clean([&] {
    for (const auto& name : r.attr_names(path)) {
      fuzz::expect_clean([&] { (void)r.attr_string(path, name); });
      fuzz::expect_clean([&] { (void)r.attr_int(path, name); });
      fuzz::expect_clean([&] { (void)r.attr_double(path, name); });
    }
  });
  std::vector<std::string> kids;
  const bool group = fuzz::expect_clean([&] { kids = r.children(path); });
  if (group) {
    for (const auto& k : kids) walk(r, path == "/" ? "/" + k : path + "/" + k, depth + 1, budget);
    fuzz::expect_clean([&] { (void)r.read_ragged_i64(path); });
    fuzz::expect_clean([&] { (void)r.read_ragged_f32(path); });
    return;
  }
  std::vector<std::int64_t> shape;
  if (!fuzz::expect_clean([&] { shape = r.shape(path); })) return;
  std::size_t n = 1;
  for (auto d : shape) {
    FUZZ_CHECK(d >= 0);
    if (d > (1 << 20)) return;  // reading a huge dataset only measures memory
    n *= static_cast<std::size_t>(d);
    if (n > (1u << 22)) return;
  }
  fuzz::expect_clean([&] { FUZZ_CHECK(r.read_f64(path).size() == n); });
  fuzz::expect_clean([&] { FUZZ_CHECK(r.read_i64(path).size() == n); });
  fuzz::expect_clean([&] { FUZZ_CHECK(r.read_strings(path).size() == n); });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  auto& scratch = fuzz::Scratch::get();
  scratch.reset();
  const std::string path = scratch.write("result.h5", in);
  fuzz::expect_clean([&] {
    const H5Reader r(path);
    int budget = 200;
    walk(r, "/", 0, budget);
  });
  return 0;
}
