// Decoder runs (generate, perplexity) through the real binary under mpirun: the result file must not
// depend on the number of ranks, the batch size or padding — identical tokens, logits within 1e-5.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "io/hdf5_file.hpp"
#include "io/logprobs16.hpp"
#include "process_util.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace evalrun;
using namespace evalrun::testing;

namespace {

const std::string kBin = EVALRUN_BIN;
const std::string kSrc = EVALRUN_SOURCE_DIR;

class DecoderRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = make_temp_dir("evalrun-dec");
    for (const char* preset : {"tiny-llama", "tiny-granite"}) {
      auto r = run_process(kBin + " make-model --preset " + preset + " --seed 5 --out " + (dir_ / preset).string());
      ASSERT_EQ(r.exit_code, 0) << r.output;
    }
    for (const char* preset : {"tiny-llama", "tiny-granite"}) {
      std::ofstream(dir_ / (std::string(preset) + ".toml"))
          << "[run]\nname = \"gen\"\nthreads = 1\n[model]\npath = \"" << (dir_ / preset).string()
          << "\"\n[task]\nkind = \"generate\"\ndataset = \"" << kSrc
          << "/tests/data/decoder_prompts.jsonl\"\nmax_new_tokens = 12\n";
    }
    // a corpus: the prompts file's text repeated, enough for several windows
    std::ofstream corpus(dir_ / "corpus.txt");
    for (int i = 0; i < 6; ++i) corpus << "The river flows through the old city, and a small boat sails around the island.\n";
    std::ofstream(dir_ / "ppl.toml") << "[run]\nname = \"ppl\"\nthreads = 1\n[model]\npath = \""
                                     << (dir_ / "tiny-llama").string() << "\"\n[task]\nkind = \"perplexity\"\ndataset = \""
                                     << (dir_ / "corpus.txt").string() << "\"\ncontext_length = 48\nstride = 20\n"
                                     << "[output]\nlogits = \"topk\"\ntop_k = 5\n";
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::string run(const std::string& config, int ranks, const std::string& out, const std::string& extra) {
    auto r = run_process(mpirun(ranks) + kBin + " " + (dir_ / config).string() + " --set output.path=" +
                         quote((dir_ / out).string()) + " " + extra);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return (dir_ / out).string();
  }

  static inline fs::path dir_;
};

void expect_same_generation(const std::string& ref, const std::vector<std::string>& others) {
  H5Reader a(ref);
  ASSERT_EQ(a.read_strings("/samples/id").size(), 5u);
  for (const auto& path : others) {
    H5Reader b(path);
    EXPECT_EQ(a.read_i64("/samples/prompt_ids/values"), b.read_i64("/samples/prompt_ids/values")) << path;
    EXPECT_EQ(a.read_i64("/generated/ids/values"), b.read_i64("/generated/ids/values")) << path;
    EXPECT_EQ(a.read_u64("/generated/ids/offsets"), b.read_u64("/generated/ids/offsets")) << path;
    EXPECT_EQ(a.read_strings("/generated/text"), b.read_strings("/generated/text")) << path;
    EXPECT_LE(max_diff(a.read_f32("/logits/step_logits"), b.read_f32("/logits/step_logits")), 1e-5F) << path;
  }
}

}  // namespace

TEST_F(DecoderRun, LlamaGenerationIndependentOfRanksBatchAndPadding) {
  const auto ref = run("tiny-llama.toml", 1, "l-n1-b1.h5", "--set task.batch_size=1");
  expect_same_generation(ref, {run("tiny-llama.toml", 2, "l-n2-b3.h5", "--set task.batch_size=3"),
                               run("tiny-llama.toml", 4, "l-n4-b8.h5", "--set task.batch_size=8"),
                               run("tiny-llama.toml", 2, "l-pad.h5", "--set task.batch_size=5 --set task.min_pad_length=40")});
  H5Reader a(ref);
  EXPECT_EQ(a.attr_string("/", "task"), "generate");
  EXPECT_EQ(a.shape("/logits/step_logits")[1], 1000);
  EXPECT_EQ(a.shape("/timing/first_token_seconds")[0], 5);
  // peak resident sets: rank 0's and the largest of the 4 ranks' (a process of this binary holds more
  // than 50 MB: the libraries alone)
  H5Reader four(dir_ / "l-n4-b8.h5");
  const auto rank0 = four.attr_int("/", "peak_rss_bytes_rank0"), most = four.attr_int("/", "peak_rss_bytes_max");
  EXPECT_GT(rank0, 50'000'000);
  EXPECT_GE(most, rank0);
  EXPECT_LT(most, 4 * rank0);
}

TEST_F(DecoderRun, GraniteGenerationIndependentOfRanksAndBatch) {
  const auto ref = run("tiny-granite.toml", 1, "g-n1-b1.h5", "--set task.batch_size=1");
  expect_same_generation(ref, {run("tiny-granite.toml", 3, "g-n3-b2.h5", "--set task.batch_size=2")});
  // granite's multipliers change the model: its tokens differ from llama's with the same seed
  const auto llama = run("tiny-llama.toml", 1, "l-ref.h5", "--set task.batch_size=1");
  EXPECT_NE(H5Reader(ref).read_i64("/generated/ids/values"), H5Reader(llama).read_i64("/generated/ids/values"));
}

TEST_F(DecoderRun, PerplexityIndependentOfRanksAndBatch) {
  const auto ref = run("ppl.toml", 1, "p-n1-b1.h5", "--set task.batch_size=1");
  const auto other = run("ppl.toml", 3, "p-n3-b2.h5", "--set task.batch_size=2");
  H5Reader a(ref), b(other);
  EXPECT_EQ(a.read_i64("/scores/position"), b.read_i64("/scores/position"));
  const auto la = a.read_f64("/scores/log_prob"), lb = b.read_f64("/scores/log_prob");
  ASSERT_EQ(la.size(), lb.size());
  for (std::size_t i = 0; i < la.size(); ++i) EXPECT_NEAR(la[i], lb[i], 1e-5) << i;
  EXPECT_NEAR(a.attr_double("/metrics", "perplexity"), b.attr_double("/metrics", "perplexity"), 1e-4);
  // every token but the first is scored exactly once
  const auto pos = a.read_i64("/scores/position");
  EXPECT_EQ(static_cast<std::int64_t>(pos.size()), a.attr_int("/metrics", "n_tokens") - 1);
  for (std::size_t i = 0; i < pos.size(); ++i) EXPECT_EQ(pos[i], static_cast<std::int64_t>(i) + 1);
  EXPECT_EQ(a.read_i64("/logits/topk/indices"), b.read_i64("/logits/topk/indices"));
  EXPECT_GT(a.attr_double("/metrics", "perplexity"), 1.0);
}

TEST_F(DecoderRun, PerplexityMaxSamplesScoresTheFirstWindowsOnly) {
  const auto all = run("ppl.toml", 1, "p-all.h5", "");
  const auto two = run("ppl.toml", 2, "p-two.h5", "--set task.max_samples=2");
  H5Reader a(all), b(two);
  // context 48, stride 20: window 1 scores positions 1..47, window 2 the next 20 (48..67)
  const auto pos = b.read_i64("/scores/position");
  ASSERT_EQ(pos.size(), 67u);
  EXPECT_EQ(pos.front(), 1);
  EXPECT_EQ(pos.back(), 67);
  const auto la = a.read_f64("/scores/log_prob"), lb = b.read_f64("/scores/log_prob");
  ASSERT_GT(la.size(), lb.size());
  for (std::size_t i = 0; i < lb.size(); ++i) EXPECT_NEAR(la[i], lb[i], 1e-5) << i;
}

TEST_F(DecoderRun, FixedPromptLengthTooShortNamesThePrompt) {
  auto r = run_process(mpirun(2) + kBin + " " + (dir_ / "tiny-llama.toml").string() +
                       " --set task.fixed_prompt_length=8 --set output.path=" + (dir_ / "never.h5").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("p3"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "never.h5"));
}

TEST_F(DecoderRun, BadPromptsAreClearErrors) {
  const auto empty = dir_ / "empty.jsonl";
  std::ofstream(empty) << "{\"id\": \"e1\", \"prompt\": \"\"}\n";
  auto r = run_process(kBin + " " + (dir_ / "tiny-llama.toml").string() + " --set task.dataset=" + empty.string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("empty.jsonl"), std::string::npos) << r.output;
  const auto bad = dir_ / "bad_utf8.txt";
  std::ofstream(bad, std::ios::binary) << "Once upon \xff\xfe a time";
  r = run_process(kBin + " " + (dir_ / "tiny-llama.toml").string() + " --set task.dataset=" + bad.string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("bad_utf8"), std::string::npos) << r.output;
}

TEST_F(DecoderRun, EncoderCheckpointForDecoderTaskIsRefused) {
  auto mk = run_process(kBin + " make-model --head qa --preset tiny --out " + (dir_ / "enc").string());
  ASSERT_EQ(mk.exit_code, 0) << mk.output;
  auto r = run_process(kBin + " " + (dir_ / "tiny-llama.toml").string() + " --set model.path=" + (dir_ / "enc").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("config.json"), std::string::npos) << r.output;
}

namespace {

// Row r of a [rows, vocab] logits dataset as exact log-probabilities (double).
std::vector<double> log_softmax_row(const std::vector<float>& logits, std::size_t r, std::size_t vocab) {
  const float* row = logits.data() + r * vocab;
  const double mx = *std::max_element(row, row + vocab);
  double sum = 0;
  for (std::size_t j = 0; j < vocab; ++j) sum += std::exp(static_cast<double>(row[j]) - mx);
  std::vector<double> out(vocab);
  for (std::size_t j = 0; j < vocab; ++j) out[j] = static_cast<double>(row[j]) - mx - std::log(sum);
  return out;
}

// The logprobs16 group of `q16` against the float logits `full_path` of `full` (same rows):
// every decoded log-prob within scale / 2 (+ `tol` for runs that differ in float rounding), the
// exact argmax and the fed / scored token's log-prob beside them.
void expect_logprobs16_of(const std::string& full, const std::string& full_path, const std::string& q16,
                          const std::vector<std::int64_t>& tokens, double tol) {
  H5Reader a(full), b(q16);
  const auto logits = a.read_f32(full_path);
  const auto shape = a.shape(full_path);
  const auto rows = static_cast<std::size_t>(shape[0]), vocab = static_cast<std::size_t>(shape[1]);
  EXPECT_FALSE(b.exists(full_path)) << q16;
  H5Rows<std::uint16_t> q(b, "/logits/logprobs16/values");
  ASSERT_EQ(q.rows(), shape[0]);
  ASSERT_EQ(q.cols(), shape[1]);
  const auto scale = b.read_f32("/logits/logprobs16/scale"), lo = b.read_f32("/logits/logprobs16/min_log_prob");
  const auto top = b.read_i64("/logits/logprobs16/top_id");
  const auto tlp = b.read_f64("/logits/logprobs16/token_log_prob");
  ASSERT_EQ(tokens.size(), rows);
  std::vector<float> decoded(vocab);
  for (std::size_t r = 0; r < rows; ++r) {
    const auto exact = log_softmax_row(logits, r, vocab);
    decode_log_probs16(q.row(static_cast<std::int64_t>(r)), shape[1], scale[r], lo[r], decoded.data());
    double worst = 0;
    for (std::size_t j = 0; j < vocab; ++j) worst = std::max(worst, std::fabs(decoded[j] - exact[j]));
    EXPECT_LE(worst, scale[r] / 2.0 + 1e-5 + tol) << q16 << " row " << r;
    const float* row = logits.data() + r * vocab;
    if (tol == 0) {
      EXPECT_EQ(top[r], std::max_element(row, row + vocab) - row) << q16 << " row " << r;
    }
    EXPECT_NEAR(tlp[r], exact[static_cast<std::size_t>(tokens[r])], 1e-6 + tol) << q16 << " row " << r;
  }
}

}  // namespace

// output.logits = "logprobs16" stores what the float logits say, at half their bytes, on any rank
// count and batch size; compare reads it beside float logits and finds them equal.
TEST_F(DecoderRun, LogProbs16HoldTheFloatLogitsWithinTheBoundOnAnyRanksAndBatch) {
  const auto full = run("tiny-llama.toml", 1, "q-full.h5", "--set task.batch_size=1");
  const auto q1 = run("tiny-llama.toml", 1, "q-n1.h5", "--set task.batch_size=1 --set output.logits=logprobs16");
  const auto q2 = run("tiny-llama.toml", 2, "q-n2-b3.h5", "--set task.batch_size=3 --set output.logits=logprobs16");
  const auto fed = H5Reader(full).read_i64("/generated/ids/values");
  for (const auto& path : {q1, q2}) {
    H5Reader b(path);
    EXPECT_EQ(b.read_i64("/generated/ids/values"), fed) << path;
    EXPECT_EQ(b.read_u64("/logits/step_offsets"), H5Reader(full).read_u64("/logits/step_offsets")) << path;
  }
  expect_logprobs16_of(full, "/logits/step_logits", q1, fed, 0);
  expect_logprobs16_of(full, "/logits/step_logits", q2, fed, 1e-5);
  EXPECT_EQ(H5Reader(q1).read_i64("/logits/logprobs16/top_id"), H5Reader(q2).read_i64("/logits/logprobs16/top_id"));
  EXPECT_LT(fs::file_size(q1), fs::file_size(full) * 6 / 10);

  for (const auto& [ref, cand] : {std::pair{full, q1}, std::pair{q1, q2}}) {
    const auto r = run_process(kBin + " compare " + ref + " " + cand + " --json " + quote(cand + ".json"));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("stores 16-bit log-probabilities"), std::string::npos) << r.output;
    std::ifstream in(cand + ".json");
    const std::string report{std::istreambuf_iterator<char>(in), {}};
    EXPECT_NE(report.find("\"ce_excess_max\""), std::string::npos) << report;
  }

  // perplexity: one row per scored token, its exact log-prob equal to /scores/log_prob
  std::ofstream(dir_ / "ppl-plain.toml") << "[run]\nname = \"ppl\"\nthreads = 1\n[model]\npath = \""
                                           << (dir_ / "tiny-llama").string() << "\"\n[task]\nkind = \"perplexity\"\n"
                                           << "dataset = \"" << (dir_ / "corpus.txt").string()
                                           << "\"\ncontext_length = 48\nstride = 20\n";
  const auto pfull = run("ppl-plain.toml", 1, "qp-full.h5", "--set task.batch_size=1 --set output.logits=full");
  const auto pq = run("ppl-plain.toml", 3, "qp-n3.h5", "--set task.batch_size=2 --set output.logits=logprobs16");
  H5Reader pa(pfull);
  std::vector<std::int64_t> scored;
  const auto ids = pa.read_i64("/tokens/ids");
  for (auto p : pa.read_i64("/scores/position")) scored.push_back(ids[static_cast<std::size_t>(p)]);
  expect_logprobs16_of(pfull, "/logits/full", pq, scored, 1e-5);
  const auto lp = H5Reader(pq).read_f64("/logits/logprobs16/token_log_prob"), exact = pa.read_f64("/scores/log_prob");
  ASSERT_EQ(lp.size(), exact.size());
  for (std::size_t i = 0; i < lp.size(); ++i) EXPECT_NEAR(lp[i], exact[i], 1e-5) << i;
  const auto r = run_process(kBin + " compare " + pfull + " " + pq);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("kl_mean"), std::string::npos) << r.output;
}
