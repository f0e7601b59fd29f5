// Inputs checked against the model before a run (task/input_limits.hpp): the batch memory estimate
// in numbers, the error for a batch over run.max_batch_bytes, learned vs rotary positions.
#include "task/input_limits.hpp"

#include <gtest/gtest.h>

#include "common/errors.hpp"
#include "config/config.hpp"

using namespace evalrun;

namespace {

#define EXPECT_HAS(text, part)                               \
  EXPECT_NE(std::string(text).find(part), std::string::npos) \
      << "message: " << (text) << "\n   lacks: " << (part)

RunSpec spec_of(const std::string& kind, const std::vector<std::string>& overrides = {}) {
  return parse_run_spec("[run]\nname = \"t\"\n[model]\npath = \"m\"\n[task]\nkind = \"" + kind +
                            "\"\ndataset = \"data.jsonl\"\n",
                        "t.toml", overrides);
}

// Llama-2-7B's shape.
ModelDims llama7b() {
  ModelDims m;
  m.config_json = "m/config.json";
  m.layers = 32, m.heads = 32, m.kv_heads = 32, m.head_dim = 128, m.vocab = 32000, m.max_positions = 4096;
  m.rotary = true;
  return m;
}

TEST(InputLimits, BatchBytesOfAGenerateBatch) {
  const RunSpec spec = spec_of("generate", {"model.dtype=\"bf16\"", "output.logits=\"topk\""});
  const BatchBytes b = batch_bytes(spec, llama7b(), {"prompt 'p'", 2048, 100}, 8);
  EXPECT_EQ(b.kv_cache, 8ull * 32 * 2 * 32 * 2148 * 128 * 2);  // batch x layers x K,V x heads x positions x dim x bf16
  EXPECT_EQ(b.scores, 8ull * 32 * 2048 * 2148 * 4);            // the prompt's pass, one layer, float32
  EXPECT_EQ(b.logits, 8ull * 32000 * 4);                       // one row per step
  const BatchBytes full = batch_bytes(spec_of("generate"), llama7b(), {"prompt 'p'", 2048, 100}, 8);
  EXPECT_EQ(full.kv_cache, 2 * b.kv_cache);  // float32
  EXPECT_EQ(full.logits, 8ull * 100 * 32000 * 4);  // every step's row kept
}

TEST(InputLimits, AVeryLongPromptIsRefusedWithTheNumbers) {
  const RunSpec spec = spec_of("generate", {"run.max_batch_bytes=64000000000"});
  std::vector<SequenceNeed> seqs = {{"prompt 'short'", 20, 100}, {"prompt 'huge'", 1000000, 100}};
  try {
    check_input_limits(spec, llama7b(), seqs);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), "data.jsonl: prompt 'huge'");
    EXPECT_HAS(e.what(), "(1000000 tokens + 100 new) needs about");
    EXPECT_HAS(e.what(), "more than run.max_batch_bytes allows (59.6 GiB)");
    EXPECT_HAS(e.what(), "lower task.batch_size");
  }
  seqs.pop_back();
  EXPECT_NO_THROW(check_input_limits(spec, llama7b(), seqs));
  // The default limit is derived from this machine's memory: still far below a terabyte.
  EXPECT_GT(max_batch_bytes(spec_of("generate")), 0u);
  EXPECT_LT(max_batch_bytes(spec_of("generate")), 1ull << 40);
}

TEST(InputLimits, RotaryModelsRunPastTheirPositionsLearnedOnesRefuse) {
  ModelDims m = llama7b();
  const std::vector<SequenceNeed> seqs = {{"prompt 'a'", 4000, 200}, {"prompt 'b'", 10, 200}};
  const RunSpec gen = spec_of("generate", {"run.max_batch_bytes=1000000000000"});
  std::string note;
  EXPECT_NO_THROW(note = check_input_limits(gen, m, seqs));  // a warning only
  EXPECT_HAS(note, "1 of 2 prompts (with max_new_tokens) on this rank run past the model's max_position_embeddings = 4096");
  EXPECT_HAS(note, "positions the model was not trained for");
  m.rope_extends = true;  // rope_scaling "dynamic": what it is for
  EXPECT_HAS(check_input_limits(gen, m, seqs), "rope_scaling \"dynamic\" rescales the rotary base");
  EXPECT_EQ(check_input_limits(gen, m, {{"prompt 'b'", 10, 200}}), "");
  m.rope_extends = false;
  m.rotary = false;
  m.max_positions = 512;
  try {
    check_input_limits(spec_of("mlm"), m, {{"feature #3", 600, 0}});
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), "t.toml: task.max_seq_length");
    EXPECT_HAS(e.what(), "feature #3 has 600 tokens but the model's position table (m/config.json) holds 512");
  }
}

}  // namespace
