#include "app/flows/decoder_flow.hpp"

#include "app/result_file.hpp"
#include "common/errors.hpp"
#include "common/logging.hpp"
#include "dist/serialize.hpp"
#include "io/logprobs16.hpp"
#include "io/text_file.hpp"
#include "task/lm_eval_stats.hpp"

namespace evalrun {

TaskFile task_file_for(const RunSpec& spec) {
  TaskFile task = read_task_file(spec.task.task_file);
  const std::string kind = to_string(spec.task.kind);
  if (task.output_type != kind) {
    throw InputError(task.path + ": output_type", "\"" + task.output_type + "\" does not run as task.kind = \"" + kind +
                                                      "\" (" + spec.config_path + ")");
  }
  return task;
}

std::vector<TaskDocument> task_documents(const RunSpec& spec, const TaskFile& task, std::size_t max_docs) {
  return build_task_documents(task, spec.task.dataset, {spec.task.num_fewshot, spec.task.fewshot_seed}, max_docs);
}

std::string document_sample_id(const TaskDocument& doc) { return "doc-" + std::to_string(doc.doc_id); }

void write_task_documents(H5Writer& out, const RunSpec& spec, const Provenance& prov, const TaskFile& task,
                          const std::vector<TaskDocument>& docs) {
  std::vector<std::string> ids, prompts;
  std::vector<std::int64_t> doc_ids;
  for (const auto& d : docs) {
    ids.push_back(document_sample_id(d));
    doc_ids.push_back(static_cast<std::int64_t>(d.doc_id));
    prompts.push_back(d.requests.front().context);
  }
  write_provenance(out, spec, prov);
  write_sample_index(out, ids);
  out.set_attr("/", "task_file", spec.task.task_file);
  out.set_attr("/", "task_name", task.name);
  out.write("/documents/doc_id", doc_ids);
  out.write_strings("/documents/prompt", prompts);
}

McRunInfo lm_eval_run_info(const RunSpec& spec, const TaskFile& task, std::size_t n_original) {
  McRunInfo info;
  info.task = task.name;
  info.task_file = spec.task.task_file;
  info.num_fewshot = spec.task.num_fewshot;
  info.fewshot_seed = spec.task.fewshot_seed;
  info.target_delimiter = task.target_delimiter;
  info.fewshot_delimiter = task.fewshot_delimiter;
  info.n_original = n_original;
  info.model_path = spec.model.path;
  info.batch_size = spec.task.batch_size;
  info.bootstrap_iters = kLmEvalBootstrapIters;  // lm-eval's default, as every stderr here is computed
  info.evalrun_version = version();
  return info;
}

void write_lm_eval_outputs(const RunSpec& spec, const std::string& results_json,
                           const std::vector<std::string>& sample_lines) {
  if (!spec.output.lm_eval_json.empty()) {
    write_text_file(spec.output.lm_eval_json, results_json + "\n", "the lm-eval results JSON");
  }
  if (!spec.output.samples_jsonl.empty()) {
    std::string text;
    for (const auto& line : sample_lines) text += line + "\n";
    write_text_file(spec.output.samples_jsonl, text, "the lm-eval samples JSONL");
  }
}

CalibrationSet task_file_calibration(
    const RunSpec& spec,
    const std::function<std::vector<std::vector<std::int64_t>>(const std::vector<TaskDocument>&, const DecoderTokenizer&)>& inputs) {
  CalibrationSet c;
  if (!direct_int8_settings(spec).needs_calibration()) return c;
  const auto tokenizer = DecoderTokenizer::from_dir(tokenizer_dir(spec));
  const auto n = static_cast<std::size_t>(spec.quantization.calibration_samples);
  const TaskFile task = task_file_for(spec);
  const std::string& from = spec.quantization.calibration_dataset.empty() ? spec.task.dataset : spec.quantization.calibration_dataset;
  const auto docs = build_task_documents(task, from, {spec.task.num_fewshot, spec.task.fewshot_seed}, n);
  c.dataset = from.empty() ? task.dataset : from;
  c.sequences = inputs(docs, tokenizer);
  c.examples = static_cast<std::int64_t>(docs.size());
  return c;
}

namespace {
constexpr const char* kTopkValues = "/logits/topk/values";
constexpr const char* kTopkIndices = "/logits/topk/indices";
}  // namespace

void DecoderFlow::keep_topk_rows(std::uint64_t index, std::vector<float>& values, std::vector<std::int64_t>& ids) {
  if (!values.empty()) rows_.add(kTopkValues, index, std::move(values));
  if (!ids.empty()) rows_.add(kTopkIndices, index, std::move(ids));
  values.clear();
  ids.clear();
}

std::vector<RowsPlan::Dataset> DecoderFlow::row_datasets(const RunSpec& spec, std::int64_t vocab, const char* logits) {
  switch (spec.output.logits) {
    case LogitsMode::none:
      return {};
    case LogitsMode::full:
      return {{logits, RowType::f32, vocab, {}}};
    case LogitsMode::topk:
      return {{kTopkValues, RowType::f32, spec.output.top_k, {}}, {kTopkIndices, RowType::i64, spec.output.top_k, {}}};
    case LogitsMode::logprobs16:
      return {{kLogProbs16Values, RowType::u16, vocab, {}}};
  }
  return {};
}

RowsPlan DecoderFlow::plan_of(const RunSpec& spec, std::int64_t vocab, const char* logits,
                              const std::vector<std::uint64_t>& rows_per_item) {
  RowsPlan plan;
  for (auto d : row_datasets(spec, vocab, logits)) {
    d.rows_per_item = rows_per_item;
    plan.datasets.push_back(std::move(d));
  }
  return plan;
}

int keep_logits(const RunSpec& spec) {
  switch (spec.output.logits) {
    case LogitsMode::none:
      return 0;
    case LogitsMode::topk:
      return spec.output.top_k;
    case LogitsMode::full:
      return kKeepFullLogits;
    case LogitsMode::logprobs16:
      return kKeepLogProbs16;
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

PreparedWork DecoderFlow::prepare(const RunSpec& spec, int ranks, const std::set<std::uint64_t>& skip) {
  tokenizer_.emplace(DecoderTokenizer::from_dir(tokenizer_dir(spec)));
  std::string everything;
  PreparedWork w = prepare_task(spec, ranks, skip, everything);
  if (spec.quantization.direct) {
    // Direct quantization: every rank calibrates on the same inputs, sent beside the task's own.
    ByteWriter b;
    b.put_string(calibration_(spec).serialize());
    b.put_string(w.shared);
    w.shared = b.take();
  }
  w.inputs_sha256 = inputs_digest({everything, w.shared});
  return w;
}

void DecoderFlow::load(const RunSpec& spec, const std::string& shard, const std::string& all_shared, Provenance& prov,
                       Communicator* tp) {
  const auto t0 = Clock::now();
  refuse_direct_with_tp(spec);
  std::string shared = all_shared, calibration;
  if (spec.quantization.direct) {
    ByteReader b(all_shared);
    calibration = b.get_string();
    shared = b.get_string();
  }
  if (spec.quantization.direct) require_float_checkpoint(spec);
  model_ = load_causal_lm(model_load(spec, spec.quantization.direct ? "none" : spec.quantization.method, tp));
  install_model(spec, *model_, calibration, prov);
  if (spec.quantization.lm_head == "int8") {
    const std::string how = model_->quantize_lm_head_int8();
    prov.quantization += "; lm_head " + how + " (in memory)";
    prov.weight_bytes = model_->weight_bytes();
    log().info("lm_head quantized in memory: {}", how);
  }
  if (tokenizer_) prov.tokenizer_sha256 = tokenizer_->sha256();
  const std::size_t items = load_task(spec, shard, shared, model_->vocab_size());
  log_model_load(spec, prov, seconds_since(t0), items, "items");
}

}  // namespace evalrun
