// configs/llama_gptq.toml run by the evalrun binary under mpirun on the GPTQ oracle checkpoint (4-bit
// in memory): the 24 greedy tokens of each of the 6 prompts and the first step's top-5 logits must be
// those transformers computed for the exactly dequantized model (oracle/llama-gptq/reference.h5).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "io/hdf5_file.hpp"
#include "process_util.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace evalrun;
using namespace evalrun::testing;

namespace {
const std::string kBin = EVALRUN_BIN;
const std::string kSrc = EVALRUN_SOURCE_DIR;
}  // namespace

TEST(GptqRun, ExampleConfigMatchesTheOracle) {
  EVALRUN_REQUIRE_SHARED_DATA(data);
  const auto dir = make_temp_dir("evalrun-gptq-run");
  const std::string oracle = data + "/oracle/llama-gptq";
  auto r = run_process("cd " + quote(kSrc) + " && " + mpirun(2) + kBin + " configs/llama_gptq.toml --set model.path=" +
                       quote(oracle) + " --set output.path=" + quote((dir / "out.h5").string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  H5Reader h((dir / "out.h5").string());
  H5Reader ref(oracle + "/reference.h5");
  EXPECT_EQ(h.attr_string("/", "quantization"), "gptq w4 g32 asym act_order");
  const auto ids = ref.read_strings("/ids");
  ASSERT_EQ(h.read_strings("/samples/id"), ids);
  const auto prompts = h.read_ragged_i64("/samples/prompt_ids");
  const auto generated = h.read_ragged_i64("/generated/ids");
  const auto top_ids = h.read_i64("/logits/topk/indices");
  const auto top_vals = h.read_f32("/logits/topk/values");
  ASSERT_EQ(generated.size(), ids.size());
  std::size_t offset = 0;  // topk rows: 24 steps per sample, 5 each
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::string g = "/samples/" + ids[i] + "/";
    EXPECT_EQ(prompts[i], ref.read_i64(g + "input_ids")) << ids[i];
    EXPECT_EQ(generated[i], ref.read_i64(g + "generated_ids")) << ids[i];
    const auto step_logits = ref.read_f32(g + "step_logits");  // [24, 512]
    for (int step = 0; step < 24; ++step) {
      for (int k = 0; k < 5; ++k) {
        const std::int64_t id = top_ids[offset + step * 5 + k];
        EXPECT_NEAR(top_vals[offset + step * 5 + k], step_logits[step * 512 + id], 1e-4) << ids[i] << " step " << step;
      }
    }
    offset += generated[i].size() * 5;
  }
  fs::remove_all(dir);
}
