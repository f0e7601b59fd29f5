#include "common/utf8.hpp"

namespace evalrun {
namespace {

// Length of the well-formed UTF-8 sequence at p[0] (1..4), or 0 if p[0] does not start one.
// `valid_prefix` gets how many bytes form the longest valid prefix of a broken sequence (at least 1),
// which is what Python's decoder replaces with a single U+FFFD.
int sequence_length(const unsigned char* p, std::size_t avail, int* valid_prefix) {
  *valid_prefix = 1;
  const unsigned char b0 = p[0];
  if (b0 < 0x80) return 1;
  int len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte (Unicode Table 3-7)
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (int k = 1; k < len; ++k) {
    if (static_cast<std::size_t>(k) >= avail) return 0;
    const unsigned char b = p[k];
    const bool ok = (k == 1) ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return 0;
    *valid_prefix = k + 1;
  }
  return len;
}

// Value of a well-formed sequence of `len` bytes.
char32_t sequence_value(const unsigned char* p, int len) {
  switch (len) {
    case 1: return p[0];
    case 2: return ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu);
    case 3: return ((p[0] & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
    default:
      return ((p[0] & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
  }
}

}  // namespace

Utf8Char decode_utf8_at(std::string_view text, std::size_t i) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data()) + i;
  int prefix = 0;
  const int len = sequence_length(p, text.size() - i, &prefix);
  Utf8Char out;
  if (len > 0) {
    out.code_point = sequence_value(p, len);
    out.length = len;
    out.valid = true;
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string utf8_replace_invalid(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  std::size_t i = 0;
  while (i < bytes.size()) {
    int prefix = 0;
    const int len = sequence_length(p + i, bytes.size() - i, &prefix);
    if (len > 0) {
      out.append(bytes.data() + i, static_cast<std::size_t>(len));
      i += static_cast<std::size_t>(len);
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD
      i += static_cast<std::size_t>(prefix);
    }
  }
  return out;
}

std::vector<std::size_t> utf8_code_point_starts(std::string_view text) {
  std::vector<std::size_t> starts;
  starts.reserve(text.size() + 1);
  for (std::size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) starts.push_back(i);
  }
  starts.push_back(text.size());
  return starts;
}

bool is_unicode_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

bool is_python_space(char32_t c) { return is_unicode_white_space(c) || (c >= 0x1C && c <= 0x1F); }

std::size_t find_invalid_utf8(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const Utf8Char c = decode_utf8_at(text, i);
    if (!c.valid) return i;
    i += static_cast<std::size_t>(c.length);
  }
  return std::string_view::npos;
}

std::size_t utf8_code_point_count(std::string_view text) {
  std::size_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0U) != 0x80U ? 1 : 0;
  return n;
}

}  // namespace evalrun
