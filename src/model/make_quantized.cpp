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

}  // namespace evalrun
