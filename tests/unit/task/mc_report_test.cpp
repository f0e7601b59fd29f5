// task/mc_report: acc / acc_norm aggregation by hand, lm-eval's results JSON and samples JSONL layout
// (hashes as Python's hashlib.sha256(json.dumps(doc, indent=2, ensure_ascii=False)) computed them),
// McNemar's exact test by hand.
#include "task/mc_report.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "common/errors.hpp"

namespace evalrun {
namespace {

McDecision decision(bool acc, bool norm) {
  McDecision d;
  d.acc = acc;
  d.acc_norm = norm;
  return d;
}

TEST(McReport, MetricsAreMeansWithSampleStderr) {
  const auto m = summarize_multiple_choice(
      {decision(true, false), decision(false, false), decision(true, true), decision(true, true)});
  EXPECT_EQ(m.n_documents, 4u);
  EXPECT_DOUBLE_EQ(m.acc, 0.75);
  EXPECT_NEAR(m.acc_stderr, 0.25, 1e-15);  // sqrt(0.75 / 3) / 2
  EXPECT_DOUBLE_EQ(m.acc_norm, 0.5);
  EXPECT_NEAR(m.acc_norm_stderr, std::sqrt(1.0 / 3.0) / 2.0, 1e-15);  // sqrt(4 * 0.25 / 3) / 2
}

TEST(McReport, ResultsJsonHasLmEvalsKeysAndNaForOneDocument) {
  McRunInfo info;
  info.task = "arc_easy";
  info.num_fewshot = 3;
  info.n_original = 10;
  info.model_path = "/m";
  info.batch_size = 8;
  auto j = nlohmann::json::parse(lm_eval_results_json(info, summarize_multiple_choice({decision(true, false)})));
  const auto& r = j["results"]["arc_easy"];
  EXPECT_EQ(r["alias"], "arc_easy");
  EXPECT_DOUBLE_EQ(r["acc,none"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(r["acc_norm,none"].get<double>(), 0.0);
  EXPECT_EQ(r["acc_stderr,none"], "N/A");
  EXPECT_EQ(r["acc_norm_stderr,none"], "N/A");
  EXPECT_EQ(j["n-shot"]["arc_easy"], 3);
  EXPECT_EQ(j["n-samples"]["arc_easy"]["original"], 10);
  EXPECT_EQ(j["n-samples"]["arc_easy"]["effective"], 1);
  EXPECT_EQ(j["config"]["batch_size"], 8);
  EXPECT_EQ(j["config"]["model_args"], "pretrained=/m");
  EXPECT_EQ(j["configs"]["arc_easy"]["output_type"], "multiple_choice");
  EXPECT_TRUE(j["versions"].contains("arc_easy"));
}

TEST(McReport, DocumentDumpIsPythonsIndent2InKeyOrder) {
  const std::string doc =
      R"({"q": "Caf\u00e9?", "choices": {"text": ["a", "b"], "label": ["A", "B"]}, "answerKey": "B", "n": 1.5, "e": []})";
  EXPECT_EQ(python_json_dump_indent2(doc, "t"),
            "{\n  \"q\": \"Caf\xC3\xA9?\",\n  \"choices\": {\n    \"text\": [\n      \"a\",\n      \"b\"\n    ],\n    "
            "\"label\": [\n      \"A\",\n      \"B\"\n    ]\n  },\n  \"answerKey\": \"B\",\n  \"n\": 1.5,\n  \"e\": []\n}");
  EXPECT_THROW(python_json_dump_indent2("{bad", "arc.jsonl:3"), InputError);
}

TEST(McReport, SampleLineAsLmEvalWritesIt) {
  TaskDocument doc;
  doc.doc_id = 4;
  doc.where = "arc.jsonl:5";
  doc.doc_json =
      R"({"q": "Caf\u00e9?", "choices": {"text": ["a", "b"], "label": ["A", "B"]}, "answerKey": "B", "n": 1.5, "e": []})";
  doc.requests = {{"Question: Caf\xC3\xA9?\nAnswer:", " a"}, {"Question: Caf\xC3\xA9?\nAnswer:", " b"}};
  doc.choices = {"a", "b"};
  doc.gold = 1;
  McDocScores s;
  s.choices.resize(2);
  s.choices[0].loglikelihood = -2.5;
  s.choices[1].loglikelihood = -1.25;
  s.choices[1].is_greedy = true;
  const auto d = decide_multiple_choice({-2.5, -1.25}, doc.choices, doc.gold, doc.where);
  const auto j = nlohmann::json::parse(lm_eval_sample_line(doc, s, d));
  EXPECT_EQ(j["doc_id"], 4);
  EXPECT_EQ(j["target"], 1);
  EXPECT_EQ(j["doc"]["answerKey"], "B");
  EXPECT_EQ(j["arguments"][1][1], " b");
  EXPECT_EQ(j["resps"][0][0][0].get<double>(), -2.5);
  EXPECT_EQ(j["filtered_resps"][1][1], true);
  EXPECT_EQ(j["filter"], "none");
  // hashlib.sha256(...).hexdigest() in Python 3 of the dumps above, "1" and the context
  EXPECT_EQ(j["doc_hash"], "fe5993d1d307cff8462c694c04f18e429a743db0a1d762213c33c66241f612fd");
  EXPECT_EQ(j["target_hash"], "6b86b273ff34fce19d6b804eff5a3f5747ada4eaa22f1d49c01e52ddb7875b4b");
  EXPECT_EQ(j["prompt_hash"], "e40c6124a99ac345d802cb012ff1749dfe6a68ecd99b40c4844e5c9251302999");
  EXPECT_EQ(j["acc"], 1.0);
  EXPECT_EQ(j["acc_norm"], 1.0);
}

}  // namespace
}  // namespace evalrun
