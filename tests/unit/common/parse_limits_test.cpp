// The pre-parse limits (common/parse_limits.hpp) and the shortened quoting of long values (text.hpp):
// what counts as nesting (brackets in strings and comments do not), where the limit lies, the line named.
#include <gtest/gtest.h>

#include <string>

#include "common/errors.hpp"
#include "common/parse_limits.hpp"
#include "common/text.hpp"

namespace evalrun {
namespace {

// The InputError message for a TOML text, or "" when it passes.
std::string toml_error(const std::string& text) {
  try {
    check_toml_limits(text, "f.toml");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

std::string json_error(const std::string& text, std::size_t first_line = 1) {
  try {
    check_json_nesting(text, "f.json", first_line);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(TomlLimits, NestingUpToTheLimitPassesOneMoreFailsNamingTheLine) {
  EXPECT_EQ(toml_error("x = " + std::string(64, '[') + std::string(64, ']') + "\n"), "");
  const std::string e = toml_error("a = 1\n\nx = " + std::string(65, '{') + "\n");
  EXPECT_NE(e.find("f.toml:3"), std::string::npos) << e;
  EXPECT_NE(e.find("64"), std::string::npos) << e;
}

TEST(TomlLimits, BracketsInStringsAndCommentsDoNotCount) {
  const std::string many(200, '[');
  EXPECT_EQ(toml_error("a = \"" + many + "\"\n"), "");
  EXPECT_EQ(toml_error("a = '" + many + "'\n"), "");
  EXPECT_EQ(toml_error("a = \"\"\"\n" + many + "\n\"\"\"\n"), "");
  EXPECT_EQ(toml_error("a = '''" + many + "'''\n"), "");
  EXPECT_EQ(toml_error("# " + many + "\n"), "");
  EXPECT_EQ(toml_error("a = \"\\\"" + many + "\"\n"), "");  // an escaped quote does not end the string
  // ...but after a string ends, they do again; and the line count goes on through multi-line strings.
  const std::string e = toml_error("a = \"\"\"x\ny\"\"\"\nb = " + std::string(70, '[') + "\n");
  EXPECT_NE(e.find("f.toml:3"), std::string::npos) << e;
}

TEST(TomlLimits, DottedKeysAreLimitedNumbersAndDatesAreNot) {
  std::string key = "a";
  for (int i = 0; i < 63; ++i) key += ".b";
  EXPECT_EQ(toml_error(key + " = 1\n"), "");  // 64 parts
  EXPECT_NE(toml_error(key + ".c = 1\n").find("dotted key"), std::string::npos);
  std::string floats = "a = [";
  for (int i = 0; i < 100; ++i) floats += "1.5, ";
  EXPECT_EQ(toml_error(floats + "2.25]\nt = 1979-05-27T07:32:00.999\n"), "");
}

TEST(TomlLimits, InvalidUtf8AndSize) {
  EXPECT_NE(toml_error("a = 1\nb = \"\xff\"\n").find("f.toml:2"), std::string::npos);
  EXPECT_NE(toml_error(std::string(kMaxTomlBytes + 1, '#')).find("bytes"), std::string::npos);
}

TEST(JsonLimits, NestingStringsAndLines) {
  EXPECT_EQ(json_error(std::string(64, '[') + std::string(64, ']')), "");
  EXPECT_EQ(json_error("{\"a\": \"" + std::string(500, '{') + "\\\"\"}"), "");
  const std::string e = json_error("{\n\"a\":\n" + std::string(100, '['), 7);
  EXPECT_NE(e.find("f.json:9"), std::string::npos) << e;
}

TEST(QuoteShort, ShortValuesWholeLongOnesCutAtACharacter) {
  EXPECT_EQ(quote_short("bf16"), "'bf16'");
  EXPECT_EQ(quote_short(std::string(100, 'x')), "'" + std::string(100, 'x') + "'");
  EXPECT_EQ(quote_short(std::string(1000, 'x')), "'" + std::string(60, 'x') + "...' (1000 bytes)");
  // "é" is 2 bytes: 59 ASCII bytes then é would straddle byte 60; the cut goes before it.
  const std::string v = std::string(59, 'a') + "\xc3\xa9" + std::string(100, 'b');
  EXPECT_EQ(quote_short(v), "'" + std::string(59, 'a') + "...' (161 bytes)");
  EXPECT_EQ(clip_text("short message"), "short message");
  EXPECT_EQ(clip_text(std::string(300, 'm')), std::string(60, 'm') + "... (300 bytes)");
}

}  // namespace
}  // namespace evalrun
