// Internal building blocks of the byte-level BPE, shared by the tokenizer and the tiny-BPE trainer:
// UTF-8 <-> code points, the character classes of the GPT-2 split pattern, the split itself, and
// GPT-2's byte <-> printable-character map. Not a public header of the tokenizer library.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/utf8.hpp"

namespace evalrun::bpe_detail {

// These two live in common/utf8.hpp; the tokenizer calls them by their bpe_detail:: names.
using evalrun::is_python_space;
using evalrun::utf8_replace_invalid;

// The text as code points, with the byte position of each one (n + 1 entries, the last = size).
// A byte that does not start a valid UTF-8 sequence becomes one "code point" of its own (class
// Other), so any byte string encodes and decodes back unchanged; Python strings never hold one.
struct CodePoints {
  std::vector<char32_t> cp;
  std::vector<int> byte_pos;
};
CodePoints to_code_points(std::string_view text);

// Classes of the GPT-2 pattern: \p{L}, \p{N}, \s (the Python `regex` module's \s, i.e. the 25
// Unicode White_Space characters) and everything else.
enum class CharClass : std::uint8_t { Letter, Number, Space, Other };
CharClass classify(char32_t c);

// The GPT-2 pre-tokenizer
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// applied to cp[begin, end) (the string ends at `end` for the look-ahead). Appends the matches as
// [first, last) code-point index pairs; they tile the range.
void split_gpt2(const std::vector<char32_t>& cp, int begin, int end, std::vector<std::pair<int, int>>& out);

// GPT-2 bytes_to_unicode: byte -> UTF-8 of its printable stand-in character ("Ġ" for ' ').
const std::array<std::string, 256>& byte_symbols();
// Inverse: code point of a stand-in character -> byte, or -1 if the character is not one.
int symbol_to_byte(char32_t c);

}  // namespace evalrun::bpe_detail
