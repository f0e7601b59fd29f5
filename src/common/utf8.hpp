// UTF-8 and Python character-class helpers shared by the tokenizer and the task code, so that every
// place agrees on what one character of a UTF-8 std::string is and which characters are whitespace.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace evalrun {

// One character decoded from UTF-8.
struct Utf8Char {
  char32_t code_point = 0xFFFD;  // U+FFFD where !valid
  int length = 1;                // bytes it takes: the sequence length, or 1 where !valid
  bool valid = false;
};

// Decodes the character that starts at byte `i` of `text` (requires i < text.size()). Only well-formed
// UTF-8 decodes (Unicode Table 3-7: no overlong forms, surrogates, values above U+10FFFF or truncated
// sequences). Anywhere else the single byte at `i` is one ill-formed character of length 1, so a walk
// `i += length` visits every byte, never skips text, and treats each bad byte as one character.
Utf8Char decode_utf8_at(std::string_view text, std::size_t i);

// Appends `c` as UTF-8. `c` is not checked: values from U+10000 up (even past U+10FFFF) take 4 bytes.
void append_utf8(std::string& out, char32_t c);

// Byte offset of the first byte that is not part of well-formed UTF-8 (as decode_utf8_at walks), or
// std::string_view::npos when all of `text` is. TOML readers check this first: toml11 3.7 reads past
// its buffer reporting invalid UTF-8 inside a literal string.
std::size_t find_invalid_utf8(std::string_view text);

// Python's bytes.decode("utf-8", errors="replace") re-encoded as UTF-8: each maximal ill-formed
// subpart (the longest prefix of a broken sequence that could still have been valid) -> one U+FFFD.
std::string utf8_replace_invalid(std::string_view bytes);

// Byte offset of every code point of valid UTF-8 text, then text.size(): entry k is where Python's
// str index k starts, and size() - 1 is the code point count. Every byte that is not a continuation
// byte (10xxxxxx) starts a code point; on ill-formed text that differs from decode_utf8_at's walk.
std::vector<std::size_t> utf8_code_point_starts(std::string_view text);
// Python's len(str) of valid UTF-8 text: its code points, counted by the same rule without the table
// (utf8_code_point_starts(text).size() - 1).
std::size_t utf8_code_point_count(std::string_view text);

// Unicode White_Space (25 characters): what \s matches in Python's `regex` module (GPT-2's split pattern).
bool is_unicode_white_space(char32_t c);

// Python's str.isspace(): White_Space plus the ASCII separators U+001C..U+001F. Used for
// str.strip()/lstrip()/split() without arguments.
bool is_python_space(char32_t c);

}  // namespace evalrun
