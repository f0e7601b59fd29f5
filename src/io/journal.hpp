// A journal of finished work items that survives a crash of the process writing it, so an interrupted
// run can resume instead of starting over. Append-only binary file:
//   "EVJ1" magic, then records [u64 item index][u64 payload length][payload][u32 CRC-32 of the three].
// A record is durable once flush() returned (write + fdatasync). A crash can leave a torn last record;
// reading drops it. A damaged record before the last one is an InputError naming the file and offset.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace evalrun {

class JournalWriter {
 public:
  // Opens `path` for appending, creating it (with its magic) when missing. A torn tail left by a crash
  // is cut off first, so new records follow the last good one.
  explicit JournalWriter(const std::string& path);
  ~JournalWriter();
  JournalWriter(const JournalWriter&) = delete;
  JournalWriter& operator=(const JournalWriter&) = delete;

  void add(std::uint64_t index, const std::string& payload);  // buffered
  // write + fdatasync. A failure (disk full, I/O error) cuts the file back to its last whole record and
  // throws WriteError naming the file and the reason; the writer writes nothing after that.
  void flush();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::string pending_;
  std::uint64_t size_ = 0;  // bytes on disk, all of them whole records
  bool failed_ = false;     // a write failed: nothing more is written (the file ends at size_)
};

struct JournalContents {
  std::map<std::uint64_t, std::string> items;  // index -> payload (a repeated index: the last one)
  std::map<std::uint64_t, std::uint64_t> offsets;  // index -> byte offset of its record (for messages)
  std::uint64_t good_bytes = 0;                // length of the valid prefix
  std::uint64_t torn_bytes = 0;                // bytes after it (an incomplete last record)
};

// Missing file: empty contents. A damaged record (CRC mismatch before the last record) or a repeated
// index with another payload is an InputError naming the file, the record's number and byte offset.
JournalContents read_journal(const std::string& path);

std::uint32_t crc32(const void* data, std::size_t n, std::uint32_t crc = 0);

}  // namespace evalrun
