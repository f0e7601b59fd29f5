#include "model/loader_util.hpp"

#include <malloc.h>

#include <cstring>
#include <mutex>

#include "common/errors.hpp"
#include "ops/bf16_rows.hpp"
#include "ops/bfloat16.hpp"
#include "ops/gemm.hpp"
#include "quant/dense.hpp"
#include "common/parse_limits.hpp"
#include "common/text.hpp"

namespace evalrun::model {

std::string shape_string(const std::vector<std::int64_t>& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

void tune_malloc_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);  // glibc's maximum on 64-bit; fixes the threshold
    mallopt(M_TRIM_THRESHOLD, 1024 * 1024 * 1024);
  });
}

torch::Tensor Workspace::get(const std::vector<std::int64_t>& shape, const torch::TensorOptions& options) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  const auto st = c10::typeMetaToScalarType(options.dtype());
  if (!storage.defined() || storage.numel() < n || storage.scalar_type() != st || storage.device() != options.device()) {
    storage = torch::Tensor();  // release first so peak memory is not old + new
    storage = torch::empty({n}, options);
  }
  return storage.narrow(0, 0, n).view(shape);
}

std::vector<float> host_floats(const torch::Tensor& t) {
  const torch::Tensor f = t.to(torch::kCPU, torch::kFloat32).contiguous();
  return {f.data_ptr<float>(), f.data_ptr<float>() + f.numel()};
}

torch::Tensor int64_on(const std::int64_t* p, const std::vector<std::int64_t>& shape, const torch::Device& device) {
  return torch::from_blob(const_cast<std::int64_t*>(p), shape, torch::kInt64).to(device);
}

torch::Tensor pre_transposed(const torch::Tensor& w) { return w.t().contiguous(); }

void matmul_into(torch::Tensor& y, const torch::Tensor& x, const torch::Tensor& w_t, float beta) {
  const std::int64_t m = x.size(0), k = x.size(1), n = w_t.size(1);
  if (x.scalar_type() == torch::kFloat32 && x.device().is_cpu() && ops::have_onednn_sgemm()) {
    ops::sgemm('N', 'N', m, n, k, 1.0f, x.data_ptr<float>(), k, w_t.data_ptr<float>(), n, beta, y.data_ptr<float>(), n);
    return;
  }
  if (x.scalar_type() == torch::kBFloat16 && linear_bf16(y, x, w_t, ops::Bf16Layout::in_out, torch::Tensor(), beta)) {
    return;
  }
  if (beta == 0.0f) {
    at::mm_out(y, x, w_t);
  } else {
    y.addmm_(x, w_t);
  }
}

bool linear_bf16(torch::Tensor& y, const torch::Tensor& x, const torch::Tensor& w, ops::Bf16Layout layout,
                 const torch::Tensor& bias, float beta) {
  if (!x.device().is_cpu()) return false;  // the kernels below read host memory
  const std::int64_t m = x.size(0), k = x.size(1), n = y.size(1);
  const bool rows = layout == ops::Bf16Layout::out_in && beta == 0.0f && m <= ops::kBf16RowsMax &&
                    ops::have_bf16_rows_kernel();
  if (!rows && ops::have_native_bf16_gemm()) return false;
  auto bits = [](const torch::Tensor& t) { return reinterpret_cast<std::uint16_t*>(t.data_ptr()); };
  const std::uint16_t* b = bias.defined() ? bits(bias) : nullptr;
  if (rows) {
    ops::linear_bf16_rows(bits(x), m, k, bits(w), b, n, bits(y));
  } else {
    ops::linear_bf16_tiles(bits(x), m, k, bits(w), layout, b, n, bits(y), beta);
  }
  return true;
}

void linear_bf16_floats(const float* x, std::int64_t m, std::int64_t ldx, const torch::Tensor& w,
                        const torch::Tensor& bias, float* y, std::int64_t ldy) {
  const std::int64_t n = w.size(0), k = w.size(1);
  // Reused across calls: a decode step's buffers are not allocated (or page-faulted) again.
  thread_local std::vector<std::uint16_t> xb, yb;
  xb.resize(static_cast<std::size_t>(m * k));
  yb.resize(static_cast<std::size_t>(m * n));
  for (std::int64_t r = 0; r < m; ++r) {
    for (std::int64_t p = 0; p < k; ++p) xb[r * k + p] = ops::bf16_of(x[r * ldx + p]);
  }
  const torch::Tensor xt = torch::from_blob(xb.data(), {m, k}, torch::kBFloat16);
  torch::Tensor yt = torch::from_blob(yb.data(), {m, n}, torch::kBFloat16);
  if (!linear_bf16(yt, xt, w, ops::Bf16Layout::out_in, bias, 0.0f)) {
    yt.copy_(bias.defined() ? at::linear(xt, w, bias) : at::linear(xt, w));
  }
  const std::uint16_t* ys = yb.data();
  for (std::int64_t r = 0; r < m; ++r) {
    for (std::int64_t j = 0; j < n; ++j) y[r * ldy + j] = ops::float_of_bf16(ys[r * n + j]);
  }
}

torch::Tensor matmul(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.scalar_type() != torch::kBFloat16 || !a.device().is_cpu()) {
    return at::matmul(a, b);
  }
  return at::matmul(a.to(torch::kFloat32), b.to(torch::kFloat32)).to(torch::kBFloat16);
}

quant::LinearPtr load_linear(const LinearLoad& how, const std::string& prefix, std::int64_t in, std::int64_t out,
                             bool bias, const quant::Shard& shard) {
  const TensorView* w = how.ckpt.find(prefix + ".weight");
  const bool float_weight =
      w != nullptr && (w->dtype == TensorDType::F32 || w->dtype == TensorDType::F16 || w->dtype == TensorDType::BF16);
  const bool float_layer = how.quant.method == quant::Method::none || float_weight;
  if (float_layer) {
    how.used.insert(prefix + ".weight");
    // W is [out, in]: a column-parallel part is rows of it, a row-parallel part columns (the other
    // way round for a Conv1D's [in, out]).
    const int out_dim = how.conv1d ? 1 : 0, in_dim = 1 - out_dim;
    TensorPart wpart, bpart;
    if (shard.split == quant::Shard::Split::out) {
      wpart = {out_dim, shard.begin, shard.end};
      bpart = {0, shard.begin, shard.end};
    }
    if (shard.split == quant::Shard::Split::in) wpart = {in_dim, shard.begin, shard.end};
    const std::vector<std::int64_t> shape = how.conv1d ? std::vector<std::int64_t>{in, out} : std::vector<std::int64_t>{out, in};
    torch::Tensor w = read_tensor(how.ckpt, prefix + ".weight", shape, how.dense_dtype, how.round_to_half, wpart);
    if (how.conv1d) w = w.t().contiguous();
    torch::Tensor b;
    if (bias) {
      how.used.insert(prefix + ".bias");
      b = read_tensor(how.ckpt, prefix + ".bias", {out}, how.dense_dtype, how.round_to_half, bpart);
      if (!shard.add_bias) b.zero_();  // row-parallel: the bias is added on one rank of the group
    }
    return std::make_unique<quant::DenseLinear>(w, b, how.transposed);
  }
  if (how.conv1d) {
    throw InputError(how.ckpt.dir() + ": tensor '" + prefix + "'",
                     std::string("a quantized Conv1D (GPT-2) layer is not supported (") + quant::to_string(how.quant.method) + ")");
  }
  switch (how.quant.method) {
    case quant::Method::gptq: return quant::load_gptq_linear(how.ckpt, prefix, in, out, how.quant.gptq, how.used, shard);
    case quant::Method::int8: return quant::load_int8_linear(how.ckpt, prefix, in, out, how.quant.int8, how.used, shard);
    case quant::Method::fp8: return quant::load_fp8_linear(how.ckpt, prefix, in, out, how.quant.fp8, how.used, shard);
    case quant::Method::none: break;
  }
  throw std::logic_error("load_linear: unhandled method");
}

void check_quantization(const quant::QuantConfig& found, const std::string& expected_method, DType dtype, bool host) {
  const std::string method = quant::to_string(found.method);
  if (expected_method != "auto" && expected_method != method) {
    throw InputError("quantization.method", "is \"" + expected_method + "\" but the checkpoint is " +
                                                (found.method == quant::Method::none ? std::string("not quantized")
                                                                                     : "quantized with " + method + " (" + found.where + ")"));
  }
  if (!host && (found.method == quant::Method::int8 || found.method == quant::Method::fp8)) {
    throw InputError("quantization.method", "the checkpoint is quantized with " + method + " (" + found.where +
                                                "): off the host (model.device) only float and GPTQ checkpoints run; " +
                                                method + "'s integer / fp8 kernels run on the host only");
  }
  if (host && found.method != quant::Method::none && dtype == DType::bf16) {
    throw InputError("model.dtype", "bf16 is not available for " + method +
                                        " checkpoints: quantized layers take float32 activations (use fp32)");
  }
}

torch::Tensor read_tensor(const Checkpoint& ckpt, const std::string& name, const std::vector<std::int64_t>& shape,
                          torch::ScalarType target, bool round_to_half, const TensorPart& part) {
  const TensorView* found = ckpt.find(name);
  if (found == nullptr) {
    throw InputError(ckpt.dir() + ": tensor '" + name + "'", "missing (expected shape " + shape_string(shape) + ")");
  }
  if (found->shape != shape) {
    throw InputError(found->file + ": tensor '" + name + "'",
                     "shape " + shape_string(found->shape) + ", expected " + shape_string(shape));
  }
  std::vector<std::byte> storage;
  const TensorView v = part.whole() ? *found : slice_view(*found, part.dim, part.begin, part.end, storage);
  torch::ScalarType src;
  switch (v.dtype) {
    case TensorDType::F32: src = torch::kFloat32; break;
    case TensorDType::F16: src = torch::kFloat16; break;
    case TensorDType::BF16: src = torch::kBFloat16; break;
    default:
      throw InputError(v.file + ": tensor '" + name + "'",
                       std::string("dtype ") + evalrun::to_string(v.dtype) + " is not supported (F32, F16, BF16)");
  }
  // Copy out of the mapping (which may not be aligned for the element type and goes away after load).
  torch::Tensor t = torch::empty(v.shape, torch::TensorOptions().dtype(src));
  if (v.nbytes != static_cast<std::size_t>(t.nbytes())) {
    throw InputError(v.file + ": tensor '" + name + "'", "byte size does not match its shape and dtype");
  }
  std::memcpy(t.data_ptr(), v.data, v.nbytes);
  // A NaN or infinite weight poisons every output it reaches; name the tensor and the first element.
  if (!torch::isfinite(t).all().item<bool>()) {
    const auto flat = torch::isfinite(t).flatten().logical_not().nonzero();
    throw InputError(v.file + ": tensor '" + name + "'",
                     "holds a NaN or infinite value (first at flat index " + std::to_string(flat[0].item<std::int64_t>()) + ")");
  }
  if (round_to_half) t = t.to(torch::kFloat16);
  return t.to(target).contiguous();
}

nlohmann::json read_config_json(const std::string& path) {
  const std::string text = read_file(path);
  nlohmann::json j;
  try {
    check_json_nesting(text, path);
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e400
    throw InputError(path, "not valid JSON: " + clip_text(e.what()));
  }
  if (!j.is_object()) throw InputError(path, "must hold a JSON object");
  return j;
}

std::int64_t json_int(const nlohmann::json& j, const std::string& path, const char* key, bool required,
                      std::int64_t fallback, std::int64_t min_value) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) throw InputError(path + ": " + key, "missing");
    return fallback;
  }
  if (!it->is_number_integer()) throw InputError(path + ": " + key, "must be an integer, got " + it->dump());
  const auto v = it->get<std::int64_t>();
  if (v < min_value) {
    throw InputError(path + ": " + key, "must be >= " + std::to_string(min_value) + ", got " + std::to_string(v));
  }
  return v;
}

std::string json_string(const nlohmann::json& j, const std::string& path, const char* key,
                        const std::string& fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_string()) throw InputError(path + ": " + key, "must be a string, got " + it->dump());
  return it->get<std::string>();
}

double json_number(const nlohmann::json& j, const std::string& path, const char* key, double fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) throw InputError(path + ": " + key, "must be a number, got " + it->dump());
  return it->get<double>();
}

bool json_bool(const nlohmann::json& j, const std::string& path, const char* key, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw InputError(path + ": " + key, "must be true or false, got " + it->dump());
  return it->get<bool>();
}

}  // namespace evalrun::model
