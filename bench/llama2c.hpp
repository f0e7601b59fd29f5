// llama2.c's plain C `run.c` on the same weights as evalrun, the decode-speed peer of the decode
// benchmark (issue 19): the Hugging Face Llama checkpoint exported to llama2.c's float32 format, a
// tokenizer.bin of placeholder pieces (run.c needs one; the benchmark's prompt is one piece per
// character), run.c built from the given checkout with `cc -Ofast -march=native -fopenmp` and run
// greedily (-t 0) with OMP_NUM_THREADS = threads. run.c is read from the checkout, never copied here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace evalrun::bench {

struct Llama2cRun {
  double tokens_per_s = 0;               // run.c's own "achieved tok/s" (every position after the first)
  std::vector<std::int64_t> prompt;      // the token ids run.c fed (BOS, its dummy-prefix space, the text)
  std::vector<std::int64_t> generated;   // the ids it chose, parsed back from its output
};

// Writes work_dir/model.bin and work_dir/tokenizer.bin from the checkpoint in hf_dir (LlamaForCausalLM,
// float32), builds work_dir/run from checkout/run.c and runs prompt_tokens - 2 characters of prompt
// plus new_tokens greedy steps. Throws std::runtime_error naming the step that failed.
Llama2cRun run_llama2c(const std::string& checkout, const std::string& hf_dir, const std::string& work_dir,
                       int threads, std::int64_t prompt_tokens, std::int64_t new_tokens);

}  // namespace evalrun::bench
