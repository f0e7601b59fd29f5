// Positioned writes of large byte ranges into an existing file, bypassing the page cache (O_DIRECT)
// where the file system allows it. A rank writes gigabytes of logits rows that nobody reads back on
// this node: through the page cache each 4 KiB page is allocated, faulted, copied and written back
// later (on the VMs evalrun is tested on, 2 s of CPU per GB and a third of the disk's speed), while a
// direct write hands the disk the bytes as they are. O_DIRECT needs file offsets, lengths and memory
// aligned to the device's block: the aligned middle of a range goes through an aligned staging buffer
// (reused), the partial blocks at its ends through the page cache (another rank may write the rest of
// such a block: the page cache merges the two). A file system that refuses O_DIRECT (tmpfs, some
// network file systems) gets buffered writes only; the bytes are the same either way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace evalrun {

class PositionedWriter {
 public:
  // Opens `path` for writing (an errno-carrying std::system_error when it cannot); `direct` false:
  // buffered writes only.
  PositionedWriter(const std::string& path, bool direct = true);
  ~PositionedWriter();
  PositionedWriter(const PositionedWriter&) = delete;
  PositionedWriter& operator=(const PositionedWriter&) = delete;

  // Writes `bytes` bytes at `offset`; returns 0 or the errno of the write that failed (ENOSPC for a
  // write that wrote nothing).
  int write(std::uint64_t offset, const void* data, std::size_t bytes);
  // fdatasync; returns 0 or its errno.
  int sync();
  bool direct() const { return direct_fd_ >= 0; }

  static constexpr std::size_t kBlock = 4096;        // a multiple of every device's logical block
  static constexpr std::uint64_t block_boundary_at_or_after(std::uint64_t offset) {
    return (offset + kBlock - 1) / kBlock * kBlock;
  }
  static constexpr std::size_t kStaging = 8u << 20;  // bytes per direct write

 private:
  int buffered(std::uint64_t offset, const char* data, std::size_t bytes);
  int fd_ = -1;         // buffered
  int direct_fd_ = -1;  // O_DIRECT, or -1
  struct Free {
    void operator()(char* p) const;
  };
  std::unique_ptr<char, Free> staging_;  // kStaging bytes, kBlock-aligned, made on the first direct write
};

}  // namespace evalrun
