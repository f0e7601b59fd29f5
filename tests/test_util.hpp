// Helpers shared by the unit tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <unistd.h>
#include <vector>

namespace evalrun::testing {

// ../shared/data when .ci/run (or the developer) sets EVALRUN_DATA_DIR; "" otherwise. Tests that
// need it call GTEST_SKIP() when it is empty, so the suite passes on a fresh clone without it.
inline std::string shared_data_dir() {
  const char* d = std::getenv("EVALRUN_DATA_DIR");
  if (d == nullptr || *d == '\0') return "";
  return std::filesystem::path(d).string();
}

#define EVALRUN_REQUIRE_SHARED_DATA(var)                                      \
  const std::string var = ::evalrun::testing::shared_data_dir();             \
  if (var.empty()) GTEST_SKIP() << "EVALRUN_DATA_DIR is not set";

// A fresh empty directory under the system temp dir, removed by the caller's TearDown if wanted.
inline std::filesystem::path make_temp_dir(const std::string& prefix) {
  auto base = std::filesystem::temp_directory_path();
  for (int i = 0;; ++i) {
    auto p = base / (prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(i));
    if (std::filesystem::create_directory(p)) return p;
  }
}

// A fixture whose every test gets a fresh directory `dir_` (named after the test suite), removed after it.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir(std::string("evalrun-") + ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

// Largest |a[i] - b[i]| (a size mismatch fails the test and compares the common prefix).
inline float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float worst = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

}  // namespace evalrun::testing
