// task.kind = "qa": extractive question answering (SQuAD) with a RoBERTa question-answering head.
// rank 0 reads the SQuAD file and cuts each context into windows (features); ranks run the features'
// start/end logits; rank 0 post-processes them into answers, scores them and writes the result file.
#include <algorithm>
#include <filesystem>

#include <unistd.h>

#include "app/flows/encoder_flow.hpp"
#include "app/flows/flows.hpp"
#include "common/logging.hpp"
#include "io/hdf5_file.hpp"
#include "io/squad.hpp"
#include "task/qa_features.hpp"
#include "task/qa_postprocess.hpp"
#include "task/squad_metric.hpp"

namespace evalrun {
namespace {

struct QaData {
  std::vector<SquadExample> examples;
  std::vector<QaFeature> features;
  std::vector<std::string> sample_ids;
  std::vector<EncoderItem> items;  // one per feature, index = feature number
};

QaData read_qa(const RunSpec& spec, const EncoderTokenizer& tokenizer) {
  QaData p;
  p.examples = read_squad(spec.task.dataset);
  if (spec.task.max_samples > 0 && static_cast<std::size_t>(spec.task.max_samples) < p.examples.size()) {
    p.examples.resize(static_cast<std::size_t>(spec.task.max_samples));
  }
  QaFeatureOptions fo;
  fo.max_seq_length = spec.task.max_seq_length;
  fo.doc_stride = spec.task.doc_stride;
  fo.pad_to_max_length = spec.task.pad_to_max_length;
  p.features = make_qa_features(p.examples, tokenizer, fo);
  for (const auto& e : p.examples) p.sample_ids.push_back(e.id);
  for (std::size_t i = 0; i < p.features.size(); ++i) {
    const auto& f = p.features[i];
    EncoderItem item;
    item.index = i;
    // Only the attended tokens travel; the runner pads again (to max_seq_length when asked).
    auto n = static_cast<std::size_t>(std::count(f.attention_mask.begin(), f.attention_mask.end(), 1));
    item.input_ids.assign(f.input_ids.begin(), f.input_ids.begin() + static_cast<std::ptrdiff_t>(n));
    if (!f.token_type_ids.empty()) {
      item.type_ids.assign(f.token_type_ids.begin(), f.token_type_ids.begin() + static_cast<std::ptrdiff_t>(n));
    }
    p.items.push_back(std::move(item));
  }
  return p;
}

void write_predictions_json_atomic(const std::string& path, const std::vector<SquadExample>& examples,
                                   const std::vector<QaPrediction>& predictions) {
  std::vector<std::pair<std::string, std::string>> rows;
  for (std::size_t i = 0; i < examples.size(); ++i) rows.emplace_back(examples[i].id, predictions[i].text);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  write_predictions_json(tmp, rows);
  std::filesystem::rename(tmp, path);
}

// rank 0: the gathered logits -> predictions, metrics and the result file.
void finish_qa(const RunSpec& spec, const QaData& p, const std::vector<std::string>& gathered, RunTimes& times,
               Provenance prov) {
  const std::size_t nf = p.features.size();
  std::vector<std::vector<float>> start(nf), end(nf);
  std::vector<double> item_seconds(nf, 0.0);
  auto results = read_gathered_records<QaItemResult>(gathered, nf, "feature");
  for (std::size_t i = 0; i < nf; ++i) {
    item_seconds[i] = results[i].seconds;
    start[i] = std::move(results[i].start_logits);
    end[i] = std::move(results[i].end_logits);
  }
  for (double s : item_seconds) times.model_total += s;

  QaPostprocessOptions po;
  po.n_best_size = spec.task.n_best_size;
  po.max_answer_length = spec.task.max_answer_length;
  po.version_2_with_negative = spec.task.version_2_with_negative;
  po.null_score_diff_threshold = static_cast<float>(spec.task.null_score_diff_threshold);
  auto predictions = postprocess_qa_predictions(p.examples, p.features, start, end, po);
  std::vector<std::string> prediction_texts;
  for (const auto& pr : predictions) prediction_texts.push_back(pr.text);
  const SquadScores scores = spec.task.version_2_with_negative ? evaluate_squad_v2(p.examples, prediction_texts)
                                                                : evaluate_squad_v1(p.examples, prediction_texts);

  H5Writer out(spec.output.path);
  prov.end_time = utc_now_iso8601();
  write_provenance(out, spec, prov);
  write_sample_index(out, p.sample_ids);
  {
    std::vector<std::string> questions;
    for (const auto& e : p.examples) questions.push_back(e.question);
    out.write_strings("/samples/question", questions);
  }
  // features: ids, windows and offsets, aligned with the logits rows
  std::vector<std::uint64_t> example_index;
  std::vector<std::int64_t> window;
  std::vector<std::vector<std::int64_t>> ids;
  std::vector<std::int64_t> offsets;
  std::size_t tokens = 0;
  for (std::size_t i = 0; i < nf; ++i) {
    const auto& f = p.features[i];
    example_index.push_back(f.example_index);
    window.push_back(f.window);
    const std::size_t n = start[i].size();
    ids.emplace_back(f.input_ids.begin(), f.input_ids.begin() + static_cast<std::ptrdiff_t>(n));
    for (std::size_t t = 0; t < n; ++t) {
      offsets.push_back(f.offsets[t].first);
      offsets.push_back(f.offsets[t].second);
    }
    tokens += n;
  }
  out.write("/features/example_index", example_index);
  out.write("/features/window", window);
  out.write_ragged("/features/input_ids", ids);
  out.write("/features/offset_mapping", offsets, {static_cast<std::int64_t>(tokens), 2});
  if (spec.output.logits == LogitsMode::full) {
    out.write_ragged("/logits/start_logits", start);
    out.write_ragged("/logits/end_logits", end);
  } else if (spec.output.logits == LogitsMode::topk) {
    write_topk_rows(out, "/logits/start_topk", start, spec.output.top_k);
    write_topk_rows(out, "/logits/end_topk", end, spec.output.top_k);
  }
  // predictions and n-best lists
  std::vector<std::int64_t> char_start, char_end, nb_cs, nb_ce, nb_feature;
  std::vector<float> score, nb_score, nb_start, nb_end, nb_prob;
  std::vector<std::string> nb_text;
  std::vector<std::uint64_t> nb_offsets{0};
  for (const auto& pr : predictions) {
    const QaCandidate* best = pr.nbest.empty() ? nullptr : &pr.nbest.front();
    const bool answered = best != nullptr && !pr.text.empty();
    char_start.push_back(answered ? best->char_start : -1);
    char_end.push_back(answered ? best->char_end : -1);
    score.push_back(best ? best->score : 0.0F);
    for (const auto& c : pr.nbest) {
      nb_text.push_back(c.text);
      nb_score.push_back(c.score);
      nb_start.push_back(c.start_logit);
      nb_end.push_back(c.end_logit);
      nb_prob.push_back(c.probability);
      nb_cs.push_back(c.char_start);
      nb_ce.push_back(c.char_end);
      nb_feature.push_back(c.feature);
    }
    nb_offsets.push_back(nb_text.size());
  }
  out.write_strings("/predictions/text", prediction_texts);
  out.write("/predictions/char_start", char_start);
  out.write("/predictions/char_end", char_end);
  out.write("/predictions/score", score);
  out.write_strings("/predictions/nbest/text", nb_text);
  out.write("/predictions/nbest/offsets", nb_offsets);
  out.write("/predictions/nbest/score", nb_score);
  out.write("/predictions/nbest/start_logit", nb_start);
  out.write("/predictions/nbest/end_logit", nb_end);
  out.write("/predictions/nbest/probability", nb_prob);
  out.write("/predictions/nbest/char_start", nb_cs);
  out.write("/predictions/nbest/char_end", nb_ce);
  out.write("/predictions/nbest/feature", nb_feature);
  // metrics
  out.create_group("/metrics");
  out.set_attr("/metrics", "exact_match", scores.exact);
  out.set_attr("/metrics", "f1", scores.f1);
  out.set_attr("/metrics", "n_examples", static_cast<std::int64_t>(p.examples.size()));
  out.set_attr("/metrics", "n_features", static_cast<std::int64_t>(nf));
  if (spec.task.version_2_with_negative) {
    out.set_attr("/metrics", "HasAns_exact", scores.has_ans_exact);
    out.set_attr("/metrics", "HasAns_f1", scores.has_ans_f1);
    out.set_attr("/metrics", "HasAns_total", static_cast<std::int64_t>(scores.has_ans_total));
    out.set_attr("/metrics", "NoAns_exact", scores.no_ans_exact);
    out.set_attr("/metrics", "NoAns_f1", scores.no_ans_f1);
    out.set_attr("/metrics", "NoAns_total", static_cast<std::int64_t>(scores.no_ans_total));
  }
  out.write("/metrics/exact_match_per_question", scores.exact_per_question);
  out.write("/metrics/f1_per_question", scores.f1_per_question);
  write_timing(out, times, item_seconds, nf, tokens, p.examples.size());
  out.commit();
  if (!spec.output.predictions_json.empty()) write_predictions_json_atomic(spec.output.predictions_json, p.examples, predictions);
  log().info("qa: {} questions, {} features: exact_match {:.2f}, f1 {:.2f}", p.examples.size(), nf,
             scores.exact, scores.f1);
}

class QaFlow : public EncoderFlow {
 public:
  QaFlow() : EncoderFlow(EncoderHead::question_answering, qa_calibration) {}

  PreparedWork prepare(const RunSpec& spec, int ranks, const std::set<std::uint64_t>& skip) override {
    tokenizer_ = EncoderTokenizer::from_dir(tokenizer_dir(spec));
    data_ = read_qa(spec, *tokenizer_);
    all_items_ = data_.items;
    return share_out(spec, ranks, skip, data_.examples.size());
  }

  std::string run(const RunSpec& spec, bool report_progress, const ItemSink& sink) override {
    Progress progress("features");
    ResultRecords records(sink);
    run_qa_items(*model_, items_, batch_options(spec, report_progress, progress), records.batch_done<QaItemResult>());
    release();
    return records.take();
  }

  FinishedFile finish(const RunSpec& spec, const std::vector<std::string>& gathered, RunTimes& times,
                      Provenance prov) override {
    finish_qa(spec, data_, gathered, times, prov);
    return {};
  }

  void check_record(std::uint64_t index, const std::string& payload) const override {
    const auto r = from_bytes<QaItemResult>(payload);
    const std::size_t n = all_items_[index].input_ids.size();
    if (r.start_logits.size() != n || r.end_logits.size() != n) {
      throw std::runtime_error(std::to_string(r.start_logits.size()) + " start and " +
                               std::to_string(r.end_logits.size()) + " end logits for a feature of " +
                               std::to_string(n) + " tokens");
    }
  }

 private:
  QaData data_;  // rank 0
};

}  // namespace

CalibrationSet qa_calibration(const RunSpec& spec) { return encoder_task_calibration(spec, read_qa); }

std::unique_ptr<TaskFlow> make_qa_flow() { return std::make_unique<QaFlow>(); }

}  // namespace evalrun
