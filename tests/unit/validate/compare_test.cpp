// compare_results on tiny hand-built result files whose metrics are worked out by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>

#include "common/errors.hpp"
#include "io/hdf5_file.hpp"
#include "test_util.hpp"
#include "validate/compare.hpp"
#include "validate/report.hpp"

using namespace evalrun;
namespace fs = std::filesystem;

namespace {

const double kLn3 = std::log(3.0);
const double kKlA = 0.13081203594113713;  // KL([.25,.75] || [.5,.5])
const double kKlB = 0.12011450695827758;  // KL([.5,.5] || softmax([1,0]))

fs::path dir() {
  static const auto d = evalrun::testing::make_temp_dir("evalrun-cmp");
  return d;
}

std::string make(const std::string& name, const std::string& task, const std::function<void(H5Writer&)>& fill) {
  const auto path = (dir() / name).string();
  H5Writer w(path);
  w.set_attr("/", "format_version", std::string("1"));
  w.set_attr("/", "task", task);
  w.set_attr("/", "dtype", std::string("fp32"));
  w.create_group("/metrics");
  fill(w);
  w.commit();
  return path;
}

const Metric& metric(const Comparison& c, const std::string& name) {
  for (const auto& m : c.metrics)
    if (m.name == name) return m;
  static Metric none{"<missing>", NAN, std::nullopt, std::nullopt, ""};
  ADD_FAILURE() << "no metric " << name;
  return none;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// generate: 2 prompts; "a" generates [5, 6] in both, "b" [7, 8, 9] vs [7, 1] (diverges at 1).
// Step logits over a 2-id vocabulary; candidate a0 differs (uniform), b1 is shifted (same softmax).
std::string generate_file(const std::string& name, bool candidate, const std::string& second_id = "b") {
  return make(name, "generate", [&](H5Writer& w) {
    w.write_strings("/samples/id", {"a", second_id});
    w.write_ragged("/samples/prompt_ids", std::vector<std::vector<std::int64_t>>{{1, 10}, {1, 11, 12}});
    if (!candidate) {
      w.write_ragged("/generated/ids", std::vector<std::vector<std::int64_t>>{{5, 6}, {7, 8, 9}});
      w.write(std::string("/logits/step_logits"), std::vector<float>{0, float(kLn3), 0, 0, 0, 0, 1, 1, 0, 0}, {5, 2});
      w.write("/logits/step_offsets", std::vector<std::uint64_t>{0, 2, 5});
    } else {
      w.write_ragged("/generated/ids", std::vector<std::vector<std::int64_t>>{{5, 6}, {7, 1}});
      w.write(std::string("/logits/step_logits"), std::vector<float>{0, 0, 0, 0, 0, 0, 2, 2}, {4, 2});
      w.write("/logits/step_offsets", std::vector<std::uint64_t>{0, 2, 4});
    }
  });
}

}  // namespace

TEST(Compare, GenerateTokenAndLogitMetricsByHand) {
  const auto c = compare_results(generate_file("g-ref.h5", false), generate_file("g-cand.h5", true), Thresholds());
  EXPECT_EQ(c.task, "generate");
  EXPECT_NEAR(metric(c, "token_mismatch_rate").value, 2.0 / 5.0, 1e-12);  // b: 3 tokens, 2 from divergence on
  EXPECT_NEAR(metric(c, "identical_samples").value, 0.5, 1e-12);
  EXPECT_NEAR(metric(c, "compared_tokens").value, 4, 0);  // a: steps 0,1; b: steps 0,1 (the divergent step)
  EXPECT_NEAR(metric(c, "ce_mean").value, std::log(2.0), 1e-6);
  EXPECT_NEAR(metric(c, "ce_excess_mean").value, kKlA / 4, 1e-6);
  EXPECT_NEAR(metric(c, "ce_excess_max").value, kKlA, 1e-6);
  EXPECT_NEAR(metric(c, "softmax_diff_max").value, 0.25, 1e-6);
  EXPECT_NEAR(metric(c, "failure_rate").value, 0.25, 1e-12);  // a0: |dp| 0.25 > 0.05
  EXPECT_FALSE(c.passed());
  const auto failed = c.failed_metrics();
  EXPECT_EQ(failed, (std::vector<std::string>{"token_mismatch_rate", "failure_rate"}));
  ASSERT_EQ(c.rows.size(), 2u);
  EXPECT_EQ(c.rows[0].id, "b");  // diverged: worst first
  EXPECT_EQ(c.rows[0].cells[0], "1");
  const auto summary = render_summary(c);
  EXPECT_NE(summary.find("RESULT: FAIL (token_mismatch_rate, failure_rate)"), std::string::npos) << summary;
  EXPECT_NE(render_markdown(c).find("| failure_rate | 0.25 | <= 0.01 | FAIL |"), std::string::npos) << render_markdown(c);
  EXPECT_NE(render_json(c).find("\"failed_metrics\""), std::string::npos);
}

TEST(Compare, GenerateIdenticalFilesPassAndLooseThresholdsPass) {
  const auto ref = generate_file("g-same.h5", false);
  const auto c = compare_results(ref, ref, Thresholds());
  EXPECT_TRUE(c.passed()) << render_summary(c);
  EXPECT_DOUBLE_EQ(metric(c, "token_mismatch_rate").value, 0.0);
  EXPECT_DOUBLE_EQ(metric(c, "failure_rate").value, 0.0);
  Thresholds loose;
  loose.set("generate", "token_mismatch_rate", 0.5);
  loose.set("generate", "softmax_diff_per_token", 0.3);
  EXPECT_TRUE(compare_results(ref, generate_file("g-cand2.h5", true), loose).passed());
}

TEST(Compare, GenerateWithoutLogitsIsLevelZeroOnly) {
  auto no_logits = make("g-nolog.h5", "generate", [](H5Writer& w) {
    w.write_strings("/samples/id", {"a", "b"});
    w.write_ragged("/samples/prompt_ids", std::vector<std::vector<std::int64_t>>{{1, 10}, {1, 11, 12}});
    w.write_ragged("/generated/ids", std::vector<std::vector<std::int64_t>>{{5, 6}, {7, 8, 9}});
  });
  const auto c = compare_results(no_logits, generate_file("g-ref2.h5", false), Thresholds());
  EXPECT_TRUE(c.passed());
  for (const auto& m : c.metrics) EXPECT_NE(m.name, "failure_rate");
  ASSERT_FALSE(c.notes.empty());
  EXPECT_NE(c.notes[0].find("level 0"), std::string::npos);
}

TEST(Compare, GenerateTopkCandidateUsesSharedIdsOnly) {
  // candidate keeps only its best id per step; a0's reference top-2 is {1, 0}, the candidate has {0}.
  auto topk = make("g-topk.h5", "generate", [](H5Writer& w) {
    w.write_strings("/samples/id", {"a", "b"});
    w.write_ragged("/samples/prompt_ids", std::vector<std::vector<std::int64_t>>{{1, 10}, {1, 11, 12}});
    w.write_ragged("/generated/ids", std::vector<std::vector<std::int64_t>>{{5, 6}, {7, 8, 9}});
    w.write(std::string("/logits/topk/values"), std::vector<float>{0, 0, 0, 1, 0}, {5, 1});
    w.write("/logits/topk/indices", std::vector<std::int64_t>{0, 0, 0, 0, 0}, {5, 1});
    w.write("/logits/step_offsets", std::vector<std::uint64_t>{0, 2, 5});
  });
  const auto c = compare_results(generate_file("g-ref3.h5", false), topk, Thresholds());
  EXPECT_DOUBLE_EQ(metric(c, "ce_excess_max").value, 0.0);  // one shared id: both distributions are {1}
  bool noted = false;
  for (const auto& n : c.notes) noted |= n.find("present in the candidate's top-k") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST(Compare, QaLogitDiffsScoresAndAgreementByHand) {
  auto qa = [](const std::string& name, bool cand) {
    return make(name, "qa", [&](H5Writer& w) {
      w.write_strings("/samples/id", {"q0", "q1"});
      w.write("/features/example_index", std::vector<std::uint64_t>{0, 0, 1});
      w.write_ragged("/features/input_ids", std::vector<std::vector<std::int64_t>>{{0, 5, 2}, {0, 6, 2}, {0, 7, 2}});
      w.write_ragged("/logits/start_logits", std::vector<std::vector<float>>{{1, 2, cand ? 3.5F : 3.0F}, {0, 0, 0}, {1, 1, 1}});
      w.write_ragged("/logits/end_logits", std::vector<std::vector<float>>{{0, 0, 0}, {0, 0, cand ? -0.25F : 0.0F}, {0, 0, 0}});
      w.write_strings("/predictions/text", {"a", cand ? "c" : "b"});
      w.set_attr("/metrics", "exact_match", cand ? 100.0 : 50.0);
      w.set_attr("/metrics", "f1", cand ? 70.0 : 60.0);
      w.write("/metrics/f1_per_question", std::vector<double>{1.0, cand ? 0.4 : 0.2});
    });
  };
  const auto c = compare_results(qa("qa-ref.h5", false), qa("qa-cand.h5", true), Thresholds());
  EXPECT_DOUBLE_EQ(metric(c, "max_logit_diff").value, 0.5);
  EXPECT_NEAR(metric(c, "mean_logit_diff").value, 0.75 / 18, 1e-12);
  EXPECT_DOUBLE_EQ(metric(c, "em_delta").value, 50.0);
  EXPECT_DOUBLE_EQ(metric(c, "f1_delta").value, 10.0);
  EXPECT_DOUBLE_EQ(metric(c, "answer_agreement").value, 0.5);
  EXPECT_EQ(c.failed_metrics(),
            (std::vector<std::string>{"max_logit_diff", "mean_logit_diff", "em_delta", "f1_delta", "answer_agreement"}));
  ASSERT_EQ(c.rows.size(), 2u);
  EXPECT_EQ(c.rows[0].id, "q1");  // different answer comes first
  EXPECT_EQ(c.rows[1].cells[1], "0.5");
}

TEST(Compare, MlmAgreementLogitsAndAccuracyByHand) {
  auto mlm = [](const std::string& name, bool cand) {
    return make(name, "mlm", [&](H5Writer& w) {
      w.write_strings("/samples/id", {"s0", "s1"});
      w.write_ragged("/samples/input_ids", std::vector<std::vector<std::int64_t>>{{0, 3, 2}, {0, 3, 3, 2}});
      w.write("/masks/sample_index", std::vector<std::uint64_t>{0, 1, 1});
      w.write("/predictions/token_ids",
              cand ? std::vector<std::int64_t>{4, 5, 7, 6, 8, 1} : std::vector<std::int64_t>{4, 5, 6, 7, 8, 9}, {3, 2});
      w.write(std::string("/logits/mask_logits"), std::vector<float>{0, 1, 2, cand ? 3.125F : 3.0F, 4, 5}, {3, 2});
      w.set_attr("/metrics", "accuracy", cand ? 0.5 : 1.0);
    });
  };
  const auto c = compare_results(mlm("m-ref.h5", false), mlm("m-cand.h5", true), Thresholds());
  EXPECT_NEAR(metric(c, "top1_agreement").value, 2.0 / 3.0, 1e-12);
  EXPECT_DOUBLE_EQ(metric(c, "max_logit_diff").value, 0.125);
  EXPECT_NEAR(metric(c, "mean_logit_diff").value, 0.125 / 6, 1e-12);
  EXPECT_DOUBLE_EQ(metric(c, "accuracy_delta").value, 0.5);
  EXPECT_EQ(c.rows[0].id, "s1");
  EXPECT_EQ(c.rows[0].cells[0], "1/2");
}

TEST(Compare, PerplexityRatioLogprobKlAndTop1ByHand) {
  auto ppl = [](const std::string& name, bool cand) {
    return make(name, "perplexity", [&](H5Writer& w) {
      w.write_strings("/samples/id", {"corpus.txt"});
      w.write("/tokens/ids", std::vector<std::int64_t>{1, 2, 3, 4, 5});
      w.write("/scores/position", std::vector<std::int64_t>{1, 2, 3, 4});
      w.write("/scores/log_prob", cand ? std::vector<double>{-1, -2.5, -1, -0.5} : std::vector<double>{-1, -2, -1, -1});
      w.write(std::string("/logits/full"),
              cand ? std::vector<float>{0, 0, 0, 0, 0, 0, 1, 0} : std::vector<float>{0, float(kLn3), 0, 0, 0, 0, 0, 0}, {4, 2});
      w.set_attr("/metrics", "perplexity", cand ? 2.1 : 2.0);
    });
  };
  const auto c = compare_results(ppl("p-ref.h5", false), ppl("p-cand.h5", true), Thresholds());
  EXPECT_NEAR(metric(c, "perplexity_ratio").value, 1.05, 1e-12);
  EXPECT_DOUBLE_EQ(metric(c, "logprob_diff_mean").value, 0.25);
  EXPECT_DOUBLE_EQ(metric(c, "logprob_diff_p99").value, 0.5);
  EXPECT_NEAR(metric(c, "kl_mean").value, (kKlA + kKlB) / 4, 1e-6);
  EXPECT_NEAR(metric(c, "kl_median").value, kKlB / 2, 1e-6);
  EXPECT_NEAR(metric(c, "kl_p99").value, kKlB + 0.97 * (kKlA - kKlB), 1e-6);
  EXPECT_DOUBLE_EQ(metric(c, "top1_agreement").value, 0.75);
  EXPECT_FALSE(metric(c, "perplexity_ratio").passed());
  EXPECT_EQ(c.rows_title, "tokens");
  EXPECT_EQ(c.rows[0].cells[0], "4");  // |diff| 0.5 and larger KL than position 2
}

TEST(Compare, IncompatibleFilesAreInputErrorsNamingTheSample) {
  const auto ref = generate_file("c-ref.h5", false);
  // other sample id
  auto msg = error_of([&] { compare_results(ref, generate_file("c-id.h5", true, "zz"), Thresholds()); });
  EXPECT_NE(msg.find("'zz'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("c-id.h5"), std::string::npos) << msg;
  // other prompt ids for sample b
  auto other_prompt = make("c-prompt.h5", "generate", [](H5Writer& w) {
    w.write_strings("/samples/id", {"a", "b"});
    w.write_ragged("/samples/prompt_ids", std::vector<std::vector<std::int64_t>>{{1, 10}, {1, 11, 99}});
    w.write_ragged("/generated/ids", std::vector<std::vector<std::int64_t>>{{5, 6}, {7, 8, 9}});
  });
  msg = error_of([&] { compare_results(ref, other_prompt, Thresholds()); });
  EXPECT_NE(msg.find("sample 'b'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("prompt_ids"), std::string::npos) << msg;
  // other task
  auto qa = make("c-qa.h5", "qa", [](H5Writer& w) { w.write_strings("/samples/id", {"a", "b"}); });
  msg = error_of([&] { compare_results(ref, qa, Thresholds()); });
  EXPECT_NE(msg.find("task 'qa'"), std::string::npos) << msg;
  // fewer samples
  auto fewer = make("c-few.h5", "generate", [](H5Writer& w) { w.write_strings("/samples/id", {"a"}); });
  msg = error_of([&] { compare_results(ref, fewer, Thresholds()); });
  EXPECT_NE(msg.find("'b'"), std::string::npos) << msg;
  // not a result file
  const auto plain = (dir() / "plain.h5").string();
  {
    H5Writer w(plain);
    w.write("/x", std::vector<double>{1});
    w.commit();
  }
  msg = error_of([&] { compare_results(plain, ref, Thresholds()); });
  EXPECT_NE(msg.find("not an evalrun result file"), std::string::npos) << msg;
}
