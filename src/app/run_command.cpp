#include "app/run_command.hpp"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <thread>

#include "app/result_file.hpp"
#include "common/errors.hpp"
#include "common/logging.hpp"
#include "common/sha256.hpp"
#include "dist/serialize.hpp"
#include "dist/sharding.hpp"
#include "io/hdf5_file.hpp"
#include "io/squad.hpp"
#include "io/text_dataset.hpp"
#include "model/roberta.hpp"
#include "task/encoder_runner.hpp"
#include "task/mlm.hpp"
#include "task/qa_features.hpp"
#include "task/qa_postprocess.hpp"
#include "task/squad_metric.hpp"
#include "tokenizer/tokenizer.hpp"

namespace evalrun {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Threads per rank: run.threads, else the node's cores shared among the ranks on the node, but never
// more than the cores this rank may run on (mpirun binds a rank to one core unless --bind-to none).
int choose_threads(const RunSpec& spec, const MpiWorld& world) {
  cpu_set_t set;
  int allowed = static_cast<int>(std::thread::hardware_concurrency());
  if (sched_getaffinity(0, sizeof set, &set) == 0) allowed = CPU_COUNT(&set);
  if (spec.run.threads > 0) {
    if (spec.run.threads > allowed) {
      log().warn("run.threads = {} but this rank may only use {} core(s); launch mpirun with --bind-to none",
                 spec.run.threads, allowed);
    }
    return spec.run.threads;
  }
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int share = std::max(1, cores / std::max(1, world.local_size()));
  return std::max(1, std::min(share, allowed));
}

std::string tokenizer_dir(const RunSpec& spec) {
  return spec.model.tokenizer.empty() ? spec.model.path : spec.model.tokenizer;
}

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

Prepared prepare(const RunSpec& spec) {
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

std::vector<std::string> serialize_shards(const std::vector<EncoderItem>& items, int parts) {
  std::vector<std::int64_t> cost;
  cost.reserve(items.size());
  for (const auto& it : items) cost.push_back(static_cast<std::int64_t>(it.input_ids.size()));
  std::vector<std::string> out;
  for (const auto& shard : shard_by_cost(cost, parts)) {
    ByteWriter w;
    w.put<std::uint64_t>(shard.size());
    for (std::size_t i : shard) {
      w.put<std::uint64_t>(items[i].index);
      w.put_vector(items[i].input_ids);
      w.put_vector(items[i].mask_positions);
    }
    out.push_back(w.take());
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

// --- every rank: run the shard --------------------------------------------------------------------

struct Progress {
  Clock::time_point start = Clock::now();
  Clock::time_point last = Clock::now();
  void operator()(std::size_t done, std::size_t total, double) {
    if (seconds_since(last) < 5.0 && done != total) return;
    last = Clock::now();
    const double el = seconds_since(start);
    const double rate = el > 0 ? static_cast<double>(done) / el : 0.0;
    const double eta = rate > 0 ? static_cast<double>(total - done) / rate : 0.0;
    log().info("progress (rank 0 shard): {}/{} features, {:.2f} features/s, ETA {:.0f} s", done, total, rate, eta);
  }
};

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

std::string run_shard(RobertaModel& model, const RunSpec& spec, const std::vector<EncoderItem>& items,
                      std::int64_t pad_id, bool report_progress) {
  EncoderBatchOptions opt;
  opt.batch_size = spec.task.batch_size;
  opt.pad_id = pad_id;
  opt.pad_to_length = spec.task.pad_to_max_length ? spec.task.max_seq_length : 0;
  Progress progress;
  if (report_progress) opt.progress = std::ref(progress);
  ByteWriter w;
  if (spec.task.kind == TaskKind::qa) {
    auto results = run_qa_items(model, items, opt);
    w.put<std::uint64_t>(results.size());
    for (const auto& r : results) {
      w.put<std::uint64_t>(r.index);
      w.put<double>(r.seconds);
      w.put_vector(r.start_logits);
      w.put_vector(r.end_logits);
    }
  } else {
    auto results = run_mlm_items(model, items, opt);
    const std::int64_t vocab = model.config().vocab_size;
    const bool full = spec.output.logits == LogitsMode::full;
    const int k = std::max(spec.task.top_k, spec.output.logits == LogitsMode::topk ? spec.output.top_k : 0);
    w.put<std::uint64_t>(results.size());
    for (std::size_t i = 0; i < results.size(); ++i) {
      const auto& r = results[i];
      const std::size_t masks = items[i].mask_positions.size();
      w.put<std::uint64_t>(r.index);
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
    }
  }
  return w.take();
}

// --- rank 0: results -> file -----------------------------------------------------------------------

struct RunTimes {
  double prepare = 0, load = 0, inference = 0, model_total = 0;
  Clock::time_point start = Clock::now();
};

void write_topk_rows(H5Writer& out, const std::string& group, const std::vector<std::vector<float>>& rows, int k) {
  std::vector<float> values;
  std::vector<std::int64_t> indices;
  for (const auto& row : rows) {
    std::vector<std::int64_t> order(row.size());
    for (std::size_t i = 0; i < row.size(); ++i) order[i] = static_cast<std::int64_t>(i);
    const std::size_t kk = std::min<std::size_t>(static_cast<std::size_t>(k), row.size());
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(kk), order.end(),
                      [&](std::int64_t a, std::int64_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    for (int j = 0; j < k; ++j) {
      const bool have = static_cast<std::size_t>(j) < kk;
      values.push_back(have ? row[order[j]] : -std::numeric_limits<float>::infinity());
      indices.push_back(have ? order[j] : -1);
    }
  }
  const auto n = static_cast<std::int64_t>(rows.size());
  out.write(group + "/values", values, {n, k});
  out.write(group + "/indices", indices, {n, k});
}

void write_timing(H5Writer& out, const RunTimes& t, const std::vector<double>& item_seconds, std::size_t items,
                  std::size_t tokens, std::size_t samples) {
  out.create_group("/timing");
  out.set_attr("/timing", "wall_seconds", seconds_since(t.start));
  out.set_attr("/timing", "prepare_seconds", t.prepare);
  out.set_attr("/timing", "load_seconds", t.load);
  out.set_attr("/timing", "inference_seconds", t.inference);
  out.set_attr("/timing", "model_seconds_all_ranks", t.model_total);
  out.write("/timing/feature_seconds", item_seconds);
  const double s = t.inference > 0 ? t.inference : 1e-9;
  out.set_attr("/metrics", "samples_per_second", static_cast<double>(samples) / s);
  out.set_attr("/metrics", "features_per_second", static_cast<double>(items) / s);
  out.set_attr("/metrics", "tokens_per_second", static_cast<double>(tokens) / s);
}

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
  std::vector<char> seen(nf, 0);
  for (const auto& bytes : gathered) {
    ByteReader r(bytes);
    const auto n = r.get<std::uint64_t>();
    for (std::uint64_t i = 0; i < n; ++i) {
      const auto idx = r.get<std::uint64_t>();
      if (idx >= nf || seen[idx]) throw std::runtime_error("gather: feature index out of range or repeated");
      seen[idx] = 1;
      item_seconds[idx] = r.get<double>();
      start[idx] = r.get_vector<float>();
      end[idx] = r.get_vector<float>();
    }
  }
  if (std::count(seen.begin(), seen.end(), 0) != 0) throw std::runtime_error("gather: a feature has no result");
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
  std::vector<char> seen(ns, 0);
  for (const auto& bytes : gathered) {
    ByteReader r(bytes);
    const auto n = r.get<std::uint64_t>();
    for (std::uint64_t i = 0; i < n; ++i) {
      const auto idx = r.get<std::uint64_t>();
      if (idx >= ns || seen[idx]) throw std::runtime_error("gather: sample index out of range or repeated");
      seen[idx] = 1;
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
    }
  }
  if (std::count(seen.begin(), seen.end(), 0) != 0) throw std::runtime_error("gather: a sample has no result");
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

std::string checkpoint_sha256(const std::string& dir) {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const auto name = e.path().filename().string();
    if (e.is_regular_file() && (name == "config.json" || e.path().extension() == ".safetensors")) {
      files.push_back(e.path());
    }
  }
  std::sort(files.begin(), files.end());
  return sha256_files(files);
}

}  // namespace

int run_command(const MpiWorld& world, const RunSpec& spec) {
  RunTimes times;
  Provenance prov;
  prov.start_time = utc_now_iso8601();
  prov.world_size = world.size();
  if (spec.parallel.tensor_parallel != 1) {
    throw InputError(spec.config_path, "parallel.tensor_parallel = " + std::to_string(spec.parallel.tensor_parallel) +
                                           ": tensor parallelism is not implemented yet (use 1)");
  }
  const int threads = choose_threads(spec, world);
  set_compute_threads(threads);
  prov.threads_per_rank = threads;
  log().info("run '{}': task {}, {} rank(s) x {} thread(s), dtype {}, model {}", spec.run.name,
             to_string(spec.task.kind), world.size(), threads, to_string(spec.model.dtype), spec.model.path);

  // 1. rank 0 reads and tokenizes the data set and splits the work.
  Prepared prepared;
  std::vector<std::string> shards;
  world.collective_step([&] {
    if (!world.is_root()) return;
    auto t0 = Clock::now();
    prepared = prepare(spec);
    shards = serialize_shards(prepared.items, world.size());
    times.prepare = seconds_since(t0);
    log().info("prepared {} samples -> {} features in {:.2f} s", prepared.sample_ids.size(), prepared.items.size(),
               times.prepare);
  });
  std::vector<EncoderItem> my_items = deserialize_items(world.scatter(shards));
  shards.clear();

  // 2. every rank loads the model and checks it fits the task and the tokenized inputs.
  std::unique_ptr<RobertaModel> model;
  std::int64_t pad_id = 1;
  std::int64_t model_vocab = 0;
  world.collective_step([&] {
    auto t0 = Clock::now();
    model = RobertaModel::load(spec.model.path, spec.model.dtype, spec.model.device);
    const auto want = spec.task.kind == TaskKind::qa ? RobertaHead::question_answering : RobertaHead::masked_lm;
    if (model->head() != want) {
      throw InputError(spec.model.path + "/config.json",
                       std::string("the checkpoint's architecture has no head for task.kind = \"") +
                           to_string(spec.task.kind) + "\"");
    }
    pad_id = model->config().pad_token_id;
    model_vocab = model->config().vocab_size;
    check_ids_fit(my_items, model->config().vocab_size, model->config().max_sequence_length(), spec.model.path);
    times.load = seconds_since(t0);
    if (world.is_root()) {
      prov.model_sha256 = checkpoint_sha256(spec.model.path);
      prov.compute_dtype = model->compute_dtype();
      prov.tokenizer_sha256 = prepared.tokenizer->sha256();
      prov.architecture = model->config().architectures.empty() ? "" : model->config().architectures.front();
    }
  });

  // 3. every rank runs its shard; rank 0 gathers.
  std::string mine;
  world.collective_step([&] {
    auto t0 = Clock::now();
    mine = run_shard(*model, spec, my_items, pad_id, world.is_root());
    times.inference = seconds_since(t0);
  });
  model.reset();
  my_items.clear();
  auto gathered = world.gather(mine);
  mine.clear();
  // wall time of the slowest rank, as the job sees it
  {
    std::string t = std::to_string(times.inference);
    auto all = world.gather(t);
    for (const auto& s : all) times.inference = std::max(times.inference, std::stod(s));
  }

  // 4. rank 0 post-processes and writes the file.
  world.collective_step([&] {
    if (!world.is_root()) return;
    if (spec.task.kind == TaskKind::qa) {
      finish_qa(spec, prepared, gathered, times, prov);
    } else {
      finish_mlm(spec, prepared, gathered, times, prov, model_vocab);
    }
    log().info("wrote {}", spec.output.path);
  });
  return kExitOk;
}

}  // namespace evalrun
