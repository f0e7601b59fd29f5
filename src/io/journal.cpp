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
#include "io/text_file.hpp"

namespace evalrun {

namespace {

constexpr char kMagic[4] = {'E', 'V', 'J', '1'};
constexpr std::size_t kHeader = 16, kTrailer = 4;

// Slicing-by-8 tables: t[0] is the usual byte table, t[k][i] the CRC of byte i followed by k zero
// bytes, so eight bytes take eight lookups and no serial dependency per byte (the bytewise loop ran
// at about 0.4 GB/s, a sizeable part of a run that journals full logits).
using CrcTables = std::array<std::array<std::uint32_t, 256>, 8>;
CrcTables make_crc_tables() {
  CrcTables t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[0][i] = c;
  }
  for (std::uint32_t i = 0; i < 256; ++i) {
    for (std::size_t k = 1; k < 8; ++k) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
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

// 0 or the errno of the failed write.
int write_all(int fd, const std::string& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    done += static_cast<std::size_t>(n);
  }
  return 0;
}

}  // namespace

std::uint32_t crc32(const void* data, std::size_t n, std::uint32_t crc) {
  static const CrcTables t = make_crc_tables();
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    // little-endian byte order, independent of the host's
    const std::uint32_t lo = crc ^ (static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
                                    static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24);
    crc = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^ t[3][p[4]] ^
          t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]];
  }
  for (; n > 0; --n, ++p) crc = t[0][(crc ^ *p) & 0xFF] ^ (crc >> 8);
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
  std::uint64_t number = 0;  // records read, for messages
  while (at < b.size()) {
    if (b.size() - at < kHeader + kTrailer) break;  // torn header
    const std::uint64_t index = get_u64(u + at), len = get_u64(u + at + 8);
    if (len > b.size() - at - kHeader - kTrailer) break;  // torn payload (or a garbage length at the tail)
    const std::size_t end = at + kHeader + len;
    std::uint32_t stored = 0;
    for (int i = 3; i >= 0; --i) stored = (stored << 8) | u[end + i];
    if (crc32(u + at, kHeader + len) != stored) {
      if (end + kTrailer == b.size()) break;  // the last record, half written
      throw InputError(path, "damaged record #" + std::to_string(number + 1) + " at byte " + std::to_string(at) +
                                 " (CRC mismatch)");
    }
    ++number;
    std::string payload = b.substr(at + kHeader, len);
    if (const auto seen = c.items.find(index); seen != c.items.end() && seen->second != payload) {
      throw InputError(path, "record #" + std::to_string(number) + " at byte " + std::to_string(at) + ": work item " +
                                 std::to_string(index) + " again, with another result than the record at byte " +
                                 std::to_string(c.offsets[index]));
    }
    c.items[index] = std::move(payload);
    c.offsets[index] = at;
    at = end + kTrailer;
  }
  c.good_bytes = at < b.size() ? at : b.size();
  c.torn_bytes = b.size() - c.good_bytes;
  return c;
}

JournalWriter::JournalWriter(const std::string& path) : path_(path) {
  const JournalContents existing = read_journal(path);  // validates and finds a torn tail
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    if (is_storage_errno(errno)) throw WriteError(path, "the journal", std::strerror(errno));
    throw InputError(path, std::string("cannot open the journal: ") + std::strerror(errno));
  }
  auto fail = [&](const char* what) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    throw WriteError(path, std::string("the journal (") + what + ")", std::strerror(err));
  };
  if (existing.good_bytes < sizeof kMagic) {
    if (::ftruncate(fd_, 0) != 0) fail("truncate");
    if (const int err = write_all(fd_, std::string(kMagic, sizeof kMagic)); err != 0) {
      errno = err;
      fail("magic");
    }
    size_ = sizeof kMagic;
  } else {
    if (::ftruncate(fd_, static_cast<off_t>(existing.good_bytes)) != 0) fail("cutting its torn tail");
    size_ = existing.good_bytes;
  }
  ::lseek(fd_, 0, SEEK_END);
  if (::fdatasync(fd_) != 0) fail("sync");
}

JournalWriter::~JournalWriter() {
  try {
    if (!failed_) flush();
  } catch (...) {
    // a destructor must not throw; the records stay pending, as after a crash
  }
  if (fd_ >= 0) ::close(fd_);
}

void JournalWriter::add(std::uint64_t index, const std::string& payload) {
  const std::size_t at = pending_.size();
  put_u64(pending_, index);
  put_u64(pending_, payload.size());
  pending_ += payload;
  const std::uint32_t c = crc32(pending_.data() + at, pending_.size() - at);
  for (int i = 0; i < 4; ++i) pending_ += static_cast<char>((c >> (8 * i)) & 0xFF);
}

void JournalWriter::flush() {
  if (pending_.empty() || failed_) return;
  int err = write_all(fd_, pending_);
  if (err == 0 && ::fdatasync(fd_) != 0) err = errno;
  if (err != 0) {
    // A half-written record would sit before the records a resumed run appends (a damaged record, not
    // a torn tail): cut it off. Freeing blocks needs no space, so this works on a full disk too.
    failed_ = true;
    pending_.clear();
    if (::ftruncate(fd_, static_cast<off_t>(size_)) == 0) ::lseek(fd_, 0, SEEK_END);
    throw WriteError(path_, "the journal", std::strerror(err));
  }
  size_ += pending_.size();
  pending_.clear();
}

}  // namespace evalrun
