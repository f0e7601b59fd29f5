// task.kind = "generate_until": lm-evaluation-harness's generate_until output type (HFLM.generate_until)
// over a task file's documents (task/task_file.hpp). rank 0 builds the prompts (few-shot included),
// tokenizes them and shards them by tokens; every rank generates greedily until a stop string of the
// task file, EOS or max_gen_toks (it loads the tokenizer to read its own text); rank 0 cuts each
// response at the stop strings, applies the task's answer filters, scores exact match against the
// document's target and writes the result file.
#include <functional>
#include <numeric>

#include "app/flows/decoder_flow.hpp"
#include "app/flows/flows.hpp"
#include "common/errors.hpp"
#include "common/logging.hpp"
#include "io/hdf5_file.hpp"
#include "task/generate.hpp"
#include "task/generate_until.hpp"
#include "task/lm_eval_stats.hpp"
#include "task/input_limits.hpp"

namespace evalrun {
namespace {

// What every rank needs beside its prompts: the stop strings and the generation length.
struct StopSettings {
  std::vector<std::string> until;
  std::int64_t max_gen_toks = 0;

  void write(ByteWriter& w) const {
    w.put<std::uint64_t>(until.size());
    for (const auto& u : until) w.put_string(u);
    w.put<std::int64_t>(max_gen_toks);
  }
  static StopSettings read(ByteReader& r) {
    StopSettings s;
    const auto n = r.get<std::uint64_t>();
    for (std::uint64_t i = 0; i < n; ++i) s.until.push_back(r.get_string());
    s.max_gen_toks = r.get<std::int64_t>();
    return s;
  }
};

bool contains_any(const std::string& text, const std::vector<std::string>& terms) {
  for (const auto& t : terms) {
    if (!t.empty() && text.find(t) != std::string::npos) return true;
  }
  return false;
}

class GenerateUntilFlow : public DecoderFlow {
 public:
  GenerateUntilFlow() : DecoderFlow(generate_until_calibration) {}

  std::string run(const RunSpec& spec, bool report_progress, const ItemSink& sink) override {
    GenerationOptions o;
    o.max_new_tokens = static_cast<int>(stop_.max_gen_toks);
    o.batch_size = spec.task.batch_size;
    // HFLM stops a row once its decoded continuation holds a stop string; the text is cut in finish().
    o.stop_when = [this](const std::vector<std::int64_t>& ids) {
      return contains_any(rank_tokenizer_->decode(ids, /*skip_special_tokens=*/true), stop_.until);
    };
    Progress progress("documents");
    if (report_progress) o.progress = std::ref(progress);
    ResultRecords records(sink);
    run_generation(*model_, shard_.items, o, shard_.stop_ids, shard_.pad_id, records.batch_done<GenerationResult>());
    model_.reset();
    return records.take();
  }

  void check_record(std::uint64_t, const std::string& payload) const override {
    const auto g = from_bytes<GenerationResult>(payload);
    if (g.generated_ids.size() > static_cast<std::size_t>(stop_.max_gen_toks)) {
      throw std::runtime_error(std::to_string(g.generated_ids.size()) + " generated tokens where max_gen_toks is " +
                               std::to_string(stop_.max_gen_toks));
    }
    if (g.own_ids.size() != g.generated_ids.size()) throw std::runtime_error("generated and chosen tokens differ in number");
  }

  FinishedFile finish(const RunSpec& spec, const std::vector<std::string>& gathered, RunTimes& times,
                      Provenance prov) override {
    const std::size_t n = docs_.size();
    const auto res = read_gathered_records<GenerationResult>(gathered, n, "document");
    const std::size_t n_filters = scoring_.filters.size();
    std::vector<std::string> targets, raw, responses;
    std::vector<std::vector<std::int64_t>> generated;
    std::vector<std::int64_t> stopped;
    std::vector<std::vector<std::string>> answers(n_filters);
    std::vector<std::vector<std::int64_t>> exact(n_filters);
    std::vector<std::vector<double>> exact_values(n_filters);
    std::vector<double> item_seconds;
    std::vector<std::string> sample_lines;
    std::size_t new_tokens = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const auto& g = res[i];
      const std::string text = tokenizer_->decode(g.generated_ids, /*skip_special_tokens=*/true);
      const ScoredResponse s = score_response(text, docs_[i].target, scoring_);
      targets.push_back(docs_[i].target);
      raw.push_back(text);
      responses.push_back(s.response);
      generated.push_back(g.generated_ids);
      stopped.push_back(g.stopped ? 1 : 0);
      for (std::size_t f = 0; f < n_filters; ++f) {
        if (!spec.output.samples_jsonl.empty()) {
          sample_lines.push_back(lm_eval_generation_sample_line(docs_[i], stop_.until, static_cast<int>(stop_.max_gen_toks),
                                                                s.response, scoring_.filters[f].name, s.answers[f], s.exact[f]));
        }
        answers[f].push_back(s.answers[f]);
        exact[f].push_back(s.exact[f] ? 1 : 0);
        exact_values[f].push_back(s.exact[f] ? 1.0 : 0.0);
      }
      new_tokens += g.generated_ids.size();
      item_seconds.push_back(std::accumulate(g.step_seconds.begin(), g.step_seconds.end(), 0.0) /
                             static_cast<double>(std::max<std::int64_t>(1, g.batch_rows)));
    }
    for (double s : item_seconds) times.model_total += s;

    H5Writer out(spec.output.path);
    prov.end_time = utc_now_iso8601();
    write_task_documents(out, spec, prov, task_, docs_);
    out.write_strings("/documents/target", targets);
    out.write_ragged("/samples/prompt_ids", prompt_ids_);
    out.write("/samples/prompt_truncated", truncated_);
    out.write_ragged("/generated/ids", generated);
    out.write_strings("/generated/text", raw);
    out.write_strings("/generated/response", responses);
    out.write("/generated/stopped", stopped);
    out.create_group("/metrics");
    out.set_attr("/metrics", "n_documents", static_cast<std::int64_t>(n));
    out.set_attr("/metrics", "num_fewshot", static_cast<std::int64_t>(spec.task.num_fewshot));
    out.set_attr("/metrics", "generated_tokens", static_cast<std::int64_t>(new_tokens));
    std::string summary;
    std::vector<LmEvalMetric> metrics;
    for (std::size_t f = 0; f < n_filters; ++f) {
      const std::string& name = scoring_.filters[f].name;
      out.write_strings("/answers/" + name + "/answer", answers[f]);
      out.write("/answers/" + name + "/exact_match", exact[f]);
      const MeanWithStderr m = mean_with_stderr(exact_values[f]);
      out.set_attr("/metrics", "exact_match," + name, m.mean);
      out.set_attr("/metrics", "exact_match_stderr," + name, m.standard_error);
      metrics.push_back({"exact_match", name, m.mean, m.standard_error});
      summary += (summary.empty() ? "" : ", ") + name + " " + std::to_string(m.mean);
    }
    write_timing(out, times, item_seconds, n, new_tokens, n);
    out.commit();
    write_lm_eval_outputs(spec, lm_eval_results_json(lm_eval_run_info(spec, task_, n_original_), "generate_until", n, metrics),
                          sample_lines);
    log().info("generate_until {}: {} documents, exact match {}", task_.name, n, summary);
    return {};
  }

 protected:
  PreparedWork prepare_task(const RunSpec& spec, int ranks, const std::set<std::uint64_t>& skip,
                            std::string& everything) override {
    task_ = task_file_for(spec);
    scoring_ = generation_scoring(task_);
    stop_ = {scoring_.until, task_.max_gen_toks};
    docs_ = task_documents(spec, task_, 0);
    n_original_ = docs_.size();
    if (spec.task.max_samples > 0 && static_cast<std::size_t>(spec.task.max_samples) < docs_.size()) {
      docs_.resize(static_cast<std::size_t>(spec.task.max_samples));  // the first N documents only
    }
    // HFLM: the context keeps its last max_length - max_gen_toks tokens.
    const std::int64_t max_length = checkpoint_dims(spec.model.path).max_positions;
    const std::int64_t max_ctx = max_length - stop_.max_gen_toks;
    if (max_ctx <= 0) {
      throw InputError(task_.path + ": max_gen_toks", std::to_string(stop_.max_gen_toks) +
                                                          " leaves no room for a prompt in the model's " +
                                                          std::to_string(max_length) + " positions");
    }
    items_.clear();
    prompt_ids_.clear();
    truncated_.clear();
    for (std::size_t i = 0; i < docs_.size(); ++i) {
      GenerationItem it;
      it.index = i;
      it.id = document_sample_id(docs_[i]);
      it.prompt_ids = tokenizer_->encode(docs_[i].requests.front().context);
      if (it.prompt_ids.empty()) throw InputError(docs_[i].where, "the prompt tokenizes to nothing");
      const auto len = static_cast<std::int64_t>(it.prompt_ids.size());
      truncated_.push_back(std::max<std::int64_t>(0, len - max_ctx));
      if (len > max_ctx) {
        it.prompt_ids.erase(it.prompt_ids.begin(), it.prompt_ids.end() - max_ctx);
        it.truncated = true;
      }
      prompt_ids_.push_back(it.prompt_ids);
      items_.push_back(std::move(it));
    }
    auto serialize = [&](const std::vector<std::size_t>& positions) {
      GenerationShard shard{tokenizer_->stop_ids(), tokenizer_->pad_id(), {}};
      for (std::size_t i : positions) shard.items.push_back(items_[i]);
      return to_bytes(shard);
    };
    std::vector<std::size_t> all(items_.size());
    std::vector<std::int64_t> cost;
    for (std::size_t i = 0; i < items_.size(); ++i) {
      all[i] = i;
      cost.push_back(static_cast<std::int64_t>(items_[i].prompt_ids.size()) + stop_.max_gen_toks);
    }
    PreparedWork w;
    w.shared = to_bytes(stop_);
    everything = serialize(all) + w.shared;
    for (const auto& positions : plan_shards(items_, cost, skip, ranks, "documents")) w.shards.push_back(serialize(positions));
    w.samples = w.items = items_.size();
    log().info("generate_until {}: {} documents, {}-shot, max_gen_toks {}", task_.name, items_.size(),
               spec.task.num_fewshot, stop_.max_gen_toks);
    return w;
  }

  std::size_t load_task(const RunSpec& spec, const std::string& shard, const std::string& shared,
                        std::int64_t vocab) override {
    shard_ = from_bytes<GenerationShard>(shard);
    stop_ = from_bytes<StopSettings>(shared);
    rank_tokenizer_.emplace(DecoderTokenizer::from_dir(tokenizer_dir(spec)));
    std::vector<SequenceNeed> seqs;
    for (const auto& it : shard_.items) {
      check_ids_in_vocab(it.prompt_ids, vocab, spec.model.path, "prompt of " + it.id);
      seqs.push_back({"prompt of " + it.id, static_cast<std::int64_t>(it.prompt_ids.size()), stop_.max_gen_toks});
    }
    check_input_limits(spec, model_->dims(), seqs);  // batch memory (positions fit by construction)
    return shard_.items.size();
  }

 private:
  // rank 0
  TaskFile task_;
  std::size_t n_original_ = 0;
  GenerateUntilScoring scoring_;
  std::vector<TaskDocument> docs_;
  std::vector<GenerationItem> items_;
  std::vector<std::vector<std::int64_t>> prompt_ids_;
  std::vector<std::int64_t> truncated_;  // tokens cut from the left of each prompt
  // every rank
  StopSettings stop_;
  GenerationShard shard_;
  std::optional<DecoderTokenizer> rank_tokenizer_;
};

}  // namespace

CalibrationSet generate_until_calibration(const RunSpec& spec) {
  // The first documents' prompts, as the run tokenizes them.
  return task_file_calibration(spec, [](const std::vector<TaskDocument>& docs, const DecoderTokenizer& tok) {
    std::vector<std::vector<std::int64_t>> out;
    for (const auto& d : docs) out.push_back(tok.encode(d.requests.front().context));
    return out;
  });
}

std::unique_ptr<TaskFlow> make_generate_until_flow() { return std::make_unique<GenerateUntilFlow>(); }

}  // namespace evalrun
