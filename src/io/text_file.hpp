// Writing a small output file (report, predictions, thresholds, journal fingerprint) so that a failed
// write never leaves a half-written file in place of an earlier one: the text goes to a temporary name
// next to `path`, is synced, and is renamed over `path`. Any failure (disk full, quota, read-only
// filesystem, I/O error) removes the temporary file and throws WriteError naming `path` and the
// reason (strerror): an exit-1 failure, not bad input.
#pragma once

#include <stdexcept>
#include <string>

namespace evalrun {

class WriteError : public std::runtime_error {
 public:
  // "PATH: cannot write WHAT: REASON"
  WriteError(const std::string& path, const std::string& what, const std::string& reason)
      : std::runtime_error(path + ": cannot write " + what + ": " + reason) {}
};

// `what` names the file in the message ("the report", "the predictions"). Missing parent directories
// are created.
void write_text_file(const std::string& path, const std::string& text, const std::string& what);

// Syncs the written file `path` to disk (fsync); WriteError naming `what` when that fails.
void sync_file(const std::string& path, const std::string& what);

// True for errno values that mean the storage refused the write (ENOSPC, EDQUOT, EROFS, EIO, EFBIG)
// rather than that the path is wrong.
bool is_storage_errno(int err);

}  // namespace evalrun
