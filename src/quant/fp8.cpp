#include "quant/fp8.hpp"

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/errors.hpp"
#include "dist/communicator.hpp"
#include "ops/fp8_rows.hpp"
#include "ops/gemm.hpp"
#include "quant/fp8_kernels.hpp"

namespace evalrun::quant {

// ---- e4m3 -------------------------------------------------------------------------------------

float e4m3_to_float(std::uint8_t code) {
  const int e = (code >> 3) & 0xF, m = code & 0x7;
  if (e == 0xF && m == 0x7) return std::numeric_limits<float>::quiet_NaN();
  const float mag = e == 0 ? std::ldexp(static_cast<float>(m), -9)  // subnormal: m/8 * 2^-6
                           : std::ldexp(static_cast<float>(8 + m), e - 10);  // (1 + m/8) * 2^(e-7)
  return (code & 0x80) ? -mag : mag;
}

float round_to_e4m3(float v) {
  if (std::isnan(v)) return v;
  const float a = std::fabs(v);
  float r;
  if (a < 0x1p-6f) {
    // Subnormal range: multiples of 2^-9 (nearbyint: ties to even in the default rounding mode).
    r = std::nearbyint(a * 512.0f) / 512.0f;
  } else if (a >= 448.0f) {
    r = 448.0f;
  } else {
    // Normal range: keep 3 of the 23 mantissa bits, ties to even; a carry moves into the exponent.
    std::uint32_t u;
    std::memcpy(&u, &a, 4);
    u += 0x7FFFFu + ((u >> 20) & 1u);
    u &= 0xFFF00000u;
    std::memcpy(&r, &u, 4);
    r = std::min(r, 448.0f);  // (464, 448) rounds up to 480, which e4m3 does not have
  }
  return std::copysign(r, v);
}

std::uint8_t float_to_e4m3(float v) {
  if (std::isnan(v)) return 0x7F;
  const float r = std::fabs(round_to_e4m3(v));
  const std::uint8_t sign = std::signbit(v) ? 0x80 : 0x00;
  if (r < 0x1p-6f) return sign | static_cast<std::uint8_t>(r * 512.0f);  // subnormal (0..7), exact
  int e;
  const float f = std::frexp(r, &e);  // r = f * 2^e, f in [0.5, 1): exponent e - 1, mantissa 16 f - 8
  return sign | static_cast<std::uint8_t>(((e - 1 + 7) << 3) | (static_cast<int>(f * 16.0f) - 8));
}

namespace {

const std::array<float, 256>& e4m3_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[c] = e4m3_to_float(static_cast<std::uint8_t>(c));
    return t;
  }();
  return table;
}

std::string key_where(const std::string& where, const std::string& key) {
  const bool file = where.size() >= 5 && where.compare(where.size() - 5, 5, ".json") == 0;
  return where + (file ? ": " : ".") + key;
}

}  // namespace

// ---- settings ---------------------------------------------------------------------------------

std::string Fp8Settings::describe() const { return static_activations ? "fp8 e4m3 static" : "fp8 e4m3 dynamic"; }

nlohmann::ordered_json Fp8Settings::to_json() const {
  nlohmann::ordered_json j;
  j["quant_method"] = "fp8";
  j["activation_scheme"] = static_activations ? "static" : "dynamic";
  j["fmt"] = "e4m3";
  return j;
}

Fp8Settings parse_fp8_settings(const nlohmann::json& s, const std::string& where) {
  Fp8Settings out;
  if (auto it = s.find("quant_method"); it == s.end() || !(it->is_string() && it->get<std::string>() == "fp8")) {
    throw InputError(key_where(where, "quant_method"), "expected \"fp8\"");
  }
  auto string_key = [&](const char* key, const std::string& fallback) {
    auto it = s.find(key);
    if (it == s.end() || it->is_null()) return fallback;
    if (!it->is_string()) throw InputError(key_where(where, key), "must be a string, got " + it->dump());
    return it->get<std::string>();
  };
  // vLLM's default when the key is absent is "dynamic".
  const std::string scheme = string_key("activation_scheme", "dynamic");
  if (scheme != "dynamic" && scheme != "static") {
    throw InputError(key_where(where, "activation_scheme"),
                     "\"" + scheme + "\" is not supported (supported: \"dynamic\", \"static\")");
  }
  out.static_activations = scheme == "static";
  const std::string fmt = string_key("fmt", "e4m3");
  if (fmt != "e4m3") {
    throw InputError(key_where(where, "fmt"), "\"" + fmt + "\" is not supported (only \"e4m3\")");
  }
  if (auto it = s.find("weight_block_size"); it != s.end() && !it->is_null()) {
    throw InputError(key_where(where, "weight_block_size"),
                     "block-wise FP8 scales are not supported (only per-tensor and per-channel weight_scale)");
  }
  for (const char* key : {"ignored_layers", "modules_to_not_convert"}) {
    // Layers left in float: they hold a float prefix.weight, which loads as a float layer.
    if (auto it = s.find(key); it != s.end() && !it->is_null() && !it->is_array()) {
      throw InputError(key_where(where, key), "must be a list of layer names, got " + it->dump());
    }
  }
  return out;
}

// ---- the layer ---------------------------------------------------------------------------------

namespace {

// Output rows dequantized per tile (each tile is one sgemm on the thread that dequantized it).
constexpr std::int64_t kTileRows = 64;

// Scratch of the calling thread (activations) and of each pool thread (weight tiles).
float* scratch_floats(int which, std::size_t n) {
  thread_local std::vector<float> buffers[2];
  auto& v = buffers[which];
  if (v.size() < n) {
    v.clear();
    v.shrink_to_fit();
    v.resize(n);
  }
  return v.data();
}

std::string tensor_where(const std::string& where, const std::string& prefix, const char* suffix) {
  return where + ": tensor '" + prefix + suffix + "'";
}

template <typename T>
TensorToWrite make_tensor(const std::string& name, TensorDType dtype, std::vector<std::int64_t> shape,
                          const std::vector<T>& v) {
  TensorToWrite t{name, dtype, std::move(shape), std::vector<std::byte>(v.size() * sizeof(T))};
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}

class Fp8Linear final : public Linear {
 public:
  Fp8Linear(const Fp8Tensors& t, const Fp8Settings& s, const std::string& where, const std::string& prefix)
      : Linear(t.in, t.out), settings_(s), w_(t.weight), scale_(t.weight_scale), input_scale_(t.input_scale),
        bias_(t.bias) {
    const std::string wt = tensor_where(where, prefix, ".weight");
    if (t.in <= 0 || t.out <= 0 || w_.size() != static_cast<std::size_t>(t.in * t.out)) {
      throw InputError(wt, std::to_string(w_.size()) + " values, expected " + std::to_string(t.in * t.out));
    }
    for (std::size_t i = 0; i < w_.size(); ++i) {
      if ((w_[i] & 0x7F) == 0x7F) {
        throw InputError(wt, "holds NaN (e4m3 code 0x" + std::string(w_[i] == 0xFF ? "FF" : "7F") + ") at [" +
                                 std::to_string(i / t.in) + ", " + std::to_string(i % t.in) + "]");
      }
    }
    if (scale_.size() != 1 && scale_.size() != static_cast<std::size_t>(t.out)) {
      throw InputError(tensor_where(where, prefix, ".weight_scale"),
                       std::to_string(scale_.size()) + " values, expected 1 or " + std::to_string(t.out));
    }
    for (float v : scale_) {
      if (!std::isfinite(v)) throw InputError(tensor_where(where, prefix, ".weight_scale"), "holds a value that is not finite");
    }
    if (s.static_activations && !(input_scale_ > 0.0f && std::isfinite(input_scale_))) {
      throw InputError(tensor_where(where, prefix, ".input_scale"),
                       "must be a positive finite number with activation_scheme \"static\"");
    }
    if (!bias_.empty() && bias_.size() != static_cast<std::size_t>(t.out)) {
      throw InputError(tensor_where(where, prefix, ".bias"), "expected " + std::to_string(t.out) + " values");
    }
  }

  void forward(const float* x, std::int64_t M, std::int64_t ldx, float* y, std::int64_t ldy, float alpha,
               float beta) override {
    if (M <= 0) return;
    const std::int64_t in = in_features(), out = out_features();
    // Activations rounded to e4m3 at their scale (emulation: the product itself runs in float32).
    float* xq = scratch_floats(0, static_cast<std::size_t>(M * in));
    const float s_x = settings_.static_activations ? input_scale_ : 0.0f;
    if (group_ != nullptr && s_x == 0.0f) {
      // A row-parallel part with dynamic scales: each row's scale from its max over the whole group.
      amax_.resize(static_cast<std::size_t>(M));
      for (std::int64_t m = 0; m < M; ++m) {
        float a = 0.0f;
        for (std::int64_t k = 0; k < in; ++k) a = std::max(a, std::fabs(x[m * ldx + k]));
        amax_[m] = a;
      }
      group_->allreduce_max(amax_.data(), amax_.size());
      at::parallel_for(0, M, std::max<std::int64_t>(1, 16384 / in), [&](std::int64_t m0, std::int64_t m1) {
        for (std::int64_t m = m0; m < m1; ++m) {
          const float s = amax_[m] / 448.0f;
          if (s > 0.0f) {
            fp8_kernels::round_rows(x + m * ldx, 1, in, ldx, s, xq + m * in);
          } else {
            std::memcpy(xq + m * in, x + m * ldx, sizeof(float) * in);
          }
        }
      });
    } else {
      at::parallel_for(0, M, std::max<std::int64_t>(1, 16384 / in), [&](std::int64_t m0, std::int64_t m1) {
        fp8_kernels::round_rows(x + m0 * ldx, m1 - m0, in, ldx, s_x, xq + m0 * in);
      });
    }
    const bool per_channel = scale_.size() != 1;
    if (M <= ops::fp8_rows_limit() && ops::have_fp8_rows_kernel()) {
      // A decode step: each weight row streamed once as codes, decoded in registers.
      ops::linear_fp8_rows(xq, M, in, w_.data(), scale_.data(), per_channel ? 1 : 0, out, in, y, ldy, alpha, beta);
      add_bias(M, 0, out, y, ldy, alpha);
      return;
    }
    // Tiles of output rows decoded to float32 on the thread that multiplies them.
    const std::int64_t tiles = (out + kTileRows - 1) / kTileRows;
    at::parallel_for(0, tiles, 1, [&](std::int64_t t0, std::int64_t t1) {
      float* tile = scratch_floats(1, static_cast<std::size_t>(kTileRows * in));
      for (std::int64_t t = t0; t < t1; ++t) {
        const std::int64_t n0 = t * kTileRows, n = std::min(kTileRows, out - n0);
        fp8_kernels::dequantize_rows(w_.data() + n0 * in, n, in, scale_.data() + (per_channel ? n0 : 0),
                                     per_channel ? 1 : 0, tile);
        ops::sgemm('N', 'T', M, n, in, alpha, xq, in, tile, in, beta, y + n0, ldy);
        add_bias(M, n0, n, y, ldy, alpha);
      }
    });
  }

  std::vector<float> weight_f32() const override {
    const std::int64_t in = in_features();
    const auto& lut = e4m3_table();
    std::vector<float> w(w_.size());
    for (std::size_t i = 0; i < w_.size(); ++i) {
      w[i] = lut[w_[i]] * (scale_.size() == 1 ? scale_[0] : scale_[i / in]);
    }
    return w;
  }
  std::vector<float> bias_f32() const override { return bias_; }
  std::size_t resident_bytes() const override {
    return w_.size() + scale_.size() * sizeof(float) + bias_.size() * sizeof(float) + sizeof(float);
  }
  std::string describe() const override { return settings_.describe(); }
  void set_row_group(Communicator* group) override { group_ = group; }
  void export_tensors(const std::string& prefix, std::vector<TensorToWrite>& out) const override {
    out.push_back(make_tensor(prefix + ".weight", TensorDType::F8_E4M3, {out_features(), in_features()}, w_));
    if (scale_.size() == 1) {
      out.push_back(make_tensor(prefix + ".weight_scale", TensorDType::F32, {}, scale_));
    } else {
      out.push_back(make_tensor(prefix + ".weight_scale", TensorDType::F32, {out_features(), 1}, scale_));
    }
    if (input_scale_ > 0.0f) {
      out.push_back(make_tensor(prefix + ".input_scale", TensorDType::F32, {}, std::vector<float>{input_scale_}));
    }
    if (!bias_.empty()) out.push_back(make_tensor(prefix + ".bias", TensorDType::F32, {out_features()}, bias_));
  }

 private:
  // y[m, n0 .. n0 + n) += alpha * bias.
  void add_bias(std::int64_t M, std::int64_t n0, std::int64_t n, float* y, std::int64_t ldy, float alpha) const {
    if (bias_.empty()) return;
    for (std::int64_t m = 0; m < M; ++m) {
      float* row = y + m * ldy + n0;
      for (std::int64_t j = 0; j < n; ++j) row[j] += alpha * bias_[n0 + j];
    }
  }

  Fp8Settings settings_;
  std::vector<std::uint8_t> w_;
  std::vector<float> scale_;
  float input_scale_;
  std::vector<float> bias_;
  Communicator* group_ = nullptr;  // row-parallel part: dynamic scales over the group (set_row_group)
  std::vector<float> amax_;
};

std::string shape_text(const std::vector<std::int64_t>& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// A float tensor (F32 / F16 / BF16) as float32 values.
std::vector<float> float_values(const TensorView& v, const std::string& where) {
  const std::size_t n = static_cast<std::size_t>(v.numel());
  std::vector<float> out(n);
  if (v.dtype == TensorDType::F32) {
    std::memcpy(out.data(), v.data, 4 * n);
    return out;
  }
  if (v.dtype != TensorDType::F16 && v.dtype != TensorDType::BF16) {
    throw InputError(where, std::string("dtype ") + to_string(v.dtype) + ", expected F32, F16 or BF16");
  }
  for (std::size_t i = 0; i < n; ++i) {
    std::uint16_t h;
    std::memcpy(&h, v.data + 2 * i, 2);
    out[i] = v.dtype == TensorDType::F16 ? static_cast<float>(c10::Half(h, c10::Half::from_bits()))
                                         : static_cast<float>(c10::BFloat16(h, c10::BFloat16::from_bits()));
  }
  return out;
}

}  // namespace

LinearPtr make_fp8_linear(const Fp8Tensors& tensors, const Fp8Settings& settings, const std::string& where,
                          const std::string& prefix) {
  return std::make_unique<Fp8Linear>(tensors, settings, where, prefix);
}

LinearPtr load_fp8_linear(const Checkpoint& ckpt, const std::string& prefix, std::int64_t in, std::int64_t out,
                          const Fp8Settings& settings, std::set<std::string>& used, const Shard& shard) {
  auto find = [&](const char* suffix, bool required) -> const TensorView* {
    const std::string name = prefix + suffix;
    const TensorView* v = ckpt.find(name);
    if (v == nullptr && required) {
      std::string why = "missing (an fp8 layer holds weight and weight_scale";
      if (std::string(suffix) == ".input_scale") why = "missing (activation_scheme \"static\" needs an input_scale per layer";
      if (std::string(suffix) == ".weight_scale" && ckpt.find(prefix + ".weight_scale_inv") != nullptr) {
        why = "missing; weight_scale_inv (block-wise FP8) is not supported";
      }
      throw InputError(ckpt.dir() + ": tensor '" + name + "'", why + ")");
    }
    if (v != nullptr) used.insert(name);
    return v;
  };
  const TensorView* w = find(".weight", true);
  const std::string ww = w->file + ": tensor '" + prefix + ".weight'";
  if (w->dtype != TensorDType::F8_E4M3) {
    throw InputError(ww, std::string("dtype ") + to_string(w->dtype) + ", expected F8_E4M3 (or a float weight)");
  }
  if (w->shape != std::vector<std::int64_t>{out, in}) {
    throw InputError(ww, "shape " + shape_text(w->shape) + ", expected " + shape_text({out, in}));
  }
  // A tensor-parallel part: rows of W [out, in] and of per-output scales and bias (column-parallel),
  // or columns of W (row-parallel; the bias then belongs to one rank).
  const bool split_out = shard.split == Shard::Split::out, split_in = shard.split == Shard::Split::in;
  std::vector<std::byte> keep_w, keep_s, keep_b;
  const TensorView wv = split_out ? slice_view(*w, 0, shard.begin, shard.end, keep_w)
                                  : split_in ? slice_view(*w, 1, shard.begin, shard.end, keep_w) : *w;
  Fp8Tensors t;
  t.in = shard.local_in(in);
  t.out = shard.local_out(out);
  t.weight.resize(static_cast<std::size_t>(t.in * t.out));
  std::memcpy(t.weight.data(), wv.data, t.weight.size());

  const TensorView* ws = find(".weight_scale", true);
  const std::string sw = ws->file + ": tensor '" + prefix + ".weight_scale'";
  const auto& s = ws->shape;
  const bool per_tensor = s.empty() || s == std::vector<std::int64_t>{1};
  const bool per_channel = s == std::vector<std::int64_t>{out} || s == std::vector<std::int64_t>{out, 1};
  if (!per_tensor && !per_channel) {
    throw InputError(sw, "shape " + shape_text(s) + ", expected [] or [1] (per tensor) or [" + std::to_string(out) +
                             "] / [" + std::to_string(out) + ", 1] (per channel)");
  }
  t.weight_scale = float_values(per_channel && split_out ? slice_view(*ws, 0, shard.begin, shard.end, keep_s) : *ws, sw);

  const TensorView* is = find(".input_scale", settings.static_activations);
  if (is != nullptr && settings.static_activations) {
    const std::string si = is->file + ": tensor '" + prefix + ".input_scale'";
    if (!(is->shape.empty() || is->shape == std::vector<std::int64_t>{1})) {
      throw InputError(si, "shape " + shape_text(is->shape) + ", expected [] or [1] (one scale per layer)");
    }
    t.input_scale = float_values(*is, si)[0];
  }
  // With "dynamic" a stored input_scale is not used (as vLLM does).
  if (const TensorView* b = find(".bias", false); b != nullptr) {
    const std::string sb = b->file + ": tensor '" + prefix + ".bias'";
    if (b->shape != std::vector<std::int64_t>{out}) {
      throw InputError(sb, "shape " + shape_text(b->shape) + ", expected " + shape_text({out}));
    }
    if (shard.add_bias) t.bias = float_values(split_out ? slice_view(*b, 0, shard.begin, shard.end, keep_b) : *b, sb);
  }
  return std::make_unique<Fp8Linear>(t, settings, w->file, prefix);
}

Fp8Tensors fp8_quantize(const float* w, std::int64_t out, std::int64_t in, bool per_channel) {
  Fp8Tensors t;
  t.in = in;
  t.out = out;
  t.weight.resize(static_cast<std::size_t>(in * out));
  t.weight_scale.assign(per_channel ? out : 1, 0.0f);
  for (std::int64_t o = 0; o < out; ++o) {
    const float* row = w + o * in;
    float amax = 0.0f;
    for (std::int64_t i = 0; i < in; ++i) amax = std::max(amax, std::fabs(row[i]));
    float& s = t.weight_scale[per_channel ? o : 0];
    s = std::max(s, amax);
  }
  for (float& s : t.weight_scale) s = s > 0.0f ? s / 448.0f : 1.0f;
  for (std::int64_t o = 0; o < out; ++o) {
    const float s = t.weight_scale[per_channel ? o : 0];
    for (std::int64_t i = 0; i < in; ++i) t.weight[o * in + i] = float_to_e4m3(w[o * in + i] / s);
  }
  return t;
}

}  // namespace evalrun::quant
