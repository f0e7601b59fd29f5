#include "common/text.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/errors.hpp"

namespace evalrun {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  if (word.size() > 100) return "";  // no typo of a short name, and edit_distance is quadratic
  std::string best;
  std::size_t best_d = std::max<std::size_t>(2, word.size() / 3) + 1;
  for (const auto& c : candidates) {
    std::size_t d = edit_distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

void refuse_directory(const std::string& path, const std::string& where) {
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec)) return;
  if (where.empty()) throw InputError(path, "is a directory, expected a file");
  throw InputError(where, quote_short(path) + " is a directory, expected a file");
}

std::string read_file(const std::string& path) {
  refuse_directory(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "cannot open file");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw InputError(path, "read error");
  return ss.str();
}

namespace {
constexpr std::size_t kWhole = 100, kKept = 60;

// The first kKept bytes of `value`, cut at a UTF-8 character boundary, marked with the full size.
std::string cut(std::string_view value, const char* mark) {
  std::size_t n = kKept;
  while (n > 0 && (static_cast<unsigned char>(value[n]) & 0xC0) == 0x80) --n;  // not inside a character
  std::string out(value.substr(0, n));
  return out.append(mark).append(std::to_string(value.size())).append(" bytes)");
}
}  // namespace

std::string quote_short(std::string_view value) {
  std::string out(1, '\'');
  if (value.size() <= kWhole) return out.append(value).append(1, '\'');
  return out.append(cut(value, "...' ("));
}

std::string clip_text(std::string_view message) {
  return message.size() <= 2 * kWhole ? std::string(message) : cut(message, "... (");
}

}  // namespace evalrun
