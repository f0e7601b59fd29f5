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
// Reads a whole file; InputError naming the path if it cannot be read.
std::string read_file(const std::string& path);

}  // namespace evalrun
