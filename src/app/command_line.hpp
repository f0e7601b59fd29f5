// What every command does with its command line: CLI11 parses it; --help / --version print and end
// the command with 0, a bad flag with kExitBadInput.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>

#include "common/errors.hpp"

namespace evalrun {

// The exit status when the command should stop now, nothing when it should go on.
inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitBadInput;
  }
  return std::nullopt;
}

}  // namespace evalrun
