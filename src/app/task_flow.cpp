#include "app/task_flow.hpp"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <stdexcept>

#include "app/direct_quant.hpp"
#include "common/errors.hpp"
#include "common/logging.hpp"
#include "common/sha256.hpp"
#include "dist/sharding.hpp"
#include "io/safetensors.hpp"

namespace evalrun {

void TaskFlow::install_model(const RunSpec& spec, Model& model, const std::string& calibration, Provenance& prov) {
  prov.quantization = model.quantization();
  if (spec.quantization.direct) {
    quant::Int8Settings settings = direct_int8_settings(spec);
    auto sites = quantize_int8(model, CalibrationSet::deserialize(calibration), settings);
    install_int8(model, sites);
    prov.quantization = settings.describe() + " (direct)";
    log().info("int8: quantized in memory: {}", settings.describe());
  }
  put_on_device(model, prov);
  prov.weight_bytes = model.weight_bytes();
  prov.architecture = model.architecture();
}

ModelLoad TaskFlow::model_load(const RunSpec& spec, const std::string& method, Communicator* tp) const {
  if (!backend_) throw std::logic_error("TaskFlow: no device backend set");
  ModelLoad how;
  how.dir = spec.model.path;
  how.dtype = spec.model.dtype;
  how.device = backend_->model_device();
  how.quantization_method = method;
  how.tp = tp;
  how.device_sync = backend_->device_sync();
  return how;
}

void TaskFlow::put_on_device(Model& model, Provenance& provenance) {
  if (!backend_) throw std::logic_error("TaskFlow: no device backend set");
  device::take_over_projections(
      *backend_, model.linear_sites(),
      [&](std::size_t i, quant::LinearPtr layer) { return model.replace_linear(i, std::move(layer)); },
      provenance.quantization);
  provenance.compute_dtype = backend_->compute_dtype(model.compute_dtype());
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void Progress::operator()(std::size_t done, std::size_t total, double) {
  if (seconds_since(last) < 5.0 && done != total) return;
  last = Clock::now();
  const double el = seconds_since(start);
  const double rate = el > 0 ? static_cast<double>(done) / el : 0.0;
  const double eta = rate > 0 ? static_cast<double>(total - done) / rate : 0.0;
  log().info("progress (rank 0 shard): {}/{} {}, {:.2f} {}/s, ETA {:.0f} s", done, total, unit, rate, unit, eta);
}

std::string tokenizer_dir(const RunSpec& spec) {
  return spec.model.tokenizer.empty() ? spec.model.path : spec.model.tokenizer;
}

void read_gathered(const std::vector<std::string>& gathered, std::size_t n, const char* what,
                   const std::function<void(ByteReader&, std::size_t)>& read_item) {
  std::vector<char> seen(n, 0);
  for (const auto& bytes : gathered) {
    ByteReader r(bytes);
    const auto count = r.get<std::uint64_t>();
    for (std::uint64_t i = 0; i < count; ++i) {
      const auto index = r.get<std::uint64_t>();
      if (index >= n || seen[index]) {
        throw std::runtime_error(std::string("gather: ") + what + " index out of range or repeated");
      }
      seen[index] = 1;
      read_item(r, static_cast<std::size_t>(index));
    }
  }
  if (std::count(seen.begin(), seen.end(), 0) != 0) {
    throw std::runtime_error(std::string("gather: a ") + what + " has no result");
  }
}

std::string no_results() {
  ByteWriter w;
  w.put<std::uint64_t>(0);
  return w.take();
}

void refuse_direct_with_tp(const RunSpec& spec) {
  if (spec.quantization.direct && spec.parallel.tensor_parallel > 1) {
    throw InputError("quantization.direct",
                     "cannot be combined with parallel.tensor_parallel = " + std::to_string(spec.parallel.tensor_parallel) +
                         ": quantize once with `evalrun quantize` and run the quantized checkpoint");
  }
}

void ResultRecords::end_batch() {
  if (batch_.empty()) return;
  if (sink_) sink_(batch_);
  for (const auto& [index, record] : batch_) {
    ByteWriter w;
    w.put<std::uint64_t>(index);
    body_ += w.take();
    body_ += record;
    ++count_;
  }
  batch_.clear();
}

std::string ResultRecords::take() {
  end_batch();
  ByteWriter w;
  w.put<std::uint64_t>(count_);
  std::string out = w.take();
  out += body_;
  body_.clear();
  count_ = 0;
  return out;
}

H5Writer TaskFlow::open_result(const RunSpec& spec) const {
  if (rows_before_run_.empty()) return H5Writer(spec.output.path);
  return H5Writer::reopen(spec.output.path, rows_before_run_.temp_path, rows_before_run_.paths());
}

void TaskFlow::lay_out_rows(RowsLayout& layout, H5Writer& out, const std::string& path, RowType type,
                            std::int64_t cols, const std::vector<std::uint64_t>& rows_per_item) const {
  const RowsLayout::Dataset* before = rows_before_run_.find(path);
  if (before == nullptr) {
    layout.create(out, path, type, cols, rows_per_item);
    return;
  }
  // Laid out before the run from the planned counts: the run must have produced exactly those.
  if (first_rows(rows_per_item) != before->first_row || cols != before->cols || type != before->type) {
    throw std::logic_error(path + ": the run's rows differ from those laid out before it");
  }
}

std::string records_buffer(const std::map<std::uint64_t, std::string>& records) {
  ResultRecords r(ItemSink{});
  for (const auto& [index, record] : records) r.add(index, record);
  return r.take();
}

std::string inputs_digest(const std::vector<std::string>& parts) {
  Sha256 h;
  for (const auto& p : parts) {
    const std::uint64_t n = p.size();  // lengths keep ("ab","c") apart from ("a","bc")
    h.update(&n, sizeof n);
    h.update(p);
  }
  return h.hex_digest();
}

std::vector<std::vector<std::size_t>> plan_shards_of(const std::vector<std::size_t>& todo,
                                                     const std::vector<std::int64_t>& cost, int parts, const char* unit) {
  std::vector<std::vector<std::size_t>> out;
  std::int64_t total = 0;
  for (auto c : cost) total += c;
  log().debug("shard plan: {} {} to run, {} tokens, over {} replica(s)", todo.size(), unit, total, parts);
  int part = 0;
  for (const auto& shard : shard_by_cost(cost, parts)) {
    std::vector<std::size_t> positions;
    std::int64_t tokens = 0;
    for (std::size_t j : shard) {
      positions.push_back(todo[j]);
      tokens += cost[j];
    }
    log().debug("shard plan: replica {}: {} {}, {} tokens", part++, positions.size(), unit, tokens);
    out.push_back(std::move(positions));
  }
  return out;
}

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
  out.set_attr("/timing", "allreduce_seconds", t.allreduce);
  out.set_attr("/timing", "resumed_items", static_cast<std::int64_t>(t.resumed_items));
  out.write("/timing/feature_seconds", item_seconds);
  const double s = t.inference > 0 ? t.inference : 1e-9;
  out.set_attr("/metrics", "samples_per_second", static_cast<double>(samples) / s);
  out.set_attr("/metrics", "features_per_second", static_cast<double>(items) / s);
  out.set_attr("/metrics", "tokens_per_second", static_cast<double>(tokens) / s);
}

void log_model_load(const RunSpec& spec, const Provenance& prov, double seconds, std::size_t items, const char* unit) {
  if (!log().should_log(spdlog::level::debug)) return;
  // The checkpoint's tensors, counted again from the file headers (cheap: they are mapped, not read).
  Checkpoint ckpt(spec.model.path);
  std::map<std::string, std::size_t> dtypes;  // stored dtype -> tensors
  std::size_t stored_bytes = 0;
  for (const auto& name : ckpt.names()) {
    const TensorView& t = ckpt.get(name);
    ++dtypes[to_string(t.dtype)];
    stored_bytes += t.nbytes;
  }
  std::string files, kinds;
  for (const auto& f : ckpt.files()) {
    std::error_code ec;
    const auto name = std::filesystem::path(f).filename();
    const auto size = std::filesystem::file_size(std::filesystem::path(spec.model.path) / name, ec);
    files += (files.empty() ? "" : ", ") + name.string() +
             (ec ? std::string() : " (" + std::to_string(size) + " bytes)");
  }
  for (const auto& [dtype, n] : dtypes) kinds += (kinds.empty() ? "" : ", ") + std::to_string(n) + " " + dtype;
  log().debug("load: {} in {:.2f} s: files {}; {} tensors ({}), {} bytes stored", spec.model.path, seconds, files,
              ckpt.names().size(), kinds, stored_bytes);
  log().debug("load: architecture {}, model.dtype {}, computes in {}, quantization {}, {} weight bytes on this rank, "
              "device {}; shard of {} {}",
              prov.architecture, to_string(spec.model.dtype), prov.compute_dtype, prov.quantization, prov.weight_bytes,
              prov.device.empty() ? to_string(spec.model.device) : prov.device, items, unit);
}

std::string checkpoint_sha256(const std::string& dir) {
  // Runs before the model is loaded (the run's fingerprint): the loader's own messages for a bad path
  // or layout, and the files it would read (Checkpoint chooses them), with config.json.
  const Checkpoint checkpoint(dir);
  std::vector<std::filesystem::path> files;
  const std::filesystem::path config = std::filesystem::path(dir) / "config.json";
  std::error_code ec;
  if (std::filesystem::is_regular_file(config, ec)) files.push_back(config);
  for (const auto& f : checkpoint.input_files()) files.push_back(f);
  std::sort(files.begin(), files.end());
  return sha256_files(files);
}

}  // namespace evalrun
