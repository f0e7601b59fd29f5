#include "quant/int8.hpp"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "common/errors.hpp"
#include "dist/communicator.hpp"
#include "ops/gemm.hpp"
#include "ops/int8_rows.hpp"
#include "quant/int8_kernels.hpp"

namespace evalrun::quant {

const char* to_string(Int8Weights w) { return w == Int8Weights::per_channel ? "per_channel" : "per_tensor"; }

const char* to_string(Int8Activations a) {
  switch (a) {
    case Int8Activations::per_token: return "per_token";
    case Int8Activations::per_tensor_symm: return "per_tensor_symm";
    case Int8Activations::per_tensor_asymm: return "per_tensor_asymm";
  }
  return "?";
}

// ---- settings ---------------------------------------------------------------------------------------

std::string Int8Settings::describe() const {
  std::string s = std::string("int8 w8a8 weights ") + to_string(weights) + ", activations " + to_string(activations);
  if (smoothquant) {
    char alpha[32];
    std::snprintf(alpha, sizeof alpha, "%g", smoothquant_alpha);
    s += ", smoothquant alpha " + std::string(alpha) + " (" + std::to_string(smoothquant_layers.size()) + " layers)";
  }
  if (!calibration_dataset.empty()) {
    s += ", calibrated on " + std::to_string(calibration_samples) + " examples of " + calibration_dataset;
  }
  return s;
}

nlohmann::json Int8Settings::to_json() const {
  nlohmann::json j;
  j["quant_method"] = "int8";
  j["weights"] = to_string(weights);
  j["activations"] = to_string(activations);
  j["smoothquant"] = smoothquant;
  if (smoothquant) {
    j["smoothquant_alpha"] = smoothquant_alpha;
    j["smoothquant_layers"] = smoothquant_layers;
  }
  j["calibration_dataset"] = calibration_dataset.empty() ? nlohmann::json() : nlohmann::json(calibration_dataset);
  j["calibration_samples"] = calibration_samples;
  return j;
}

namespace {

std::string key_where(const std::string& where, const char* key) { return where + "." + key; }

std::string choice_of(const nlohmann::json& s, const std::string& where, const char* key,
                      const std::vector<std::string>& choices) {
  if (!s.contains(key)) throw InputError(key_where(where, key), "missing");
  const auto& v = s[key];
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "\"" : ", \"") + c + "\"";
  if (!v.is_string()) throw InputError(key_where(where, key), "must be one of " + list + ", got " + v.dump());
  const auto value = v.get<std::string>();
  if (std::find(choices.begin(), choices.end(), value) == choices.end()) {
    throw InputError(key_where(where, key), "\"" + value + "\" is not supported (one of " + list + ")");
  }
  return value;
}

}  // namespace

Int8Settings parse_int8_settings(const nlohmann::json& s, const std::string& where) {
  static const std::set<std::string> known = {"quant_method",       "weights",           "activations",
                                              "smoothquant",        "smoothquant_alpha", "smoothquant_layers",
                                              "calibration_dataset", "calibration_samples"};
  for (const auto& [key, value] : s.items()) {
    if (!known.count(key)) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      throw InputError(where + "." + key, "unknown key for quant_method \"int8\" (known: " + list + ")");
    }
  }
  Int8Settings r;
  r.weights = choice_of(s, where, "weights", {"per_channel", "per_tensor"}) == "per_channel" ? Int8Weights::per_channel
                                                                                             : Int8Weights::per_tensor;
  const auto act = choice_of(s, where, "activations", {"per_token", "per_tensor_symm", "per_tensor_asymm"});
  r.activations = act == "per_token"         ? Int8Activations::per_token
                  : act == "per_tensor_symm" ? Int8Activations::per_tensor_symm
                                             : Int8Activations::per_tensor_asymm;
  if (!s.contains("smoothquant")) throw InputError(key_where(where, "smoothquant"), "missing");
  if (!s["smoothquant"].is_boolean()) {
    throw InputError(key_where(where, "smoothquant"), "must be true or false, got " + s["smoothquant"].dump());
  }
  r.smoothquant = s["smoothquant"].get<bool>();
  if (r.smoothquant) {
    if (!s.contains("smoothquant_alpha")) throw InputError(key_where(where, "smoothquant_alpha"), "missing (smoothquant is true)");
    const auto& a = s["smoothquant_alpha"];
    if (!a.is_number() || a.get<double>() < 0.0 || a.get<double>() > 1.0) {
      throw InputError(key_where(where, "smoothquant_alpha"), "must be a number in 0..1, got " + a.dump());
    }
    r.smoothquant_alpha = a.get<double>();
    if (!s.contains("smoothquant_layers")) throw InputError(key_where(where, "smoothquant_layers"), "missing (smoothquant is true)");
    const auto& l = s["smoothquant_layers"];
    if (!l.is_array()) throw InputError(key_where(where, "smoothquant_layers"), "must be a list of layer names");
    for (const auto& e : l) {
      if (!e.is_string()) throw InputError(key_where(where, "smoothquant_layers"), "must be a list of layer names, has " + e.dump());
      r.smoothquant_layers.push_back(e.get<std::string>());
    }
  } else {
    for (const char* key : {"smoothquant_alpha", "smoothquant_layers"}) {
      if (s.contains(key) && !s[key].is_null()) throw InputError(key_where(where, key), "set but smoothquant is false");
    }
  }
  if (s.contains("calibration_dataset") && !s["calibration_dataset"].is_null()) {
    if (!s["calibration_dataset"].is_string()) {
      throw InputError(key_where(where, "calibration_dataset"), "must be a string or null, got " + s["calibration_dataset"].dump());
    }
    r.calibration_dataset = s["calibration_dataset"].get<std::string>();
  }
  if (s.contains("calibration_samples") && !s["calibration_samples"].is_null()) {
    const auto& n = s["calibration_samples"];
    if (!n.is_number_integer() || n.get<std::int64_t>() < 0) {
      throw InputError(key_where(where, "calibration_samples"), "must be an integer >= 0, got " + n.dump());
    }
    r.calibration_samples = n.get<std::int64_t>();
  }
  return r;
}

// ---- kernels: src/quant/int8_kernels.cpp ----------------------------------------------------------

namespace {

using kernels::dequant_row;
using kernels::quantize_row;
using kernels::row_absmax;

// Work buffers shared by every Int8Linear of a thread (layers run one after another): the quantized
// input, the int32 product and the row scales. They grow to the largest call and stay, so a forward
// pass does not fault fresh pages in (expensive on these VMs) and a model holds one set, not one per
// layer.
struct Scratch {
  std::vector<std::uint8_t> a;
  std::vector<std::int32_t> acc;
  std::vector<float> row_scale;
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

template <typename T>
T* grown(std::vector<T>& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// Rows per parallel task: enough work per task to amortise the hand-off.
std::int64_t grain_rows(std::int64_t row_len) { return std::max<std::int64_t>(1, 32768 / std::max<std::int64_t>(1, row_len)); }

}  // namespace

// ---- Int8Linear -------------------------------------------------------------------------------------

Int8Linear::Int8Linear(std::int64_t in, std::int64_t out, std::vector<std::int8_t> weight,
                       std::vector<float> weight_scale, Int8ActivationParams act, std::vector<float> bias)
    : Linear(in, out),
      weight_(std::move(weight)),
      weight_scale_(std::move(weight_scale)),
      act_(std::move(act)),
      bias_(std::move(bias)) {
  auto bad = [](const std::string& what) { throw std::invalid_argument("Int8Linear: " + what); };
  auto positive = [](float v) { return std::isfinite(v) && v > 0.0f; };
  if (in <= 0 || out <= 0) bad("in and out must be positive");
  if (static_cast<std::int64_t>(weight_.size()) != in * out) bad("weight size is not out * in");
  if (weight_scale_.size() != 1 && static_cast<std::int64_t>(weight_scale_.size()) != out) bad("weight_scale size is not out or 1");
  for (float s : weight_scale_) {
    if (!positive(s)) bad("weight_scale values must be finite and positive");
  }
  if (!bias_.empty() && static_cast<std::int64_t>(bias_.size()) != out) bad("bias size is not out");
  if (!act_.smooth_scale.empty()) {
    if (static_cast<std::int64_t>(act_.smooth_scale.size()) != in) bad("smooth_scale size is not in");
    for (float s : act_.smooth_scale) {
      if (!positive(s)) bad("smooth_scale values must be finite and positive");
      inv_smooth_.push_back(1.0f / s);
    }
  }
  if (act_.mode != Int8Activations::per_token && !positive(act_.input_scale)) bad("input_scale must be finite and positive");
  if (act_.mode == Int8Activations::per_tensor_asymm && (act_.zero_point < 0 || act_.zero_point > 255)) {
    bad("input zero point must be in 0..255");
  }
  if (act_.mode != Int8Activations::per_tensor_asymm) act_.zero_point = 0;
  if (act_.mode == Int8Activations::per_token) act_.input_scale = 0.0f;
  row_scale_ = weight_scale_.size() == static_cast<std::size_t>(out) ? weight_scale_
                                                                     : std::vector<float>(out, weight_scale_.front());
  per_tensor_ = weight_scale_.size() == 1 && out > 1;
}

void Int8Linear::forward(const float* x, std::int64_t M, std::int64_t ldx, float* y, std::int64_t ldy, float alpha,
                         float beta) {
  if (M <= 0) return;
  if (!packed_) {
    packed_ = std::make_unique<ops::PackedS8Weights>(out_features(), in_features(), weight_.data(),
                                                     act_.mode == Int8Activations::per_tensor_asymm);
    // The row kernel's weight-row sums, made here and not in forward_rows, which threads share.
    row_sums_.resize(static_cast<std::size_t>(out_features()));
    ops::int8_row_sums(weight_.data(), in_features(), out_features(), in_features(), row_sums_.data());
  }
  // Many rows: blocks of at most 256 rows, each quantized, multiplied and dequantized by one thread
  // while its input and int32 product stay in that core's cache. In a probe of oneDNN alone, one
  // product over all rows of a batch (M = 3072) ran up to 4x slower than the same rows in 256-row
  // blocks. Few rows: one product, which oneDNN splits over the threads by columns.
  // A row-parallel part with per-token scales: each row's max over the whole row, from the group.
  const float* amax = nullptr;
  if (group_ != nullptr && act_.mode == Int8Activations::per_token) {
    group_amax_.resize(static_cast<std::size_t>(M));
    const float* inv_s = inv_smooth_.empty() ? nullptr : inv_smooth_.data();
    for (std::int64_t r = 0; r < M; ++r) group_amax_[r] = row_absmax(x + r * ldx, inv_s, in_features());
    group_->allreduce_max(group_amax_.data(), group_amax_.size());
    amax = group_amax_.data();
  }
  const std::int64_t threads = at::get_num_threads();
  if (M <= 256 || M < 64 * threads || at::in_parallel_region()) {
    forward_rows(x, M, ldx, y, ldy, alpha, beta, amax);
    return;
  }
  std::int64_t blocks = (M + 255) / 256;
  blocks = (blocks + threads - 1) / threads * threads;  // the same number of blocks per thread
  const std::int64_t rows = ((M + blocks - 1) / blocks + 15) / 16 * 16;
  blocks = (M + rows - 1) / rows;
  at::parallel_for(0, blocks, 1, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b) {
      const std::int64_t r0 = b * rows;
      forward_rows(x + r0 * ldx, std::min(rows, M - r0), ldx, y + r0 * ldy, ldy, alpha, beta,
                   amax != nullptr ? amax + r0 : nullptr);
    }
  });
}

void Int8Linear::forward_rows(const float* x, std::int64_t M, std::int64_t ldx, float* y, std::int64_t ldy,
                              float alpha, float beta, const float* group_amax) {
  const std::int64_t K = in_features(), N = out_features();
  // Round M up (the rows past M are computed and dropped): each M is a new oneDNN primitive, and a
  // run's batches come in many lengths.
  const std::int64_t Mp = M <= 64 ? M : (M + 15) / 16 * 16;
  Scratch& s = scratch();  // per thread
  std::uint8_t* a = grown(s.a, static_cast<std::size_t>(Mp * K));
  std::int32_t* acc = grown(s.acc, static_cast<std::size_t>(Mp * N));
  float* rscale = grown(s.row_scale, static_cast<std::size_t>(M));
  const float* inv_s = inv_smooth_.empty() ? nullptr : inv_smooth_.data();

  switch (act_.mode) {
    case Int8Activations::per_token:
      at::parallel_for(0, M, grain_rows(K), [&](std::int64_t r0, std::int64_t r1) {
        for (std::int64_t r = r0; r < r1; ++r) {
          const float* xr = x + r * ldx;
          const float amax = group_amax != nullptr ? group_amax[r] : row_absmax(xr, inv_s, K);
          const float mult = amax > 0.0f ? 127.0f / amax : 0.0f;
          rscale[r] = amax / 127.0f;
          quantize_row(xr, inv_s, K, mult, -127.0f, 127.0f, 0, reinterpret_cast<std::int8_t*>(a + r * K));
        }
      });
      break;
    case Int8Activations::per_tensor_symm:
    case Int8Activations::per_tensor_asymm: {
      const bool asymm = act_.mode == Int8Activations::per_tensor_asymm;
      const float mult = 1.0f / act_.input_scale;
      const auto zp = act_.zero_point;
      at::parallel_for(0, M, grain_rows(K), [&](std::int64_t r0, std::int64_t r1) {
        for (std::int64_t r = r0; r < r1; ++r) {
          rscale[r] = act_.input_scale;
          if (asymm) {
            quantize_row(x + r * ldx, inv_s, K, mult, static_cast<float>(-zp), static_cast<float>(255 - zp), zp,
                         a + r * K);
          } else {
            quantize_row(x + r * ldx, inv_s, K, mult, -127.0f, 127.0f, 0, reinterpret_cast<std::int8_t*>(a + r * K));
          }
        }
      });
      break;
    }
  }

  if (M <= ops::int8_rows_limit() && ops::have_int8_rows_kernel()) {
    // A decode step: the row kernel (VNNI or AVX2) streams the [out, in] weights once (exact, as the GEMM).
    ops::int8_rows(a, act_.mode != Int8Activations::per_tensor_asymm, act_.zero_point, M, K, weight_.data(), K,
                   row_sums_.data(), N, K, acc, N);
  } else {
    packed_->multiply(Mp, a, K, act_.zero_point, acc, N);
  }

  const float* b = bias_.empty() ? nullptr : bias_.data();
  const bool accumulate = beta != 0.0f;
  at::parallel_for(0, M, grain_rows(N), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      dequant_row(acc + r * N, N, rscale[r], row_scale_.data(), b, alpha, accumulate, y + r * ldy);
    }
  });
}

std::vector<float> Int8Linear::weight_f32() const {
  const std::int64_t K = in_features(), N = out_features();
  std::vector<float> w(static_cast<std::size_t>(N * K));
  for (std::int64_t n = 0; n < N; ++n) {
    for (std::int64_t k = 0; k < K; ++k) {
      float v = static_cast<float>(weight_[n * K + k]) * row_scale_[n];
      if (!act_.smooth_scale.empty()) v /= act_.smooth_scale[k];
      w[n * K + k] = v;
    }
  }
  return w;
}

std::size_t Int8Linear::resident_bytes() const {
  // What the layer holds once it has run: the packed copy and the row sums are made at the first
  // forward, and a result file's weight_bytes_per_rank is taken before it. Until then the copy counts
  // at the weights' own size (oneDNN's blocking pads it by a little) where one will be made: only for
  // oneDNN's integer kernels, which are exact with VNNI alone (on an AVX2 CPU there is no copy).
  const std::size_t packed = packed_ ? packed_->bytes() : ops::have_onednn_igemm() ? weight_.size() : 0;
  const std::size_t sums = static_cast<std::size_t>(out_features()) * sizeof(std::int32_t);
  return weight_.size() + packed + sums +
         (weight_scale_.size() + row_scale_.size() + inv_smooth_.size() + act_.smooth_scale.size() + bias_.size()) *
             sizeof(float);
}

std::string Int8Linear::describe() const {
  return std::string("int8 w8a8 weights ") + (per_tensor_ ? "per_tensor" : "per_channel") + ", activations " +
         to_string(act_.mode) + (act_.smooth_scale.empty() ? "" : ", smoothquant");
}

namespace {

TensorToWrite f32_tensor(const std::string& name, std::vector<std::int64_t> shape, const std::vector<float>& v) {
  TensorToWrite t{name, TensorDType::F32, std::move(shape), std::vector<std::byte>(v.size() * sizeof(float))};
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}

}  // namespace

void Int8Linear::export_tensors(const std::string& prefix, std::vector<TensorToWrite>& out) const {
  if (!exportable_) throw std::logic_error("a concatenated int8 layer is exported part by part (" + prefix + ")");
  const std::int64_t K = in_features(), N = out_features();
  TensorToWrite w{prefix + ".weight", TensorDType::I8, {N, K}, std::vector<std::byte>(weight_.size())};
  std::memcpy(w.data.data(), weight_.data(), weight_.size());
  out.push_back(std::move(w));
  out.push_back(f32_tensor(prefix + ".weight_scale", {static_cast<std::int64_t>(weight_scale_.size())}, weight_scale_));
  if (act_.mode != Int8Activations::per_token) out.push_back(f32_tensor(prefix + ".input_scale", {1}, {act_.input_scale}));
  if (act_.mode == Int8Activations::per_tensor_asymm) {
    TensorToWrite z{prefix + ".input_zero_point", TensorDType::I32, {1}, std::vector<std::byte>(sizeof(std::int32_t))};
    std::memcpy(z.data.data(), &act_.zero_point, sizeof(std::int32_t));
    out.push_back(std::move(z));
  }
  if (!act_.smooth_scale.empty()) out.push_back(f32_tensor(prefix + ".smooth_scale", {K}, act_.smooth_scale));
  if (!bias_.empty()) out.push_back(f32_tensor(prefix + ".bias", {N}, bias_));
}

LinearPtr Int8Linear::concat(std::vector<LinearPtr>& parts) {
  if (parts.empty()) return nullptr;
  std::vector<const Int8Linear*> p;
  for (const auto& part : parts) {
    const auto* q = dynamic_cast<const Int8Linear*>(part.get());
    if (q == nullptr) return nullptr;
    if (!p.empty() && (q->in_features() != p.front()->in_features() || !(q->act_ == p.front()->act_))) return nullptr;
    p.push_back(q);
  }
  const std::int64_t in = p.front()->in_features();
  std::int64_t out = 0;
  bool any_bias = false;
  for (const auto* q : p) {
    out += q->out_features();
    any_bias = any_bias || !q->bias_.empty();
  }
  std::vector<std::int8_t> w;
  std::vector<float> scale, bias;
  w.reserve(static_cast<std::size_t>(in * out));
  for (const auto* q : p) {
    w.insert(w.end(), q->weight_.begin(), q->weight_.end());
    scale.insert(scale.end(), q->row_scale_.begin(), q->row_scale_.end());
    if (any_bias) {
      if (q->bias_.empty()) {
        bias.insert(bias.end(), static_cast<std::size_t>(q->out_features()), 0.0f);
      } else {
        bias.insert(bias.end(), q->bias_.begin(), q->bias_.end());
      }
    }
  }
  auto fused = std::make_unique<Int8Linear>(in, out, std::move(w), std::move(scale), p.front()->act_, std::move(bias));
  fused->per_tensor_ = p.front()->per_tensor_;
  fused->exportable_ = false;
  parts.clear();
  return fused;
}

// ---- loading ----------------------------------------------------------------------------------------

namespace {

std::string shape_str(const std::vector<std::int64_t>& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// The tensor `name`, which must exist with this dtype and shape (InputError naming it otherwise).
const TensorView& expect_tensor(const Checkpoint& ckpt, const std::string& name, TensorDType dtype,
                                const std::vector<std::int64_t>& shape, const std::string& why,
                                std::set<std::string>& used) {
  const TensorView* t = ckpt.find(name);
  if (t == nullptr) {
    throw InputError(ckpt.dir() + ": tensor '" + name + "'",
                     "missing (expected " + std::string(to_string(dtype)) + " " + shape_str(shape) + why + ")");
  }
  if (t->dtype != dtype) {
    throw InputError(t->file + ": tensor '" + name + "'",
                     std::string("dtype ") + to_string(t->dtype) + ", expected " + to_string(dtype) + why);
  }
  if (t->shape != shape) {
    throw InputError(t->file + ": tensor '" + name + "'", "shape " + shape_str(t->shape) + ", expected " + shape_str(shape) + why);
  }
  used.insert(name);
  return *t;
}

std::vector<float> f32_values(const TensorView& t, bool positive) {
  std::vector<float> v(static_cast<std::size_t>(t.numel()));
  std::memcpy(v.data(), t.data, v.size() * sizeof(float));
  for (float x : v) {
    if (!std::isfinite(x) || (positive && !(x > 0.0f))) {
      throw InputError(t.file + ": tensor '" + t.name + "'",
                       std::string("holds ") + std::to_string(x) + (positive ? ": scales must be finite and positive" : ": values must be finite"));
    }
  }
  return v;
}

}  // namespace

LinearPtr load_int8_linear(const Checkpoint& ckpt, const std::string& prefix, std::int64_t in, std::int64_t out,
                           const Int8Settings& settings, std::set<std::string>& used, const Shard& shard) {
  const std::string mode = std::string(" (weights ") + to_string(settings.weights) + ", activations " +
                           to_string(settings.activations) + ")";
  // A tensor-parallel part: rows of W [out, in] and of what is per output (column-parallel), or
  // columns of W and what is per input (row-parallel).
  const bool split_out = shard.split == Shard::Split::out, split_in = shard.split == Shard::Split::in;
  std::vector<std::byte> keep;
  auto part = [&](const TensorView& v, bool per_output) {
    if (split_out && per_output) return slice_view(v, 0, shard.begin, shard.end, keep);
    if (split_in && !per_output) return slice_view(v, v.shape.size() - 1, shard.begin, shard.end, keep);
    return v;
  };
  const std::int64_t local_in = shard.local_in(in), local_out = shard.local_out(out);
  const TensorView& w_full = expect_tensor(ckpt, prefix + ".weight", TensorDType::I8, {out, in}, "", used);
  const TensorView w = split_out ? slice_view(w_full, 0, shard.begin, shard.end, keep)
                                 : split_in ? slice_view(w_full, 1, shard.begin, shard.end, keep) : w_full;
  std::vector<std::int8_t> weight(static_cast<std::size_t>(w.numel()));
  std::memcpy(weight.data(), w.data, weight.size());
  const bool per_channel = settings.weights == Int8Weights::per_channel;
  const std::int64_t n_scales = per_channel ? out : 1;
  const TensorView& ws = expect_tensor(ckpt, prefix + ".weight_scale", TensorDType::F32, {n_scales}, mode, used);
  auto weight_scale = f32_values(per_channel ? part(ws, true) : ws, true);

  Int8ActivationParams act;
  act.mode = settings.activations;
  const bool is_static = settings.activations != Int8Activations::per_token;
  auto refuse = [&](const std::string& name, const std::string& why) {
    if (ckpt.find(name) != nullptr) throw InputError(ckpt.dir() + ": tensor '" + name + "'", "unexpected: " + why);
  };
  if (is_static) {
    act.input_scale = f32_values(expect_tensor(ckpt, prefix + ".input_scale", TensorDType::F32, {1}, mode, used), true)[0];
  } else {
    refuse(prefix + ".input_scale", "per_token activations are scaled per row at run time");
  }
  if (settings.activations == Int8Activations::per_tensor_asymm) {
    const TensorView& z = expect_tensor(ckpt, prefix + ".input_zero_point", TensorDType::I32, {1}, mode, used);
    std::memcpy(&act.zero_point, z.data, sizeof(std::int32_t));
    if (act.zero_point < 0 || act.zero_point > 255) {
      throw InputError(z.file + ": tensor '" + z.name + "'",
                       "zero point " + std::to_string(act.zero_point) + " is outside 0..255 (uint8 activations)");
    }
  } else {
    refuse(prefix + ".input_zero_point", std::string("activations are ") + to_string(settings.activations));
  }
  const bool smoothed = settings.smoothquant && std::find(settings.smoothquant_layers.begin(),
                                                          settings.smoothquant_layers.end(),
                                                          prefix) != settings.smoothquant_layers.end();
  if (smoothed) {
    act.smooth_scale = f32_values(
        part(expect_tensor(ckpt, prefix + ".smooth_scale", TensorDType::F32, {in}, " (listed in smoothquant_layers)", used), false),
        true);
  } else {
    refuse(prefix + ".smooth_scale", "the layer is not listed in quantization_config.smoothquant_layers");
  }
  std::vector<float> bias;
  if (ckpt.find(prefix + ".bias") != nullptr) {
    const TensorView& b = expect_tensor(ckpt, prefix + ".bias", TensorDType::F32, {out}, "", used);
    if (shard.add_bias) bias = f32_values(part(b, true), false);  // row-parallel: one rank adds it
  }
  return std::make_unique<Int8Linear>(local_in, local_out, std::move(weight), std::move(weight_scale), std::move(act),
                                      std::move(bias));
}

// ---- direct quantization ----------------------------------------------------------------------------

void ChannelStats::merge(const ChannelStats& o) {
  if (o.rows == 0) return;
  if (rows == 0) {
    *this = o;
    return;
  }
  for (std::size_t k = 0; k < min.size(); ++k) {
    min[k] = std::min(min[k], o.min[k]);
    max[k] = std::max(max[k], o.max[k]);
  }
  rows += o.rows;
}

std::vector<float> smoothquant_scales(const ChannelStats& stats, const std::vector<float>& weight, std::int64_t in,
                                      std::int64_t out, double alpha) {
  if (static_cast<std::int64_t>(stats.max.size()) != in || static_cast<std::int64_t>(weight.size()) != in * out) {
    throw std::invalid_argument("smoothquant_scales: sizes do not match");
  }
  std::vector<double> wmax(static_cast<std::size_t>(in), 0.0);
  for (std::int64_t n = 0; n < out; ++n) {
    for (std::int64_t k = 0; k < in; ++k) wmax[k] = std::max(wmax[k], std::fabs(static_cast<double>(weight[n * in + k])));
  }
  std::vector<float> s(static_cast<std::size_t>(in), 1.0f);
  for (std::int64_t k = 0; k < in; ++k) {
    const double xmax = std::max(std::fabs(static_cast<double>(stats.min[k])), std::fabs(static_cast<double>(stats.max[k])));
    if (!(xmax > 0.0) || !(wmax[k] > 0.0) || !std::isfinite(xmax)) continue;
    const double v = std::pow(xmax, alpha) / std::pow(wmax[k], 1.0 - alpha);
    // Keep the scale and its reciprocal comfortably inside float's range.
    s[k] = static_cast<float>(std::clamp(v, 1e-12, 1e12));
  }
  return s;
}

namespace {

// Calibration wrapper: records the per-channel minimum and maximum of every input row, then runs the
// layer it wraps.
class ObservingLinear final : public Linear {
 public:
  ObservingLinear(std::int64_t in, std::int64_t out) : Linear(in, out) {
    stats.min.assign(static_cast<std::size_t>(in), std::numeric_limits<float>::infinity());
    stats.max.assign(static_cast<std::size_t>(in), -std::numeric_limits<float>::infinity());
  }

  void forward(const float* x, std::int64_t M, std::int64_t ldx, float* y, std::int64_t ldy, float alpha,
               float beta) override {
    const std::int64_t K = in_features();
    // Each task owns a range of channels: no shared writes.
    at::parallel_for(0, K, 64, [&](std::int64_t k0, std::int64_t k1) {
      for (std::int64_t m = 0; m < M; ++m) {
        const float* row = x + m * ldx;
        for (std::int64_t k = k0; k < k1; ++k) {
          stats.min[k] = std::min(stats.min[k], row[k]);
          stats.max[k] = std::max(stats.max[k], row[k]);
        }
      }
    });
    stats.rows += M;
    inner->forward(x, M, ldx, y, ldy, alpha, beta);
  }
  std::vector<float> weight_f32() const override { return inner->weight_f32(); }
  std::vector<float> bias_f32() const override { return inner->bias_f32(); }
  std::size_t resident_bytes() const override { return inner->resident_bytes(); }
  std::string describe() const override { return inner->describe() + " (observed)"; }
  void export_tensors(const std::string& prefix, std::vector<TensorToWrite>& out) const override {
    inner->export_tensors(prefix, out);
  }

  LinearPtr inner;
  ChannelStats stats;
};

// Symmetric 8-bit codes of w / scale.
std::int8_t quantize_weight(float w, float scale) {
  const float v = std::nearbyint(w / scale);
  return static_cast<std::int8_t>(std::clamp(v, -127.0f, 127.0f));
}

}  // namespace

std::vector<ChannelStats> observe_sites(const std::vector<LinearSite>& sites,
                                        const std::function<LinearPtr(std::size_t, LinearPtr)>& replace,
                                        const std::function<void()>& run) {
  std::vector<ObservingLinear*> observers;
  auto restore = [&] {
    std::vector<ChannelStats> stats;
    for (std::size_t i = 0; i < observers.size(); ++i) {
      stats.push_back(std::move(observers[i]->stats));
      LinearPtr inner = std::move(observers[i]->inner);
      replace(i, std::move(inner));  // returns the observer, dropped here
    }
    observers.clear();
    return stats;
  };
  try {
    for (std::size_t i = 0; i < sites.size(); ++i) {
      auto obs = std::make_unique<ObservingLinear>(sites[i].layer->in_features(), sites[i].layer->out_features());
      ObservingLinear* raw = obs.get();
      raw->inner = replace(i, std::move(obs));
      observers.push_back(raw);
    }
    run();
  } catch (...) {
    restore();
    throw;
  }
  return restore();
}

std::vector<LinearPtr> quantize_site_int8(const LinearSite& site, const Int8Settings& settings,
                                          const ChannelStats* stats, bool smooth) {
  const Linear& layer = *site.layer;
  const std::int64_t in = layer.in_features(), out = layer.out_features();
  const bool need_stats = smooth || settings.activations != Int8Activations::per_token;
  if (need_stats && (stats == nullptr || stats->rows == 0)) {
    throw std::invalid_argument("quantize_site_int8: no calibration statistics for " + site.prefixes.front());
  }
  std::vector<float> w = layer.weight_f32();
  const std::vector<float> b = layer.bias_f32();

  Int8ActivationParams act;
  act.mode = settings.activations;
  std::vector<float> s;
  if (smooth) {
    s = smoothquant_scales(*stats, w, in, out, settings.smoothquant_alpha);
    for (std::int64_t n = 0; n < out; ++n) {
      for (std::int64_t k = 0; k < in; ++k) w[n * in + k] *= s[k];
    }
    act.smooth_scale = s;
  }
  if (settings.activations != Int8Activations::per_token) {
    // Statistics of x / s, the values the layer quantizes (s > 0 keeps min and max in place).
    double lo = 0.0, hi = 0.0;
    for (std::int64_t k = 0; k < in; ++k) {
      const double d = smooth ? s[k] : 1.0;
      lo = std::min(lo, stats->min[k] / d);
      hi = std::max(hi, stats->max[k] / d);
    }
    if (settings.activations == Int8Activations::per_tensor_symm) {
      const double amax = std::max(-lo, hi);
      act.input_scale = amax > 0.0 ? static_cast<float>(amax / 127.0) : 1.0f;
    } else {
      const double range = hi - lo;
      act.input_scale = range > 0.0 ? static_cast<float>(range / 255.0) : 1.0f;
      act.zero_point = static_cast<std::int32_t>(std::clamp(std::nearbyint(-lo / act.input_scale), 0.0, 255.0));
    }
  }

  std::vector<LinearPtr> parts;
  std::int64_t row0 = 0;
  for (std::size_t p = 0; p < site.part_out.size(); ++p) {
    const std::int64_t rows = site.part_out[p];
    const float* wp = w.data() + row0 * in;
    std::vector<float> scale;
    auto scale_of = [](float amax) { return amax > 0.0f ? amax / 127.0f : 1.0f; };
    if (settings.weights == Int8Weights::per_channel) {
      for (std::int64_t n = 0; n < rows; ++n) {
        float amax = 0.0f;
        for (std::int64_t k = 0; k < in; ++k) amax = std::max(amax, std::fabs(wp[n * in + k]));
        scale.push_back(scale_of(amax));
      }
    } else {
      float amax = 0.0f;
      for (std::int64_t i = 0; i < rows * in; ++i) amax = std::max(amax, std::fabs(wp[i]));
      scale.push_back(scale_of(amax));
    }
    std::vector<std::int8_t> q(static_cast<std::size_t>(rows * in));
    for (std::int64_t n = 0; n < rows; ++n) {
      const float sc = scale.size() == 1 ? scale.front() : scale[n];
      for (std::int64_t k = 0; k < in; ++k) q[n * in + k] = quantize_weight(wp[n * in + k], sc);
    }
    std::vector<float> bias;
    if (!b.empty()) bias.assign(b.begin() + row0, b.begin() + row0 + rows);
    parts.push_back(std::make_unique<Int8Linear>(in, rows, std::move(q), std::move(scale), act, std::move(bias)));
    row0 += rows;
  }
  if (row0 != out) throw std::logic_error("quantize_site_int8: part_out does not add up to the layer's outputs");
  return parts;
}

std::vector<QuantizedSite> quantize_sites_int8(const std::vector<LinearSite>& sites,
                                               const std::function<LinearPtr(std::size_t, LinearPtr)>& replace,
                                               const std::function<void()>& run_calibration, Int8Settings& settings) {
  std::vector<ChannelStats> stats;
  if (settings.needs_calibration()) stats = observe_sites(sites, replace, run_calibration);
  settings.smoothquant_layers.clear();
  std::vector<QuantizedSite> out;
  for (std::size_t i = 0; i < sites.size(); ++i) {
    QuantizedSite q;
    q.prefixes = sites[i].prefixes;
    q.parts = quantize_site_int8(sites[i], settings, stats.empty() ? nullptr : &stats[i], settings.smoothquant);
    if (settings.smoothquant) {
      settings.smoothquant_layers.insert(settings.smoothquant_layers.end(), sites[i].prefixes.begin(), sites[i].prefixes.end());
    }
    out.push_back(std::move(q));
  }
  return out;
}

}  // namespace evalrun::quant
