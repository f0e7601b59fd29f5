#include "model/make_quantized.hpp"

#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "common/errors.hpp"
#include "io/safetensors.hpp"
#include "model/llama.hpp"
#include "model/loader_util.hpp"
#include "model/roberta.hpp"
#include "quant/dense.hpp"
#include "quant/quant_config.hpp"

namespace evalrun {

namespace fs = std::filesystem;

namespace {

void write_json(const fs::path& path, const nlohmann::ordered_json& j) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw InputError(path.string(), "cannot write");
  out << j.dump(2) << "\n";
  out.close();
  if (!out) throw InputError(path.string(), "write failed");
}

// The checkpoint layers of the model's projections, with their output counts.
std::vector<std::pair<std::string, std::int64_t>> projection_prefixes(const std::string& dir,
                                                                      const std::string& model_type) {
  std::vector<quant::LinearSite> sites;
  std::unique_ptr<DecoderModel> decoder;
  std::unique_ptr<RobertaModel> encoder;
  if (model_type == "roberta") {
    encoder = RobertaModel::load(dir, DType::fp32, Device::cpu, "none");
    sites = encoder->linear_sites();
  } else {
    decoder = DecoderModel::load(dir, DType::fp32, Device::cpu, "none");
    sites = decoder->linear_sites();
  }
  std::vector<std::pair<std::string, std::int64_t>> out;
  for (const auto& s : sites) {
    for (std::size_t i = 0; i < s.prefixes.size(); ++i) out.emplace_back(s.prefixes[i], s.part_out[i]);
  }
  return out;
}

std::vector<float> to_vector(const torch::Tensor& t) {
  const torch::Tensor c = t.to(torch::kFloat32).contiguous();
  return {c.data_ptr<float>(), c.data_ptr<float>() + c.numel()};
}

}  // namespace

void quantize_checkpoint(const std::string& dir, const nlohmann::ordered_json& config, bool autogptq_file,
                         const LayerQuantizer& quantize) {
  const fs::path config_path = fs::path(dir) / "config.json";
  nlohmann::ordered_json cfg;
  {
    std::ifstream in(config_path);
    if (!in) throw InputError(config_path.string(), "cannot be read");
    cfg = nlohmann::ordered_json::parse(in);
  }
  if (quant::read_quant_config(dir).method != quant::Method::none) {
    throw InputError(dir, "the checkpoint is quantized already");
  }
  const std::string model_type = cfg.value("model_type", std::string());
  const auto prefixes = projection_prefixes(dir, model_type);

  std::vector<TensorToWrite> tensors;
  {
    Checkpoint ckpt(dir);
    std::map<std::string, bool> replaced;
    for (const auto& [prefix, out] : prefixes) {
      const TensorView& w = ckpt.get(prefix + ".weight");
      if (w.shape.size() != 2 || w.shape[0] != out) {
        throw InputError(w.file + ": tensor '" + w.name + "'", "is not a [" + std::to_string(out) + ", in] weight");
      }
      const std::int64_t in = w.shape[1];
      const std::vector<float> weight = to_vector(model::read_tensor(ckpt, w.name, {out, in}, torch::kFloat32, false));
      std::vector<float> bias;
      if (ckpt.find(prefix + ".bias") != nullptr) {
        bias = to_vector(model::read_tensor(ckpt, prefix + ".bias", {out}, torch::kFloat32, false));
        replaced[prefix + ".bias"] = true;
      }
      replaced[prefix + ".weight"] = true;
      quantize(prefix, weight, out, in, bias)->export_tensors(prefix, tensors);
    }
    for (const auto& name : ckpt.names()) {
      if (replaced.count(name)) continue;
      const TensorView& v = ckpt.get(name);
      TensorToWrite t{name, v.dtype, v.shape, std::vector<std::byte>(v.nbytes)};
      std::memcpy(t.data.data(), v.data, v.nbytes);
      tensors.push_back(std::move(t));
    }
  }  // the mapping of the old file is gone before it is replaced
  for (const auto& f : fs::directory_iterator(dir)) {
    const std::string name = f.path().filename().string();
    if (name.find(".safetensors") != std::string::npos) fs::remove(f.path());
  }
  write_safetensors((fs::path(dir) / "model.safetensors").string(), tensors);
  cfg["quantization_config"] = config;
  write_json(config_path, cfg);
  if (autogptq_file) write_json(fs::path(dir) / "quantize_config.json", config);
}

void make_gptq_checkpoint(const std::string& dir, const quant::GptqSettings& settings, std::uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0x6770747100000000ULL);
  quantize_checkpoint(dir, settings.to_json(), true,
                      [&](const std::string& prefix, const std::vector<float>& w, std::int64_t out, std::int64_t in,
                          const std::vector<float>& bias) {
                        std::vector<std::int32_t> g_idx;
                        if (settings.desc_act) {
                          // Act-order: group j // group_size holds the inputs perm[j].
                          std::vector<std::int32_t> perm(in);
                          for (std::int64_t i = 0; i < in; ++i) perm[i] = static_cast<std::int32_t>(i);
                          std::shuffle(perm.begin(), perm.end(), rng);
                          g_idx.resize(in);
                          for (std::int64_t j = 0; j < in; ++j) {
                            g_idx[perm[j]] = settings.group_size <= 0 ? 0 : static_cast<std::int32_t>(j / settings.group_size);
                          }
                        }
                        quant::GptqTensors t = quant::gptq_quantize_rtn(w.data(), out, in, settings, g_idx);
                        t.bias = bias;
                        return quant::make_gptq_linear(t, settings, dir, prefix);
                      });
}

namespace {

// A float layer that records the largest |x| it is given (calibration of static activation scales).
class RecordingLinear final : public quant::Linear {
 public:
  explicit RecordingLinear(const quant::Linear& layer) : Linear(layer.in_features(), layer.out_features()) {
    std::vector<float> w = layer.weight_f32(), b = layer.bias_f32();
    torch::Tensor wt = torch::from_blob(w.data(), {out_features(), in_features()}).clone();
    torch::Tensor bt = b.empty() ? torch::Tensor() : torch::from_blob(b.data(), {out_features()}).clone();
    inner_ = std::make_unique<quant::DenseLinear>(wt, bt, true);
  }
  void forward(const float* x, std::int64_t M, std::int64_t ldx, float* y, std::int64_t ldy, float alpha,
               float beta) override {
    for (std::int64_t m = 0; m < M; ++m) {
      for (std::int64_t k = 0; k < in_features(); ++k) amax = std::max(amax, std::fabs(x[m * ldx + k]));
    }
    inner_->forward(x, M, ldx, y, ldy, alpha, beta);
  }
  std::vector<float> weight_f32() const override { return inner_->weight_f32(); }
  std::vector<float> bias_f32() const override { return inner_->bias_f32(); }
  std::size_t resident_bytes() const override { return inner_->resident_bytes(); }
  std::string describe() const override { return inner_->describe(); }
  void export_tensors(const std::string& prefix, std::vector<TensorToWrite>& out) const override {
    inner_->export_tensors(prefix, out);
  }

  float amax = 0.0f;

 private:
  quant::LinearPtr inner_;
};

// max |x| of each projection's input (by checkpoint prefix) over random token ids.
std::map<std::string, float> input_absmax(const std::string& dir, const std::string& model_type, std::uint64_t seed) {
  std::unique_ptr<DecoderModel> decoder;
  std::unique_ptr<RobertaModel> encoder;
  std::vector<quant::LinearSite> sites;
  std::int64_t vocab;
  if (model_type == "roberta") {
    encoder = RobertaModel::load(dir, DType::fp32, Device::cpu, "none");
    sites = encoder->linear_sites();
    vocab = encoder->config().vocab_size;
  } else {
    decoder = DecoderModel::load(dir, DType::fp32, Device::cpu, "none");
    sites = decoder->linear_sites();
    vocab = decoder->config().vocab_size;
  }
  std::vector<RecordingLinear*> recorders;
  for (std::size_t i = 0; i < sites.size(); ++i) {
    auto rec = std::make_unique<RecordingLinear>(*sites[i].layer);
    recorders.push_back(rec.get());
    try {
      if (encoder) {
        encoder->replace_linear(i, std::move(rec));
      } else {
        decoder->replace_linear(i, std::move(rec));
      }
    } catch (const std::logic_error&) {
      throw InputError("make-model: static FP8 activations", "calibration needs the float32 oneDNN path of this build");
    }
  }
  const std::int64_t batch = 4, seq = 32;
  std::mt19937_64 rng(seed ^ 0x6670380000000000ULL);
  std::uniform_int_distribution<std::int64_t> token(3, vocab - 1);
  std::vector<std::int64_t> ids(batch * seq), mask(batch * seq, 1);
  for (auto& id : ids) id = token(rng);
  if (encoder) {
    encoder->hidden_states(ids.data(), mask.data(), batch, seq);
  } else {
    decoder->hidden_states(ids.data(), batch, seq);
  }
  std::map<std::string, float> out;
  for (std::size_t i = 0; i < sites.size(); ++i) {
    for (const auto& prefix : sites[i].prefixes) out[prefix] = recorders[i]->amax;
  }
  return out;
}

}  // namespace

void make_fp8_checkpoint(const std::string& dir, const quant::Fp8Settings& settings, bool per_channel,
                         std::uint64_t seed) {
  std::map<std::string, float> amax;
  if (settings.static_activations) {
    nlohmann::json cfg = model::read_config_json((fs::path(dir) / "config.json").string());
    amax = input_absmax(dir, cfg.value("model_type", std::string()), seed);
  }
  quantize_checkpoint(dir, settings.to_json(), false,
                      [&](const std::string& prefix, const std::vector<float>& w, std::int64_t out, std::int64_t in,
                          const std::vector<float>& bias) {
                        quant::Fp8Tensors t = quant::fp8_quantize(w.data(), out, in, per_channel);
                        t.bias = bias;
                        if (settings.static_activations) {
                          const float a = amax.at(prefix);
                          t.input_scale = a > 0.0f ? a / 448.0f : 1.0f;
                        }
                        return quant::make_fp8_linear(t, settings, dir, prefix);
                      });
}

}  // namespace evalrun
