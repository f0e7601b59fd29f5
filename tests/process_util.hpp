// Running the real evalrun binary (directly or under mpirun) from tests.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace evalrun::testing {

struct ProcessResult {
  int exit_code = -1;  // -1: killed by a signal
  std::string output;  // stdout + stderr
};

inline ProcessResult run_process(const std::string& command) {
  ProcessResult r;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf{};
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// mpirun as these tests need it: root is allowed (CI runs as root), more ranks than cores, and no
// core binding so a rank's threads are not pinned to one core.
inline std::string mpirun(int ranks) {
  return "timeout 300 mpirun --allow-run-as-root --oversubscribe --bind-to none -n " + std::to_string(ranks) + " ";
}

inline std::string quote(const std::string& s) { return "'" + s + "'"; }

}  // namespace evalrun::testing
