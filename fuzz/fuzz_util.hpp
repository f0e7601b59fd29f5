// Helpers shared by the fuzz targets (fuzz/*_fuzz.cpp).
//
// Each target defines LLVMFuzzerTestOneInput. The parsers under test read files, so the input is
// written to a per-process scratch directory first. Inputs that describe several files (a
// tokenizer directory, a sharded checkpoint) use a small text container:
//
//   @@ vocab.json
//   {"a": 0}
//   @@ merges.txt
//   #version: 0.2
//
// A line "@@ NAME" starts the file NAME (a plain file name: letters, digits, '.', '_', '-'); the
// newline before the next "@@ " line belongs to the separator. Sections with another name are kept
// under `extra` for the target to use (e.g. "@@ text" = text to encode).
//
// Rejection contract: a target calls the code under test inside `expect_clean`, which swallows
// evalrun::InputError (a clean refusal of bad input). Every other exception escapes and libFuzzer
// reports it as a crash, as it does for sanitizer reports, signals, timeouts and out-of-memory.
// Targets also check invariants of what was accepted with FUZZ_CHECK (abort on violation).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/errors.hpp"

namespace evalrun::fuzz {

#define FUZZ_CHECK(cond)                                                                     \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

// A scratch directory for this process (tmpfs when available: the targets write files on every
// run), emptied by reset() before each input and removed at exit.
class Scratch {
 public:
  static Scratch& get() {
    static Scratch s;
    return s;
  }
  const std::filesystem::path& dir() const { return dir_; }
  void reset() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    std::filesystem::create_directories(dir_);
  }
  std::string write(const std::string& name, std::string_view bytes) const {
    const std::string path = (dir_ / name).string();
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return path;
  }
  // A second directory that reset() leaves alone (a target's fixed files, made once).
  const std::filesystem::path& fixed_dir() const { return fixed_; }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    std::filesystem::remove_all(fixed_, ec);
  }

 private:
  Scratch() {
    const char* base = std::getenv("EVALRUN_FUZZ_TMP");
    std::filesystem::path root = base != nullptr ? base
                                 : std::filesystem::is_directory("/dev/shm") ? "/dev/shm"
                                                                              : std::filesystem::temp_directory_path();
    dir_ = root / ("evalrun-fuzz-" + std::to_string(::getpid()));
    fixed_ = root / ("evalrun-fuzz-" + std::to_string(::getpid()) + "-fixed");
    std::filesystem::create_directories(fixed_);
    reset();
  }
  std::filesystem::path dir_, fixed_;
};

struct Sections {
  std::map<std::string, std::string> files;  // name -> content, for names that look like file names
  bool container = false;                    // the input started with "@@ "
};

inline bool plain_file_name(std::string_view s) {
  if (s.empty() || s.size() > 64 || s == "." || s == "..") return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// Splits the container format above. Input that does not start with "@@ " is no container.
inline Sections split_sections(std::string_view in) {
  Sections out;
  if (in.substr(0, 3) != "@@ ") return out;
  out.container = true;
  std::vector<std::size_t> headers{0};  // where each "@@ " line starts
  for (std::size_t p = in.find("\n@@ "); p != std::string_view::npos; p = in.find("\n@@ ", p + 1))
    headers.push_back(p + 1);
  for (std::size_t i = 0; i < headers.size(); ++i) {
    const std::size_t h = headers[i];
    const std::size_t stop = i + 1 < headers.size() ? headers[i + 1] - 1 : in.size();  // before the '\n'
    std::size_t eol = in.find('\n', h);
    if (eol == std::string_view::npos || eol > stop) eol = stop;
    const std::string name(in.substr(h + 3, eol - h - 3));
    const std::size_t body = eol < stop ? eol + 1 : stop;
    if (plain_file_name(name)) out.files[name] = std::string(in.substr(body, stop - body));
  }
  return out;
}

// Runs `fn`, treating InputError as the clean rejection of bad input.
template <typename Fn>
bool expect_clean(Fn&& fn) {
  try {
    fn();
    return true;
  } catch (const evalrun::InputError& e) {
    // Every rejection must say where and what.
    FUZZ_CHECK(!e.where().empty());
    FUZZ_CHECK(!e.detail().empty());
    return false;
  }
}

}  // namespace evalrun::fuzz
