// task.kind = "mlm": masked-token prediction with a RoBERTa masked-LM head. rank 0 reads the texts
// (with <mask> tokens); ranks keep each mask's top-k logits (and the full row with output.logits =
// "full"); rank 0 turns them into fill-ins, accuracy against the targets and the result file.
#include <algorithm>
#include <limits>

#include "app/flows/encoder_flow.hpp"
#include "app/flows/flows.hpp"
#include "common/logging.hpp"
#include "io/hdf5_file.hpp"
#include "io/text_dataset.hpp"
#include "task/mlm.hpp"

namespace evalrun {
namespace {

struct MlmData {
  std::vector<TextSample> samples;
  std::vector<MlmFeature> features;  // one per sample
  std::vector<std::string> sample_ids;
  std::vector<EncoderItem> items;  // one per feature, index = feature number
};

MlmData read_mlm(const RunSpec& spec, const EncoderTokenizer& tokenizer) {
  MlmData p;
  p.samples = read_text_samples(spec.task.dataset);
  if (spec.task.max_samples > 0 && static_cast<std::size_t>(spec.task.max_samples) < p.samples.size()) {
    p.samples.resize(static_cast<std::size_t>(spec.task.max_samples));
  }
  p.features = make_mlm_features(p.samples, tokenizer, spec.task.max_seq_length, spec.task.dataset);
  for (const auto& s : p.samples) p.sample_ids.push_back(s.id);
  for (std::size_t i = 0; i < p.features.size(); ++i) {
    EncoderItem item;
    item.index = i;
    item.input_ids = p.features[i].input_ids;
    item.type_ids = p.features[i].token_type_ids;
    item.mask_positions = p.features[i].mask_positions;
    p.items.push_back(std::move(item));
  }
  return p;
}

constexpr const char* kMaskLogits = "/logits/mask_logits";

// A sample's full logits rows (output.logits = "full") go to `rows`, out of its record.
void keep_rows(std::uint64_t index, MlmItemScores& s, RankRows& rows) {
  std::vector<float> flat;
  for (auto& m : s.masks) {
    flat.insert(flat.end(), m.full_row.begin(), m.full_row.end());
    m.full_row.clear();
  }
  if (!flat.empty()) rows.add(kMaskLogits, index, std::move(flat));
}

class MlmFlow : public EncoderFlow {
 public:
  MlmFlow() : EncoderFlow(EncoderHead::masked_lm, mlm_calibration) {}

  PreparedWork prepare(const RunSpec& spec, int ranks, const std::set<std::uint64_t>& skip) override {
    tokenizer_ = EncoderTokenizer::from_dir(tokenizer_dir(spec));
    data_ = read_mlm(spec, *tokenizer_);
    all_items_ = data_.items;
    return share_out(spec, ranks, skip, data_.sample_ids.size());
  }

  std::string run(const RunSpec& spec, bool report_progress, const ItemSink& sink) override {
    Progress progress("features");
    ResultRecords records(ItemSink{});  // what rank 0 gets; the sink (journal) gets each record below
    const bool full = spec.output.logits == LogitsMode::full;
    const int k = std::max(spec.task.top_k, spec.output.logits == LogitsMode::topk ? spec.output.top_k : 0);
    run_mlm_items(*model_, items_, batch_options(spec, report_progress, progress),
                  [&](const std::vector<MlmItemResult>& results, const std::vector<std::size_t>& done) {
                    FinishedItems journaled;
                    for (std::size_t i : done) {
                      const auto& r = results[i];
                      MlmItemScores s;
                      s.seconds = r.seconds;
                      for (std::size_t m = 0; m < items_[i].mask_positions.size(); ++m) {
                        const float* row = r.mask_logits.data() + m * static_cast<std::size_t>(vocab_);
                        MlmItemScores::Mask mask{top_k_of_row(row, vocab_, k), {}};
                        if (full) mask.full_row.assign(row, row + vocab_);
                        s.masks.push_back(std::move(mask));
                      }
                      // the journal's record: with its rows when they stay here until the end
                      if (sink && !rows_.writes_as_added()) journaled.emplace_back(r.index, to_bytes(s));
                      keep_rows(r.index, s, rows_);
                      if (sink && rows_.writes_as_added()) journaled.emplace_back(r.index, to_bytes(s));
                      records.add(r.index, s);
                    }
                    if (sink) sink(journaled);
                    records.end_batch();
                  });
    release();
    return records.take();
  }

  FinishedFile finish(const RunSpec& spec, const std::vector<std::string>& gathered, RunTimes& times,
                      Provenance prov) override;

  // A sample's rows are its masks: known before the run.
  RowsPlan plan_rows(const RunSpec& spec) const override {
    if (spec.output.logits != LogitsMode::full) return {};
    RowsPlan::Dataset d{kMaskLogits, RowType::f32, vocab_, {}};
    for (const auto& item : all_items_) d.rows_per_item.push_back(item.mask_positions.size());
    return {{d}};
  }

  void check_record(std::uint64_t index, const std::string& payload) const override {
    const auto r = from_bytes<MlmItemScores>(payload);
    const std::size_t masks = all_items_[index].mask_positions.size();
    if (r.masks.size() != masks) {
      throw std::runtime_error(std::to_string(r.masks.size()) + " masks for a sample with " + std::to_string(masks));
    }
    for (const auto& m : r.masks) {
      if (m.top.ids.size() != m.top.logits.size()) throw std::runtime_error("top-k ids and logits differ in number");
      if (!m.full_row.empty() && m.full_row.size() != r.masks.front().full_row.size()) {
        throw std::runtime_error("logits rows of different lengths");
      }
    }
  }

 private:
  MlmData data_;  // rank 0
};

// rank 0: the gathered mask scores -> fill-ins, accuracy and the result file (journaled full rows go
// to rank_rows(), rank 0's to write).
FinishedFile MlmFlow::finish(const RunSpec& spec, const std::vector<std::string>& gathered, RunTimes& times,
                             Provenance prov) {
  const MlmData& p = data_;
  const EncoderTokenizer& tokenizer = *tokenizer_;
  const std::int64_t vocab = vocab_;
  RankRows& rows = rows_;
  const std::size_t ns = p.features.size();
  std::vector<std::vector<MaskTopK>> topk(ns);
  std::vector<double> item_seconds(ns, 0.0);
  auto scores = read_gathered_records<MlmItemScores>(gathered, ns, "sample");
  std::vector<std::uint64_t> masks_per_sample;
  for (std::size_t i = 0; i < ns; ++i) {
    keep_rows(i, scores[i], rows);
    item_seconds[i] = scores[i].seconds;
    masks_per_sample.push_back(scores[i].masks.size());
    for (auto& m : scores[i].masks) topk[i].push_back(std::move(m.top));
  }
  for (double s : item_seconds) times.model_total += s;

  const int k = spec.task.top_k;
  std::vector<std::uint64_t> mask_sample;
  std::vector<std::int64_t> pred_ids;
  std::vector<float> pred_scores;
  std::vector<std::string> pred_tokens, filled, targets;
  std::vector<double> lse;
  std::vector<std::vector<std::int64_t>> ids, positions;
  std::vector<std::string> texts;
  std::size_t tokens = 0, masks = 0, with_target = 0, correct = 0;
  for (std::size_t i = 0; i < ns; ++i) {
    const auto& f = p.features[i];
    const auto& sample = p.samples[f.sample_index];
    std::vector<MaskPrediction> preds;
    for (std::size_t m = 0; m < topk[i].size(); ++m) {
      preds.push_back(predict_mask(topk[i][m], k, tokenizer));
      const auto& pr = preds.back();
      mask_sample.push_back(i);
      lse.push_back(topk[i][m].logsumexp);
      for (int j = 0; j < k; ++j) {
        const bool have = static_cast<std::size_t>(j) < pr.token_ids.size();
        pred_ids.push_back(have ? pr.token_ids[j] : -1);
        pred_scores.push_back(have ? pr.scores[j] : 0.0F);
        pred_tokens.push_back(have ? pr.tokens[j] : "");
      }
      targets.push_back(sample.targets.empty() ? "" : sample.targets[m]);
      if (!sample.targets.empty()) {
        ++with_target;
        if (mask_prediction_correct(pr, sample.targets[m])) ++correct;
      }
      ++masks;
    }
    filled.push_back(fill_masks(f, preds, tokenizer));
    ids.push_back(f.input_ids);
    positions.push_back(f.mask_positions);
    texts.push_back(sample.text);
    tokens += f.input_ids.size();
  }

  H5Writer out = open_result(spec);
  prov.end_time = utc_now_iso8601();
  write_provenance(out, spec, prov);
  write_sample_index(out, p.sample_ids);
  out.write_strings("/samples/text", texts);
  out.write_ragged("/samples/input_ids", ids);
  out.write_ragged("/samples/mask_positions", positions);
  out.write("/masks/sample_index", mask_sample);
  out.write_strings("/masks/target", targets);
  const auto M = static_cast<std::int64_t>(masks);
  out.write("/logits/logsumexp", lse);
  RowsLayout layout;
  if (spec.output.logits == LogitsMode::full) {
    lay_out_rows(layout, out, kMaskLogits, RowType::f32, vocab, masks_per_sample);
  } else if (spec.output.logits == LogitsMode::topk) {
    std::vector<float> values;
    std::vector<std::int64_t> indices;
    for (const auto& per_sample : topk) {
      for (const auto& t : per_sample) {
        for (int j = 0; j < spec.output.top_k; ++j) {
          const bool have = static_cast<std::size_t>(j) < t.ids.size();
          values.push_back(have ? t.logits[j] : -std::numeric_limits<float>::infinity());
          indices.push_back(have ? t.ids[j] : -1);
        }
      }
    }
    out.write("/logits/topk/values", values, {M, spec.output.top_k});
    out.write("/logits/topk/indices", indices, {M, spec.output.top_k});
  }
  out.write("/predictions/token_ids", pred_ids, {M, k});
  out.write("/predictions/scores", pred_scores, {M, k});
  out.write_strings("/predictions/tokens", pred_tokens);
  out.write_strings("/predictions/filled_text", filled);
  out.create_group("/metrics");
  out.set_attr("/metrics", "n_samples", static_cast<std::int64_t>(ns));
  out.set_attr("/metrics", "n_masks", static_cast<std::int64_t>(masks));
  out.set_attr("/metrics", "n_masks_with_target", static_cast<std::int64_t>(with_target));
  if (with_target > 0) {
    out.set_attr("/metrics", "accuracy", 100.0 * static_cast<double>(correct) / static_cast<double>(with_target));
  }
  write_timing(out, times, item_seconds, ns, tokens, ns);
  if (with_target > 0) {
    log().info("mlm: {} samples, {} masks: top-1 accuracy {:.2f}%", ns, masks,
               100.0 * static_cast<double>(correct) / static_cast<double>(with_target));
  } else {
    log().info("mlm: {} samples, {} masks (no targets given: no accuracy)", ns, masks);
  }
  return {std::move(out), std::move(layout)};
}

}  // namespace

CalibrationSet mlm_calibration(const RunSpec& spec) { return encoder_task_calibration(spec, read_mlm); }

std::unique_ptr<TaskFlow> make_mlm_flow() { return std::make_unique<MlmFlow>(); }

}  // namespace evalrun
