// generate_until scoring: stop strings, lm-eval's RegexFilter and exact_match. The expected values are
// what CPython 3.11's `re` gives (the Python expression beside each), not what this code gives.
#include "task/answer_match.hpp"

#include <cmath>

#include <gtest/gtest.h>

#include "common/errors.hpp"
#include "task/generate_until.hpp"
#include "task/lm_eval_stats.hpp"

namespace evalrun {
namespace {

using Matches = std::vector<std::vector<std::string>>;

TEST(AnswerMatch, StopStringsCutInTurnAsHflmSplits) {
  const std::vector<std::string> until = {"Question:", "\n\n"};
  EXPECT_EQ(cut_at_stop_strings("42\n\nQuestion: more", until), "42");
  EXPECT_EQ(cut_at_stop_strings("42 Question:\n\nx", until), "42 ");
  EXPECT_EQ(cut_at_stop_strings("no stop here", until), "no stop here");
  // "ab".split("b")[0] after "xab".split("xa")[0]: each term cuts what the previous ones left.
  EXPECT_EQ(cut_at_stop_strings("xab", {"b", "xa"}), "");
  // A term that straddles an earlier term's cut is gone with it: "abc".split("c")[0] = "ab", then
  // "ab".split("bc")[0] = "ab" (cutting at the earliest occurrence of any term would give "a").
  EXPECT_EQ(cut_at_stop_strings("abc", {"c", "bc"}), "ab");
  EXPECT_EQ(cut_at_stop_strings("abc", {""}), "abc");  // an empty term cuts nothing
}

TEST(AnswerMatch, FindallFollowsPythonRe) {
  // re.findall(r"#### (\-?[0-9\.\,]+)", ...) -> ['7', '12']
  EXPECT_EQ(PyRegex::compile(R"(#### (\-?[0-9\.\,]+))", "t").findall("so 3+4=7.\n#### 7\n\nQuestion: next #### 12"),
            (Matches{{"7"}, {"12"}}));
  // re.findall(r"(-?[$0-9.,]{2,})|(-?[0-9]+)", "The answer is $1,234.5 and then 7.")
  //   -> [('$1,234.5', ''), ('7.', '')]
  EXPECT_EQ(PyRegex::compile(R"((-?[$0-9.,]{2,})|(-?[0-9]+))", "t").findall("The answer is $1,234.5 and then 7."),
            (Matches{{"$1,234.5", ""}, {"7.", ""}}));
  // Empty matches, Python 3.7+: re.findall(r"\w*", "ab c") -> ['ab', '', 'c', ''];
  // re.findall(r"x*", "axxb") -> ['', 'xx', '', '']
  EXPECT_EQ(PyRegex::compile(R"(\w*)", "t").findall("ab c"), (Matches{{"ab"}, {""}, {"c"}, {""}}));
  EXPECT_EQ(PyRegex::compile("x*", "t").findall("axxb"), (Matches{{""}, {"xx"}, {""}, {""}}));
  // re.findall(r"(a)|(b)", "ba") -> [('', 'b'), ('a', '')]; re.findall(r"(\d)(\d)?", "1 23") -> [('1', ''), ('2', '3')]
  EXPECT_EQ(PyRegex::compile("(a)|(b)", "t").findall("ba"), (Matches{{"", "b"}, {"a", ""}}));
  EXPECT_EQ(PyRegex::compile(R"((\d)(\d)?)", "t").findall("1 23"), (Matches{{"1", ""}, {"2", "3"}}));
  // Characters, not bytes: re.findall("é+", "café éé") -> ['é', 'éé']
  EXPECT_EQ(PyRegex::compile("é+", "t").findall("café éé"), (Matches{{"é"}, {"éé"}}));
  // re.sub(r"(?s).*#### ", "", "...\n#### 72") -> '72'; re.sub(r"x*", "", "axxb") -> 'ab'
  EXPECT_EQ(PyRegex::compile("(?s).*#### ", "t").remove_all("Natalia sold 48/2 = 24 clips.\n#### 72"), "72");
  EXPECT_EQ(PyRegex::compile("x*", "t").remove_all("axxb"), "ab");
}

TEST(AnswerMatch, RegexFilterSelectsFirstOrLastMatchAndFallsBack) {
  const PyRegex strict = PyRegex::compile(R"(#### (\-?[0-9\.\,]+))", "t");
  const std::string response = "48/2 = 24\n#### 72\nQuestion: ... #### 9";
  EXPECT_EQ(extract_answer(response, strict, 0), "72");
  EXPECT_EQ(extract_answer(response, strict, -1), "9");
  EXPECT_EQ(extract_answer("no answer", strict, 0), "[invalid]");
  EXPECT_EQ(extract_answer(response, strict, 5, "none"), "none");
  // GSM8K's flexible-extract (group_select -1): the first non-empty group of the last match, stripped.
  const PyRegex flexible = PyRegex::compile(R"((-?[$0-9.,]{2,})|(-?[0-9]+))", "t");
  EXPECT_EQ(extract_answer("She pays $18 a day, 7 days", flexible, -1), "7");
  EXPECT_EQ(extract_answer("She pays $18 a day", flexible, -1), "$18");
  EXPECT_EQ(extract_answer("x: (  b  )", PyRegex::compile(R"(\(([^)]*)\))", "t"), 0), "b");
}

TEST(AnswerMatch, ExactMatchNormalizesBothSides) {
  ExactMatchOptions gsm8k;  // lm-eval gsm8k.yaml's exact_match settings
  gsm8k.ignore_case = true;
  gsm8k.ignore_punctuation = false;
  for (const char* re : {",", R"(\$)", "(?s).*#### ", R"(\.$)"}) gsm8k.regexes_to_ignore.push_back(PyRegex::compile(re, "t"));
  EXPECT_TRUE(exact_match("1,234", "Step one.\n#### 1234", gsm8k));
  EXPECT_TRUE(exact_match("$72.", "#### 72", gsm8k));
  EXPECT_FALSE(exact_match("72.5", "#### 72", gsm8k));

  ExactMatchOptions o;
  EXPECT_FALSE(exact_match("Paris", "paris", o));
  o.ignore_case = true;  // "ΣΑΣ".lower() == "σας" (final sigma), "İ".lower() == "i̇"
  EXPECT_TRUE(exact_match("ΣΑΣ", "σας", o));
  EXPECT_TRUE(exact_match("İ", "i\xCC\x87", o));
  o.ignore_punctuation = true;  // "Hello, World!".translate(... string.punctuation) == "Hello World"
  EXPECT_TRUE(exact_match("Hello, World!", "hello world", o));
  EXPECT_FALSE(exact_match(" hello world", "hello world", o));
  o.strip = true;
  EXPECT_TRUE(exact_match(" hello world\n", "hello world", o));
  o.ignore_numbers = true;
  EXPECT_TRUE(exact_match("route 66", "route", o));
}

TEST(AnswerMatch, BadPatternNamesWhere) {
  try {
    PyRegex::compile("(unclosed", "tasks/gsm8k.toml: filter.regex");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("tasks/gsm8k.toml: filter.regex"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(unclosed"), std::string::npos) << e.what();
  }
}

// A GSM8K-style document scored as lm-eval scores it: the response cut at "Question:", the strict and
// flexible filters' answers, exact match against the whole "... #### 72" target.
TEST(GenerateUntil, ScoresEachFilterAgainstTheTarget) {
  GenerateUntilScoring g;
  g.until = {"Question:", "</s>"};
  AnswerFilter strict, flexible;
  strict.name = "strict-match";
  strict.regex = PyRegex::compile(R"(#### (\-?[0-9\.\,]+))", "t");
  flexible.name = "flexible-extract";
  flexible.regex = PyRegex::compile(R"((-?[$0-9.,]{2,})|(-?[0-9]+))", "t");
  flexible.group_select = -1;
  g.filters = {strict, flexible};
  g.exact_match.ignore_case = true;
  for (const char* re : {",", R"(\$)", "(?s).*#### ", R"(\.$)"}) g.exact_match.regexes_to_ignore.push_back(PyRegex::compile(re, "t"));
  const std::string target = "She sold 48/2 = 24 in May.\n#### 72";

  const auto a = score_response(" 48 + 24 = 72.\n#### 72\n\nQuestion: How many #### 5", target, g);
  EXPECT_EQ(a.response, " 48 + 24 = 72.\n#### 72\n\n");
  EXPECT_EQ(a.answers, (std::vector<std::string>{"72", "72"}));
  EXPECT_EQ(a.exact, (std::vector<bool>{true, true}));
  // No "####": strict falls back to "[invalid]"; flexible takes the last number.
  const auto b = score_response(" So the answer is $72.", target, g);
  EXPECT_EQ(b.answers, (std::vector<std::string>{"[invalid]", "$72."}));
  EXPECT_EQ(b.exact, (std::vector<bool>{false, true}));
  // A filterless task compares the cut response itself.
  GenerateUntilScoring plain;
  plain.until = {"\n"};
  plain.filters = {AnswerFilter{}};
  plain.exact_match.strip = true;
  const auto c = score_response(" Paris\nThe end", "Paris", plain);
  EXPECT_EQ(c.answers, std::vector<std::string>{" Paris"});
  EXPECT_EQ(c.exact, std::vector<bool>{true});
}

TEST(GenerateUntil, MeanAndStderrAsLmEval) {
  // [1, 0, 1, 1]: mean 0.75, sample sd sqrt(0.25) = 0.5, stderr 0.5 / 2 = 0.25.
  const auto m = mean_with_stderr({1, 0, 1, 1});
  EXPECT_DOUBLE_EQ(m.mean, 0.75);
  EXPECT_DOUBLE_EQ(m.standard_error, 0.25);
  EXPECT_TRUE(std::isnan(mean_with_stderr({1}).standard_error));
  EXPECT_DOUBLE_EQ(mean_with_stderr({1}).mean, 1.0);
}

}  // namespace
}  // namespace evalrun
