// stories260K (a real trained Llama, shared data) run by the evalrun binary exactly as a user would:
// its README's greedy continuation of "Once upon a time" must come out token for token.
#include <gtest/gtest.h>

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

// ../shared/data/models/stories260K/README.md: the first 100 ids generated after "Once upon a time".
const std::vector<std::int64_t> kReadmeIds = {
    432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337, 410, 408, 419, 292,
    411, 322, 265, 282, 295, 433, 426, 385, 328, 432, 358, 394, 261, 370, 432, 352, 266, 268, 388, 426,
    338, 391, 266, 267, 337, 335, 312, 432, 398, 312, 286, 267, 414, 270, 333, 415, 426, 13,  438, 310,
    439, 419, 357, 336, 432, 313, 438, 310, 432, 278, 316, 439, 419, 298, 414, 267, 265, 282, 295, 433,
    426, 436, 317, 286, 296, 418, 269, 279, 292, 416, 439, 413, 409, 416, 327, 263, 415, 294, 267, 400};
}  // namespace

TEST(StoriesRun, GreedyContinuationMatchesReadme) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const auto dir = make_temp_dir("evalrun-stories");
  std::ofstream(dir / "prompts.jsonl") << "{\"id\": \"once\", \"prompt\": \"Once upon a time\"}\n"
                                       << "{\"id\": \"boy\", \"prompt\": \"The boy\"}\n";
  std::ofstream(dir / "run.toml") << "[run]\nname = \"stories\"\nthreads = 1\n[model]\npath = \"" << data
                                  << "/models/stories260K\"\n[task]\nkind = \"generate\"\ndataset = \""
                                  << (dir / "prompts.jsonl").string() << "\"\nmax_new_tokens = 100\nbatch_size = 2\n"
                                  << "[output]\npath = \"" << (dir / "out.h5").string() << "\"\nlogits = \"topk\"\ntop_k = 5\n";
  auto r = run_process(mpirun(2) + kBin + " " + (dir / "run.toml").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  H5Reader h((dir / "out.h5").string());
  const auto prompts = h.read_ragged_i64("/samples/prompt_ids");
  EXPECT_EQ(prompts[0], (std::vector<std::int64_t>{1, 403, 407, 261, 378}));
  const auto generated = h.read_ragged_i64("/generated/ids");
  EXPECT_EQ(generated[0], kReadmeIds);
  const auto text = h.read_strings("/generated/text");
  EXPECT_EQ(text[0].rfind(", there was a little girl named Lily. She loved to play outside in the park.", 0), 0u)
      << text[0];
  // first step's top-5 (README: 432:17.7994 383:14.2813 322:9.7096 353:9.5873 323:9.1342)
  const auto idx = h.read_i64("/logits/topk/indices");
  const auto val = h.read_f32("/logits/topk/values");
  EXPECT_EQ((std::vector<std::int64_t>(idx.begin(), idx.begin() + 5)),
            (std::vector<std::int64_t>{432, 383, 322, 353, 323}));
  EXPECT_NEAR(val[0], 17.7994F, 1e-3F);
  EXPECT_NEAR(val[4], 9.1342F, 1e-3F);
  fs::remove_all(dir);
}

TEST(StoriesRun, WikitextPerplexityIsReportedWithItsError) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const auto dir = make_temp_dir("evalrun-stories-ppl");
  {
    std::ifstream in(data + "/wikitext-2/wiki.test.txt");
    std::string text(30000, '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<std::size_t>(in.gcount()));
    std::ofstream(dir / "wiki.txt") << text;
  }
  std::ofstream(dir / "run.toml") << "[run]\nname = \"ppl\"\nthreads = 1\n[model]\npath = \"" << data
                                  << "/models/stories260K\"\n[task]\nkind = \"perplexity\"\ndataset = \""
                                  << (dir / "wiki.txt").string() << "\"\ncontext_length = 256\nstride = 128\n"
                                  << "batch_size = 4\n[output]\npath = \"" << (dir / "ppl.h5").string() << "\"\n";
  auto r = run_process(mpirun(2) + kBin + " " + (dir / "run.toml").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  H5Reader h((dir / "ppl.h5").string());
  const double ppl = h.attr_double("/metrics", "perplexity");
  const double se = h.attr_double("/metrics", "perplexity_stderr");
  // a 260K-parameter model trained on children's stories finds Wikipedia hard, but not random:
  // uniform over its 512 tokens would be 512
  EXPECT_GT(ppl, 20.0);
  EXPECT_LT(ppl, 512.0);
  EXPECT_GT(se, 0.0);
  EXPECT_LT(se, ppl / 10);
  EXPECT_FALSE(h.exists("/logits/full")) << "perplexity stores no logits unless asked";
  fs::remove_all(dir);
}
