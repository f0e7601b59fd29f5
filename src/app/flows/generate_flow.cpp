// task.kind = "generate": greedy generation with a Llama-family decoder (optionally teacher-forced
// with a reference run's tokens, [validation] golden). rank 0 tokenizes the prompts; ranks generate
// with per-step logits and timing; rank 0 decodes the tokens and writes the result file.
#include <algorithm>
#include <functional>
#include <numeric>

#include "app/flows/decoder_flow.hpp"
#include "app/flows/flows.hpp"
#include "common/errors.hpp"
#include "common/logging.hpp"
#include "io/hdf5_file.hpp"
#include "io/prompts.hpp"
#include "task/generate.hpp"
#include "task/input_limits.hpp"
#include "task/perplexity.hpp"

namespace evalrun {
namespace {

std::string join_stop_ids(const std::vector<std::int64_t>& ids) {
  std::string s;
  for (auto id : ids) {
    if (!s.empty()) s.push_back(' ');
    s.append(std::to_string(id));
  }
  return s;
}

constexpr const char* kStepLogits = "/logits/step_logits";

// [validation] golden: the reference run's /generated/ids become each item's forced_ids. The file must
// be a generate result over the same prompts, in the same order, tokenized to the same ids (so the
// candidate is fed exactly what the reference saw); anything else is an InputError naming the sample.
void attach_golden_tokens(const std::string& path, std::vector<GenerationItem>& items) {
  H5Reader g(path);
  if (!g.has_attr("/", "task") || g.attr_string("/", "task") != "generate") {
    throw InputError(path, "validation.golden must be an evalrun generate result file (root attribute task = "
                           "\"generate\")" +
                               (g.has_attr("/", "task") ? ", this one is \"" + g.attr_string("/", "task") + "\"" : ""));
  }
  const auto ids = g.read_strings("/samples/id");
  const auto prompt_ids = g.read_ragged_i64("/samples/prompt_ids");
  const auto generated = g.read_ragged_i64("/generated/ids");
  if (prompt_ids.size() != ids.size() || generated.size() != ids.size()) {
    throw InputError(path, "/samples/id, /samples/prompt_ids and /generated/ids have different lengths");
  }
  for (std::size_t i = 0; i < items.size(); ++i) {
    const std::string name = "prompt '" + items[i].id + "' (#" + std::to_string(i) + ")";
    if (i >= ids.size()) {
      throw InputError(path, name + " is not in the golden file (it has " + std::to_string(ids.size()) +
                                 " samples, this run " + std::to_string(items.size()) + ")");
    }
    if (ids[i] != items[i].id) {
      throw InputError(path, "sample #" + std::to_string(i) + " is '" + ids[i] + "' but this run's " + name +
                                 " differs: the golden run must use the same prompts in the same order");
    }
    if (prompt_ids[i] != items[i].prompt_ids) {
      throw InputError(path, "sample '" + ids[i] + "': its prompt token ids (" + std::to_string(prompt_ids[i].size()) +
                                 " tokens) differ from this run's (" + std::to_string(items[i].prompt_ids.size()) +
                                 " tokens): another prompt text, tokenizer or max_prompt_length");
    }
    if (generated[i].empty()) throw InputError(path, "sample '" + ids[i] + "' has no generated tokens to feed");
    items[i].forced_ids = generated[i];
  }
  if (ids.size() > items.size()) {
    throw InputError(path, "sample '" + ids[items.size()] + "' (#" + std::to_string(items.size()) +
                               ") is not among this run's prompts (the golden file has " + std::to_string(ids.size()) +
                               " samples, this run " + std::to_string(items.size()) + ")");
  }
}

GenerationOptions prompt_options(const RunSpec& spec) {
  GenerationOptions o;
  o.max_new_tokens = spec.task.max_new_tokens;
  o.max_prompt_length = spec.task.max_prompt_length;
  o.min_pad_length = spec.task.min_pad_length;
  o.fixed_prompt_length = spec.task.fixed_prompt_length;
  o.batch_size = spec.task.batch_size;
  return o;
}

class GenerateFlow : public DecoderFlow {
 public:
  GenerateFlow() : DecoderFlow(generate_calibration) {}

  std::string run(const RunSpec& spec, bool report_progress, const ItemSink& sink) override {
    GenerationOptions o = generation_options(spec);
    Progress progress("prompts");
    if (report_progress) o.progress = std::ref(progress);
    auto results = run_generation(*model_, shard_.items, o, shard_.stop_ids, shard_.pad_id,
                                  keep_and_journal<GenerationResult>(sink, rows_, [this](GenerationResult& r) {
                                    keep_rows(r.index, r);
                                  }));
    model_.reset();
    return records_buffer_of(results);
  }

  // Without early termination every prompt generates its most tokens (max_new_tokens, or its golden
  // tokens), a row each: known before the run.
  RowsPlan plan_rows(const RunSpec& spec) const override {
    if (!rows_known_) return {};
    return plan_of(spec, model_->vocab_size(), kStepLogits, {max_steps_.begin(), max_steps_.end()});
  }

  void check_record(std::uint64_t index, const std::string& payload) const override {
    const auto g = from_bytes<GenerationResult>(payload);
    const std::size_t n = g.generated_ids.size();
    if (n > max_steps_[index]) {
      throw std::runtime_error(std::to_string(n) + " generated tokens where the prompt runs at most " +
                               std::to_string(max_steps_[index]) + " steps");
    }
    if (g.own_ids.size() != n || g.step_seconds.size() != n) {
      throw std::runtime_error("generated tokens, chosen tokens and step times differ in number");
    }
    if (!g.step_logits.empty() && g.step_logits.size() != n * static_cast<std::size_t>(std::max<std::int64_t>(g.vocab, 0))) {
      throw std::runtime_error("the logits are not one row of the vocabulary per generated token");
    }
    if (g.topk_ids.size() != g.topk_logits.size()) throw std::runtime_error("top-k ids and logits differ in number");
    if (g.logprobs16.rows() != 0 && (g.logprobs16.rows() != n || !g.logprobs16.consistent(g.vocab, !rows_known_)))
      throw std::runtime_error("the 16-bit log-probabilities are not one row of the vocabulary per generated token");
  }

  FinishedFile finish(const RunSpec& spec, const std::vector<std::string>& gathered, RunTimes& times,
                      Provenance prov) override {
    const std::size_t n = prompts_.size();
    std::vector<GenerationResult> res = read_gathered_records<GenerationResult>(gathered, n, "prompt");
    for (std::size_t i = 0; i < n; ++i) keep_rows(i, res[i]);  // a journaled record's rows: rank 0 writes them

    std::vector<std::string> ids, texts, generated_text;
    std::vector<std::vector<std::int64_t>> generated, own;
    std::vector<std::int64_t> stopped, n_generated;
    std::vector<double> prefill, first, mean_all, mean_next, min_next, max_next, std_next, item_seconds;
    std::vector<std::int64_t> min_step, max_step;
    std::vector<std::vector<double>> step_seconds;
    LogProbRows16 logprobs16;
    std::size_t total_new = 0, total_prompt = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const auto& g = res[i];
      ids.push_back(prompts_[i].id);
      texts.push_back(prompts_[i].text);
      generated.push_back(g.generated_ids);
      own.push_back(g.own_ids);
      generated_text.push_back(tokenizer_->decode(g.generated_ids, /*skip_special_tokens=*/true));
      stopped.push_back(g.stopped ? 1 : 0);
      n_generated.push_back(static_cast<std::int64_t>(g.generated_ids.size()));
      total_new += g.generated_ids.size();
      total_prompt += prompt_ids_[i].size();
      const LatencySummary s = summarize_latencies(g.step_seconds);
      prefill.push_back(g.prefill_seconds);
      first.push_back(s.first_token);
      mean_all.push_back(s.mean_all);
      mean_next.push_back(s.mean_next);
      min_next.push_back(s.min_next);
      max_next.push_back(s.max_next);
      std_next.push_back(s.std_next);
      min_step.push_back(s.min_step);
      max_step.push_back(s.max_step);
      step_seconds.push_back(g.step_seconds);
      item_seconds.push_back(std::accumulate(g.step_seconds.begin(), g.step_seconds.end(), 0.0) /
                             static_cast<double>(std::max<std::int64_t>(1, g.batch_rows)));
      logprobs16.append(g.logprobs16);
    }
    for (double s : item_seconds) times.model_total += s;

    H5Writer out = open_result(spec);
    prov.end_time = utc_now_iso8601();
    write_provenance(out, spec, prov);
    write_sample_index(out, ids);
    out.set_attr("/", "stop_token_ids", join_stop_ids(tokenizer_->stop_ids()));
    out.set_attr("/", "pad_token_id", tokenizer_->pad_id());
    out.write_strings("/samples/prompt", texts);
    out.write_ragged("/samples/prompt_ids", prompt_ids_);
    out.write("/samples/prompt_truncated", truncated_);
    out.write_ragged("/generated/ids", generated);
    out.write_strings("/generated/text", generated_text);
    out.write("/generated/stopped", stopped);
    if (!spec.validation.golden.empty()) {
      // /generated/ids holds the golden tokens that were fed; own_ids what this model would have chosen.
      out.write_ragged("/generated/own_ids", own);
      out.set_attr("/", "golden", spec.validation.golden);
      out.set_attr("/", "teacher_forced", static_cast<std::int64_t>(1));
    }
    const std::int64_t vocab = model_vocab(res);
    const std::vector<std::uint64_t> rows_per_prompt(n_generated.begin(), n_generated.end());
    RowsLayout layout;
    if (spec.output.logits == LogitsMode::logprobs16) logprobs16.write(out);
    for (const auto& d : row_datasets(spec, vocab, kStepLogits)) lay_out_rows(layout, out, d.path, d.type, d.cols, rows_per_prompt);
    if (spec.output.logits != LogitsMode::none) {
      // rows of sample i are [step_offsets[i], step_offsets[i+1]) in the logits datasets
      std::vector<std::uint64_t> offsets{0};
      for (auto c : n_generated) offsets.push_back(offsets.back() + static_cast<std::uint64_t>(c));
      out.write("/logits/step_offsets", offsets);
    }
    out.create_group("/metrics");
    out.set_attr("/metrics", "n_prompts", static_cast<std::int64_t>(n));
    out.set_attr("/metrics", "prompt_tokens", static_cast<std::int64_t>(total_prompt));
    out.set_attr("/metrics", "generated_tokens", static_cast<std::int64_t>(total_new));
    out.set_attr("/metrics", "stopped_at_eos", static_cast<std::int64_t>(std::count(stopped.begin(), stopped.end(), 1)));
    out.write("/timing/prefill_seconds", prefill);
    out.write("/timing/first_token_seconds", first);
    out.write("/timing/mean_token_seconds", mean_all);
    out.write("/timing/mean_next_token_seconds", mean_next);
    out.write("/timing/min_next_token_seconds", min_next);
    out.write("/timing/max_next_token_seconds", max_next);
    out.write("/timing/min_next_token_step", min_step);
    out.write("/timing/max_next_token_step", max_step);
    out.write("/timing/std_next_token_seconds", std_next);
    std::vector<std::vector<float>> steps_f;
    for (const auto& v : step_seconds) steps_f.emplace_back(v.begin(), v.end());
    out.write_ragged("/timing/step_seconds", steps_f);
    write_timing(out, times, item_seconds, n, total_new, n);
    log().info("generate: {} prompts, {} new tokens ({} stopped at EOS)", n, total_new,
               std::count(stopped.begin(), stopped.end(), 1));
    return {std::move(out), std::move(layout)};
  }

 protected:
  PreparedWork prepare_task(const RunSpec& spec, int ranks, const std::set<std::uint64_t>& skip,
                                std::string& everything) override {
    prompts_ = spec.task.prompt_set.empty() ? read_prompts(spec.task.dataset) : builtin_prompts(spec.task.prompt_set);
    if (spec.task.max_samples > 0 && static_cast<std::size_t>(spec.task.max_samples) < prompts_.size()) {
      prompts_.resize(static_cast<std::size_t>(spec.task.max_samples));
    }
    auto items = prepare_generation_items(prompts_, *tokenizer_, generation_options(spec));
    if (!spec.validation.golden.empty()) {
      attach_golden_tokens(spec.validation.golden, items);
      log().info("generate: teacher forcing the generated tokens of {}", spec.validation.golden);
    }
    rows_known_ = spec.task.no_early_termination;
    prompt_ids_.clear();
    truncated_.clear();
    max_steps_.clear();
    for (const auto& it : items) {
      prompt_ids_.push_back(it.prompt_ids);
      truncated_.push_back(it.truncated ? 1 : 0);
      max_steps_.push_back(it.forced_ids ? it.forced_ids->size() : static_cast<std::size_t>(spec.task.max_new_tokens));
    }
    // A shard: the tokenizer's stop and pad ids and the prompts at `positions`.
    auto serialize = [&](const std::vector<std::size_t>& positions) {
      GenerationShard shard{tokenizer_->stop_ids(), tokenizer_->pad_id(), {}};
      for (std::size_t i : positions) shard.items.push_back(items[i]);
      return to_bytes(shard);
    };
    std::vector<std::size_t> all(items.size());
    std::vector<std::int64_t> cost;  // tokens a prompt feeds: its own and those generated
    for (std::size_t i = 0; i < items.size(); ++i) {
      all[i] = i;
      const auto& it = items[i];
      const auto steps = it.forced_ids ? static_cast<std::int64_t>(it.forced_ids->size()) : spec.task.max_new_tokens;
      cost.push_back(static_cast<std::int64_t>(it.prompt_ids.size()) + steps);
    }
    everything = serialize(all);
    PreparedWork w;
    for (const auto& positions : plan_shards(items, cost, skip, ranks, "prompts")) {
      w.shards.push_back(serialize(positions));
    }
    w.samples = w.items = items.size();
    log().info("generate: {} prompts, stop ids [{}], pad id {}", items.size(), join_stop_ids(tokenizer_->stop_ids()),
               tokenizer_->pad_id());
    return w;
  }

  std::size_t load_task(const RunSpec& spec, const std::string& shard, const std::string&, std::int64_t vocab) override {
    shard_ = from_bytes<GenerationShard>(shard);
    for (const auto& it : shard_.items) {
      check_ids_in_vocab(it.prompt_ids, vocab, spec.model.path, "prompt '" + it.id + "'");
      if (it.forced_ids) {
        check_ids_in_vocab(*it.forced_ids, vocab, spec.validation.golden, "golden tokens of prompt '" + it.id + "'");
      }
    }
    check_decoder_inputs(spec, model_->dims(), shard_.items, {});  // positions and batch memory
    return shard_.items.size();
  }

 private:
  GenerationOptions generation_options(const RunSpec& spec) const {
    GenerationOptions o = prompt_options(spec);
    o.no_early_termination = spec.task.no_early_termination;
    o.keep_logits = keep_logits(spec);
    return o;
  }

  // The record's vocabulary-wide rows go to rank_rows(), out of the record.
  void keep_rows(std::uint64_t index, GenerationResult& r) {
    if (!r.step_logits.empty()) rows_.add(kStepLogits, index, std::move(r.step_logits));
    if (!r.logprobs16.values.empty()) rows_.add(kLogProbs16Values, index, std::move(r.logprobs16.values));
    r.step_logits.clear();
    r.logprobs16.values.clear();
    keep_topk_rows(index, r.topk_logits, r.topk_ids);
  }

  static std::int64_t model_vocab(const std::vector<GenerationResult>& res) {
    for (const auto& r : res) {
      if (r.vocab > 0) return r.vocab;
    }
    return 0;
  }

  // rank 0
  std::vector<Prompt> prompts_;
  std::vector<std::vector<std::int64_t>> prompt_ids_;
  std::vector<std::int64_t> truncated_;
  std::vector<std::size_t> max_steps_;  // most tokens each prompt generates (forced: its forced ids)
  bool rows_known_ = false;  // every prompt generates max_steps_ tokens: rows laid out before the run
  // every rank
  GenerationShard shard_;
};

}  // namespace

CalibrationSet generate_calibration(const RunSpec& spec) {
  CalibrationSet c;
  if (!direct_int8_settings(spec).needs_calibration()) return c;
  const auto tokenizer = DecoderTokenizer::from_dir(tokenizer_dir(spec));
  const auto n = static_cast<std::size_t>(spec.quantization.calibration_samples);
  // The prompts as the run tokenizes them (template, BOS, max_prompt_length).
  std::vector<Prompt> prompts;
  if (spec.quantization.calibration_dataset.empty() && !spec.task.prompt_set.empty()) {
    prompts = builtin_prompts(spec.task.prompt_set);
    c.dataset = "prompt_set " + spec.task.prompt_set;
  } else {
    c.dataset = calibration_dataset(spec);
    prompts = read_prompts(c.dataset);
  }
  if (prompts.size() > n) prompts.resize(n);
  for (auto& item : prepare_generation_items(prompts, tokenizer, prompt_options(spec))) {
    c.sequences.push_back(std::move(item.prompt_ids));
  }
  c.examples = static_cast<std::int64_t>(prompts.size());
  return c;
}

std::unique_ptr<TaskFlow> make_generate_flow() { return std::make_unique<GenerateFlow>(); }

}  // namespace evalrun
