// The decoder families through the real binary under mpirun: evalrun run (task generate) on the
// Mistral and Mixtral oracle checkpoints ($EVALRUN_DATA_DIR/oracle/mistral: sliding window 16, shorter
// than every prompt + 24 tokens; oracle/mixtral: 4 experts, top-2) with their sentencepiece tokenizers, on 1 rank, 2 ranks data parallel and 2
// ranks with tensor_parallel = 2: identical tokens, step logits within 1e-4 of the 1-rank run; and the
// 1-rank run against transformers' greedy tokens and step logits (reference.h5) for every prompt the
// tokenizer encodes to the reference's ids. The Qwen2 oracle (q/k/v biases, tied embeddings) runs the
// same way with its Qwen2Tokenizer files (converted as transformers does), the Gemma oracle (head_dim
// 24 with one kv head, which tensor_parallel 2 gives to both ranks; sqrt(hidden) embedding scale,
// (1 + w) RMSNorm, tanh GELU) with its GemmaTokenizer; tiny-qwen2 checks the biased tensor-parallel
// split on 4 ranks too. StarCoder2 (LayerNorm, biases everywhere, sliding window 12), GPTBigCode
// (multi-query: the one key/value head replicated on both tensor-parallel ranks, learned positions)
// and GPT-2 (Conv1D, fused c_attn cut per rank) run the same way with their GPT2Tokenizer files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/hdf5_file.hpp"
#include "process_util.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace evalrun;
using namespace evalrun::testing;

namespace {

const std::string kBin = EVALRUN_BIN;
const std::string kSrc = EVALRUN_SOURCE_DIR;

class FamiliesRun : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    dir_ = make_temp_dir("evalrun-families");
    auto r = run_process(kBin + " make-model --preset tiny-qwen2 --seed 5 --out " + (dir_ / "qwen2").string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ofstream(dir_ / "qwen2.toml") << "[run]\nname = \"gen\"\nthreads = 1\n[model]\npath = \"" << (dir_ / "qwen2").string()
                                       << "\"\n[task]\nkind = \"generate\"\ndataset = \"" << kSrc
                                       << "/tests/data/decoder_prompts.jsonl\"\nmax_new_tokens = 12\nbatch_size = 2\n";
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static const fs::path& dir() { return dir_; }
  static std::string run(const std::string& config, int ranks, int tp, const std::string& dtype = "fp32") {
    const std::string out =
        (dir_ / (config + "-n" + std::to_string(ranks) + "-tp" + std::to_string(tp) + "-" + dtype + ".h5")).string();
    auto r = run_process(mpirun(ranks) + kBin + " " + (dir_ / config).string() + " --set output.path=" + quote(out) +
                         " --set parallel.tensor_parallel=" + std::to_string(tp) + " --set model.dtype=" + dtype);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return out;
  }

  static inline fs::path dir_;
};

float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

void expect_same_generation(const std::string& ref, const std::string& other, float tol) {
  H5Reader a(ref), b(other);
  EXPECT_EQ(a.read_i64("/samples/prompt_ids/values"), b.read_i64("/samples/prompt_ids/values")) << other;
  EXPECT_EQ(a.read_i64("/generated/ids/values"), b.read_i64("/generated/ids/values")) << other;
  EXPECT_EQ(a.read_u64("/generated/ids/offsets"), b.read_u64("/generated/ids/offsets")) << other;
  EXPECT_EQ(a.read_strings("/generated/text"), b.read_strings("/generated/text")) << other;
  const float d = max_diff(a.read_f32("/logits/step_logits"), b.read_f32("/logits/step_logits"));
  EXPECT_LE(d, tol) << other;
  std::printf("%s vs %s: max |step logit diff| %.3g\n", fs::path(other).filename().c_str(),
              fs::path(ref).filename().c_str(), d);
}

}  // namespace

// evalrun run on oracle/<fixture> (generate, 24 tokens) on 1 rank, 2 ranks data parallel and
// tensor_parallel 2: the same result, and transformers' tokens and step logits.
static void oracle_layouts(FamiliesRun& t, const std::string& data, const std::string& fixture, std::int64_t V) {
  const std::string oracle = data + "/oracle/" + fixture;
  H5Reader ref(oracle + "/reference.h5");
  const auto ids = ref.read_strings("/ids");
  // "oracle-" keeps its files apart from the tiny presets' (qwen2.toml is tiny-qwen2's).
  const std::string name = "oracle-" + fixture;
  {
    std::ofstream prompts(t.dir() / (name + "_prompts.jsonl"));
    for (const auto& id : ids) {
      prompts << nlohmann::json{{"id", id}, {"prompt", ref.attr_string("/samples/" + id, "prompt")}}.dump() << "\n";
    }
  }
  std::ofstream(t.dir() / (name + ".toml")) << "[run]\nname = \"" << fixture << "\"\nthreads = 1\n[model]\npath = \"" << oracle
                                    << "\"\n[task]\nkind = \"generate\"\ndataset = \""
                                    << (t.dir() / (name + "_prompts.jsonl")).string()
                                    << "\"\nmax_new_tokens = 24\nbatch_size = 3\n";
  const auto one = t.run(name + ".toml", 1, 1);
  const auto dp2 = t.run(name + ".toml", 2, 1);
  const auto tp2 = t.run(name + ".toml", 2, 2);
  expect_same_generation(one, dp2, 1e-4F);
  expect_same_generation(one, tp2, 1e-4F);
  H5Reader split(tp2);
  EXPECT_EQ(split.attr_int("/", "tensor_parallel"), 2);

  // Against transformers: the prompts the sentencepiece tokenizer encodes to the reference's ids.
  H5Reader a(one);
  ASSERT_EQ(a.read_strings("/samples/id"), ids);
  const auto prompt_vals = a.read_i64("/samples/prompt_ids/values");
  const auto prompt_offs = a.read_u64("/samples/prompt_ids/offsets");
  const auto gen_vals = a.read_i64("/generated/ids/values");
  const auto gen_offs = a.read_u64("/generated/ids/offsets");
  const auto logits = a.read_f32("/logits/step_logits");
  int compared = 0;
  float worst = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::string g = "/samples/" + ids[i] + "/";
    const auto want_prompt = ref.read_i64(g + "input_ids");
    const auto want_gen = ref.read_i64(g + "generated_ids");
    const std::vector<std::int64_t> got_prompt(prompt_vals.begin() + prompt_offs[i], prompt_vals.begin() + prompt_offs[i + 1]);
    const std::vector<std::int64_t> got_gen(gen_vals.begin() + gen_offs[i], gen_vals.begin() + gen_offs[i + 1]);
    if (got_prompt != want_prompt) {
      std::printf("%s: the tokenizer's ids differ from the reference's; not compared\n", ids[i].c_str());
      continue;
    }
    // evalrun stops at EOS, the reference does not: compare up to where evalrun stopped.
    ASSERT_LE(got_gen.size(), want_gen.size()) << ids[i];
    if (std::find(want_gen.begin(), want_gen.end(), 2) == want_gen.end()) {
      EXPECT_EQ(got_gen.size(), 24u) << ids[i];
    }
    EXPECT_TRUE(std::equal(got_gen.begin(), got_gen.end(), want_gen.begin())) << ids[i];
    const auto want_logits = ref.read_f32(g + "step_logits");
    for (std::size_t s = 0; s < got_gen.size(); ++s) {
      float d = 0;
      for (std::int64_t v = 0; v < V; ++v) {
        d = std::max(d, std::fabs(logits[(gen_offs[i] + s) * V + v] - want_logits[s * V + v]));
      }
      EXPECT_LT(d, 1e-4F) << ids[i] << " step " << s;
      worst = std::max(worst, d);
    }
    ++compared;
  }
  std::printf("%s end to end: %d of %zu prompts tokenized as the reference; max |step logit diff| %.3g\n", fixture.c_str(), compared,
              ids.size(), worst);
  EXPECT_GE(compared, 4);
}

TEST_F(FamiliesRun, MistralOracleGenerationIsTheSameOnEveryLayoutAndEqualsTransformers) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  oracle_layouts(*this, data, "mistral", 1000);
}

// Mixtral: each expert split like a dense MLP under tensor_parallel 2.
TEST_F(FamiliesRun, MixtralOracleGenerationIsTheSameOnEveryLayoutAndEqualsTransformers) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  oracle_layouts(*this, data, "mixtral", 512);
}

TEST_F(FamiliesRun, Qwen2OracleGenerationIsTheSameOnEveryLayoutAndEqualsTransformers) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  oracle_layouts(*this, data, "qwen2", 1261);
}

TEST_F(FamiliesRun, GemmaOracleGenerationIsTheSameOnEveryLayoutAndEqualsTransformers) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  oracle_layouts(*this, data, "gemma", 1000);
}

TEST_F(FamiliesRun, Starcoder2OracleGenerationIsTheSameOnEveryLayoutAndEqualsTransformers) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  oracle_layouts(*this, data, "starcoder2", 1261);
}

TEST_F(FamiliesRun, GptBigCodeOracleGenerationIsTheSameOnEveryLayoutAndEqualsTransformers) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  oracle_layouts(*this, data, "gpt-bigcode", 1261);
}

TEST_F(FamiliesRun, Gpt2OracleGenerationIsTheSameOnEveryLayoutAndEqualsTransformers) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  oracle_layouts(*this, data, "gpt2", 1261);
}

// tiny-gpt-bigcode's one key/value head is replicated on both ranks of a tensor-parallel pair,
// tiny-starcoder2's o / c_proj biases are added once per group, tiny-gpt2's Conv1D c_attn is cut per
// rank: 1 rank, tensor_parallel 2 and tensor_parallel 2 x data parallel 2 agree.
TEST_F(FamiliesRun, TinyGptAndStarcoder2PresetsAgreeUnderTensorParallelism) {
  for (const std::string preset : {"tiny-gpt-bigcode", "tiny-starcoder2", "tiny-gpt2"}) {
    SCOPED_TRACE(preset);
    auto r = run_process(kBin + " make-model --preset " + preset + " --seed 7 --out " + (dir() / preset).string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ofstream(dir() / (preset + ".toml")) << "[run]\nname = \"gen\"\nthreads = 1\n[model]\npath = \""
                                              << (dir() / preset).string() << "\"\n[task]\nkind = \"generate\"\ndataset = \""
                                              << kSrc << "/tests/data/decoder_prompts.jsonl\"\nmax_new_tokens = 12\nbatch_size = 2\n";
    const auto one = run(preset + ".toml", 1, 1);
    expect_same_generation(one, run(preset + ".toml", 2, 2), 1e-5F);
    expect_same_generation(one, run(preset + ".toml", 4, 2), 1e-5F);
  }
}

// bfloat16 (the raw-buffer path): each rank's partial o / down product is rounded to bfloat16, summed
// in float32 and rounded again (the torch path's Weights::summed), so the split run's logits differ
// from the unsplit run's by bfloat16 rounding only; the tokens are the same.
TEST_F(FamiliesRun, Bfloat16TensorParallelEqualsTheUnsplitRunToRounding) {
  const auto one = run("qwen2.toml", 1, 1, "bf16");
  H5Reader a(one);
  const auto logits = a.read_f32("/logits/step_logits");
  float scale = 0;
  for (float v : logits) scale = std::max(scale, std::fabs(v));
  expect_same_generation(one, run("qwen2.toml", 2, 2, "bf16"), 0.05F * scale);
  // Really bfloat16: not the float32 run's logits.
  const float d = evalrun::testing::max_diff(logits, H5Reader(run("qwen2.toml", 1, 1)).read_f32("/logits/step_logits"));
  std::printf("bf16 vs fp32, 1 rank: max |step logit diff| %.3g (largest |logit| %.3g)\n", d, scale);
  EXPECT_GT(d, 0.0F);
}

TEST_F(FamiliesRun, Qwen2TensorParallelSplitsTheBiasesWithTheirColumns) {
  const auto one = run("qwen2.toml", 1, 1);
  const auto tp2 = run("qwen2.toml", 2, 2);
  const auto tp2dp2 = run("qwen2.toml", 4, 2);
  expect_same_generation(one, tp2, 1e-5F);
  expect_same_generation(one, tp2dp2, 1e-5F);
}
