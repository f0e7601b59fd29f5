#include "tokenizer/pretokenize.hpp"

#include <unicode/uchar.h>

namespace evalrun::bpe_detail {
namespace {

// Stand-in "code points" for bytes that are not valid UTF-8 lie above the Unicode range.
constexpr char32_t kRawByteBase = 0x110000;

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
  std::size_t i = 0;
  while (i < text.size()) {
    const Utf8Char c = decode_utf8_at(text, i);
    out.byte_pos.push_back(static_cast<int>(i));
    out.cp.push_back(c.valid ? c.code_point : kRawByteBase + static_cast<unsigned char>(text[i]));
    i += static_cast<std::size_t>(c.length);
  }
  out.byte_pos.push_back(static_cast<int>(text.size()));
  return out;
}

CharClass classify(char32_t c) {
  if (c < 0x80) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return CharClass::Letter;
    if (c >= '0' && c <= '9') return CharClass::Number;
    if (is_unicode_white_space(c)) return CharClass::Space;
    return CharClass::Other;
  }
  if (c >= kRawByteBase) return CharClass::Other;
  if (is_unicode_white_space(c)) return CharClass::Space;
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

}  // namespace evalrun::bpe_detail
