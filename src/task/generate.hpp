// Greedy generation with a decoder (Llama-family) model on one rank: prompts -> work items ->
// batched greedy decoding with a key/value cache, per-step logits and per-token timing, following
// the seed's inference.py (fms generate) semantics.
//
// Batches are formed from the items sorted by prompt length, longest first (make_batches), and LEFT
// padded: pad tokens sit before the prompt, get RoPE position 0 and key_mask 0, the prompt's own
// tokens get positions 0, 1, ... So tokens do not depend on batch size, padding or which rank ran an
// item, and logits only by float rounding (tests hold them within 1e-5).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dist/serialize.hpp"
#include "io/logprobs16.hpp"
#include "io/prompts.hpp"
#include "task/batch_done.hpp"
#include "tokenizer/decoder_tokenizer.hpp"

namespace evalrun {

class CausalLM;

struct GenerationOptions {
  int max_new_tokens = 100;
  // 0: no truncation. n > 0: a prompt longer than n tokens keeps its FIRST n tokens (BOS included).
  // That is the seed's truncate_prompts_to_max_length (`prompt[:max_allowed_length]` on the token
  // ids); note it cuts the end of the prompt, the part the model would continue. Ignored when
  // fixed_prompt_length is set (as in the seed).
  int max_prompt_length = 0;
  // Each batch is left-padded to max(its longest prompt, min_pad_length) (the seed's pad_input_ids).
  int min_pad_length = 0;
  // > 0: every prompt is padded to exactly this length; a longer prompt is an InputError naming its
  // id (the seed refuses to truncate then).
  int fixed_prompt_length = 0;
  // false: a sequence ends at its first stop id (the stop token kept as its last token) and the run
  // ends when every sequence of the batch has ended; true: every sequence gets max_new_tokens.
  bool no_early_termination = false;
  // Stop strings (generate_until's `until`, whose text needs the tokenizer): called after each token a
  // free row generates, with the row's new ids so far; true ends the row there, `stopped` set, as a stop
  // id does. A function of the row's own ids only, so rows stop where they would alone. Unset = none.
  std::function<bool(const std::vector<std::int64_t>& generated)> stop_when;
  int batch_size = 1;
  // Logits kept per generated token: 0 none, kKeepFullLogits the full vocabulary row, k > 0 the k
  // largest (values + ids, ties: lower id first), kKeepLogProbs16 the row's 16-bit log-probabilities.
  int keep_logits = 0;
  // Called after each batch with (items done, items total, seconds spent in the model so far).
  std::function<void(std::size_t, std::size_t, double)> progress;
};

struct GenerationItem {
  std::uint64_t index = 0;              // global index (position in the prompt list)
  std::string id;                       // prompt id, for messages and results
  std::vector<std::int64_t> prompt_ids; // tokenized (BOS per the tokenizer), truncated, NOT padded
  bool truncated = false;               // max_prompt_length cut it
  // Teacher forcing ([validation] golden): a reference run's generated ids. When set, step t feeds
  // forced_ids[t] instead of the model's argmax, so the logits stay comparable with the reference's at
  // every position even after the greedy choices would have diverged. The row runs exactly
  // forced_ids->size() steps: max_new_tokens does not apply to it and it never stops early at a stop
  // id (the reference decided its length). Must not be empty.
  std::optional<std::vector<std::int64_t>> forced_ids;

  void write(ByteWriter& w) const {
    w.put<std::uint64_t>(index);
    w.put_string(id);
    w.put_vector(prompt_ids);
    w.put<std::uint8_t>(truncated ? 1 : 0);
    w.put<std::uint8_t>(forced_ids ? 1 : 0);
    if (forced_ids) w.put_vector(*forced_ids);
  }
  static GenerationItem read(ByteReader& r) {
    GenerationItem it;
    it.index = r.get<std::uint64_t>();
    it.id = r.get_string();
    it.prompt_ids = r.get_vector<std::int64_t>();
    it.truncated = r.get<std::uint8_t>() != 0;
    if (r.get<std::uint8_t>() != 0) it.forced_ids = r.get_vector<std::int64_t>();
    return it;
  }
};

// One rank's generate work: the tokenizer's stop and pad ids (ranks do not load the tokenizer) and
// its prompts.
struct GenerationShard {
  std::vector<std::int64_t> stop_ids;
  std::int64_t pad_id = 0;
  std::vector<GenerationItem> items;

  void write(ByteWriter& w) const {
    w.put_vector(stop_ids);
    w.put<std::int64_t>(pad_id);
    put_records(w, items);
  }
  static GenerationShard read(ByteReader& r) {
    GenerationShard s;
    s.stop_ids = r.get_vector<std::int64_t>();
    s.pad_id = r.get<std::int64_t>();
    s.items = get_records<GenerationItem>(r);
    return s;
  }
};

// Tokenizes the prompts (DecoderTokenizer::encode) and applies max_prompt_length / checks
// fixed_prompt_length. Item i gets index first_index + i. A prompt that tokenizes to nothing is an
// InputError naming its id.
std::vector<GenerationItem> prepare_generation_items(const std::vector<Prompt>& prompts,
                                                     const DecoderTokenizer& tokenizer,
                                                     const GenerationOptions& options,
                                                     std::uint64_t first_index = 0);

struct GenerationResult {
  std::uint64_t index = 0;
  // New tokens only, i.e. what was fed back: the argmax, or forced_ids when forced. Ends with the stop
  // id when stopped.
  std::vector<std::int64_t> generated_ids;
  // The model's own greedy choice (argmax of the kept logits) at each step, one per generated_ids
  // entry; equal to generated_ids unless the row was forced.
  std::vector<std::int64_t> own_ids;
  // Ended at a stop id (early termination on). A forced row: its last fed token is a stop id (the
  // reference stopped there).
  bool stopped = false;
  std::int64_t vocab = 0;
  std::vector<float> step_logits;           // keep_logits -1: [generated_ids.size(), vocab]
  std::vector<std::int64_t> topk_ids;       // keep_logits k > 0: [generated_ids.size(), k]
  std::vector<float> topk_logits;           //   same layout
  LogProbRows16 logprobs16;                 // kKeepLogProbs16: a row per generated token
  // Timing of the item's batch (every row of a batch shares it):
  double prefill_seconds = 0.0;             // the forward pass over the padded prompts
  // One entry per generated token: [0] = prefill_seconds (time to the first token), [s] = the decode
  // step that produced token s. A forward pass plus the argmax; keeping logits is not counted.
  std::vector<double> step_seconds;
  std::int64_t batch_rows = 0;              // rows of its batch
  std::int64_t padded_length = 0;           // prompt length of its batch after padding

  // The record a rank journals and sends to rank 0; the index travels beside it, not in it.
  void write(ByteWriter& w) const {
    w.put_vector(generated_ids);
    w.put_vector(own_ids);
    w.put<std::uint8_t>(stopped ? 1 : 0);
    w.put<std::int64_t>(vocab);
    w.put_vector(step_logits);
    w.put_vector(topk_ids);
    w.put_vector(topk_logits);
    logprobs16.put(w);
    w.put<double>(prefill_seconds);
    w.put_vector(step_seconds);
    w.put<std::int64_t>(batch_rows);
    w.put<std::int64_t>(padded_length);
  }
  static GenerationResult read(ByteReader& r) {
    GenerationResult g;
    g.generated_ids = r.get_vector<std::int64_t>();
    g.own_ids = r.get_vector<std::int64_t>();
    g.stopped = r.get<std::uint8_t>() != 0;
    g.vocab = r.get<std::int64_t>();
    g.step_logits = r.get_vector<float>();
    g.topk_ids = r.get_vector<std::int64_t>();
    g.topk_logits = r.get_vector<float>();
    g.logprobs16 = LogProbRows16::get(r);
    g.prefill_seconds = r.get<double>();
    g.step_seconds = r.get_vector<double>();
    g.batch_rows = r.get<std::int64_t>();
    g.padded_length = r.get<std::int64_t>();
    return g;
  }
};

// Runs the items in batches; results come back in the order of `items`. stop_ids: the tokenizer's
// stop_ids() (empty = never stop early). pad_id: the id written into pad positions (the tokenizer's
// pad_id(); masked out, so any valid id gives the same result); it must be a valid id whenever a
// batch needs padding (InputError otherwise). Finished rows of a batch keep being fed (their
// outputs discarded) until the whole batch is done. Forced items (forced_ids set) may share batches
// with free ones; each row runs its own number of steps. Empty or out-of-vocabulary forced ids are an
// InputError naming the prompt.
std::vector<GenerationResult> run_generation(CausalLM& model, const std::vector<GenerationItem>& items,
                                             const GenerationOptions& options,
                                             const std::vector<std::int64_t>& stop_ids, std::int64_t pad_id,
                                             const BatchDone<GenerationResult>& batch_done = {});

// The seed's per-token latency report over one step_seconds list. "next" values leave out the first
// token (the prefill); with fewer than two tokens they are 0 and the steps -1.
struct LatencySummary {
  double first_token = 0.0;     // step_seconds[0]
  double mean_all = 0.0;        // mean over all tokens, first included
  double mean_next = 0.0;       // mean over tokens 1..n-1
  double min_next = 0.0, max_next = 0.0;
  int min_step = -1, max_step = -1;  // index into step_seconds (the seed prints it + 1 as "token #")
  double std_next = 0.0;        // population standard deviation (numpy's np.std) over tokens 1..n-1
};
LatencySummary summarize_latencies(const std::vector<double>& step_seconds);

}  // namespace evalrun
