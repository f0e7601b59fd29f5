// Small string helpers shared by the libraries.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace evalrun {

// Levenshtein distance, for "did you mean" suggestions.
std::size_t edit_distance(std::string_view a, std::string_view b);
// The candidate closest to `word` if it is close enough to be a plausible typo, else "".
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);
// Reads a whole file; InputError naming the path if it cannot be read, or one line saying so when the
// path is a directory.
std::string read_file(const std::string& path);
// InputError(`where`, "'path' is a directory, expected a file") when `path` names a directory; `where`
// is the key or argument that gave it ("" = the path itself).
void refuse_directory(const std::string& path, const std::string& where = "");
// `value` in single quotes for an error message; one longer than 100 bytes is cut after its first 60
// bytes (at a UTF-8 character boundary) and marked: 'abc...' (10485760 bytes).
std::string quote_short(std::string_view value);
// A parser's message (which may quote the input it stopped at) cut the same way, without quotes.
std::string clip_text(std::string_view message);

}  // namespace evalrun
