#include "quant/gptq.hpp"

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "common/errors.hpp"
#include "ops/gemm.hpp"
#include "quant/gptq_kernels.hpp"

namespace evalrun::quant {

namespace k = gptq_kernels;

float half_to_float(std::uint16_t h) { return static_cast<float>(c10::Half(h, c10::Half::from_bits())); }
std::uint16_t float_to_half(float f) { return c10::Half(f).x; }

// ---- settings ---------------------------------------------------------------------------------

namespace {

// "file.json: key" for a file of its own, "config.json: quantization_config.key" inside config.json.
std::string key_where(const std::string& where, const std::string& key) {
  const bool file = where.size() >= 5 && where.compare(where.size() - 5, 5, ".json") == 0;
  return where + (file ? ": " : ".") + key;
}

}  // namespace

std::string GptqSettings::describe() const {
  std::string s = v2 ? "gptq_v2" : "gptq";
  s += " w" + std::to_string(bits) + (group_size < 0 ? std::string(" g-1") : " g" + std::to_string(group_size));
  s += sym ? " sym" : " asym";
  if (desc_act) s += " act_order";
  return s;
}

nlohmann::ordered_json GptqSettings::to_json() const {
  nlohmann::ordered_json j;
  j["bits"] = bits;
  j["group_size"] = group_size;
  j["damp_percent"] = 0.01;
  j["desc_act"] = desc_act;
  j["static_groups"] = false;
  j["sym"] = sym;
  j["true_sequential"] = true;
  j["model_name_or_path"] = nullptr;
  j["model_file_base_name"] = "model";
  j["quant_method"] = "gptq";
  j["checkpoint_format"] = v2 ? "gptq_v2" : "gptq";
  return j;
}

GptqSettings parse_gptq_settings(const nlohmann::json& s, const std::string& where) {
  GptqSettings out;
  auto boolean = [&](const char* key, bool fallback) {
    auto it = s.find(key);
    if (it == s.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) throw InputError(key_where(where, key), "must be true or false, got " + it->dump());
    return it->get<bool>();
  };
  auto integer = [&](const char* key) {
    auto it = s.find(key);
    if (it == s.end() || it->is_null()) throw InputError(key_where(where, key), "missing");
    if (!it->is_number_integer()) throw InputError(key_where(where, key), "must be an integer, got " + it->dump());
    return it->get<std::int64_t>();
  };
  if (auto it = s.find("quant_method"); it != s.end() && !(it->is_string() && it->get<std::string>() == "gptq")) {
    throw InputError(key_where(where, "quant_method"), "is " + it->dump() + ", expected \"gptq\"");
  }
  const std::int64_t bits = integer("bits");
  if (bits != 4) {
    throw InputError(key_where(where, "bits"), std::to_string(bits) + "-bit GPTQ is not supported (only bits = 4)");
  }
  out.bits = 4;
  out.group_size = integer("group_size");
  if (out.group_size != -1 && out.group_size <= 0) {
    throw InputError(key_where(where, "group_size"),
                     "must be -1 (one group) or positive, got " + std::to_string(out.group_size));
  }
  out.sym = boolean("sym", true);
  out.desc_act = boolean("desc_act", false);
  if (boolean("is_marlin_format", false)) {
    throw InputError(key_where(where, "is_marlin_format"),
                     "Marlin-packed GPTQ checkpoints are not supported (only the \"gptq\" and \"gptq_v2\" formats)");
  }
  // AutoGPTQ >= 0.8 and transformers write checkpoint_format; GPTQModel writes format.
  const char* format_key = s.contains("checkpoint_format") ? "checkpoint_format" : "format";
  std::string format = "gptq";
  if (auto it = s.find(format_key); it != s.end() && !it->is_null()) {
    if (!it->is_string()) throw InputError(key_where(where, format_key), "must be a string, got " + it->dump());
    format = it->get<std::string>();
  }
  if (format != "gptq" && format != "gptq_v2") {
    throw InputError(key_where(where, format_key),
                     "\"" + format + "\" is not supported (supported: \"gptq\", \"gptq_v2\")");
  }
  out.v2 = format == "gptq_v2";
  if (boolean("lm_head", false)) {
    throw InputError(key_where(where, "lm_head"), "a quantized lm_head is not supported");
  }
  if (auto it = s.find("dynamic"); it != s.end() && !it->is_null() && !it->empty()) {
    throw InputError(key_where(where, "dynamic"), "per-module overrides of the GPTQ settings are not supported");
  }
  return out;
}

std::int64_t gptq_groups(std::int64_t in, std::int64_t group_size) {
  return group_size <= 0 ? 1 : (in + group_size - 1) / group_size;
}

// ---- the layer ---------------------------------------------------------------------------------

namespace {

// Scratch buffers of the calling thread, shared by all layers (a layer's forward runs on one caller
// at a time; the pool threads it starts write into the caller's buffers).
float* scratch_floats(int which, std::size_t n) {
  thread_local std::vector<float> buffers[3];
  auto& v = buffers[which];
  if (v.size() < n) {
    v.clear();
    v.shrink_to_fit();  // release first so peak memory is not old + new
    v.resize(n);
  }
  return v.data();
}

// Up to this many rows the packed weights are used directly (one pass over them per 4 rows);
// above, tiles of them are dequantized once and multiplied with sgemm (measured on a 768 x 2048
// layer: the packed product is faster up to about 32-64 rows).
constexpr std::int64_t kGemvMaxRows = 32;
// Rows per dequantized tile (a multiple of 8).
constexpr std::int64_t kTileRows = 256;

class GptqLinear final : public Linear {
 public:
  GptqLinear(const GptqTensors& t, const GptqSettings& s, const std::string& where, const std::string& prefix);

  void forward(const float* x, std::int64_t M, std::int64_t ldx, float* y, std::int64_t ldy, float alpha,
               float beta) override;
  std::vector<float> weight_f32() const override;
  std::vector<float> bias_f32() const override { return bias_; }
  std::size_t resident_bytes() const override;
  std::string describe() const override { return settings_.describe(); }
  void export_tensors(const std::string& prefix, std::vector<TensorToWrite>& out) const override;

 private:
  k::Packed packed() const;
  // Sorted row -> original input row.
  std::int64_t original_row(std::int64_t k) const {
    if (!perm16_.empty()) return perm16_[k];
    if (!perm32_.empty()) return perm32_[k];
    return k;
  }
  bool permuted() const { return !perm16_.empty() || !perm32_.empty(); }
  std::uint32_t q_at(std::int64_t k, std::int64_t n) const {
    return (q_[((n / k::kBlock) * kwords_ + k / 8) * k::kBlock + n % k::kBlock] >> (4 * (k % 8))) & 15u;
  }
  std::uint32_t zero_nibble(std::int64_t g, std::int64_t n) const {
    const std::int64_t b = n / k::kBlock, j = n % k::kBlock;
    return (z_[(b * groups_ + g) * 2 + j / 8] >> (4 * (j % 8))) & 15u;
  }
  float scale_at(std::int64_t g, std::int64_t n) const {
    const std::size_t at = ((n / k::kBlock) * groups_ + g) * k::kBlock + n % k::kBlock;
    return s16_.empty() ? s32_[at] : half_to_float(s16_[at]);
  }

  GptqSettings settings_;
  std::int64_t groups_, blocks_, kwords_;
  std::vector<std::uint32_t> q_, z_;
  std::vector<std::uint16_t> s16_;
  std::vector<float> s32_;
  std::vector<std::int32_t> group_start_;
  std::vector<std::uint16_t> perm16_;  // act-order with in <= 65536 (half the bytes of int32)
  std::vector<std::int32_t> perm32_;
  std::vector<float> bias_;
};

std::string tensor_where(const std::string& where, const std::string& prefix, const char* suffix) {
  return where + ": tensor '" + prefix + suffix + "'";
}

GptqLinear::GptqLinear(const GptqTensors& t, const GptqSettings& s, const std::string& where,
                       const std::string& prefix)
    : Linear(t.in, t.out), settings_(s) {
  const std::int64_t in = t.in, out = t.out;
  if (in <= 0 || in % 8 != 0) {
    throw InputError(tensor_where(where, prefix, ".qweight"),
                     "in_features " + std::to_string(in) + " is not a positive multiple of 8 (8 rows per int32)");
  }
  if (out <= 0 || out % 8 != 0) {
    throw InputError(tensor_where(where, prefix, ".qzeros"), "out_features " + std::to_string(out) +
                                                                 " is not a positive multiple of 8 (8 zero points per int32)");
  }
  groups_ = t.groups > 0 ? t.groups : gptq_groups(in, s.group_size);
  kwords_ = in / 8;
  blocks_ = (out + k::kBlock - 1) / k::kBlock;
  auto check_size = [&](std::size_t got, std::int64_t want, const char* suffix) {
    if (got != static_cast<std::size_t>(want)) {
      throw InputError(tensor_where(where, prefix, suffix),
                       std::to_string(got) + " values, expected " + std::to_string(want));
    }
  };
  check_size(t.qweight.size(), kwords_ * out, ".qweight");
  check_size(t.qzeros.size(), groups_ * out / 8, ".qzeros");
  if (t.scales_f16.empty() == t.scales_f32.empty()) {
    throw InputError(tensor_where(where, prefix, ".scales"), "exactly one of float16 or float32 scales expected");
  }
  check_size(t.scales_f16.empty() ? t.scales_f32.size() : t.scales_f16.size(), groups_ * out, ".scales");
  if (!t.bias.empty()) check_size(t.bias.size(), out, ".bias");

  // Group of each input row.
  std::vector<std::int32_t> g_idx = t.g_idx;
  if (g_idx.empty()) {
    if (s.desc_act) throw InputError(tensor_where(where, prefix, ".g_idx"), "missing (desc_act is true)");
    g_idx.resize(in);
    for (std::int64_t i = 0; i < in; ++i) g_idx[i] = s.group_size <= 0 ? 0 : static_cast<std::int32_t>(i / s.group_size);
  }
  check_size(g_idx.size(), in, ".g_idx");
  for (std::int64_t i = 0; i < in; ++i) {
    if (g_idx[i] < 0 || g_idx[i] >= groups_) {
      throw InputError(tensor_where(where, prefix, ".g_idx"), "g_idx[" + std::to_string(i) + "] = " +
                                                                  std::to_string(g_idx[i]) + " is outside [0, " +
                                                                  std::to_string(groups_) + ")");
    }
  }
  // Sorted order: rows by group, stable (the identity when g_idx is non-decreasing).
  std::vector<std::int32_t> perm(in);
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(), [&](std::int32_t a, std::int32_t b) { return g_idx[a] < g_idx[b]; });
  group_start_.assign(groups_ + 1, 0);
  for (std::int64_t i = 0; i < in; ++i) ++group_start_[g_idx[i] + 1];
  for (std::int64_t g = 0; g < groups_; ++g) group_start_[g + 1] += group_start_[g];
  bool identity = true;
  for (std::int64_t i = 0; i < in && identity; ++i) identity = perm[i] == i;
  if (!identity) {
    if (in <= 65536) {
      perm16_.assign(perm.begin(), perm.end());
    } else {
      perm32_ = perm;
    }
  }

  // 4-bit weights, regrouped into sorted rows and blocks of 16 columns.
  q_.assign(static_cast<std::size_t>(blocks_ * kwords_ * k::kBlock), 0u);
  for (std::int64_t kk = 0; kk < in; ++kk) {
    const std::int64_t i = perm[kk];
    const auto* src = reinterpret_cast<const std::uint32_t*>(t.qweight.data()) + (i / 8) * out;
    const unsigned from = 4 * (i % 8), to = 4 * (kk % 8);
    for (std::int64_t n = 0; n < out; ++n) {
      q_[((n / k::kBlock) * kwords_ + kk / 8) * k::kBlock + n % k::kBlock] |= ((src[n] >> from) & 15u) << to;
    }
  }
  // Zero points: a block's 16 columns are two consecutive qzeros words already.
  z_.assign(static_cast<std::size_t>(blocks_ * groups_ * 2), 0u);
  const std::int64_t zw = out / 8;
  for (std::int64_t b = 0; b < blocks_; ++b) {
    for (std::int64_t g = 0; g < groups_; ++g) {
      for (std::int64_t w = 0; w < 2 && 2 * b + w < zw; ++w) {
        z_[(b * groups_ + g) * 2 + w] = static_cast<std::uint32_t>(t.qzeros[g * zw + 2 * b + w]);
      }
    }
  }
  // Scales: float16 (float32 ones that are all exact float16 values become float16).
  bool as_half = !t.scales_f16.empty();
  if (!as_half) {
    as_half = true;
    for (float v : t.scales_f32) {
      if (!std::isfinite(v)) throw InputError(tensor_where(where, prefix, ".scales"), "holds a value that is not finite");
      as_half = as_half && half_to_float(float_to_half(v)) == v;
    }
  } else {
    for (std::uint16_t h : t.scales_f16) {
      if ((h & 0x7c00u) == 0x7c00u) {
        throw InputError(tensor_where(where, prefix, ".scales"), "holds a value that is not finite");
      }
    }
  }
  const std::size_t ns = static_cast<std::size_t>(blocks_ * groups_ * k::kBlock);
  if (as_half) {
    s16_.assign(ns, 0);
  } else {
    s32_.assign(ns, 0.0f);
  }
  for (std::int64_t g = 0; g < groups_; ++g) {
    for (std::int64_t n = 0; n < out; ++n) {
      const std::size_t at = ((n / k::kBlock) * groups_ + g) * k::kBlock + n % k::kBlock;
      const std::size_t from = g * out + n;
      if (as_half) {
        s16_[at] = t.scales_f16.empty() ? float_to_half(t.scales_f32[from]) : t.scales_f16[from];
      } else {
        s32_[at] = t.scales_f32[from];
      }
    }
  }
  bias_ = t.bias;
}

k::Packed GptqLinear::packed() const {
  k::Packed p;
  p.in = in_features();
  p.out = out_features();
  p.blocks = blocks_;
  p.kwords = kwords_;
  p.groups = groups_;
  p.q = q_.data();
  p.z = z_.data();
  p.s16 = s16_.empty() ? nullptr : s16_.data();
  p.s32 = s32_.empty() ? nullptr : s32_.data();
  p.group_start = group_start_.data();
  p.zero_offset = settings_.v2 ? 0 : 1;
  return p;
}

void GptqLinear::forward(const float* x, std::int64_t M, std::int64_t ldx, float* y, std::int64_t ldy, float alpha,
                         float beta) {
  if (M <= 0) return;
  const std::int64_t in = in_features(), out = out_features();
  const k::Packed p = packed();
  // Act-order: x's columns into the sorted row order.
  const float* xs = x;
  std::int64_t lds = ldx;
  if (permuted()) {
    float* xp = scratch_floats(0, static_cast<std::size_t>(M * in));
    auto gather = [&](const auto* perm) {
      at::parallel_for(0, M, std::max<std::int64_t>(1, 16384 / in), [&](std::int64_t m0, std::int64_t m1) {
        for (std::int64_t m = m0; m < m1; ++m) {
          const float* xr = x + m * ldx;
          float* d = xp + m * in;
          for (std::int64_t kk = 0; kk < in; ++kk) d[kk] = xr[perm[kk]];
        }
      });
    };
    if (!perm16_.empty()) {
      gather(perm16_.data());
    } else {
      gather(perm32_.data());
    }
    xs = xp;
    lds = in;
  }
  const float* bias = bias_.empty() ? nullptr : bias_.data();
  if (M <= kGemvMaxRows) {
    // Sums of x over each group (the zero points' share of the product).
    float* xsum = scratch_floats(2, static_cast<std::size_t>(M * groups_));
    for (std::int64_t m = 0; m < M; ++m) {
      for (std::int64_t g = 0; g < groups_; ++g) {
        float sum = 0.0f;
        for (std::int64_t kk = group_start_[g]; kk < group_start_[g + 1]; ++kk) sum += xs[m * lds + kk];
        xsum[m * groups_ + g] = sum;
      }
    }
    // Each task gets at least ~64K multiply-adds, so small layers stay on one thread.
    const std::int64_t grain = std::max<std::int64_t>(1, 65536 / (in * k::kBlock * M));
    at::parallel_for(0, blocks_, grain, [&](std::int64_t b0, std::int64_t b1) {
      k::gemv_blocks(p, xs, M, lds, xsum, b0, b1, y, ldy, alpha, beta, bias);
    });
    return;
  }
  const std::int64_t ldt = blocks_ * k::kBlock;
  float* tile = scratch_floats(1, static_cast<std::size_t>(std::min(kTileRows, in) * ldt));
  const std::int64_t grain = std::max<std::int64_t>(1, 65536 / (kTileRows * k::kBlock));
  for (std::int64_t k0 = 0; k0 < in; k0 += kTileRows) {
    const std::int64_t k1 = std::min(in, k0 + kTileRows);
    at::parallel_for(0, blocks_, grain, [&](std::int64_t b0, std::int64_t b1) {
      k::dequantize_blocks(p, k0, k1, b0, b1, tile, ldt);
    });
    ops::sgemm('N', 'N', M, out, k1 - k0, alpha, xs + k0, lds, tile, ldt, k0 == 0 ? beta : 1.0f, y, ldy);
  }
  if (bias != nullptr) {
    for (std::int64_t m = 0; m < M; ++m) {
      float* row = y + m * ldy;
      for (std::int64_t j = 0; j < out; ++j) row[j] += alpha * bias[j];
    }
  }
}

std::vector<float> GptqLinear::weight_f32() const {
  const std::int64_t in = in_features(), out = out_features();
  const int offset = settings_.v2 ? 0 : 1;
  std::vector<float> w(static_cast<std::size_t>(in * out));
  for (std::int64_t g = 0; g < groups_; ++g) {
    for (std::int64_t kk = group_start_[g]; kk < group_start_[g + 1]; ++kk) {
      const std::int64_t i = original_row(kk);
      for (std::int64_t n = 0; n < out; ++n) {
        const int q = static_cast<int>(q_at(kk, n)), z = static_cast<int>(zero_nibble(g, n)) + offset;
        w[n * in + i] = scale_at(g, n) * static_cast<float>(q - z);
      }
    }
  }
  return w;
}

std::size_t GptqLinear::resident_bytes() const {
  return q_.size() * sizeof(std::uint32_t) + z_.size() * sizeof(std::uint32_t) + s16_.size() * sizeof(std::uint16_t) +
         s32_.size() * sizeof(float) + group_start_.size() * sizeof(std::int32_t) +
         perm16_.size() * sizeof(std::uint16_t) + perm32_.size() * sizeof(std::int32_t) + bias_.size() * sizeof(float);
}

template <typename T>
TensorToWrite make_tensor(const std::string& name, TensorDType dtype, std::vector<std::int64_t> shape,
                          const std::vector<T>& v) {
  TensorToWrite t{name, dtype, std::move(shape), std::vector<std::byte>(v.size() * sizeof(T))};
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}

void GptqLinear::export_tensors(const std::string& prefix, std::vector<TensorToWrite>& out_tensors) const {
  const std::int64_t in = in_features(), out = out_features();
  std::vector<std::uint32_t> qweight(static_cast<std::size_t>(kwords_ * out), 0u);
  std::vector<std::int32_t> g_idx(in);
  for (std::int64_t g = 0; g < groups_; ++g) {
    for (std::int64_t kk = group_start_[g]; kk < group_start_[g + 1]; ++kk) {
      const std::int64_t i = original_row(kk);
      g_idx[i] = static_cast<std::int32_t>(g);
      for (std::int64_t n = 0; n < out; ++n) qweight[(i / 8) * out + n] |= q_at(kk, n) << (4 * (i % 8));
    }
  }
  std::vector<std::uint32_t> qzeros(static_cast<std::size_t>(groups_ * out / 8));
  for (std::int64_t g = 0; g < groups_; ++g) {
    for (std::int64_t w = 0; w < out / 8; ++w) qzeros[g * (out / 8) + w] = z_[((w / 2) * groups_ + g) * 2 + w % 2];
  }
  out_tensors.push_back(make_tensor(prefix + ".qweight", TensorDType::I32, {kwords_, out}, qweight));
  out_tensors.push_back(make_tensor(prefix + ".qzeros", TensorDType::I32, {groups_, out / 8}, qzeros));
  std::vector<std::uint16_t> s16(s16_.empty() ? 0 : static_cast<std::size_t>(groups_ * out));
  std::vector<float> s32(s16_.empty() ? static_cast<std::size_t>(groups_ * out) : 0);
  for (std::int64_t g = 0; g < groups_; ++g) {
    for (std::int64_t n = 0; n < out; ++n) {
      const std::size_t at = ((n / k::kBlock) * groups_ + g) * k::kBlock + n % k::kBlock;
      if (s16_.empty()) {
        s32[g * out + n] = s32_[at];
      } else {
        s16[g * out + n] = s16_[at];
      }
    }
  }
  if (s16_.empty()) {
    out_tensors.push_back(make_tensor(prefix + ".scales", TensorDType::F32, {groups_, out}, s32));
  } else {
    out_tensors.push_back(make_tensor(prefix + ".scales", TensorDType::F16, {groups_, out}, s16));
  }
  out_tensors.push_back(make_tensor(prefix + ".g_idx", TensorDType::I32, {in}, g_idx));
  if (!bias_.empty()) out_tensors.push_back(make_tensor(prefix + ".bias", TensorDType::F32, {out}, bias_));
}

// A checkpoint tensor's bytes copied out of the mapping (which need not be aligned for T).
template <typename T>
std::vector<T> read_raw(const TensorView& v) {
  std::vector<T> out(v.nbytes / sizeof(T));
  std::memcpy(out.data(), v.data, out.size() * sizeof(T));
  return out;
}

std::string shape_text(const std::vector<std::int64_t>& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

LinearPtr make_gptq_linear(const GptqTensors& tensors, const GptqSettings& settings, const std::string& where,
                           const std::string& prefix) {
  return std::make_unique<GptqLinear>(tensors, settings, where, prefix);
}

LinearPtr load_gptq_linear(const Checkpoint& ckpt, const std::string& prefix, std::int64_t in, std::int64_t out,
                           const GptqSettings& settings, std::set<std::string>& used, const Shard& shard) {
  auto tensor = [&](const char* suffix, std::vector<TensorDType> dtypes, const std::vector<std::int64_t>& shape,
                    bool required) -> const TensorView* {
    const std::string name = prefix + suffix;
    const TensorView* v = ckpt.find(name);
    if (v == nullptr) {
      if (!required) return nullptr;
      throw InputError(ckpt.dir() + ": tensor '" + name + "'",
                       std::string("missing (a GPTQ layer holds qweight, qzeros, scales") +
                           (settings.desc_act ? " and g_idx with desc_act)" : ")"));
    }
    used.insert(name);
    const std::string where = v->file + ": tensor '" + name + "'";
    if (std::find(dtypes.begin(), dtypes.end(), v->dtype) == dtypes.end()) {
      std::string want;
      for (auto d : dtypes) want += (want.empty() ? "" : " or ") + std::string(to_string(d));
      throw InputError(where, std::string("dtype ") + to_string(v->dtype) + ", expected " + want);
    }
    if (v->shape != shape) throw InputError(where, "shape " + shape_text(v->shape) + ", expected " + shape_text(shape));
    return v;
  };
  const std::string where0 = ckpt.dir() + ": tensor '" + prefix + ".qweight'";
  if (in % 8 != 0) {
    throw InputError(where0, "in_features " + std::to_string(in) + " is not a multiple of 8 (8 rows per int32)");
  }
  if (out % 8 != 0) {
    throw InputError(where0,
                     "out_features " + std::to_string(out) + " is not a multiple of 8 (8 zero points per int32)");
  }
  const std::int64_t G = gptq_groups(in, settings.group_size);
  const TensorView* qw = tensor(".qweight", {TensorDType::I32}, {in / 8, out}, true);
  const TensorView* qz = tensor(".qzeros", {TensorDType::I32}, {G, out / 8}, true);
  const TensorView* sc = tensor(".scales", {TensorDType::F16, TensorDType::F32}, {G, out}, true);
  const TensorView* gi = tensor(".g_idx", {TensorDType::I32}, {in}, settings.desc_act);
  const TensorView* bi = tensor(".bias", {TensorDType::F16, TensorDType::F32, TensorDType::BF16}, {out}, false);

  GptqTensors t;
  t.in = shard.local_in(in);
  t.out = shard.local_out(out);
  TensorView qwv = *qw, qzv = *qz, scv = *sc, giv, biv;
  if (gi != nullptr) giv = *gi;
  if (bi != nullptr) biv = *bi;
  std::vector<std::byte> keep_qw, keep_qz, keep_sc, keep_gi, keep_bi;
  const std::int64_t b = shard.begin, e = shard.end;
  const std::string split_text = "[" + std::to_string(b) + ", " + std::to_string(e) + ")";
  if (shard.split == Shard::Split::out) {
    if (b % 8 != 0 || e % 8 != 0) {
      throw InputError(ckpt.dir() + ": tensor '" + prefix + ".qzeros'",
                       "tensor parallel: outputs " + split_text + " do not start and end on a multiple of 8 (8 zero points per int32)");
    }
    qwv = slice_view(*qw, 1, b, e, keep_qw);
    qzv = slice_view(*qz, 1, b / 8, e / 8, keep_qz);
    scv = slice_view(*sc, 1, b, e, keep_sc);
    if (bi != nullptr) biv = slice_view(*bi, 0, b, e, keep_bi);
  } else if (shard.split == Shard::Split::in) {
    if (b % 8 != 0 || e % 8 != 0) {
      throw InputError(where0, "tensor parallel: inputs " + split_text + " do not start and end on a multiple of 8 (8 rows per int32)");
    }
    qwv = slice_view(*qw, 0, b / 8, e / 8, keep_qw);
    std::vector<std::int32_t> full_g;
    if (gi != nullptr) {
      full_g = read_raw<std::int32_t>(*gi);
      giv = slice_view(*gi, 0, b, e, keep_gi);
    }
    // Act-order: rows of this part belong to any group, so every group's scales and zeros stay.
    bool ordered = true;
    const std::int64_t gs = settings.group_size;
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(full_g.size()) && ordered; ++i) {
      ordered = full_g[i] == (gs <= 0 ? 0 : i / gs);
    }
    if (!ordered) {
      t.groups = G;
    } else if (gs > 0) {
      if (b % gs != 0 || (e % gs != 0 && e != in)) {
        throw InputError(where0, "tensor parallel: inputs " + split_text + " do not start and end on a group boundary (group_size " +
                                     std::to_string(gs) + "); choose a tensor_parallel degree that divides the groups");
      }
      const std::int64_t g0 = b / gs, g1 = (e + gs - 1) / gs;
      qzv = slice_view(*qz, 0, g0, g1, keep_qz);
      scv = slice_view(*sc, 0, g0, g1, keep_sc);
      if (gi != nullptr) {
        // The part's own group numbers: i / group_size from its first row.
        keep_gi.resize(static_cast<std::size_t>(e - b) * sizeof(std::int32_t));
        for (std::int64_t i = b; i < e; ++i) {
          const std::int32_t g = static_cast<std::int32_t>(i / gs - g0);
          std::memcpy(keep_gi.data() + (i - b) * sizeof(std::int32_t), &g, sizeof g);
        }
        giv.data = keep_gi.data();
      }
    }
    if (!shard.add_bias) bi = nullptr;
  }

  t.qweight = read_raw<std::int32_t>(qwv);
  t.qzeros = read_raw<std::int32_t>(qzv);
  if (scv.dtype == TensorDType::F16) {
    t.scales_f16 = read_raw<std::uint16_t>(scv);
  } else {
    t.scales_f32 = read_raw<float>(scv);
  }
  if (gi != nullptr) t.g_idx = read_raw<std::int32_t>(giv);
  if (bi != nullptr) {
    if (biv.dtype == TensorDType::F32) {
      t.bias = read_raw<float>(biv);
    } else {
      const auto raw = read_raw<std::uint16_t>(biv);
      t.bias.resize(static_cast<std::size_t>(t.out));
      for (std::int64_t j = 0; j < t.out; ++j) {
        t.bias[j] = biv.dtype == TensorDType::F16 ? half_to_float(raw[j])
                                                  : static_cast<float>(c10::BFloat16(raw[j], c10::BFloat16::from_bits()));
      }
    }
  }
  return std::make_unique<GptqLinear>(t, settings, qw->file, prefix);
}

GptqTensors gptq_quantize_rtn(const float* w, std::int64_t out, std::int64_t in, const GptqSettings& s,
                              const std::vector<std::int32_t>& g_idx_in) {
  if (in % 8 != 0 || out % 8 != 0) {
    throw InputError("gptq quantization", "in and out features must be multiples of 8, got " + std::to_string(in) +
                                              " and " + std::to_string(out));
  }
  const std::int64_t G = gptq_groups(in, s.group_size);
  std::vector<std::int32_t> g_idx = g_idx_in;
  if (g_idx.empty()) {
    g_idx.resize(in);
    for (std::int64_t i = 0; i < in; ++i) g_idx[i] = s.group_size <= 0 ? 0 : static_cast<std::int32_t>(i / s.group_size);
  }
  GptqTensors t;
  t.in = in;
  t.out = out;
  t.qweight.assign(static_cast<std::size_t>(in / 8 * out), 0);
  t.qzeros.assign(static_cast<std::size_t>(G * out / 8), 0);
  t.scales_f16.assign(static_cast<std::size_t>(G * out), 0);
  t.g_idx = g_idx;
  std::vector<float> lo(G), hi(G), scale(G);
  std::vector<int> zero(G);
  const int zmin = s.v2 ? 0 : 1;  // v1 stores zero - 1, so a zero of 0 cannot be written
  for (std::int64_t o = 0; o < out; ++o) {
    const float* row = w + o * in;
    std::fill(lo.begin(), lo.end(), 0.0f);  // ranges include 0, as AutoGPTQ's quantizer does
    std::fill(hi.begin(), hi.end(), 0.0f);
    for (std::int64_t i = 0; i < in; ++i) {
      lo[g_idx[i]] = std::min(lo[g_idx[i]], row[i]);
      hi[g_idx[i]] = std::max(hi[g_idx[i]], row[i]);
    }
    for (std::int64_t g = 0; g < G; ++g) {
      float a = lo[g], b = hi[g];
      if (s.sym) {
        b = std::max(-a, b);
        a = -b;
      }
      if (a == 0.0f && b == 0.0f) a = -1.0f, b = 1.0f;
      scale[g] = half_to_float(float_to_half((b - a) / 15.0f));
      if (scale[g] == 0.0f) scale[g] = half_to_float(1);  // the smallest float16
      zero[g] = s.sym ? 8 : std::clamp(static_cast<int>(std::lround(-a / scale[g])), zmin, 15);
      t.scales_f16[g * out + o] = float_to_half(scale[g]);
      const std::uint32_t stored = static_cast<std::uint32_t>(zero[g] - (s.v2 ? 0 : 1));
      t.qzeros[g * (out / 8) + o / 8] |= static_cast<std::int32_t>(stored << (4 * (o % 8)));
    }
    for (std::int64_t i = 0; i < in; ++i) {
      const std::int64_t g = g_idx[i];
      const int q = std::clamp(static_cast<int>(std::lround(row[i] / scale[g])) + zero[g], 0, 15);
      t.qweight[(i / 8) * out + o] |= static_cast<std::int32_t>(static_cast<std::uint32_t>(q) << (4 * (i % 8)));
    }
  }
  return t;
}

}  // namespace evalrun::quant
