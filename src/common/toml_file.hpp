// A TOML file read for evalrun (jobs and thresholds files): checked against the parser limits first
// (UTF-8, size, nesting: parse_limits.hpp), then parsed by toml11; every failure is one InputError
// naming the file and, for syntax errors, the line.
#pragma once

#include <toml.hpp>

#include <string>

namespace evalrun {

// The source name every TOML reader gives toml11 for a file's text (the run config's loader too; its
// --set values get "--set"), where messages name the real path themselves. A short one, because
// toml11 3.7 copies the name into the region of every character it scans: with a long path that is an
// allocation per character (minutes on a 10 MB line in a sanitizer build).
inline constexpr const char* kTomlFileSource = "file";

// `what` names the file in the not-found message ("jobs file", "thresholds file").
toml::value read_toml_file(const std::string& path, const char* what);

}  // namespace evalrun
