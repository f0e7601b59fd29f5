// Reads byte ranges of a file once, in order, bypassing the page cache (O_DIRECT) where the file system
// allows it, with the next range read on a thread of its own while the caller computes on the last.
// `evalrun compare` streams two files of gigabytes of logits rows this way (H5Rows): through the page
// cache, every page is allocated, filled and copied on the one core that also computes (on the VMs
// evalrun is tested on, two thirds of compare's time on a cold cache), and the file evicts everything
// else cached; a direct read hands the bytes to the buffer as the disk delivers them. A file system
// that refuses O_DIRECT (tmpfs) is read through the page cache, still one range ahead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <string>

namespace evalrun {

class PositionedReader {
 public:
  // Opens `path` for reading (a std::system_error carrying errno when it cannot); ranges are at most
  // `max_bytes` long. `direct` false: through the page cache only.
  PositionedReader(const std::string& path, std::size_t max_bytes, bool direct = true);
  ~PositionedReader();
  PositionedReader(const PositionedReader&) = delete;
  PositionedReader& operator=(const PositionedReader&) = delete;

  // The `bytes` bytes at `offset`, valid until the next read(); waits for the thread when prefetch()
  // asked for this range, reads it now otherwise. Throws std::system_error with the read's errno,
  // ENODATA when the file ends before the range does, EINVAL when bytes > max_bytes.
  const char* read(std::uint64_t offset, std::size_t bytes);
  // Starts reading a range on a thread, for the next read(); a range nobody reads is dropped.
  void prefetch(std::uint64_t offset, std::size_t bytes);
  bool direct() const { return direct_fd_ >= 0; }

  static constexpr std::size_t kBlock = 4096;  // a multiple of every device's logical block

 private:
  struct Free {
    void operator()(char* p) const;
  };
  static constexpr int kFileEnds = -1;  // Buffer::error: the file ended before the range
  // A range as read: its bytes start at data + lead (the range's offset rounded down to kBlock is at
  // data); error is 0, the errno that stopped it, or kFileEnds.
  struct Buffer {
    std::unique_ptr<char, Free> data;
    std::uint64_t offset = 0;
    std::size_t bytes = 0, lead = 0;
    int error = 0;
    bool holds(std::uint64_t o, std::size_t n) const { return error == 0 && data && offset == o && bytes == n; }
  };
  void fill(Buffer& b, std::uint64_t offset, std::size_t bytes) const;
  int read_into(int fd, char* to, std::uint64_t at, std::size_t want, std::size_t need) const;

  std::string path_;
  std::size_t max_bytes_;
  std::size_t capacity_;  // of each buffer: max_bytes_ and a block at each end, rounded to blocks
  int fd_ = -1;           // through the page cache
  int direct_fd_ = -1;    // O_DIRECT, or -1
  Buffer current_, next_;
  std::future<void> pending_;  // fills next_
};

}  // namespace evalrun
