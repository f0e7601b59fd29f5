#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "common/utf8.hpp"

using namespace evalrun;

namespace {

// Code points of `text` by walking decode_utf8_at (U+FFFD for each ill-formed byte).
std::vector<char32_t> walk(std::string_view text) {
  std::vector<char32_t> out;
  for (std::size_t i = 0; i < text.size();) {
    const Utf8Char c = decode_utf8_at(text, i);
    out.push_back(c.code_point);
    i += static_cast<std::size_t>(c.length);
  }
  return out;
}

}  // namespace

TEST(Utf8, DecodesOneToFourByteSequences) {
  const std::string s = "A\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80";  // A é € 😀
  const std::vector<std::pair<char32_t, int>> expected = {{U'A', 1}, {0xE9, 2}, {0x20AC, 3}, {0x1F600, 4}};
  std::size_t i = 0;
  for (const auto& [cp, len] : expected) {
    const Utf8Char c = decode_utf8_at(s, i);
    EXPECT_TRUE(c.valid) << i;
    EXPECT_EQ(c.code_point, cp) << i;
    EXPECT_EQ(c.length, len) << i;
    i += static_cast<std::size_t>(c.length);
  }
  EXPECT_EQ(i, s.size());
  // Boundaries of Table 3-7 that are still well-formed.
  EXPECT_EQ(walk("\xC2\x80\xED\x9F\xBF\xEE\x80\x80\xF4\x8F\xBF\xBF"),
            (std::vector<char32_t>{0x80, 0xD7FF, 0xE000, 0x10FFFF}));
}

TEST(Utf8, EachIllFormedByteIsOneCharacter) {
  const std::vector<std::string> bad = {
      "\x80",              // lone continuation byte
      "\xC0\xAF",          // overlong '/'
      "\xE0\x80\xAF",      // overlong, 3 bytes
      "\xED\xA0\x80",      // surrogate U+D800
      "\xF4\x90\x80\x80",  // above U+10FFFF
      "\xFF",
  };
  for (const std::string& s : bad) {
    const std::vector<char32_t> cps = walk(s);
    EXPECT_EQ(cps, std::vector<char32_t>(s.size(), 0xFFFD)) << testing::PrintToString(s);
    const Utf8Char c = decode_utf8_at(s, 0);
    EXPECT_FALSE(c.valid);
    EXPECT_EQ(c.length, 1);
  }
  // A truncated sequence does not swallow the byte after it, nor run past the end.
  EXPECT_EQ(walk("\xE2\x82" "A"), (std::vector<char32_t>{0xFFFD, 0xFFFD, U'A'}));
  EXPECT_EQ(walk("x\xF0\x9F\x98"), (std::vector<char32_t>{U'x', 0xFFFD, 0xFFFD, 0xFFFD}));
  // A space-like value hidden in a broken sequence is not a space: C2 20 is not U+00A0.
  EXPECT_EQ(walk("\xC2 "), (std::vector<char32_t>{0xFFFD, U' '}));
}

TEST(Utf8, AppendRoundTripsThroughDecode) {
  for (char32_t cp : {char32_t{0}, char32_t{0x7F}, char32_t{0x80}, char32_t{0x7FF}, char32_t{0x800},
                      char32_t{0xFFFD}, char32_t{0xFFFF}, char32_t{0x10000}, char32_t{0x10FFFF}}) {
    std::string s;
    append_utf8(s, cp);
    const int expected_len = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    ASSERT_EQ(static_cast<int>(s.size()), expected_len) << std::hex << static_cast<std::uint32_t>(cp);
    const Utf8Char c = decode_utf8_at(s, 0);
    EXPECT_TRUE(c.valid);
    EXPECT_EQ(c.code_point, cp);
    EXPECT_EQ(c.length, expected_len);
  }
  std::string s = "x";
  append_utf8(s, 0x20AC);
  EXPECT_EQ(s, "x\xE2\x82\xAC");
}

TEST(Utf8, ReplaceInvalidMatchesPythonErrorsReplace) {
  // Expected values from Python 3.11: bytes.decode("utf-8", errors="replace").
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8_replace_invalid("a\x80" "b"), "a" + r + "b");
  EXPECT_EQ(utf8_replace_invalid("\xE2\x82"), r);  // maximal subpart: one replacement
  EXPECT_EQ(utf8_replace_invalid("\xE2\x82" "A"), r + "A");
  EXPECT_EQ(utf8_replace_invalid("\xF0\x9F\x98"), r);
  EXPECT_EQ(utf8_replace_invalid("\xED\xA0\x80"), r + r + r);
  EXPECT_EQ(utf8_replace_invalid("\xC0\xAF"), r + r);
  EXPECT_EQ(utf8_replace_invalid("\xF4\x90\x80\x80"), r + r + r + r);
  EXPECT_EQ(utf8_replace_invalid("\xF0\x80\x80\x80x"), r + r + r + r + "x");
  const std::string ok = "plain \xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80";
  EXPECT_EQ(utf8_replace_invalid(ok), ok);
}

TEST(Utf8, CodePointStartsAreStrIndices) {
  EXPECT_EQ(utf8_code_point_starts(""), (std::vector<std::size_t>{0}));
  EXPECT_EQ(utf8_code_point_starts("a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80z"),
            (std::vector<std::size_t>{0, 1, 3, 6, 10, 11}));
}

TEST(Utf8, FindInvalidGivesTheFirstIllFormedByte) {
  EXPECT_EQ(find_invalid_utf8(""), std::string_view::npos);
  EXPECT_EQ(find_invalid_utf8("caf\xc3\xa9 \xf0\x9f\x98\x80"), std::string_view::npos);
  EXPECT_EQ(find_invalid_utf8("ab\xff"), 2u);
  EXPECT_EQ(find_invalid_utf8("\xc3\xa9\xc3"), 2u);          // truncated sequence at the end
  EXPECT_EQ(find_invalid_utf8("a\xed\xa0\x80"), 1u);         // a surrogate
  EXPECT_EQ(find_invalid_utf8("\xc0\xaf"), 0u);               // overlong '/'
}

TEST(Utf8, PythonSpaceIsStrIsspace) {
  // [hex(c) for c in range(0x110000) if chr(c).isspace()] in Python 3.11.
  const std::set<char32_t> python = {0x9,    0xA,    0xB,    0xC,    0xD,    0x1C,   0x1D,   0x1E,
                                     0x1F,   0x20,   0x85,   0xA0,   0x1680, 0x2000, 0x2001, 0x2002,
                                     0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200A,
                                     0x2028, 0x2029, 0x202F, 0x205F, 0x3000};
  int mismatches = 0;
  for (char32_t c = 0; c <= 0x10FFFF; ++c) {
    if (is_python_space(c) != (python.count(c) == 1)) ++mismatches;
    // White_Space is the same set without the ASCII separators U+001C..U+001F.
    const bool white = python.count(c) == 1 && !(c >= 0x1C && c <= 0x1F);
    if (is_unicode_white_space(c) != white) ++mismatches;
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_FALSE(is_python_space(0x200B));  // zero-width space
  EXPECT_FALSE(is_unicode_white_space(0x1C));
}
