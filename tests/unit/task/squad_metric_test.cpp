// task/squad_metric: the official normalization, EM/F1 (v1.1 and v2.0), and the JSON writers.
// Expected normalizations were produced with the official normalize_answer under Python 3.11.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/errors.hpp"
#include "task/squad_metric.hpp"
#include "test_util.hpp"

namespace evalrun {
namespace {

TEST(SquadNormalize, MatchesTheOfficialScript) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"The Quick, brown fox!", "quick brown fox"},
      {"an apple a day keeps THE doctor away", "apple day keeps doctor away"},
      {"theory anthem a_b a-b", "theory anthem ab ab"},  // '_' and '-' are punctuation
      {"\u00c4RGER im B\u00fcro", "\u00e4rger im b\u00fcro"},
      {"\u039f\u0394\u039f\u03a3 \u03a3", "\u03bf\u03b4\u03bf\u03c2 \u03c3"},  // final sigma
      {"\u0130stanbul", "i\u0307stanbul"},                                       // full lower-casing
      // \b is Unicode-aware: é, ², ١ are word characters, a combining accent is not.
      {"the\u00e9 a\u00e9 \u00e9a a\u00b2 a\u0661 a\u0301", "the\u00e9 a\u00e9 \u00e9a a\u00b2 a\u0661 \u0301"},
      // Unicode whitespace splits, the zero-width space does not.
      {"x\u00a0y\u3000z\u200bw\u2028v", "x y z\u200bw v"},
      {"\u00abthe\u00bb \u2014 a \u201cquote\u201d", "\u00ab \u00bb \u2014 \u201cquote\u201d"},  // only ASCII punctuation
      {"  \t\n ", ""},
      {"", ""},
      {"A. B. the.", "b"},
      {"\ufb01 \u00df \u1e9e", "\ufb01 \u00df \u00df"},
      {"the_ a_ _a", ""},
      {"\u216ba a\u216b", "\u217ba a\u217b"},
  };
  for (const auto& [in, out] : cases) EXPECT_EQ(normalize_squad_answer(in), out) << in;
  EXPECT_EQ(squad_answer_tokens("The cat, the hat."), (std::vector<std::string>{"cat", "hat"}));
  EXPECT_TRUE(squad_answer_tokens(" a an the ").empty());
}

TEST(SquadScores, ExactAndF1PerPair) {
  EXPECT_EQ(squad_v1_exact("The Eiffel Tower!", "eiffel tower"), 1.0);
  EXPECT_EQ(squad_v1_exact("Eiffel", "eiffel tower"), 0.0);
  // pred {cat, sat} vs gold {cat, sat, on}: precision 1, recall 2/3.
  EXPECT_DOUBLE_EQ(squad_v1_f1("the cat sat", "a cat sat on"), 0.8);
  // Counter intersection: pred [x, x, y] and gold [y, y] share one token.
  EXPECT_DOUBLE_EQ(squad_v1_f1("x x y", "y y"), 2 * (1.0 / 3) * 0.5 / (1.0 / 3 + 0.5));
  EXPECT_EQ(squad_v1_f1("dog", "cat"), 0.0);
  // Both sides empty after normalization: v1.1 scores F1 0, v2.0 scores 1.
  EXPECT_EQ(squad_v1_f1("the", "a"), 0.0);
  EXPECT_EQ(squad_v1_exact("the", "a"), 1.0);
  EXPECT_EQ(squad_v2_f1("the", "a"), 1.0);
  EXPECT_EQ(squad_v2_f1("", "cat"), 0.0);
  EXPECT_EQ(squad_v2_f1("cat", ""), 0.0);
  EXPECT_DOUBLE_EQ(squad_v2_f1("the cat sat", "a cat sat on"), 0.8);
}

SquadExample example(const std::string& id, std::vector<std::string> golds) {
  SquadExample e;
  e.id = id;
  for (auto& g : golds) e.answers.push_back({g, 0});
  e.is_impossible = e.answers.empty();
  return e;
}

TEST(SquadScores, V1MaxOverGoldAnswersAndTotals) {
  const std::vector<SquadExample> ex = {example("q1", {"Denver Broncos", "The Broncos", "Broncos"}),
                                        example("q2", {"Santa Clara, California", "Levi's Stadium"}),
                                        example("q3", {"gold"})};
  const SquadScores s = evaluate_squad_v1(ex, {"broncos", "Levi's Stadium in Santa Clara", "silver"});
  EXPECT_EQ(s.total, 3u);
  EXPECT_EQ(s.exact_per_question, (std::vector<double>{1, 0, 0}));
  // q2: vs "levis stadium": pred [levis, stadium, in, santa, clara] -> p 2/5, r 1 -> 4/7; vs "santa
  // clara california": p 2/5, r 2/3 -> 0.5. Max 4/7.
  ASSERT_EQ(s.f1_per_question.size(), 3u);
  EXPECT_DOUBLE_EQ(s.f1_per_question[0], 1.0);
  EXPECT_DOUBLE_EQ(s.f1_per_question[1], 4.0 / 7.0);
  EXPECT_EQ(s.f1_per_question[2], 0.0);
  EXPECT_DOUBLE_EQ(s.exact, 100.0 / 3.0);
  EXPECT_DOUBLE_EQ(s.f1, 100.0 * (1.0 + 4.0 / 7.0) / 3.0);
  EXPECT_FALSE(s.version_2);
  EXPECT_THROW(evaluate_squad_v1({example("none", {})}, {""}), InputError);
  EXPECT_THROW(evaluate_squad_v1(ex, {"too few"}), std::invalid_argument);
}

TEST(SquadScores, V2NoAnswerQuestions) {
  const std::vector<SquadExample> ex = {
      example("has1", {"Broncos"}), example("has2", {"the cat sat on"}), example("none1", {}), example("none2", {}),
      example("articles-only", {"the"}),  // its only gold answer normalizes to "": treated as no answer
  };
  const SquadScores s = evaluate_squad_v2(ex, {"Broncos", "", "", "something", ""});
  EXPECT_TRUE(s.version_2);
  EXPECT_EQ(s.exact_per_question, (std::vector<double>{1, 0, 1, 0, 1}));
  EXPECT_EQ(s.f1_per_question, (std::vector<double>{1, 0, 1, 0, 1}));
  EXPECT_DOUBLE_EQ(s.exact, 60.0);
  EXPECT_DOUBLE_EQ(s.f1, 60.0);
  // HasAns / NoAns split by whether the question lists answers, as the script does.
  EXPECT_EQ(s.has_ans_total, 3u);
  EXPECT_DOUBLE_EQ(s.has_ans_exact, 200.0 / 3.0);
  EXPECT_EQ(s.no_ans_total, 2u);
  EXPECT_DOUBLE_EQ(s.no_ans_exact, 50.0);
  EXPECT_DOUBLE_EQ(s.no_ans_f1, 50.0);
  const SquadScores only_has = evaluate_squad_v2({example("h", {"x"})}, {"x y"});
  EXPECT_EQ(only_has.no_ans_total, 0u);
  EXPECT_DOUBLE_EQ(only_has.f1, 100.0 * 2 * 0.5 / 1.5);
}

TEST(PythonJson, FloatReprMatchesPython) {
  // Expected strings printed by Python 3.11 repr().
  EXPECT_EQ(python_float_repr(2.669111490249634), "2.669111490249634");
  EXPECT_EQ(python_float_repr(1e-05), "1e-05");
  EXPECT_EQ(python_float_repr(0.0001), "0.0001");
  EXPECT_EQ(python_float_repr(0.00012345), "0.00012345");
  EXPECT_EQ(python_float_repr(1e16), "1e+16");
  EXPECT_EQ(python_float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(python_float_repr(123.0), "123.0");
  EXPECT_EQ(python_float_repr(1.5e300), "1.5e+300");
  EXPECT_EQ(python_float_repr(-2.5e-7), "-2.5e-07");
  EXPECT_EQ(python_float_repr(0.0), "0.0");
  EXPECT_EQ(python_float_repr(-0.0), "-0.0");
  EXPECT_EQ(python_float_repr(static_cast<double>(0.1F)), "0.10000000149011612");
  EXPECT_EQ(python_float_repr(static_cast<double>(1e-6F)), "9.999999974752427e-07");
  EXPECT_EQ(python_float_repr(5e-324), "5e-324");
  EXPECT_EQ(python_float_repr(1234567890123456.7), "1234567890123456.8");
}

TEST(PythonJson, StringEscapesLikeEnsureAscii) {
  EXPECT_EQ(python_json_string("a\"b"), "\"a\\\"b\"");
  EXPECT_EQ(python_json_string("\u00e9\U0001F600\n\x7f\x01/\\"), "\"\\u00e9\\ud83d\\ude00\\n\\u007f\\u0001/\\\\\"");
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(PredictionFiles, WritesUtilsQaLayout) {
  const auto dir = testing::make_temp_dir("evalrun-squad-metric");
  const auto pred = dir / "predictions.json";
  write_predictions_json(pred.string(), {{"b", "K\u00f6ln"}, {"a", ""}});
  EXPECT_EQ(slurp(pred), "{\n    \"b\": \"K\\u00f6ln\",\n    \"a\": \"\"\n}\n");
  write_predictions_json(pred.string(), {});
  EXPECT_EQ(slurp(pred), "{}\n");

  QaPrediction p;
  QaCandidate c;
  c.text = "x";
  c.start_logit = 1.5F;
  c.end_logit = -0.25F;
  c.probability = 1.0F;
  p.nbest.push_back(c);
  QaPrediction q;
  QaCandidate e;
  e.kind = QaCandidate::Kind::empty_fallback;
  e.text = "empty";
  e.probability = 1.0F;
  q.nbest.push_back(e);
  q.null_score_diff = 0.5F;
  const auto nbest = dir / "nbest_predictions.json";
  write_nbest_predictions_json(nbest.string(), {"id1", "id2"}, {p, q});
  EXPECT_EQ(slurp(nbest),
            "{\n    \"id1\": [\n        {\n            \"start_logit\": 1.5,\n            \"end_logit\": -0.25,\n"
            "            \"text\": \"x\",\n            \"probability\": 1.0\n        }\n    ],\n"
            "    \"id2\": [\n        {\n            \"text\": \"empty\",\n            \"start_logit\": 0.0,\n"
            "            \"end_logit\": 0.0,\n            \"probability\": 1.0\n        }\n    ]\n}\n");
  const auto odds = dir / "null_odds.json";
  write_null_odds_json(odds.string(), {"id1", "id2"}, {p, q});
  EXPECT_EQ(slurp(odds), "{\n    \"id1\": 0.0,\n    \"id2\": 0.5\n}\n");
  // a missing directory is made (as for the result file); a path under a regular file cannot be written
  write_predictions_json((dir / "new-dir" / "p.json").string(), {});
  EXPECT_TRUE(std::filesystem::exists(dir / "new-dir" / "p.json"));
  EXPECT_THROW(write_predictions_json((odds / "p.json").string(), {}), InputError);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace evalrun
