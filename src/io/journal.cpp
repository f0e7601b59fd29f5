#include "io/journal.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "common/errors.hpp"

namespace evalrun {

namespace {

constexpr char kMagic[4] = {'E', 'V', 'J', '1'};
constexpr std::size_t kHeader = 16, kTrailer = 4;

std::array<std::uint32_t, 256> make_crc_table() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  return t;
}

void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
}
std::uint64_t get_u64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void write_all(int fd, const std::string& data, const std::string& path) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error("cannot write the journal " + path + ": " + std::strerror(errno));
    }
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace

std::uint32_t crc32(const void* data, std::size_t n, std::uint32_t crc) {
  static const auto table = make_crc_table();
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (std::size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

JournalContents read_journal(const std::string& path) {
  JournalContents c;
  if (!std::filesystem::exists(path)) return c;
  std::ifstream in(path, std::ios::binary);
  const std::string b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (b.size() < sizeof kMagic) {
    c.torn_bytes = b.size();  // crashed before the magic was complete
    return c;
  }
  if (std::memcmp(b.data(), kMagic, sizeof kMagic) != 0) throw InputError(path, "not an evalrun journal (bad magic)");
  const auto* u = reinterpret_cast<const unsigned char*>(b.data());
  std::size_t at = sizeof kMagic;
  while (at < b.size()) {
    if (b.size() - at < kHeader + kTrailer) break;  // torn header
    const std::uint64_t index = get_u64(u + at), len = get_u64(u + at + 8);
    if (len > b.size() - at - kHeader - kTrailer) break;  // torn payload (or a garbage length at the tail)
    const std::size_t end = at + kHeader + len;
    std::uint32_t stored = 0;
    for (int i = 3; i >= 0; --i) stored = (stored << 8) | u[end + i];
    if (crc32(u + at, kHeader + len) != stored) {
      if (end + kTrailer == b.size()) break;  // the last record, half written
      throw InputError(path, "damaged record at byte " + std::to_string(at) + " (CRC mismatch)");
    }
    c.items[index] = b.substr(at + kHeader, len);
    at = end + kTrailer;
  }
  c.good_bytes = at < b.size() ? at : b.size();
  c.torn_bytes = b.size() - c.good_bytes;
  return c;
}

JournalWriter::JournalWriter(const std::string& path) : path_(path) {
  const JournalContents existing = read_journal(path);  // validates and finds a torn tail
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw InputError(path, std::string("cannot open the journal: ") + std::strerror(errno));
  if (existing.good_bytes < sizeof kMagic) {
    if (::ftruncate(fd_, 0) != 0) throw std::runtime_error("cannot truncate " + path);
    write_all(fd_, std::string(kMagic, sizeof kMagic), path);
  } else if (::ftruncate(fd_, static_cast<off_t>(existing.good_bytes)) != 0) {
    throw std::runtime_error("cannot cut the torn tail of " + path);
  }
  ::lseek(fd_, 0, SEEK_END);
  if (::fdatasync(fd_) != 0) throw std::runtime_error("cannot sync " + path);
}

JournalWriter::~JournalWriter() {
  try {
    flush();
  } catch (...) {
    // a destructor must not throw; the records stay pending, as after a crash
  }
  if (fd_ >= 0) ::close(fd_);
}

void JournalWriter::add(std::uint64_t index, const std::string& payload) {
  std::string rec;
  put_u64(rec, index);
  put_u64(rec, payload.size());
  rec += payload;
  const std::uint32_t c = crc32(rec.data(), rec.size());
  for (int i = 0; i < 4; ++i) rec += static_cast<char>((c >> (8 * i)) & 0xFF);
  pending_ += rec;
}

void JournalWriter::flush() {
  if (pending_.empty()) return;
  write_all(fd_, pending_, path_);
  if (::fdatasync(fd_) != 0) throw std::runtime_error("cannot sync the journal " + path_ + ": " + std::strerror(errno));
  pending_.clear();
}

}  // namespace evalrun
