// generate and perplexity runs of Llama-family decoders.
#include <algorithm>
#include <cmath>
#include <limits>
#include <functional>
#include <numeric>
#include <optional>
#include <set>

#include "app/direct_quant.hpp"
#include "app/task_flow.hpp"
#include "common/errors.hpp"
#include "common/logging.hpp"
#include "common/text.hpp"
#include "dist/serialize.hpp"
#include "io/hdf5_file.hpp"
#include "io/prompts.hpp"
#include "model/llama.hpp"
#include "task/generate.hpp"
#include "task/input_limits.hpp"
#include "task/perplexity.hpp"
#include "tokenizer/decoder_tokenizer.hpp"

namespace evalrun {
namespace {

// 0 none, -1 full rows, k > 0 top-k: what the runners keep of each step's logits.
int keep_logits(const RunSpec& spec) {
  switch (spec.output.logits) {
    case LogitsMode::none:
      return 0;
    case LogitsMode::topk:
      return spec.output.top_k;
    case LogitsMode::full:
      return -1;
  }
  return 0;
}

void check_ids_in_vocab(const std::vector<std::int64_t>& ids, std::int64_t vocab, const std::string& model_path,
                        const std::string& what) {
  for (auto id : ids) {
    if (id < 0 || id >= vocab) {
      throw InputError(model_path, what + ": token id " + std::to_string(id) + " is outside the model's vocabulary (" +
                                       std::to_string(vocab) + "): tokenizer and model do not match");
    }
  }
}

std::string join_stop_ids(const std::vector<std::int64_t>& ids) {
  std::string s;
  for (auto id : ids) {
    if (!s.empty()) s.push_back(' ');
    s.append(std::to_string(id));
  }
  return s;
}

// Writes [rows, row_len] float32 rows given as one flat vector per sample (rows of all samples stacked).
void write_step_logits(H5Writer& out, const std::string& path, const std::vector<std::vector<float>>& per_sample,
                       std::int64_t row_len) {
  std::vector<float> flat;
  for (const auto& v : per_sample) flat.insert(flat.end(), v.begin(), v.end());
  const auto rows = row_len > 0 ? static_cast<std::int64_t>(flat.size()) / row_len : 0;
  out.write(path, flat, {rows, row_len}, /*row_chunk=*/4);
}

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

int context_length_of(const RunSpec& spec) {
  int context = spec.task.context_length;
  if (context == 0) {
    context = static_cast<int>(LlamaConfig::from_json_file(spec.model.path + "/config.json").max_position_embeddings);
  }
  return context;
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

}  // namespace

CalibrationSet prepare_decoder_calibration(const RunSpec& spec) {
  CalibrationSet c;
  if (!direct_int8_settings(spec).needs_calibration()) return c;
  const auto tokenizer = DecoderTokenizer::from_dir(tokenizer_dir(spec));
  const auto n = static_cast<std::size_t>(spec.quantization.calibration_samples);
  if (spec.task.kind == TaskKind::generate) {
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
  } else {
    // The first windows of the calibration text, as the run cuts its own.
    c.dataset = calibration_dataset(spec);
    const std::string text = read_file(c.dataset);
    if (text.empty()) throw InputError(c.dataset, "the calibration corpus is empty");
    const auto tokens = tokenizer.encode(text);
    auto windows = make_perplexity_windows(static_cast<std::int64_t>(tokens.size()), context_length_of(spec),
                                           spec.task.stride);
    if (windows.size() > n) windows.resize(n);
    for (const auto& w : windows) c.sequences.emplace_back(tokens.begin() + w.begin, tokens.begin() + w.end);
    c.examples = static_cast<std::int64_t>(windows.size());
  }
  return c;
}

namespace {

// ================================================================================================
class DecoderFlow : public TaskFlow {
 public:
  PreparedWork prepare(const RunSpec& spec, int ranks, const std::set<std::uint64_t>& skip) override {
    tokenizer_.emplace(DecoderTokenizer::from_dir(tokenizer_dir(spec)));
    // `everything`: every item as one shard, for the inputs digest.
    std::string everything;
    PreparedWork w = spec.task.kind == TaskKind::generate ? prepare_generate(spec, ranks, skip, everything)
                                                          : prepare_perplexity(spec, ranks, skip, everything);
    if (spec.quantization.direct) {
      // Direct quantization: every rank calibrates on the same inputs, sent beside the task's own.
      ByteWriter b;
      b.put_string(prepare_decoder_calibration(spec).serialize());
      b.put_string(w.shared);
      w.shared = b.take();
    }
    w.inputs_sha256 = inputs_digest({everything, w.shared});
    return w;
  }

  void load(const RunSpec& spec, const std::string& shard, const std::string& all_shared, Provenance& prov,
            Communicator* tp) override {
    refuse_direct_with_tp(spec);
    std::string shared = all_shared, calibration;
    if (spec.quantization.direct) {
      ByteReader b(all_shared);
      calibration = b.get_string();
      shared = b.get_string();
    }
    if (spec.quantization.direct) require_float_checkpoint(spec);
    model_ = DecoderModel::load(spec.model.path, spec.model.dtype, spec.model.device,
                                spec.quantization.direct ? "none" : spec.quantization.method, tp);
    const auto& cfg = model_->config();
    prov.quantization = model_->quantization();
    if (spec.quantization.direct) {
      quant::Int8Settings settings = direct_int8_settings(spec);
      auto sites = quantize_int8(*model_, CalibrationSet::deserialize(calibration), settings);
      install_int8(*model_, sites);
      prov.quantization = settings.describe() + " (direct)";
      log().info("int8: quantized in memory: {}", settings.describe());
    }
    put_on_device(*model_, prov);
    prov.weight_bytes = model_->weight_bytes();
    prov.architecture = cfg.architectures.empty() ? cfg.model_type : cfg.architectures.front();
    if (tokenizer_) prov.tokenizer_sha256 = tokenizer_->sha256();
    ByteReader r(shard);
    if (spec.task.kind == TaskKind::generate) {
      stop_ids_ = r.get_vector<std::int64_t>();
      pad_id_ = r.get<std::int64_t>();
      gen_items_.resize(r.get<std::uint64_t>());
      for (auto& it : gen_items_) {
        it.index = r.get<std::uint64_t>();
        it.id = r.get_string();
        it.prompt_ids = r.get_vector<std::int64_t>();
        it.truncated = r.get<std::uint8_t>() != 0;
        if (r.get<std::uint8_t>() != 0) it.forced_ids = r.get_vector<std::int64_t>();
        check_ids_in_vocab(it.prompt_ids, cfg.vocab_size, spec.model.path, "prompt '" + it.id + "'");
        if (it.forced_ids) {
          check_ids_in_vocab(*it.forced_ids, cfg.vocab_size, spec.validation.golden,
                             "golden tokens of prompt '" + it.id + "'");
        }
      }
    } else {
      ByteReader s(shared);
      tokens_ = s.get_vector<std::int64_t>();
      context_ = static_cast<int>(s.get<std::int64_t>());
      check_ids_in_vocab(tokens_, cfg.vocab_size, spec.model.path, spec.task.dataset);
      windows_.resize(r.get<std::uint64_t>());
      for (auto& w : windows_) {
        w.index = r.get<std::uint64_t>();
        w.begin = r.get<std::int64_t>();
        w.end = r.get<std::int64_t>();
        w.score_from = r.get<std::int64_t>();
      }
    }
    check_decoder_inputs(spec, cfg, gen_items_, windows_);  // positions and batch memory
  }

  std::string run(const RunSpec& spec, bool report_progress, const ItemSink& sink) override {
    std::string out = spec.task.kind == TaskKind::generate ? run_generate(spec, report_progress, sink)
                                                           : run_perplexity(spec, report_progress, sink);
    model_.reset();
    return out;
  }

  void finish(const RunSpec& spec, const std::vector<std::string>& gathered, RunTimes& times,
              Provenance prov) override {
    if (spec.task.kind == TaskKind::generate) {
      finish_generate(spec, gathered, times, prov);
    } else {
      finish_perplexity(spec, gathered, times, prov);
    }
  }

 private:
  // --- generate -----------------------------------------------------------------------------------
  GenerationOptions generation_options(const RunSpec& spec) const {
    GenerationOptions o = prompt_options(spec);
    o.no_early_termination = spec.task.no_early_termination;
    o.keep_logits = keep_logits(spec);
    return o;
  }

  PreparedWork prepare_generate(const RunSpec& spec, int ranks, const std::set<std::uint64_t>& skip,
                                std::string& everything) {
    prompts_ = spec.task.prompt_set.empty() ? read_prompts(spec.task.dataset) : builtin_prompts(spec.task.prompt_set);
    if (spec.task.max_samples > 0 && static_cast<std::size_t>(spec.task.max_samples) < prompts_.size()) {
      prompts_.resize(static_cast<std::size_t>(spec.task.max_samples));
    }
    auto items = prepare_generation_items(prompts_, *tokenizer_, generation_options(spec));
    if (!spec.validation.golden.empty()) {
      attach_golden_tokens(spec.validation.golden, items);
      log().info("generate: teacher forcing the generated tokens of {}", spec.validation.golden);
    }
    prompt_ids_.clear();
    truncated_.clear();
    for (const auto& it : items) {
      prompt_ids_.push_back(it.prompt_ids);
      truncated_.push_back(it.truncated ? 1 : 0);
    }
    auto serialize = [&](const std::vector<std::size_t>& positions) {
      ByteWriter b;
      b.put_vector(tokenizer_->stop_ids());
      b.put<std::int64_t>(tokenizer_->pad_id());
      b.put<std::uint64_t>(positions.size());
      for (std::size_t i : positions) {
        b.put<std::uint64_t>(items[i].index);
        b.put_string(items[i].id);
        b.put_vector(items[i].prompt_ids);
        b.put<std::uint8_t>(items[i].truncated ? 1 : 0);
        b.put<std::uint8_t>(items[i].forced_ids ? 1 : 0);
        if (items[i].forced_ids) b.put_vector(*items[i].forced_ids);
      }
      return b.take();
    };
    std::vector<std::size_t> all(items.size()), todo;
    std::vector<std::int64_t> cost;
    for (std::size_t i = 0; i < items.size(); ++i) {
      all[i] = i;
      if (skip.count(items[i].index)) continue;
      const auto& it = items[i];
      const auto steps = it.forced_ids ? static_cast<std::int64_t>(it.forced_ids->size()) : spec.task.max_new_tokens;
      todo.push_back(i);
      cost.push_back(static_cast<std::int64_t>(it.prompt_ids.size()) + steps);
    }
    everything = serialize(all);
    PreparedWork w;
    for (const auto& shard : balanced_shards(cost, ranks)) {
      std::vector<std::size_t> positions;
      for (std::size_t j : shard) positions.push_back(todo[j]);
      w.shards.push_back(serialize(positions));
    }
    w.samples = w.items = items.size();
    log().info("generate: {} prompts, stop ids [{}], pad id {}", items.size(), join_stop_ids(tokenizer_->stop_ids()),
               tokenizer_->pad_id());
    return w;
  }

  std::string run_generate(const RunSpec& spec, bool report_progress, const ItemSink& sink) {
    GenerationOptions o = generation_options(spec);
    Progress progress("prompts");
    if (report_progress) o.progress = std::ref(progress);
    ResultRecords records(sink);
    auto batch_done = [&](const std::vector<GenerationResult>& results, const std::vector<std::size_t>& done) {
      for (std::size_t i : done) records.add(results[i].index, generation_record(results[i]));
      records.end_batch();
    };
    run_generation(*model_, gen_items_, o, stop_ids_, pad_id_, batch_done);
    return records.take();
  }

  // What finish_generate reads of one prompt.
  static std::string generation_record(const GenerationResult& r) {
    ByteWriter w;
    w.put_vector(r.generated_ids);
    w.put_vector(r.own_ids);
    w.put<std::uint8_t>(r.stopped ? 1 : 0);
    w.put<std::int64_t>(r.vocab);
    w.put_vector(r.step_logits);
    w.put_vector(r.topk_ids);
    w.put_vector(r.topk_logits);
    w.put<double>(r.prefill_seconds);
    w.put_vector(r.step_seconds);
    w.put<std::int64_t>(r.batch_rows);
    w.put<std::int64_t>(r.padded_length);
    return w.take();
  }

  void finish_generate(const RunSpec& spec, const std::vector<std::string>& gathered, RunTimes& times,
                       Provenance prov) {
    const std::size_t n = prompts_.size();
    std::vector<GenerationResult> res(n);
    read_gathered(gathered, n, "prompt", [&](ByteReader& r, std::size_t index) {
      GenerationResult& g = res[index];
      g.index = index;
      g.generated_ids = r.get_vector<std::int64_t>();
      g.own_ids = r.get_vector<std::int64_t>();
      g.stopped = r.get<std::uint8_t>() != 0;
      g.vocab = r.get<std::int64_t>();
      g.step_logits = r.get_vector<float>();
      g.topk_ids = r.get_vector<std::int64_t>();
      g.topk_logits = r.get_vector<float>();
      g.prefill_seconds = r.get<double>();
      g.step_seconds = r.get_vector<double>();
      g.batch_rows = r.get<std::int64_t>();
      g.padded_length = r.get<std::int64_t>();
    });

    std::vector<std::string> ids, texts, generated_text;
    std::vector<std::vector<std::int64_t>> generated, own;
    std::vector<std::int64_t> stopped, n_generated;
    std::vector<double> prefill, first, mean_all, mean_next, min_next, max_next, std_next, item_seconds;
    std::vector<std::int64_t> min_step, max_step;
    std::vector<std::vector<double>> step_seconds;
    std::vector<std::vector<float>> full_rows, topk_values;
    std::vector<std::vector<std::int64_t>> topk_ids;
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
      full_rows.push_back(g.step_logits);
      topk_values.push_back(g.topk_logits);
      topk_ids.push_back(g.topk_ids);
    }
    for (double s : item_seconds) times.model_total += s;

    H5Writer out(spec.output.path);
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
    if (spec.output.logits == LogitsMode::full) {
      write_step_logits(out, "/logits/step_logits", full_rows, vocab);
    } else if (spec.output.logits == LogitsMode::topk) {
      write_step_logits(out, "/logits/topk/values", topk_values, spec.output.top_k);
      std::vector<std::int64_t> flat;
      for (const auto& v : topk_ids) flat.insert(flat.end(), v.begin(), v.end());
      out.write("/logits/topk/indices", flat, {static_cast<std::int64_t>(total_new), spec.output.top_k});
    }
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
    out.commit();
    log().info("generate: {} prompts, {} new tokens ({} stopped at EOS)", n, total_new,
               std::count(stopped.begin(), stopped.end(), 1));
  }

  static std::int64_t model_vocab(const std::vector<GenerationResult>& res) {
    for (const auto& r : res) {
      if (r.vocab > 0) return r.vocab;
    }
    return 0;
  }

  // --- perplexity ---------------------------------------------------------------------------------
  PreparedWork prepare_perplexity(const RunSpec& spec, int ranks, const std::set<std::uint64_t>& skip,
                                  std::string& everything) {
    const std::string text = read_file(spec.task.dataset);
    if (text.empty()) throw InputError(spec.task.dataset, "the corpus is empty");
    tokens_ = tokenizer_->encode(text);
    context_ = context_length_of(spec);
    if (context_ < 2) throw InputError(spec.config_path, "task.context_length must be at least 2");
    if (spec.task.stride > context_) {
      throw InputError(spec.config_path, "task.stride (" + std::to_string(spec.task.stride) +
                                             ") exceeds the context length (" + std::to_string(context_) + ")");
    }
    all_windows_ = make_perplexity_windows(static_cast<std::int64_t>(tokens_.size()), context_, spec.task.stride);
    if (spec.task.max_samples > 0 && static_cast<std::size_t>(spec.task.max_samples) < all_windows_.size()) {
      all_windows_.resize(static_cast<std::size_t>(spec.task.max_samples));  // the first N windows only
    }
    auto serialize = [&](const std::vector<std::size_t>& positions) {
      ByteWriter b;
      b.put<std::uint64_t>(positions.size());
      for (std::size_t i : positions) {
        b.put<std::uint64_t>(all_windows_[i].index);
        b.put<std::int64_t>(all_windows_[i].begin);
        b.put<std::int64_t>(all_windows_[i].end);
        b.put<std::int64_t>(all_windows_[i].score_from);
      }
      return b.take();
    };
    std::vector<std::size_t> all(all_windows_.size()), todo;
    std::vector<std::int64_t> cost;
    for (std::size_t i = 0; i < all_windows_.size(); ++i) {
      all[i] = i;
      if (skip.count(all_windows_[i].index)) continue;
      todo.push_back(i);
      cost.push_back(all_windows_[i].end - all_windows_[i].begin);
    }
    everything = serialize(all);
    PreparedWork work;
    for (const auto& shard : balanced_shards(cost, ranks)) {
      std::vector<std::size_t> positions;
      for (std::size_t j : shard) positions.push_back(todo[j]);
      work.shards.push_back(serialize(positions));
    }
    ByteWriter shared;
    shared.put_vector(tokens_);
    shared.put<std::int64_t>(context_);
    work.shared = shared.take();
    work.samples = 1;
    work.items = all_windows_.size();
    log().info("perplexity: {} tokens in {} windows of {} (stride {})", tokens_.size(), all_windows_.size(), context_,
               spec.task.stride == 0 ? context_ : spec.task.stride);
    return work;
  }

  std::string run_perplexity(const RunSpec& spec, bool report_progress, const ItemSink& sink) {
    PerplexityOptions o;
    o.context_length = context_;
    o.stride = spec.task.stride;
    o.batch_size = spec.task.batch_size;
    o.keep_logits = keep_logits(spec);
    Progress progress("windows");
    if (report_progress) o.progress = std::ref(progress);
    ResultRecords records(sink);
    score_perplexity_windows(*model_, tokens_, windows_, o,
                             [&](const std::vector<WindowScores>& scores, const std::vector<std::size_t>& done) {
                               for (std::size_t i : done) {
                                 const auto& s = scores[i];
                                 ByteWriter w;  // what finish_perplexity reads of one window
                                 w.put_vector(s.positions);
                                 w.put_vector(s.log_probs);
                                 w.put<std::int64_t>(s.vocab);
                                 w.put_vector(s.logits);
                                 w.put_vector(s.topk_ids);
                                 w.put_vector(s.topk_logits);
                                 w.put<double>(s.seconds);
                                 records.add(s.index, w.take());
                               }
                               records.end_batch();
                             });
    return records.take();
  }

  void finish_perplexity(const RunSpec& spec, const std::vector<std::string>& gathered, RunTimes& times,
                         Provenance prov) {
    const std::size_t nw = all_windows_.size();
    std::vector<WindowScores> by_window(nw);
    read_gathered(gathered, nw, "window", [&](ByteReader& r, std::size_t index) {
      WindowScores& s = by_window[index];
      s.index = index;
      s.positions = r.get_vector<std::int64_t>();
      s.log_probs = r.get_vector<double>();
      s.vocab = r.get<std::int64_t>();
      s.logits = r.get_vector<float>();
      s.topk_ids = r.get_vector<std::int64_t>();
      s.topk_logits = r.get_vector<float>();
      s.seconds = r.get<double>();
    });
    // windows are in stream order and score disjoint ranges, so concatenation is position order
    std::vector<std::int64_t> positions, topk_ids;
    std::vector<double> log_probs, item_seconds;
    std::vector<float> logits, topk_logits;
    std::int64_t vocab = 0;
    for (const auto& s : by_window) {
      positions.insert(positions.end(), s.positions.begin(), s.positions.end());
      log_probs.insert(log_probs.end(), s.log_probs.begin(), s.log_probs.end());
      logits.insert(logits.end(), s.logits.begin(), s.logits.end());
      topk_ids.insert(topk_ids.end(), s.topk_ids.begin(), s.topk_ids.end());
      topk_logits.insert(topk_logits.end(), s.topk_logits.begin(), s.topk_logits.end());
      item_seconds.push_back(s.seconds);
      if (s.vocab > 0) vocab = s.vocab;
    }
    for (double s : item_seconds) times.model_total += s;
    const PerplexitySummary sum = summarize_perplexity(log_probs);
    const auto scored = static_cast<std::int64_t>(positions.size());

    H5Writer out(spec.output.path);
    prov.end_time = utc_now_iso8601();
    write_provenance(out, spec, prov);
    write_sample_index(out, {spec.task.dataset});
    out.write("/tokens/ids", tokens_);
    std::vector<std::int64_t> wb, we, ws;
    for (const auto& w : all_windows_) {
      wb.push_back(w.begin);
      we.push_back(w.end);
      ws.push_back(w.score_from);
    }
    out.write("/windows/begin", wb);
    out.write("/windows/end", we);
    out.write("/windows/score_from", ws);
    out.write("/scores/position", positions);
    out.write("/scores/log_prob", log_probs);
    if (spec.output.logits == LogitsMode::full) {
      out.write("/logits/full", logits, {scored, vocab}, /*row_chunk=*/4);
    } else if (spec.output.logits == LogitsMode::topk) {
      out.write("/logits/topk/values", topk_logits, {scored, spec.output.top_k});
      out.write("/logits/topk/indices", topk_ids, {scored, spec.output.top_k});
    }
    out.create_group("/metrics");
    out.set_attr("/metrics", "perplexity", sum.perplexity);
    out.set_attr("/metrics", "perplexity_stderr", sum.perplexity_stderr);
    out.set_attr("/metrics", "mean_nll", sum.mean_nll);
    out.set_attr("/metrics", "n_scored_tokens", sum.n_scored);
    out.set_attr("/metrics", "n_tokens", static_cast<std::int64_t>(tokens_.size()));
    out.set_attr("/metrics", "n_windows", static_cast<std::int64_t>(nw));
    out.set_attr("/metrics", "context_length", static_cast<std::int64_t>(context_));
    out.set_attr("/metrics", "stride", static_cast<std::int64_t>(spec.task.stride == 0 ? context_ : spec.task.stride));
    write_timing(out, times, item_seconds, nw, tokens_.size(), 1);
    out.commit();
    log().info("perplexity: {:.4f} ± {:.4f} over {} tokens ({} windows)", sum.perplexity, sum.perplexity_stderr,
               sum.n_scored, nw);
  }

  // rank 0
  std::optional<DecoderTokenizer> tokenizer_;
  std::vector<Prompt> prompts_;
  std::vector<std::vector<std::int64_t>> prompt_ids_;
  std::vector<std::int64_t> truncated_;
  std::vector<PerplexityWindow> all_windows_;
  // every rank
  std::unique_ptr<DecoderModel> model_;
  std::vector<GenerationItem> gen_items_;
  std::vector<std::int64_t> stop_ids_;
  std::int64_t pad_id_ = 0;
  std::vector<std::int64_t> tokens_;  // perplexity: the whole stream
  int context_ = 0;
  std::vector<PerplexityWindow> windows_;
};

}  // namespace

std::unique_ptr<TaskFlow> make_decoder_flow() { return std::make_unique<DecoderFlow>(); }

}  // namespace evalrun
