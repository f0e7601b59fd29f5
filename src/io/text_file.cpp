#include "io/text_file.hpp"

#include "common/errors.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace evalrun {

bool is_storage_errno(int err) {
  return err == ENOSPC || err == EDQUOT || err == EROFS || err == EIO || err == EFBIG;
}

void sync_file(const std::string& path, const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  const int err = fd < 0 ? errno : (::fsync(fd) != 0 ? errno : 0);
  if (fd >= 0) ::close(fd);
  if (err != 0) throw WriteError(path, what, std::strerror(err));
}

void write_text_file(const std::string& path, const std::string& text, const std::string& what) {
  namespace fs = std::filesystem;
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    fs::create_directories(parent, ec);
    // A path through a regular file is a mistyped path (bad input, exit 2); anything else the storage refused.
    if (ec == std::errc::not_a_directory) {
      throw InputError(path, "cannot write " + what + ": " + parent.string() + " is not a directory");
    }
    if (ec) throw WriteError(path, what, "cannot create directory " + parent.string() + ": " + ec.message());
  }
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw WriteError(path, what, std::strerror(errno));
  auto fail = [&](int err) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw WriteError(path, what, std::strerror(err));
  };
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(errno);
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) fail(errno);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw WriteError(path, what, std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw WriteError(path, what, std::strerror(err));
  }
}

}  // namespace evalrun
