// Teacher forcing ([validation] golden) through the real binary under mpirun: a bf16 candidate fed an
// fp32 reference's tokens reports exactly those tokens, its own argmax choices in /generated/own_ids,
// and step logits close to the reference's at every position; a golden file over other prompts, or
// golden on a task other than generate, is refused with exit status 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "io/hdf5_file.hpp"
#include "process_util.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace evalrun;
using namespace evalrun::testing;

namespace {

const std::string kBin = EVALRUN_BIN;
const std::string kSrc = EVALRUN_SOURCE_DIR;

class GoldenRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = make_temp_dir("evalrun-golden");
    auto r = run_process(kBin + " make-model --preset tiny-llama --seed 5 --out " + (dir_ / "tiny-llama").string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ofstream(dir_ / "gen.toml") << "[run]\nname = \"gen\"\nthreads = 1\n[model]\npath = \""
                                     << (dir_ / "tiny-llama").string() << "\"\n[task]\nkind = \"generate\"\ndataset = \""
                                     << kSrc << "/tests/data/decoder_prompts.jsonl\"\nmax_new_tokens = 12\n";
    // The reference every test compares against: fp32, one rank.
    reference_ = run("gen.toml", 1, "ref.h5", "--set task.batch_size=2");
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::string run(const std::string& config, int ranks, const std::string& out, const std::string& extra) {
    auto r = run_process(mpirun(ranks) + kBin + " " + (dir_ / config).string() + " --set output.path=" +
                         quote((dir_ / out).string()) + " " + extra);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return (dir_ / out).string();
  }

  static inline fs::path dir_;
  static inline std::string reference_;
};

// Largest |a - b| and largest |a| over two equally long logits arrays.
std::pair<float, float> diff_and_scale(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float worst = 0, scale = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst = std::max(worst, std::fabs(a[i] - b[i]));
    scale = std::max(scale, std::fabs(a[i]));
  }
  return {worst, scale};
}

}  // namespace

TEST_F(GoldenRun, Bf16CandidateIsFedTheReferenceTokens) {
  // max_new_tokens does not apply to forced prompts: each runs its reference length.
  const auto cand = run("gen.toml", 2, "cand-bf16.h5",
                        "--set model.dtype=bf16 --set task.batch_size=3 --set task.max_new_tokens=4 "
                        "--set validation.golden=" + quote(reference_));
  H5Reader ref(reference_), c(cand);
  EXPECT_EQ(c.read_i64("/generated/ids/values"), ref.read_i64("/generated/ids/values"));
  EXPECT_EQ(c.read_u64("/generated/ids/offsets"), ref.read_u64("/generated/ids/offsets"));
  EXPECT_EQ(c.read_strings("/generated/text"), ref.read_strings("/generated/text"));
  ASSERT_TRUE(c.exists("/generated/own_ids/values"));
  EXPECT_EQ(c.read_u64("/generated/own_ids/offsets"), ref.read_u64("/generated/ids/offsets"));
  EXPECT_EQ(c.attr_int("/", "teacher_forced"), 1);
  EXPECT_EQ(c.attr_string("/", "golden"), reference_);
  EXPECT_FALSE(ref.has_attr("/", "teacher_forced"));
  EXPECT_FALSE(ref.exists("/generated/own_ids"));
  EXPECT_EQ(c.attr_string("/", "dtype"), "bf16");

  ASSERT_EQ(c.shape("/logits/step_logits"), ref.shape("/logits/step_logits"));
  EXPECT_EQ(c.read_u64("/logits/step_offsets"), ref.read_u64("/logits/step_offsets"));
  const auto cl = c.read_f32("/logits/step_logits");
  const auto rl = ref.read_f32("/logits/step_logits");
  const auto [worst, scale] = diff_and_scale(cl, rl);
  // bf16 keeps 8 significant bits: a few percent of the logits' range after a few layers.
  EXPECT_GT(worst, 0.0F) << "bf16 logits identical to fp32: was the candidate really bf16?";
  EXPECT_LE(worst, 0.05F * scale) << "largest |logit| " << scale;

  // own_ids: the candidate's argmax at each position of its own logits rows.
  const auto own = c.read_i64("/generated/own_ids/values");
  const std::int64_t vocab = c.shape("/logits/step_logits")[1];
  ASSERT_EQ(static_cast<std::int64_t>(cl.size()), static_cast<std::int64_t>(own.size()) * vocab);
  for (std::size_t s = 0; s < own.size(); ++s) {
    const float* row = cl.data() + static_cast<std::ptrdiff_t>(s) * vocab;
    EXPECT_EQ(std::max_element(row, row + vocab) - row, own[s]) << "step " << s;
  }
}

TEST_F(GoldenRun, Fp32CandidateForcedOnItsOwnOutputReproducesIt) {
  const auto cand = run("gen.toml", 3, "cand-fp32.h5", "--set task.batch_size=1 --set validation.golden=" + quote(reference_));
  H5Reader ref(reference_), c(cand);
  EXPECT_EQ(c.read_i64("/generated/own_ids/values"), ref.read_i64("/generated/ids/values"));
  EXPECT_EQ(c.read_i64("/generated/ids/values"), ref.read_i64("/generated/ids/values"));
  EXPECT_EQ(c.read_i64("/generated/stopped"), ref.read_i64("/generated/stopped"));
  const auto [worst, scale] = diff_and_scale(c.read_f32("/logits/step_logits"), ref.read_f32("/logits/step_logits"));
  EXPECT_LE(worst, 1e-5F) << "largest |logit| " << scale;
}

TEST_F(GoldenRun, GoldenOverOtherPromptsNamesTheSample) {
  // Same ids, one prompt text changed: its token ids differ.
  const auto changed = dir_ / "changed.jsonl";
  {
    std::ifstream in(kSrc + "/tests/data/decoder_prompts.jsonl");
    std::ofstream out(changed);
    std::string line;
    while (std::getline(in, line)) {
      if (line.find("\"p4\"") != std::string::npos) line = R"({"id": "p4", "prompt": "Bread and butter"})";
      out << line << "\n";
    }
  }
  auto r = run_process(mpirun(2) + kBin + " " + (dir_ / "gen.toml").string() + " --set task.dataset=" +
                       changed.string() + " --set validation.golden=" + quote(reference_) +
                       " --set output.path=" + (dir_ / "never.h5").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("'p4'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ref.h5"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "never.h5"));

  // Fewer prompts (max_samples) than the golden file: the first extra sample is named.
  r = run_process(kBin + " " + (dir_ / "gen.toml").string() + " --set task.max_samples=3 --set validation.golden=" +
                  quote(reference_) + " --set output.path=" + (dir_ / "never.h5").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("'p4'"), std::string::npos) << r.output;

  // Same prompts, other order.
  const auto reordered = dir_ / "reordered.jsonl";
  {
    std::ifstream in(kSrc + "/tests/data/decoder_prompts.jsonl");
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    std::swap(lines[0], lines[1]);
    std::ofstream out(reordered);
    for (const auto& l : lines) out << l << "\n";
  }
  r = run_process(kBin + " " + (dir_ / "gen.toml").string() + " --set task.dataset=" + reordered.string() +
                  " --set validation.golden=" + quote(reference_) + " --set output.path=" + (dir_ / "never.h5").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("'p1'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("same order"), std::string::npos) << r.output;
}

TEST_F(GoldenRun, GoldenMustBeAGenerateResult) {
  auto r = run_process(kBin + " " + (dir_ / "gen.toml").string() + " --set validation.golden=" +
                       (dir_ / "missing.h5").string() + " --set output.path=" + (dir_ / "never.h5").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("missing.h5"), std::string::npos) << r.output;

  // A perplexity result is not a generate result.
  std::ofstream corpus(dir_ / "corpus.txt");
  corpus << "The river flows through the old city, and a small boat sails around the island.\n";
  corpus.close();
  std::ofstream(dir_ / "ppl.toml") << "[run]\nname = \"ppl\"\nthreads = 1\n[model]\npath = \""
                                   << (dir_ / "tiny-llama").string() << "\"\n[task]\nkind = \"perplexity\"\ndataset = \""
                                   << (dir_ / "corpus.txt").string() << "\"\ncontext_length = 16\n";
  const auto ppl = run("ppl.toml", 1, "ppl.h5", "");
  r = run_process(kBin + " " + (dir_ / "gen.toml").string() + " --set validation.golden=" + ppl +
                  " --set output.path=" + (dir_ / "never.h5").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("generate result"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"perplexity\""), std::string::npos) << r.output;
}

TEST_F(GoldenRun, GoldenOnANonGenerateRunIsAConfigError) {
  std::ofstream(dir_ / "qa.toml") << "[run]\nname = \"qa\"\n[model]\npath = \"" << (dir_ / "tiny-llama").string()
                                  << "\"\n[task]\nkind = \"qa\"\ndataset = \"squad.json\"\n[validation]\ngolden = \""
                                  << reference_ << "\"\n";
  auto r = run_process(kBin + " " + (dir_ / "qa.toml").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("qa.toml:9"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("validation.golden applies only to task.kind = \"generate\""), std::string::npos) << r.output;
}
