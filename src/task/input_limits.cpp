#include "task/input_limits.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "common/errors.hpp"
#include "common/logging.hpp"
#include "task/encoder_runner.hpp"
#include "task/generate.hpp"
#include "task/perplexity.hpp"

namespace evalrun {
namespace {

std::uint64_t product(std::initializer_list<std::int64_t> factors) {
  // In double: a hostile length must give a huge number, not a wrapped-around small one.
  double p = 1;
  for (auto f : factors) p *= static_cast<double>(std::max<std::int64_t>(f, 0));
  constexpr double kMax = static_cast<double>(std::numeric_limits<std::uint64_t>::max());
  return p >= kMax ? std::numeric_limits<std::uint64_t>::max() : static_cast<std::uint64_t>(p);
}

std::int64_t value_bytes(DType d) { return d == DType::fp32 ? 4 : 2; }

std::string gib(std::uint64_t bytes) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.3g GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

std::int64_t ranks_on_node() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"}) {
    if (const char* v = std::getenv(var); v != nullptr && std::atoi(v) > 0) return std::atoi(v);
  }
  return 1;
}

std::string dataset_of(const RunSpec& spec) {
  if (!spec.task.dataset.empty()) return spec.task.dataset;
  return spec.task.prompt_set.empty() ? spec.config_path : "task.prompt_set " + spec.task.prompt_set;
}

}  // namespace

BatchBytes batch_bytes(const RunSpec& spec, const ModelDims& m, const SequenceNeed& s, std::int64_t batch) {
  BatchBytes b;
  const std::int64_t len = s.tokens + s.new_tokens;  // positions held at the end
  switch (spec.task.kind) {
    case TaskKind::generate:
    case TaskKind::generate_until:  // generate_until keeps no logits: one row per step
      b.kv_cache = product({batch, m.layers, 2, m.kv_heads, len, m.head_dim, value_bytes(spec.model.dtype)});
      b.scores = product({batch, m.heads, s.tokens, len, 4});  // the prompt's pass, one layer, float32
      // full logits: every step's row is kept; otherwise one row per step at a time
      b.logits = product({batch, spec.output.logits == LogitsMode::full ? std::max<std::int64_t>(s.new_tokens, 1) : 1,
                          m.vocab, 4});
      break;
    case TaskKind::multiple_choice:  // as loglikelihood, plus the shared context's KV cache
      b.kv_cache = product({batch, m.layers, 2, m.kv_heads, len, m.head_dim, value_bytes(spec.model.dtype)});
      [[fallthrough]];
    case TaskKind::perplexity:
    case TaskKind::loglikelihood:  // every position's logits row is made (the last ones are scored)
      b.scores = product({batch, m.heads, len, len, 4});
      b.logits = product({batch, len, m.vocab, 4});  // every position is scored
      break;
    case TaskKind::qa:
      b.scores = product({batch, m.heads, len, len, 4});
      b.logits = product({batch, len, 2, 4});
      break;
    case TaskKind::mlm:
      b.scores = product({batch, m.heads, len, len, 4});
      b.logits = product({batch, len, m.vocab, 4});  // at most every position is a mask
      break;
  }
  return b;
}

std::uint64_t max_batch_bytes(const RunSpec& spec) {
  if (spec.run.max_batch_bytes > 0) return static_cast<std::uint64_t>(spec.run.max_batch_bytes);
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return std::numeric_limits<std::uint64_t>::max();
  return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) / 2 /
         static_cast<std::uint64_t>(ranks_on_node());
}

std::string check_input_limits(const RunSpec& spec, const ModelDims& m, const std::vector<SequenceNeed>& seqs) {
  if (seqs.empty()) return {};
  // Positions.
  std::size_t past = 0;
  const SequenceNeed* longest = &seqs.front();
  for (const auto& s : seqs) {
    if (s.tokens + s.new_tokens > longest->tokens + longest->new_tokens) longest = &s;
    if (s.tokens + s.new_tokens <= m.max_positions) continue;
    if (!m.rotary) {
      const char* key = spec.task.kind == TaskKind::generate ? "task.max_prompt_length" : "task.max_seq_length";
      throw InputError(spec.config_path + ": " + key,
                       s.name + " has " + std::to_string(s.tokens) + " tokens but the model's position table (" +
                           m.config_json + ") holds " + std::to_string(m.max_positions) + ": lower " + key);
    }
    ++past;
  }
  std::string note;
  if (past > 0) {
    note = std::to_string(past) + " of " + std::to_string(seqs.size()) + " " +
           (spec.task.kind == TaskKind::generate ? "prompts (with max_new_tokens)" : "windows") +
           " on this rank run past the model's max_position_embeddings = " + std::to_string(m.max_positions) + " (" +
           m.config_json + ": " + longest->name + ", " + std::to_string(longest->tokens) + " + " +
           std::to_string(longest->new_tokens) + " tokens): ";
    if (m.rope_extends) {
      note += "rope_scaling \"dynamic\" rescales the rotary base for them, as transformers does";
      log().info("{}", note);
    } else {
      note += "rotary positions have no table, so they run as in transformers (no error), on positions the model "
              "was not trained for";
      log().warn("{}", note);
    }
  }
  // Memory: the batch holding the longest sequence, every sequence of it padded to that length.
  const std::int64_t batch = std::min<std::int64_t>(spec.task.batch_size, static_cast<std::int64_t>(seqs.size()));
  const BatchBytes need = batch_bytes(spec, m, *longest, batch);
  const std::uint64_t limit = max_batch_bytes(spec);
  if (need.total() > limit) {
    throw InputError(dataset_of(spec) + ": " + longest->name,
                     "a batch of " + std::to_string(batch) + " sequences of its length (" +
                         std::to_string(longest->tokens) + " tokens" +
                         (longest->new_tokens > 0 ? " + " + std::to_string(longest->new_tokens) + " new" : "") +
                         ") needs about " + gib(need.total()) + " (KV cache " + gib(need.kv_cache) +
                         ", attention scores " + gib(need.scores) + ", logits " + gib(need.logits) +
                         "), more than run.max_batch_bytes allows (" + gib(limit) +
                         (spec.run.max_batch_bytes > 0 ? "" : ": half this node's memory per rank") +
                         "): shorten it, lower task.batch_size or raise run.max_batch_bytes");
  }
  return note;
}

void check_decoder_inputs(const RunSpec& spec, const ModelDims& m, const std::vector<GenerationItem>& prompts,
                          const std::vector<PerplexityWindow>& windows) {
  std::vector<SequenceNeed> seqs;
  if (spec.task.kind == TaskKind::generate) {
    for (const auto& p : prompts) {
      // left padding to min_pad_length / fixed_prompt_length happens in the batch
      const auto tokens = std::max<std::int64_t>({static_cast<std::int64_t>(p.prompt_ids.size()), spec.task.min_pad_length,
                                                  spec.task.fixed_prompt_length});
      const auto steps = p.forced_ids ? static_cast<std::int64_t>(p.forced_ids->size()) : spec.task.max_new_tokens;
      seqs.push_back({"prompt '" + p.id + "'", tokens, steps});
    }
  } else {
    for (const auto& w : windows) seqs.push_back({"window #" + std::to_string(w.index), w.end - w.begin, 0});
  }
  check_input_limits(spec, m, seqs);
}

void check_encoder_inputs(const RunSpec& spec, const ModelDims& m, const std::vector<EncoderItem>& features) {
  std::vector<SequenceNeed> seqs;
  for (const auto& f : features) {
    seqs.push_back({"feature #" + std::to_string(f.index), static_cast<std::int64_t>(f.input_ids.size()), 0});
  }
  check_input_limits(spec, m, seqs);
}

}  // namespace evalrun
