// A TOML file read for evalrun (jobs and thresholds files): checked against the parser limits first
// (UTF-8, size, nesting: parse_limits.hpp), then parsed by toml11; every failure is one InputError
// naming the file and, for syntax errors, the line.
#pragma once

#include <toml.hpp>

#include <string>

namespace evalrun {

// `what` names the file in the not-found message ("jobs file", "thresholds file").
toml::value read_toml_file(const std::string& path, const char* what);

}  // namespace evalrun
