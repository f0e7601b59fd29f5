#include "io/positioned_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <system_error>

namespace evalrun {

PositionedWriter::PositionedWriter(const std::string& path, bool direct) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd_ < 0) throw std::system_error(errno, std::generic_category(), path);
  // EINVAL: the file system takes no O_DIRECT; the buffered descriptor does every write then.
  if (direct) direct_fd_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_DIRECT);
}

PositionedWriter::~PositionedWriter() {
  if (direct_fd_ >= 0) ::close(direct_fd_);
  if (fd_ >= 0) ::close(fd_);
}

void PositionedWriter::Free::operator()(char* p) const { std::free(p); }

int PositionedWriter::buffered(std::uint64_t offset, const char* data, std::size_t bytes) {
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd_, data, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : ENOSPC;
    data += n;
    bytes -= static_cast<std::size_t>(n);
    offset += static_cast<std::uint64_t>(n);
  }
  return 0;
}

int PositionedWriter::write(std::uint64_t offset, const void* data, std::size_t bytes) {
  const char* p = static_cast<const char*>(data);
  const std::uint64_t end = offset + bytes;
  const std::uint64_t first_block = block_boundary_at_or_after(offset), last_block = end / kBlock * kBlock;
  if (direct_fd_ < 0 || first_block >= last_block) return buffered(offset, p, bytes);
  if (!staging_) {
    staging_.reset(static_cast<char*>(std::aligned_alloc(kBlock, kStaging)));
    if (!staging_) return ENOMEM;
  }
  if (int e = buffered(offset, p, first_block - offset)) return e;
  for (std::uint64_t at = first_block; at < last_block;) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kStaging, last_block - at));
    std::memcpy(staging_.get(), p + (at - offset), n);
    std::size_t done = 0;
    while (done < n) {  // a short direct write stops at a block boundary, so the rest stays aligned
      const ssize_t w = ::pwrite(direct_fd_, staging_.get() + done, n - done, static_cast<off_t>(at + done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return w < 0 ? errno : ENOSPC;
      done += static_cast<std::size_t>(w);
    }
    at += n;
  }
  return buffered(last_block, p + (last_block - offset), end - last_block);
}

int PositionedWriter::sync() { return ::fdatasync(fd_) == 0 ? 0 : errno; }

}  // namespace evalrun
