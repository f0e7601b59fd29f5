#include "tokenizer/pretokenize.hpp"

#include <unicode/uchar.h>

namespace evalrun::bpe_detail {
namespace {

// Stand-in "code points" for bytes that are not valid UTF-8 lie above the Unicode range.
constexpr char32_t kRawByteBase = 0x110000;

// Length of the valid UTF-8 sequence starting at p[0] (1..4), or 0 if p[0] does not start one.
// `valid_prefix` gets how many bytes form the longest valid prefix of a broken sequence (at least 1),
// which is what Python's decoder replaces with a single U+FFFD.
int utf8_sequence(const unsigned char* p, std::size_t avail, int* valid_prefix) {
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

char32_t utf8_value(const unsigned char* p, int len) {
  switch (len) {
    case 1: return p[0];
    case 2: return ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu);
    case 3: return ((p[0] & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
    default:
      return ((p[0] & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
  }
}

bool is_white_space(char32_t c) {
  // Unicode White_Space, exactly what \s matches in the `regex` module that GPT-2/RoBERTa use.
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

struct ByteMaps {
  std::array<std::string, 256> to_symbol;
  std::array<int, 512> from_symbol;  // stand-ins are all below U+0200
  ByteMaps() {
    from_symbol.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t c = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
      append_utf8(to_symbol[b], c);
      from_symbol[c] = b;
    }
  }
};

const ByteMaps& byte_maps() {
  static const ByteMaps maps;
  return maps;
}

}  // namespace

CodePoints to_code_points(std::string_view text) {
  CodePoints out;
  out.cp.reserve(text.size());
  out.byte_pos.reserve(text.size() + 1);
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  std::size_t i = 0;
  while (i < text.size()) {
    int prefix = 0;
    const int len = utf8_sequence(p + i, text.size() - i, &prefix);
    out.byte_pos.push_back(static_cast<int>(i));
    if (len == 0) {
      out.cp.push_back(kRawByteBase + p[i]);
      i += 1;
    } else {
      out.cp.push_back(utf8_value(p + i, len));
      i += static_cast<std::size_t>(len);
    }
  }
  out.byte_pos.push_back(static_cast<int>(text.size()));
  return out;
}

CharClass classify(char32_t c) {
  if (c < 0x80) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return CharClass::Letter;
    if (c >= '0' && c <= '9') return CharClass::Number;
    if (is_white_space(c)) return CharClass::Space;
    return CharClass::Other;
  }
  if (c >= kRawByteBase) return CharClass::Other;
  if (is_white_space(c)) return CharClass::Space;
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      return CharClass::Letter;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER:
      return CharClass::Number;
    default:
      return CharClass::Other;
  }
}

bool is_python_space(char32_t c) { return is_white_space(c) || (c >= 0x1C && c <= 0x1F); }

void split_gpt2(const std::vector<char32_t>& cp, int begin, int end, std::vector<std::pair<int, int>>& out) {
  auto run_of = [&](int from, CharClass cls) {
    while (from < end && classify(cp[from]) == cls) ++from;
    return from;
  };
  int i = begin;
  while (i < end) {
    const char32_t c = cp[i];
    // 's|'t|'re|'ve|'m|'ll|'d (case-sensitive, tried first)
    if (c == U'\'' && i + 1 < end) {
      const char32_t n1 = cp[i + 1];
      const char32_t n2 = i + 2 < end ? cp[i + 2] : 0;
      int len = 0;
      if (n1 == U's' || n1 == U't' || n1 == U'm' || n1 == U'd') {
        len = 2;
      } else if ((n1 == U'r' && n2 == U'e') || (n1 == U'v' && n2 == U'e') || (n1 == U'l' && n2 == U'l')) {
        len = 3;
      }
      if (len > 0) {
        out.emplace_back(i, i + len);
        i += len;
        continue;
      }
    }
    const CharClass cls = classify(c);
    // ' ?\p{L}+ | ?\p{N}+ | ?[^\s\p{L}\p{N}]+': an optional U+0020 glued to the run after it.
    if (c == U' ' && i + 1 < end) {
      const CharClass next = classify(cp[i + 1]);
      if (next != CharClass::Space) {
        const int j = run_of(i + 1, next);
        out.emplace_back(i, j);
        i = j;
        continue;
      }
    }
    if (cls != CharClass::Space) {
      const int j = run_of(i, cls);
      out.emplace_back(i, j);
      i = j;
      continue;
    }
    // '\s+(?!\S)|\s+': a whitespace run followed by text leaves its last character to start the
    // next piece (so " word" keeps its space), unless the run is a single character.
    const int j = run_of(i, CharClass::Space);
    const int stop = (j < end && j - i >= 2) ? j - 1 : j;
    out.emplace_back(i, stop);
    i = stop;
  }
}

const std::array<std::string, 256>& byte_symbols() { return byte_maps().to_symbol; }

int symbol_to_byte(char32_t c) { return c < 512 ? byte_maps().from_symbol[c] : -1; }

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
    const int len = utf8_sequence(p + i, bytes.size() - i, &prefix);
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

}  // namespace evalrun::bpe_detail
