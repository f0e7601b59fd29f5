#include "io/positioned_reader.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include "test_util.hpp"

using namespace evalrun;
namespace fs = std::filesystem;

namespace {

class PositionedReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = evalrun::testing::make_temp_dir("io-reader");
    path_ = (dir_ / "bytes").string();
    bytes_.resize((std::size_t{3} << 20) + 123);  // not a whole number of blocks
    std::uint32_t x = 12345;
    for (auto& b : bytes_) {
      x = x * 1664525u + 1013904223u;
      b = static_cast<char>(x >> 24);
    }
    std::ofstream(path_, std::ios::binary).write(bytes_.data(), static_cast<std::streamsize>(bytes_.size()));
  }
  void TearDown() override { fs::remove_all(dir_); }

  void expect_range(const char* got, std::uint64_t offset, std::size_t n) const {
    ASSERT_NE(got, nullptr);
    EXPECT_EQ(std::string(got, n), std::string(bytes_.data() + offset, n)) << "bytes " << offset << "+" << n;
  }
  static int errno_of(PositionedReader& r, std::uint64_t offset, std::size_t n) {
    try {
      r.read(offset, n);
    } catch (const std::system_error& e) {
      return e.code().value();
    }
    return 0;
  }

  fs::path dir_;
  std::string path_;
  std::vector<char> bytes_;
};

// Every range comes back byte for byte, direct or through the page cache: at block boundaries and off
// them, prefetched in order (the thread's), prefetched and then not asked for (dropped), asked for
// twice, and ending exactly at the end of the file.
TEST_F(PositionedReaderTest, RangesComeBackAsWritten) {
  for (const bool direct : {true, false}) {
    PositionedReader r(path_, std::size_t{1} << 20, direct);
    if (!direct) {
      EXPECT_FALSE(r.direct());
    }
    const std::vector<std::pair<std::uint64_t, std::size_t>> ranges = {
        {0, 4096}, {4096, 100}, {5000, 1 << 20}, {(1 << 20) + 5000, 777}, {2 << 20, 1}, {bytes_.size() - 9000, 9000}};
    for (std::size_t i = 0; i < ranges.size(); ++i) {
      const auto [offset, n] = ranges[i];
      const char* got = r.read(offset, n);
      if (i + 1 < ranges.size()) r.prefetch(ranges[i + 1].first, ranges[i + 1].second);
      expect_range(got, offset, n);
    }
    r.prefetch(123, 456);  // not read next: dropped
    expect_range(r.read(3, 70000), 3, 70000);
    expect_range(r.read(3, 70000), 3, 70000);
    r.prefetch(bytes_.size() - 1, 1);
  }  // destroyed with a read in flight
}

// A range past the end of the file (ENODATA: H5Rows names the dataset and rows), or longer than the
// reader was made for, is an error with an errno; so is a file that does not exist.
TEST_F(PositionedReaderTest, ShortFilesAndLongRangesAreErrors) {
  PositionedReader r(path_, 4096);
  EXPECT_EQ(errno_of(r, bytes_.size() - 10, 11), ENODATA);
  r.prefetch(bytes_.size(), 1);
  EXPECT_EQ(errno_of(r, bytes_.size(), 1), ENODATA);
  EXPECT_EQ(errno_of(r, 0, 4097), EINVAL);
  EXPECT_EQ(errno_of(r, 10, 4096), 0);
  try {
    PositionedReader missing((dir_ / "missing").string(), 4096);
    ADD_FAILURE() << "opened a missing file";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code().value(), ENOENT);
    EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos);
  }
}

}  // namespace
