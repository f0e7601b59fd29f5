#include "common/parse_limits.hpp"

#include <algorithm>
#include <cctype>

#include "common/errors.hpp"
#include "common/utf8.hpp"

namespace evalrun {
namespace {

std::string at_line(const std::string& origin, std::size_t line) { return origin + ":" + std::to_string(line); }

std::string too_deep(const char* what) {
  return std::string(what) + " nested more than " + std::to_string(kMaxNesting) +
         " levels deep; evalrun reads at most " + std::to_string(kMaxNesting);
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

void check_toml_limits(std::string_view text, const std::string& origin) {
  if (text.size() > kMaxTomlBytes) {
    throw InputError(origin, std::to_string(text.size()) + " bytes: a TOML file evalrun reads may have at most " +
                                 std::to_string(kMaxTomlBytes) + " bytes");
  }
  if (const std::size_t bad = find_invalid_utf8(text); bad != std::string_view::npos) {
    const auto line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(bad), '\n');
    throw InputError(at_line(origin, static_cast<std::size_t>(line)),
                     "not valid UTF-8 (byte " + std::to_string(bad) + "); TOML files must be UTF-8");
  }
  // Strings and comments are skipped; what is left of a line is keys, punctuation and scalars. A '.'
  // there separates key parts unless it sits between digits (1.5, a date's fraction).
  std::size_t line = 1;
  int depth = 0, dots = 0;
  const std::size_t n = text.size();
  auto starts = [&](std::size_t i, std::string_view s) { return text.substr(i, s.size()) == s; };
  for (std::size_t i = 0; i < n; ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      dots = 0;
    } else if (c == '#') {
      while (i + 1 < n && text[i + 1] != '\n') ++i;
    } else if (c == '"' || c == '\'') {
      const bool multi = starts(i, c == '"' ? "\"\"\"" : "'''");
      const std::string_view close = multi ? (c == '"' ? "\"\"\"" : "'''") : std::string_view(&text[i], 1);
      for (i += multi ? 3 : 1; i < n && !starts(i, close); ++i) {
        if (text[i] == '\n') {
          if (!multi) break;  // unterminated: the parser reports it
          ++line;
        } else if (text[i] == '\\' && c == '"' && i + 1 < n) {
          if (text[++i] == '\n') ++line;  // an escaped character never ends the string
        }
      }
      if (i >= n) break;
      if (text[i] == '\n') {
        --i;  // the outer loop counts the line
      } else if (multi) {
        i += 2;
        while (i + 1 < n && text[i + 1] == c) ++i;  // """a"""" ends with its last quote
      }
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxNesting) throw InputError(at_line(origin, line), too_deep("arrays and inline tables"));
    } else if (c == ']' || c == '}') {
      depth = std::max(0, depth - 1);
    } else if (c == '.' && !(i > 0 && is_digit(text[i - 1]) && i + 1 < n && is_digit(text[i + 1]))) {
      if (++dots >= kMaxNesting) throw InputError(at_line(origin, line), too_deep("a dotted key"));
    }
  }
}

void check_json_nesting(std::string_view text, const std::string& file, std::size_t first_line) {
  std::size_t line = first_line;
  int depth = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
    } else if (c == '"') {
      for (++i; i < text.size() && text[i] != '"'; ++i) {
        if (text[i] == '\\') ++i;
        else if (text[i] == '\n') ++line;
      }
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxNesting) throw InputError(at_line(file, line), too_deep("JSON arrays and objects"));
    } else if (c == ']' || c == '}') {
      depth = std::max(0, depth - 1);
    }
  }
}

}  // namespace evalrun
