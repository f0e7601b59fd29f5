#include "io/positioned_reader.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <system_error>
#include <utility>

namespace evalrun {

PositionedReader::PositionedReader(const std::string& path, std::size_t max_bytes, bool direct)
    : path_(path), max_bytes_(max_bytes), capacity_((max_bytes + 2 * kBlock - 1) / kBlock * kBlock) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw std::system_error(errno, std::generic_category(), path);
  // EINVAL: the file system takes no O_DIRECT; the buffered descriptor does every read then.
  if (direct) direct_fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
}

PositionedReader::~PositionedReader() {
  if (pending_.valid()) pending_.wait();  // the thread writes into next_
  if (direct_fd_ >= 0) ::close(direct_fd_);
  if (fd_ >= 0) ::close(fd_);
}

void PositionedReader::Free::operator()(char* p) const { std::free(p); }

// Reads from `at` until `need` bytes are in (asking for `want`, the block-rounded length: a direct
// read stops short only at the end of the file). Returns 0, the errno, or kFileEnds.
int PositionedReader::read_into(int fd, char* to, std::uint64_t at, std::size_t want, std::size_t need) const {
  std::size_t done = 0;
  while (done < need) {
    const ssize_t n = ::pread(fd, to + done, want - done, static_cast<off_t>(at + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return kFileEnds;
    done += static_cast<std::size_t>(n);
  }
  return 0;
}

void PositionedReader::fill(Buffer& b, std::uint64_t offset, std::size_t bytes) const {
  b.offset = offset;
  b.bytes = bytes;
  b.lead = static_cast<std::size_t>(offset % kBlock);
  b.error = 0;
  if (bytes > max_bytes_) {
    b.error = EINVAL;
    return;
  }
  if (!b.data) {
    b.data.reset(static_cast<char*>(std::aligned_alloc(kBlock, capacity_)));
    if (!b.data) {
      b.error = ENOMEM;
      return;
    }
  }
  const std::uint64_t start = offset - b.lead;
  const std::size_t need = b.lead + bytes, want = (need + kBlock - 1) / kBlock * kBlock;
  if (direct_fd_ >= 0) {
    b.error = read_into(direct_fd_, b.data.get(), start, want, need);
    if (b.error != EINVAL) return;  // EINVAL: this file system refuses the direct read itself
  }
  b.error = read_into(fd_, b.data.get(), start, want, need);
}

const char* PositionedReader::read(std::uint64_t offset, std::size_t bytes) {
  if (pending_.valid()) {
    pending_.get();
    if (next_.holds(offset, bytes)) std::swap(current_, next_);
  }
  if (!current_.holds(offset, bytes)) fill(current_, offset, bytes);
  if (current_.error != 0) {
    const int e = current_.error;
    const std::string range = "bytes " + std::to_string(offset) + ".." + std::to_string(offset + bytes - 1);
    if (e == kFileEnds)
      throw std::system_error(ENODATA, std::generic_category(), path_ + ": the file ends before " + range);
    throw std::system_error(e, std::generic_category(), path_ + ": " + range);
  }
  return current_.data.get() + current_.lead;
}

void PositionedReader::prefetch(std::uint64_t offset, std::size_t bytes) {
  if (pending_.valid()) pending_.get();
  try {
    pending_ = std::async(std::launch::async, [this, offset, bytes] { fill(next_, offset, bytes); });
  } catch (const std::system_error&) {
    // no thread to be had: read() reads the range itself
  }
}

}  // namespace evalrun
