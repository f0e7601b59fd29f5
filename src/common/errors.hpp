// Error types shared by every library. An InputError means the user's input (config, checkpoint,
// data set, reference file) is wrong: `main` prints its one line and exits with status 2. Anything
// else that escapes is an internal failure (exit 1).
#pragma once

#include <stdexcept>
#include <string>

namespace evalrun {

class InputError : public std::runtime_error {
 public:
  // `where` names the place: "configs/a.toml:12: task.batch_size", "model.safetensors: tensor 'x'".
  InputError(std::string where, const std::string& what);
  const std::string& where() const noexcept { return where_; }
  const std::string& detail() const noexcept { return detail_; }

 private:
  std::string where_;
  std::string detail_;
};

// Process exit codes used across the commands.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;  // comparison failed / internal error
inline constexpr int kExitBadInput = 2;

}  // namespace evalrun
