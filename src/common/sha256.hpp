// SHA-256 of bytes and files, for the provenance attributes of result files.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace evalrun {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, std::size_t size);
  void update(std::string_view s) { update(s.data(), s.size()); }
  std::string hex_digest();  // finishes the hash

 private:
  void block(const unsigned char* p);
  unsigned int h_[8];
  unsigned char buf_[64];
  std::size_t buf_len_ = 0;
  unsigned long long total_ = 0;
};

std::string sha256_hex(std::string_view bytes);
// Hash of the files' contents in the given order (each file's bytes, then its name), so a checkpoint
// directory gets one stable digest.
std::string sha256_files(const std::vector<std::filesystem::path>& files);

}  // namespace evalrun
