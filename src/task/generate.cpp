#include "task/generate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "common/errors.hpp"
#include "dist/sharding.hpp"
#include "model/model.hpp"
#include "task/mlm.hpp"

namespace evalrun {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Greedy choice: the first maximum, as torch.argmax.
std::int64_t argmax_row(const float* row, std::int64_t vocab) {
  std::int64_t best = 0;
  for (std::int64_t v = 1; v < vocab; ++v) {
    if (row[v] > row[best]) best = v;
  }
  return best;
}

// `fed`: the token this step's row chose or was forced to.
void keep_step_logits(GenerationResult& out, const float* row, std::int64_t vocab, int keep, std::int64_t fed) {
  if (keep == kKeepFullLogits) {
    out.step_logits.insert(out.step_logits.end(), row, row + vocab);
  } else if (keep == kKeepLogProbs16) {
    out.logprobs16.append(row, vocab, fed);
  } else if (keep > 0) {
    const MaskTopK top = top_k_of_row(row, vocab, keep);
    out.topk_ids.insert(out.topk_ids.end(), top.ids.begin(), top.ids.end());
    out.topk_logits.insert(out.topk_logits.end(), top.logits.begin(), top.logits.end());
  }
}

void check_options(const GenerationOptions& o) {
  if (o.max_new_tokens < 1) throw InputError("generation: max_new_tokens", "must be at least 1");
  if (o.batch_size < 1) throw InputError("generation: batch_size", "must be at least 1");
  if (o.max_prompt_length < 0) throw InputError("generation: max_prompt_length", "must be >= 0");
  if (o.min_pad_length < 0) throw InputError("generation: min_pad_length", "must be >= 0");
  if (o.fixed_prompt_length < 0) throw InputError("generation: fixed_prompt_length", "must be >= 0");
  if (o.keep_logits < kKeepLogProbs16)
    throw InputError("generation: keep_logits", "must be kKeepFullLogits, kKeepLogProbs16, 0 (none) or k > 0 (top-k)");
}

}  // namespace

std::vector<GenerationItem> prepare_generation_items(const std::vector<Prompt>& prompts,
                                                     const DecoderTokenizer& tokenizer,
                                                     const GenerationOptions& options, std::uint64_t first_index) {
  check_options(options);
  std::vector<GenerationItem> items;
  items.reserve(prompts.size());
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    GenerationItem item;
    item.index = first_index + i;
    item.id = prompts[i].id;
    item.prompt_ids = tokenizer.encode(prompts[i].text);
    const auto n = static_cast<std::int64_t>(item.prompt_ids.size());
    if (n == 0) throw InputError("prompt '" + item.id + "'", "tokenizes to no tokens");
    if (options.fixed_prompt_length > 0) {
      if (n > options.fixed_prompt_length) {
        throw InputError("prompt '" + item.id + "'",
                         std::to_string(n) + " tokens, longer than fixed_prompt_length " +
                             std::to_string(options.fixed_prompt_length) +
                             " (prompts are not truncated when fixed_prompt_length is set)");
      }
    } else if (options.max_prompt_length > 0 && n > options.max_prompt_length) {
      item.prompt_ids.resize(static_cast<std::size_t>(options.max_prompt_length));
      item.truncated = true;
    }
    items.push_back(std::move(item));
  }
  return items;
}

std::vector<GenerationResult> run_generation(CausalLM& model, const std::vector<GenerationItem>& items,
                                             const GenerationOptions& options,
                                             const std::vector<std::int64_t>& stop_ids, std::int64_t pad_id,
                                             const BatchDone<GenerationResult>& batch_done) {
  check_options(options);
  const std::int64_t vocab = model.vocab_size();
  std::vector<GenerationResult> results(items.size());
  std::vector<std::int64_t> lengths;
  lengths.reserve(items.size());
  for (const auto& it : items) {
    if (it.prompt_ids.empty()) throw InputError("prompt '" + it.id + "'", "has no tokens");
    for (auto id : it.prompt_ids) {
      if (id < 0 || id >= vocab) {
        throw InputError("prompt '" + it.id + "'",
                         "token id " + std::to_string(id) + " is outside the model's vocabulary (" +
                             std::to_string(vocab) + ")");
      }
    }
    if (it.forced_ids) {
      if (it.forced_ids->empty()) throw InputError("prompt '" + it.id + "'", "forced (reference) token ids are empty");
      for (auto id : *it.forced_ids) {
        if (id < 0 || id >= vocab) {
          throw InputError("prompt '" + it.id + "'",
                           "forced (reference) token id " + std::to_string(id) +
                               " is outside the model's vocabulary (" + std::to_string(vocab) + ")");
        }
      }
    }
    lengths.push_back(static_cast<std::int64_t>(it.prompt_ids.size()));
  }
  auto is_stop = [&](std::int64_t id) {
    return !options.no_early_termination && std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end();
  };
  auto stops_on_text = [&](const std::vector<std::int64_t>& generated) {
    return !options.no_early_termination && options.stop_when && options.stop_when(generated);
  };

  std::vector<float> logits;
  std::size_t done = 0, batch = 0;
  double total_seconds = 0.0;
  for (const auto& members : make_batches(lengths, options.batch_size)) {
    const auto rows = static_cast<std::int64_t>(members.size());
    std::int64_t padded = std::max<std::int64_t>(options.min_pad_length, options.fixed_prompt_length);
    for (std::size_t m : members) padded = std::max(padded, lengths[m]);
    bool needs_pad = false;
    for (std::size_t m : members) needs_pad = needs_pad || lengths[m] < padded;
    if (needs_pad && (pad_id < 0 || pad_id >= vocab)) {
      throw InputError("generation: pad id",
                       pad_id < 0 ? "the tokenizer has neither a pad nor an eos token to pad prompts with"
                                  : "pad id " + std::to_string(pad_id) + " is outside the model's vocabulary");
    }

    // Left-padded prompts: pads at position 0 and masked, real tokens at 0, 1, ...
    std::vector<std::int64_t> ids(static_cast<std::size_t>(rows * padded), pad_id);
    std::vector<std::int64_t> pos(ids.size(), 0);
    std::vector<std::int64_t> prompt_mask(ids.size(), 0);
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto& p = items[members[r]].prompt_ids;
      const std::int64_t off = padded - static_cast<std::int64_t>(p.size());
      for (std::size_t j = 0; j < p.size(); ++j) {
        const std::size_t at = static_cast<std::size_t>(r * padded + off) + j;
        ids[at] = p[j];
        pos[at] = static_cast<std::int64_t>(j);
        prompt_mask[at] = 1;
      }
    }

    // Steps of each row: max_new_tokens, or exactly its forced ids; the batch runs the longest.
    std::vector<std::int64_t> row_steps(static_cast<std::size_t>(rows));
    std::int64_t max_steps = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto& forced = items[members[r]].forced_ids;
      row_steps[r] = forced ? static_cast<std::int64_t>(forced->size()) : options.max_new_tokens;
      max_steps = std::max(max_steps, row_steps[r]);
    }
    auto cache = model.new_cache(rows, padded + max_steps);
    std::vector<std::vector<std::int64_t>> generated(static_cast<std::size_t>(rows));
    std::vector<bool> finished(static_cast<std::size_t>(rows), false);
    std::vector<double> step_seconds;
    // key_mask grows by one column per step: [rows, padded + step].
    std::vector<std::int64_t> key_mask = prompt_mask;
    std::int64_t key_len = padded;

    for (std::int64_t step = 0; step < max_steps; ++step) {
      auto t0 = std::chrono::steady_clock::now();
      if (step == 0) {
        model.forward(ids.data(), pos.data(), key_mask.data(), rows, padded, *cache, false, logits);
      } else {
        std::vector<std::int64_t> next(static_cast<std::size_t>(rows)), next_pos(static_cast<std::size_t>(rows));
        std::vector<std::int64_t> grown(static_cast<std::size_t>(rows * (key_len + 1)));
        for (std::int64_t r = 0; r < rows; ++r) {
          // A finished row is fed its own last token again; its outputs are discarded.
          next[r] = generated[r].back();
          next_pos[r] = lengths[members[r]] + step - 1;
          std::copy_n(key_mask.begin() + r * key_len, key_len, grown.begin() + r * (key_len + 1));
          grown[static_cast<std::size_t>(r * (key_len + 1) + key_len)] = 1;
        }
        key_mask.swap(grown);
        ++key_len;
        model.forward(next.data(), next_pos.data(), key_mask.data(), rows, 1, *cache, false, logits);
      }
      std::vector<std::int64_t> chosen(static_cast<std::size_t>(rows));
      for (std::int64_t r = 0; r < rows; ++r) chosen[r] = argmax_row(logits.data() + r * vocab, vocab);
      step_seconds.push_back(seconds_since(t0));

      bool all_done = true;
      for (std::int64_t r = 0; r < rows; ++r) {
        if (finished[r]) {
          generated[r].push_back(generated[r].back());  // keeps the fed token defined; not reported
          continue;
        }
        const auto& forced = items[members[r]].forced_ids;
        // What is fed back next step: the reference's token when forced, else the model's choice.
        const std::int64_t fed = forced ? (*forced)[static_cast<std::size_t>(step)] : chosen[r];
        generated[r].push_back(fed);
        auto& out = results[members[r]];
        out.generated_ids.push_back(fed);
        out.own_ids.push_back(chosen[r]);
        keep_step_logits(out, logits.data() + r * vocab, vocab, options.keep_logits, fed);
        const bool last = step + 1 == row_steps[r];
        if (forced) {
          // No early stop: the reference's length decides; a stop id at its end is reported.
          if (last) {
            finished[r] = true;
            out.stopped = is_stop(fed);
          }
        } else if (is_stop(fed) || stops_on_text(out.generated_ids)) {
          finished[r] = true;
          out.stopped = true;
        } else if (last) {
          finished[r] = true;
        }
        all_done = all_done && finished[r];
      }
      if (all_done) break;
    }

    for (std::int64_t r = 0; r < rows; ++r) {
      auto& out = results[members[r]];
      out.index = items[members[r]].index;
      out.vocab = vocab;
      out.prefill_seconds = step_seconds.front();
      out.step_seconds.assign(step_seconds.begin(),
                              step_seconds.begin() + static_cast<std::ptrdiff_t>(out.generated_ids.size()));
      out.batch_rows = rows;
      out.padded_length = padded;
    }
    double batch_seconds = 0.0;
    for (double s : step_seconds) batch_seconds += s;
    total_seconds += batch_seconds;
    std::int64_t prompt_tokens = 0;
    for (std::size_t m : members) prompt_tokens += lengths[m];
    // The prompt's shape (padding is left padding of the prompts); the steps follow it one token each.
    log_batch("generate", batch++, rows, padded, prompt_tokens, batch_seconds);
    log().debug("generate batch {}: prefill {:.3f} s, {} decode step(s)", batch - 1, step_seconds.front(),
                step_seconds.size() - 1);
    if (batch_done) batch_done(results, members);
    done += members.size();
    if (options.progress) options.progress(done, items.size(), total_seconds);
  }
  return results;
}

LatencySummary summarize_latencies(const std::vector<double>& t) {
  LatencySummary s;
  if (t.empty()) return s;
  s.first_token = t[0];
  double sum = 0.0;
  for (double x : t) sum += x;
  s.mean_all = sum / static_cast<double>(t.size());
  if (t.size() < 2) return s;
  const std::size_t n = t.size() - 1;
  double next_sum = 0.0;
  s.min_step = s.max_step = 1;
  for (std::size_t i = 1; i < t.size(); ++i) {
    next_sum += t[i];
    if (t[i] < t[static_cast<std::size_t>(s.min_step)]) s.min_step = static_cast<int>(i);
    if (t[i] > t[static_cast<std::size_t>(s.max_step)]) s.max_step = static_cast<int>(i);
  }
  s.mean_next = next_sum / static_cast<double>(n);
  s.min_next = t[static_cast<std::size_t>(s.min_step)];
  s.max_next = t[static_cast<std::size_t>(s.max_step)];
  double var = 0.0;
  for (std::size_t i = 1; i < t.size(); ++i) var += (t[i] - s.mean_next) * (t[i] - s.mean_next);
  s.std_next = std::sqrt(var / static_cast<double>(n));
  return s;
}

}  // namespace evalrun
