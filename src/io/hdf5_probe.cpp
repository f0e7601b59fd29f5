#include "io/hdf5_probe.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <vector>

#include "common/errors.hpp"
#include "io/hdf5_file.hpp"

namespace evalrun {
namespace {

// Reads every object below `path` the way inspect and compare may: attributes in every type, shapes,
// data up to the size limit. Errors the reader raises are expected (a dataset of
// strings read as numbers) and skipped: only a crash matters here.
void read_everything(const H5Reader& r, const std::string& path, int depth) {
  if (depth > 64) return;
  auto quietly = [](auto&& read) {
    try {
      read();
    } catch (const std::exception&) {
    }
  };
  std::vector<std::string> names;
  quietly([&] { names = r.attr_names(path); });
  for (const auto& name : names) {
    quietly([&] { (void)r.attr_string(path, name); });
    quietly([&] { (void)r.attr_int(path, name); });
    quietly([&] { (void)r.attr_double(path, name); });
  }
  std::vector<std::string> kids;
  bool group = false;
  quietly([&] {
    kids = r.children(path);
    group = true;
  });
  if (group) {
    for (const auto& k : kids) read_everything(r, path == "/" ? "/" + k : path + "/" + k, depth + 1);
    return;
  }
  std::vector<std::int64_t> shape;
  bool known = false;
  quietly([&] {
    shape = r.shape(path);
    known = true;
  });
  if (!known) return;
  std::size_t bytes = 8;
  for (auto d : shape) {
    if (d < 0 || (d > 0 && bytes > kProbeMaxDatasetBytes / static_cast<std::size_t>(d))) return;
    bytes *= static_cast<std::size_t>(d);
  }
  // Numbers once (as float64: every numeric class converts), strings when they are not numbers.
  bool numeric = false;
  quietly([&] {
    (void)r.read_f64(path);
    numeric = true;
  });
  if (!numeric) quietly([&] { (void)r.read_strings(path); });
}

}  // namespace

void probe_hdf5_file(const std::string& path) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t child = fork();
  if (child < 0) return;  // no child to spare: the caller reads the file itself
  if (child == 0) {
    // The child's own messages would only repeat what the parent says.
    std::freopen("/dev/null", "w", stderr);
    try {
      const H5Reader r(path);
      read_everything(r, "/", 0);
    } catch (...) {
    }
    std::_Exit(0);
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) return;
  }
  if (WIFSIGNALED(status)) {
    throw InputError(path, std::string("the HDF5 library crashed reading it (") + strsignal(WTERMSIG(status)) +
                               "): the file is damaged or was not written by evalrun");
  }
}

}  // namespace evalrun
