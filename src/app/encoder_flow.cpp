#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>

#include "app/direct_quant.hpp"
#include "app/task_flow.hpp"
#include "common/errors.hpp"
#include "common/logging.hpp"
#include "dist/serialize.hpp"
#include "dist/sharding.hpp"
#include "io/hdf5_file.hpp"
#include "io/squad.hpp"
#include "io/text_dataset.hpp"
#include "model/roberta.hpp"
#include "task/encoder_runner.hpp"
#include "task/input_limits.hpp"
#include "task/mlm.hpp"
#include "task/qa_features.hpp"
#include "task/qa_postprocess.hpp"
#include "task/squad_metric.hpp"
#include "tokenizer/tokenizer.hpp"

namespace evalrun {
namespace {

// --- rank 0: data set -> work items ------------------------------------------------------------

struct Prepared {
  std::optional<ByteLevelBPE> tokenizer;
  std::vector<std::string> sample_ids;
  std::vector<SquadExample> examples;     // qa
  std::vector<QaFeature> features;        // qa
  std::vector<TextSample> samples;        // mlm
  std::vector<MlmFeature> mlm_features;   // mlm
  std::vector<EncoderItem> items;         // one per feature, index = feature number
};

Prepared prepare_encoder_work(const RunSpec& spec) {
  Prepared p;
  p.tokenizer = ByteLevelBPE::from_dir(tokenizer_dir(spec));
  if (spec.task.kind == TaskKind::qa) {
    p.examples = read_squad(spec.task.dataset);
    if (spec.task.max_samples > 0 && static_cast<std::size_t>(spec.task.max_samples) < p.examples.size()) {
      p.examples.resize(static_cast<std::size_t>(spec.task.max_samples));
    }
    QaFeatureOptions fo;
    fo.max_seq_length = spec.task.max_seq_length;
    fo.doc_stride = spec.task.doc_stride;
    fo.pad_to_max_length = spec.task.pad_to_max_length;
    p.features = make_qa_features(p.examples, *p.tokenizer, fo);
    for (const auto& e : p.examples) p.sample_ids.push_back(e.id);
    for (std::size_t i = 0; i < p.features.size(); ++i) {
      const auto& f = p.features[i];
      EncoderItem item;
      item.index = i;
      // Only the attended tokens travel; the runner pads again (to max_seq_length when asked).
      auto n = static_cast<std::size_t>(std::count(f.attention_mask.begin(), f.attention_mask.end(), 1));
      item.input_ids.assign(f.input_ids.begin(), f.input_ids.begin() + static_cast<std::ptrdiff_t>(n));
      p.items.push_back(std::move(item));
    }
  } else {
    p.samples = read_text_samples(spec.task.dataset);
    if (spec.task.max_samples > 0 && static_cast<std::size_t>(spec.task.max_samples) < p.samples.size()) {
      p.samples.resize(static_cast<std::size_t>(spec.task.max_samples));
    }
    p.mlm_features = make_mlm_features(p.samples, *p.tokenizer, spec.task.max_seq_length, spec.task.dataset);
    for (const auto& s : p.samples) p.sample_ids.push_back(s.id);
    for (std::size_t i = 0; i < p.mlm_features.size(); ++i) {
      EncoderItem item;
      item.index = i;
      item.input_ids = p.mlm_features[i].input_ids;
      item.mask_positions = p.mlm_features[i].mask_positions;
      p.items.push_back(std::move(item));
    }
  }
  return p;
}

// The items at `positions`, as a shard.
std::string serialize_items(const std::vector<EncoderItem>& items, const std::vector<std::size_t>& positions) {
  ByteWriter w;
  w.put<std::uint64_t>(positions.size());
  for (std::size_t i : positions) {
    w.put<std::uint64_t>(items[i].index);
    w.put_vector(items[i].input_ids);
    w.put_vector(items[i].mask_positions);
  }
  return w.take();
}

// Balanced shards of the items not in `skip`.
std::vector<std::string> serialize_shards(const std::vector<EncoderItem>& items, int parts,
                                          const std::set<std::uint64_t>& skip) {
  std::vector<std::size_t> todo;
  std::vector<std::int64_t> cost;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (skip.count(items[i].index)) continue;
    todo.push_back(i);
    cost.push_back(static_cast<std::int64_t>(items[i].input_ids.size()));
  }
  std::vector<std::string> out;
  for (const auto& shard : shard_by_cost(cost, parts)) {
    std::vector<std::size_t> positions;
    for (std::size_t j : shard) positions.push_back(todo[j]);
    out.push_back(serialize_items(items, positions));
  }
  return out;
}

std::vector<EncoderItem> deserialize_items(const std::string& bytes) {
  ByteReader r(bytes);
  std::vector<EncoderItem> items(r.get<std::uint64_t>());
  for (auto& it : items) {
    it.index = r.get<std::uint64_t>();
    it.input_ids = r.get_vector<std::int64_t>();
    it.mask_positions = r.get_vector<std::int64_t>();
  }
  return items;
}

void check_ids_fit(const std::vector<EncoderItem>& items, std::int64_t vocab, std::int64_t max_length,
                   const std::string& model_path) {
  for (const auto& it : items) {
    for (auto id : it.input_ids) {
      if (id < 0 || id >= vocab) {
        throw InputError(model_path, "token id " + std::to_string(id) + " is outside the model's vocabulary (" +
                                         std::to_string(vocab) + "): tokenizer and model do not match");
      }
    }
    if (static_cast<std::int64_t>(it.input_ids.size()) > max_length) {
      throw InputError(model_path, "a feature of " + std::to_string(it.input_ids.size()) +
                                       " tokens is longer than the model's position table allows (" +
                                       std::to_string(max_length) + "): lower task.max_seq_length");
    }
  }
}

// Runs the shard; each batch's result records go to `sink` (the run journal) as well as into the
// returned buffer (read back by finish_qa / finish_mlm).
std::string run_shard(RobertaModel& model, const RunSpec& spec, const std::vector<EncoderItem>& items,
                      std::int64_t pad_id, bool report_progress, const ItemSink& sink) {
  EncoderBatchOptions opt;
  opt.batch_size = spec.task.batch_size;
  opt.pad_id = pad_id;
  opt.pad_to_length = spec.task.pad_to_max_length ? spec.task.max_seq_length : 0;
  Progress progress("features");
  if (report_progress) opt.progress = std::ref(progress);
  ResultRecords records(sink);
  if (spec.task.kind == TaskKind::qa) {
    run_qa_items(model, items, opt, [&](const std::vector<QaItemResult>& results, const std::vector<std::size_t>& done) {
      for (std::size_t i : done) {
        const auto& r = results[i];
        ByteWriter w;
        w.put<double>(r.seconds);
        w.put_vector(r.start_logits);
        w.put_vector(r.end_logits);
        records.add(r.index, w.take());
      }
      records.end_batch();
    });
  } else {
    const std::int64_t vocab = model.config().vocab_size;
    const bool full = spec.output.logits == LogitsMode::full;
    const int k = std::max(spec.task.top_k, spec.output.logits == LogitsMode::topk ? spec.output.top_k : 0);
    run_mlm_items(model, items, opt, [&](const std::vector<MlmItemResult>& results, const std::vector<std::size_t>& done) {
      for (std::size_t i : done) {
        const auto& r = results[i];
        const std::size_t masks = items[i].mask_positions.size();
        ByteWriter w;
        w.put<double>(r.seconds);
        w.put<std::uint64_t>(masks);
        for (std::size_t m = 0; m < masks; ++m) {
          const float* row = r.mask_logits.data() + m * static_cast<std::size_t>(vocab);
          MaskTopK t = top_k_of_row(row, vocab, k);
          w.put_vector(t.ids);
          w.put_vector(t.logits);
          w.put<double>(t.logsumexp);
          w.put<std::uint8_t>(full ? 1 : 0);
          if (full) w.put_vector(std::vector<float>(row, row + vocab));
        }
        records.add(r.index, w.take());
      }
      records.end_batch();
    });
  }
  return records.take();
}

// --- rank 0: results -> file -----------------------------------------------------------------------

void write_predictions_json_atomic(const std::string& path, const std::vector<SquadExample>& examples,
                                   const std::vector<QaPrediction>& predictions) {
  std::vector<std::pair<std::string, std::string>> rows;
  for (std::size_t i = 0; i < examples.size(); ++i) rows.emplace_back(examples[i].id, predictions[i].text);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  write_predictions_json(tmp, rows);
  std::filesystem::rename(tmp, path);
}

void finish_qa(const RunSpec& spec, const Prepared& p, const std::vector<std::string>& gathered, RunTimes& times,
               Provenance prov) {
  const std::size_t nf = p.features.size();
  std::vector<std::vector<float>> start(nf), end(nf);
  std::vector<double> item_seconds(nf, 0.0);
  read_gathered(gathered, nf, "feature", [&](ByteReader& r, std::size_t idx) {
    item_seconds[idx] = r.get<double>();
    start[idx] = r.get_vector<float>();
    end[idx] = r.get_vector<float>();
  });
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

void finish_mlm(const RunSpec& spec, const Prepared& p, const std::vector<std::string>& gathered, RunTimes& times,
                Provenance prov, std::int64_t vocab) {
  const std::size_t ns = p.mlm_features.size();
  std::vector<std::vector<MaskTopK>> topk(ns);
  std::vector<std::vector<std::vector<float>>> full_rows(ns);
  std::vector<double> item_seconds(ns, 0.0);
  read_gathered(gathered, ns, "sample", [&](ByteReader& r, std::size_t idx) {
    item_seconds[idx] = r.get<double>();
    const auto masks = r.get<std::uint64_t>();
    for (std::uint64_t m = 0; m < masks; ++m) {
      MaskTopK t;
      t.ids = r.get_vector<std::int64_t>();
      t.logits = r.get_vector<float>();
      t.logsumexp = r.get<double>();
      topk[idx].push_back(std::move(t));
      if (r.get<std::uint8_t>()) full_rows[idx].push_back(r.get_vector<float>());
    }
  });
  for (double s : item_seconds) times.model_total += s;

  const int k = spec.task.top_k;
  std::vector<std::uint64_t> mask_sample;
  std::vector<std::int64_t> pred_ids;
  std::vector<float> pred_scores;
  std::vector<std::string> pred_tokens, filled, targets;
  std::vector<double> lse;
  std::vector<std::vector<float>> all_rows;
  std::vector<std::vector<std::int64_t>> ids, positions;
  std::vector<std::string> texts;
  std::size_t tokens = 0, masks = 0, with_target = 0, correct = 0;
  for (std::size_t i = 0; i < ns; ++i) {
    const auto& f = p.mlm_features[i];
    const auto& sample = p.samples[f.sample_index];
    std::vector<MaskPrediction> preds;
    for (std::size_t m = 0; m < topk[i].size(); ++m) {
      preds.push_back(predict_mask(topk[i][m], k, *p.tokenizer));
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
    for (auto& row : full_rows[i]) all_rows.push_back(std::move(row));
    filled.push_back(fill_masks(f, preds, *p.tokenizer));
    ids.push_back(f.input_ids);
    positions.push_back(f.mask_positions);
    texts.push_back(sample.text);
    tokens += f.input_ids.size();
  }

  H5Writer out(spec.output.path);
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
  if (spec.output.logits == LogitsMode::full) {
    std::vector<float> flat;
    flat.reserve(static_cast<std::size_t>(M * vocab));
    for (const auto& row : all_rows) flat.insert(flat.end(), row.begin(), row.end());
    out.write("/logits/mask_logits", flat, {M, vocab}, /*row_chunk=*/4);
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
  out.commit();
  if (with_target > 0) {
    log().info("mlm: {} samples, {} masks: top-1 accuracy {:.2f}%", ns, masks,
               100.0 * static_cast<double>(correct) / static_cast<double>(with_target));
  } else {
    log().info("mlm: {} samples, {} masks (no targets given: no accuracy)", ns, masks);
  }
}

}  // namespace

CalibrationSet prepare_encoder_calibration(const RunSpec& spec) {
  CalibrationSet c;
  if (!direct_int8_settings(spec).needs_calibration()) return c;
  // The task's own preprocessing on the calibration data set's first examples.
  RunSpec cal = spec;
  cal.task.dataset = calibration_dataset(spec);
  cal.task.max_samples = spec.quantization.calibration_samples;
  Prepared p = prepare_encoder_work(cal);
  c.dataset = cal.task.dataset;
  c.examples = static_cast<std::int64_t>(p.sample_ids.size());
  for (auto& item : p.items) c.sequences.push_back(std::move(item.input_ids));
  return c;
}

namespace {

class EncoderFlow : public TaskFlow {
 public:
  PreparedWork prepare(const RunSpec& spec, int ranks, const std::set<std::uint64_t>& skip) override {
    prepared_ = prepare_encoder_work(spec);
    PreparedWork w;
    w.shards = serialize_shards(prepared_.items, ranks, skip);
    w.samples = prepared_.sample_ids.size();
    w.items = prepared_.items.size();
    // Direct quantization: every rank calibrates on the same inputs (so every rank quantizes alike).
    if (spec.quantization.direct) w.shared = prepare_encoder_calibration(spec).serialize();
    std::vector<std::size_t> all(prepared_.items.size());
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
    w.inputs_sha256 = inputs_digest({serialize_items(prepared_.items, all), w.shared});
    return w;
  }

  void load(const RunSpec& spec, const std::string& shard, const std::string& shared, Provenance& prov,
            Communicator* tp) override {
    items_ = deserialize_items(shard);
    refuse_direct_with_tp(spec);
    if (spec.quantization.direct) require_float_checkpoint(spec);
    model_ = RobertaModel::load(spec.model.path, spec.model.dtype, spec.model.device,
                                spec.quantization.direct ? "none" : spec.quantization.method, tp);
    const auto want = spec.task.kind == TaskKind::qa ? RobertaHead::question_answering : RobertaHead::masked_lm;
    if (model_->head() != want) {
      throw InputError(spec.model.path + "/config.json",
                       std::string("the checkpoint's architecture has no head for task.kind = \"") +
                           to_string(spec.task.kind) + "\"");
    }
    pad_id_ = model_->config().pad_token_id;
    vocab_ = model_->config().vocab_size;
    check_encoder_inputs(spec, model_->config(), items_);  // positions and batch memory
    check_ids_fit(items_, vocab_, model_->config().max_sequence_length(), spec.model.path);
    prov.quantization = model_->quantization();
    if (spec.quantization.direct) {
      quant::Int8Settings settings = direct_int8_settings(spec);
      auto sites = quantize_int8(*model_, CalibrationSet::deserialize(shared), settings);
      install_int8(*model_, sites);
      prov.quantization = settings.describe() + " (direct)";
      log().info("int8: quantized in memory: {}", settings.describe());
    }
    put_on_device(*model_, prov);
    prov.weight_bytes = model_->weight_bytes();
    prov.architecture = model_->config().architectures.empty() ? "" : model_->config().architectures.front();
    if (prepared_.tokenizer) prov.tokenizer_sha256 = prepared_.tokenizer->sha256();
  }

  std::string run(const RunSpec& spec, bool report_progress, const ItemSink& sink) override {
    std::string out = run_shard(*model_, spec, items_, pad_id_, report_progress, sink);
    model_.reset();
    items_.clear();
    return out;
  }

  void finish(const RunSpec& spec, const std::vector<std::string>& gathered, RunTimes& times,
              Provenance prov) override {
    if (spec.task.kind == TaskKind::qa) {
      finish_qa(spec, prepared_, gathered, times, prov);
    } else {
      finish_mlm(spec, prepared_, gathered, times, prov, vocab_);
    }
  }

 private:
  Prepared prepared_;  // rank 0 only
  std::vector<EncoderItem> items_;
  std::unique_ptr<RobertaModel> model_;
  std::int64_t pad_id_ = 1;
  std::int64_t vocab_ = 0;
};

}  // namespace

std::unique_ptr<TaskFlow> make_encoder_flow() { return std::make_unique<EncoderFlow>(); }

}  // namespace evalrun
