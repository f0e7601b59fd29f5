#include "app/flows/encoder_flow.hpp"

#include "task/input_limits.hpp"

#include <functional>

#include "common/errors.hpp"
#include "common/logging.hpp"
#include "dist/serialize.hpp"

namespace evalrun {
namespace {

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

}  // namespace

PreparedWork EncoderFlow::share_out(const RunSpec& spec, int ranks, const std::set<std::uint64_t>& skip,
                                    std::size_t samples) {
  PreparedWork w;
  std::vector<std::int64_t> cost;
  for (const auto& it : all_items_) cost.push_back(static_cast<std::int64_t>(it.input_ids.size()));
  for (const auto& positions : plan_shards(all_items_, cost, skip, ranks, "features")) {
    w.shards.push_back(shard_bytes(all_items_, positions));
  }
  w.samples = samples;
  w.items = all_items_.size();
  // Direct quantization: every rank calibrates on the same inputs (so every rank quantizes alike).
  if (spec.quantization.direct) w.shared = calibration_(spec).serialize();
  ByteWriter everything;
  put_records(everything, all_items_);
  w.inputs_sha256 = inputs_digest({everything.take(), w.shared});
  return w;
}

void EncoderFlow::load(const RunSpec& spec, const std::string& shard, const std::string& shared, Provenance& prov,
                       Communicator* tp) {
  const auto t0 = Clock::now();
  {
    ByteReader r(shard);
    items_ = get_records<EncoderItem>(r);
  }
  refuse_direct_with_tp(spec);
  if (spec.quantization.direct) require_float_checkpoint(spec);
  model_ = load_encoder(model_load(spec, spec.quantization.direct ? "none" : spec.quantization.method, tp));
  if (model_->head() != head_) {
    throw InputError(spec.model.path + "/config.json",
                     std::string("the checkpoint's architecture has no head for task.kind = \"") +
                         to_string(spec.task.kind) + "\"");
  }
  pad_id_ = model_->pad_token_id();
  vocab_ = model_->vocab_size();
  check_encoder_inputs(spec, model_->dims(), items_);  // positions and batch memory
  check_ids_fit(items_, vocab_, model_->max_sequence_length(), spec.model.path);
  install_model(spec, *model_, shared, prov);
  if (spec.quantization.attention == "bf16") {
    const std::string how = model_->use_bf16_attention_products();
    prov.quantization += "; " + how;
    log().info("{}", how);
  }
  if (tokenizer_) prov.tokenizer_sha256 = tokenizer_->sha256();
  log_model_load(spec, prov, seconds_since(t0), items_.size(), "features");
}

EncoderBatchOptions EncoderFlow::batch_options(const RunSpec& spec, bool report_progress, Progress& progress) const {
  EncoderBatchOptions opt;
  opt.batch_size = spec.task.batch_size;
  opt.pad_id = pad_id_;
  opt.pad_to_length = spec.task.pad_to_max_length ? spec.task.max_seq_length : 0;
  if (report_progress) opt.progress = std::ref(progress);
  return opt;
}

void EncoderFlow::release() {
  model_.reset();
  items_.clear();
}

RunSpec calibration_spec(const RunSpec& spec) {
  RunSpec cal = spec;
  cal.task.dataset = calibration_dataset(spec);
  cal.task.max_samples = spec.quantization.calibration_samples;
  return cal;
}

CalibrationSet encoder_calibration(const std::vector<EncoderItem>& items, const std::string& dataset,
                                   std::size_t examples) {
  CalibrationSet c;
  c.dataset = dataset;
  c.examples = static_cast<std::int64_t>(examples);
  for (const auto& item : items) {
    c.sequences.push_back(item.input_ids);
    c.type_ids.push_back(item.type_ids);  // BERT's question / context pairs; empty: all 0
  }
  return c;
}

}  // namespace evalrun
