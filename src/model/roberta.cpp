// The encoder forward pass (RoBERTa, BERT, DistilBERT: post-LayerNorm layers, learned absolute
// positions) on libtorch tensors held by the model (no nn::Module, no autograd). What differs between
// the families is data in their EncoderFamily row (roberta_config.cpp): tensor names, position
// numbering, token type embeddings, the MLM head's activation.
//
// Layout: activations are 2-D [batch * seq, hidden] row-major. Every linear weight is stored
// pre-transposed and contiguous ([in, out]) so a product is one row-major GEMM; the query, key and
// value projections are fused into one [hidden, 3 * hidden] weight. Float32 attention runs per
// (sequence, head) straight on the fused QKV buffer with strided sgemm calls (ops/attention.hpp, no
// permute copies); so does bfloat16 on the host, on a float32 copy of the buffer, rounding as HF's
// bfloat16 attention. The torch path (every run off the host, whose tensors sit on the model's
// device: Weights::device) uses batched torch matmuls.
//
// Tensor parallelism (a Communicator of T ranks passed to load): rank r holds attention heads
// [r nh/T, (r+1) nh/T) of query, key and value (column-parallel) and intermediate columns
// [r I/T, (r+1) I/T); attention.output.dense and output.dense are row-parallel: each rank multiplies
// its columns, one sum all-reduce gives every rank the whole product, and the bias is added by rank 0
// of the group only. Embeddings, LayerNorms and the heads are replicated (the QA head is 2 outputs;
// the MLM decoder is evaluated at the masked positions only).
//
// Memory: big per-batch buffers (QKV, attention context, FFN intermediate, attention scores) live in
// a workspace that grows to the largest batch seen and is reused. The remaining per-layer tensors
// (LayerNorm outputs) are below 32 MiB for roberta-base at batch 8 x 384 and come from the glibc
// heap: load() raises glibc's mmap threshold to its maximum (32 MiB) and the trim threshold to
// 1 GiB (see tune_malloc_once), so freed blocks are reused instead of being unmapped and faulted in
// again (~11 us per first-touched 4 KiB page on these VMs).
#include "model/roberta.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>
#include <stdexcept>
#include <type_traits>

#include "common/errors.hpp"
#include "common/sha256.hpp"
#include "dist/communicator.hpp"
#include "io/safetensors.hpp"
#include "ops/attention.hpp"
#include "ops/bf16_rows.hpp"
#include "ops/gemm.hpp"
#include "ops/norms.hpp"
#include "quant/dense.hpp"
#include "model/weights.hpp"
#include "model/loader_util.hpp"

namespace evalrun {
namespace {

using torch::Tensor;
namespace fs = std::filesystem;

using model::shape_string;
using Buffer = model::Workspace;

// Projections with their biases. Float ones hold W^T ([in, out]) on every path; quantized ones run
// on the sgemm path only.
struct Layer {
  quant::LinearPtr qkv;       // H -> 3H: query | key | value
  quant::LinearPtr attn_out;  // H -> H
  Tensor attn_ln_w, attn_ln_b;
  quant::LinearPtr inter;     // H -> I
  quant::LinearPtr out;       // I -> H
  Tensor out_ln_w, out_ln_b;
};

// y = beta * y + x @ W^T + b with a float layer on the torch path. A bfloat16 product on the host
// without accumulation is rounded once, after the bias, as F.linear's addmm rounds it.
void torch_linear(Tensor& y, const Tensor& x, const quant::LinearPtr& layer, float beta) {
  const auto& dense = quant::as_dense(*layer);
  if (beta == 0.0f && x.scalar_type() == torch::kBFloat16 && x.device().is_cpu()) {
    if (!model::linear_bf16(y, x, dense.weight(), ops::Bf16Layout::in_out, dense.bias(), 0.0f)) {
      at::addmm_out(y, dense.bias(), x, dense.weight());
    }
    return;
  }
  model::matmul_into(y, x, dense.weight(), beta);
  y.add_(dense.bias());
}

// A bfloat16 tensor's data as raw 16-bit patterns (the ops on bfloat16 rows take them).
std::uint16_t* bf16_bits(const Tensor& t) { return reinterpret_cast<std::uint16_t*>(t.data_ptr()); }

// Reads tensors out of a checkpoint, checking shapes and remembering which names were used.
class WeightReader {
 public:
  WeightReader(const Checkpoint& ckpt, const std::string& prefix, torch::ScalarType target, bool round_to_half)
      : ckpt_(ckpt), prefix_(prefix), target_(target), round_to_half_(round_to_half) {}

  // Encoder tensors: the family's prefix + name (as saved from a model with a head, "roberta.") or
  // name (as saved from the bare encoder); HF accepts both.
  Tensor encoder(const std::string& name, const std::vector<std::int64_t>& shape) {
    if (ckpt_.find(prefix_ + name) != nullptr) return take(prefix_ + name, shape);
    if (ckpt_.find(name) != nullptr) return take(name, shape);
    throw InputError(ckpt_.dir() + ": tensor '" + prefix_ + name + "'",
                     "missing (expected shape " + shape_string(shape) + ")");
  }

  // Head tensors are never prefixed.
  Tensor head(const std::string& name, const std::vector<std::int64_t>& shape) {
    if (ckpt_.find(name) == nullptr) {
      throw InputError(ckpt_.dir() + ": tensor '" + name + "'", "missing (expected shape " + shape_string(shape) + ")");
    }
    return take(name, shape);
  }

  bool has(const std::string& name) const { return ckpt_.find(name) != nullptr; }
  // The checkpoint's name of an encoder tensor: with the family's prefix or without.
  std::string encoder_prefix() const {
    return ckpt_.find(prefix_ + "embeddings.word_embeddings.weight") != nullptr ? prefix_ : "";
  }
  const Checkpoint& checkpoint() const { return ckpt_; }
  std::set<std::string>& used() { return used_; }
  void ignore(const std::string& name) { used_.insert(name); }

  // Everything not used must be one of the tensors HF ignores too.
  void check_no_unexpected() const {
    for (const auto& name : ckpt_.names()) {
      if (used_.count(name)) continue;
      // The pooler (unused by these heads) and the position / token type id buffers older
      // transformers versions saved.
      bool harmless = false;
      for (const std::string& p : {prefix_, std::string()}) {
        harmless = harmless || name.rfind(p + "pooler.", 0) == 0 || name == p + "embeddings.position_ids" ||
                   name == p + "embeddings.token_type_ids";
      }
      if (harmless) continue;
      throw InputError(ckpt_.dir() + ": tensor '" + name + "'", "unexpected tensor for this architecture");
    }
  }

 private:
  Tensor take(const std::string& name, const std::vector<std::int64_t>& shape) {
    Tensor t = model::read_tensor(ckpt_, name, shape, target_, round_to_half_);
    used_.insert(name);
    return t;
  }

  const Checkpoint& ckpt_;
  std::string prefix_;
  torch::ScalarType target_;
  bool round_to_half_;
  std::set<std::string> used_;
};

using model::pre_transposed;

}  // namespace

struct RobertaModel::Impl : model::Weights {
  RobertaConfig cfg;
  EncoderHead head = EncoderHead::question_answering;
  std::vector<std::string> files;
  mutable std::string sha256;

  Tensor word_emb, pos_emb, emb_ln_w, emb_ln_b;
  Tensor type_emb;  // [type_vocab_size, H]; undefined when the family has no token types
  std::vector<Layer> layers;
  Tensor qa_w_t, qa_b;                               // [H, 2], [2]
  Tensor lm_dense_w_t, lm_dense_b, lm_ln_w, lm_ln_b;  // MLM head transform
  Tensor decoder_w, decoder_b;                       // [V, H] (tied: the word embeddings), [V]

  Buffer buf_qkv, buf_ctx, buf_inter, buf_scores, buf_part;
  Buffer buf_act32, buf_qkv32, buf_ctx32;  // float32 copies of bfloat16 activations (host)

  // This rank's attention heads and intermediate columns (all of them without tensor parallelism).
  std::int64_t heads = 0, inter = 0;
  std::int64_t attn_width() const { return heads * cfg.head_dim(); }

  // y += x W^T + b for a row-parallel layer: this rank's partial product (with the bias on rank 0
  // only, see load), summed over the group. Without tensor parallelism one accumulating product.
  void row_parallel(const quant::LinearPtr& layer, const Tensor& x, Tensor& y) {
    if (split()) {
      y.add_(row_parallel_product(layer, x));
    } else if (fast_fp32()) {
      layer->forward(x.data_ptr<float>(), x.size(0), x.size(1), y.data_ptr<float>(), layer->out_features(), 1.0f, 1.0f);
    } else {
      torch_linear(y, x, layer, 1.0f);
    }
  }
  // x @ W^T + b of a row-parallel layer (the bias on rank 0 only), summed over the group, into a
  // workspace buffer.
  Tensor row_parallel_product(const quant::LinearPtr& layer, const Tensor& x) {
    const std::int64_t M = x.size(0), N = layer->out_features();
    Tensor part = buf_part.get({M, N}, on_device());
    if (fast_fp32()) {
      layer->forward(x.data_ptr<float>(), M, x.size(1), part.data_ptr<float>(), N, 1.0f, 0.0f);
    } else {
      torch_linear(part, x, layer, 0.0f);
    }
    return split() ? summed(part) : part;
  }
  // The end of a sublayer: LayerNorm(residual + x W^T + b), w and b the norm's. The residual is
  // not needed afterwards; a float32 model adds the product into it. A bfloat16 model on the host
  // rounds the product, then the sum, as HF's (ops::layer_norm_rows_bf16 does the sum and the norm
  // in one pass over the 16-bit rows).
  Tensor residual_layer_norm(const quant::LinearPtr& layer, const Tensor& x, Tensor& residual, const Tensor& w,
                             const Tensor& b) {
    if (bf16_on_host()) return add_layer_norm(row_parallel_product(layer, x), residual, w, b);
    row_parallel(layer, x, residual);
    return layer_norm(residual, w, b);
  }
  // 1/sqrt(head_dim) is in the query weights (a power of two, folded at load where the model does not
  // run the float32 path: the torch path, a bfloat16 model on the host).
  bool scale_folded = false;
  bool attention_bf16 = false;  // quantization.attention = "bf16" (float32 compute on the host)

  // A bfloat16 model on the host: its attention runs the raw-buffer op with bfloat16 rounding, and its
  // LayerNorms (with the residual sum before them) run on the raw 16-bit rows,
  // ops::layer_norm_rows_bf16, without float32 copies of the activations.
  bool bf16_on_host() const { return st == torch::kBFloat16 && device.is_cpu(); }

  std::string encoder_prefix;  // the family's prefix ("roberta.") when the checkpoint's encoder names carry it
  bool fast_fp32() const { return use_sgemm; }

  void check_batch(const std::int64_t* ids, const std::int64_t* mask, std::int64_t batch, std::int64_t seq) const {
    if (ids == nullptr || mask == nullptr) throw std::invalid_argument("RobertaModel: null ids or mask");
    if (batch <= 0 || seq <= 0) throw std::invalid_argument("RobertaModel: batch and seq must be positive");
  }

  // Adds the token type embeddings (all type 0 when type_ids is null) to x [B*L, H].
  void add_token_types(Tensor& x, const std::int64_t* type_ids, std::int64_t batch, std::int64_t seq) const {
    if (!type_emb.defined()) return;  // DistilBERT: the tokenizer's type ids are not fed
    if (type_ids == nullptr) {
      x.add_(type_emb[0]);
      return;
    }
    for (std::int64_t i = 0; i < batch * seq; ++i) {
      if (type_ids[i] < 0 || type_ids[i] >= cfg.type_vocab_size) {
        throw InputError("token type ids", "type id " + std::to_string(type_ids[i]) + " at [" +
                                               std::to_string(i / seq) + ", " + std::to_string(i % seq) +
                                               "] is outside type_vocab_size " + std::to_string(cfg.type_vocab_size));
      }
    }
    x.add_(type_emb.index_select(0, model::int64_on(type_ids, {batch * seq}, device)));
  }

  // RoBERTa: position ids as HF create_position_ids_from_input_ids: running count of non-pad tokens,
  // offset by pad_token_id; pad tokens get pad_token_id. They come from the ids, not from the
  // attention mask. BERT, DistilBERT: 0 .. seq-1 whatever the ids.
  Tensor position_ids(const std::int64_t* ids, std::int64_t batch, std::int64_t seq) const {
    const bool after_padding = cfg.family->positions_after_padding;
    Tensor pos = torch::empty({batch * seq}, torch::kInt64);
    auto* p = pos.data_ptr<std::int64_t>();
    const std::int64_t pad = cfg.pad_token_id;
    for (std::int64_t b = 0; b < batch; ++b) {
      std::int64_t count = 0;
      for (std::int64_t t = 0; t < seq; ++t) {
        const std::int64_t id = ids[b * seq + t];
        if (id < 0 || id >= cfg.vocab_size) {
          throw InputError("input ids", "token id " + std::to_string(id) + " at [" + std::to_string(b) + ", " +
                                            std::to_string(t) + "] is outside the vocabulary (vocab_size " +
                                            std::to_string(cfg.vocab_size) + ")");
        }
        if (!after_padding) {
          p[b * seq + t] = t;
          if (t >= cfg.max_position_embeddings) {
            throw InputError("input ids", "sequences of " + std::to_string(seq) + " tokens are longer than " +
                                              std::to_string(cfg.max_sequence_length()) +
                                              " (max_position_embeddings " +
                                              std::to_string(cfg.max_position_embeddings) + ")");
          }
          continue;
        }
        if (id != pad) {
          ++count;
          p[b * seq + t] = count + pad;
        } else {
          p[b * seq + t] = pad;
        }
        if (count + pad >= cfg.max_position_embeddings) {
          throw InputError("input ids", "sequence " + std::to_string(b) + " has more than " +
                                            std::to_string(cfg.max_sequence_length()) +
                                            " non-pad tokens (max_position_embeddings " +
                                            std::to_string(cfg.max_position_embeddings) + ")");
        }
      }
    }
    return pos.to(device);
  }

  // LayerNorm with float32 weight and bias. torch's bfloat16 LayerNorm computes in float32
  // internally anyway, but its CPU kernel is ~15x slower than converting around the float32 one.
  Tensor layer_norm(const Tensor& x, const Tensor& w, const Tensor& b) const {
    if (x.scalar_type() == torch::kFloat32) return at::layer_norm(x, {cfg.hidden_size}, w, b, cfg.layer_norm_eps);
    if (bf16_on_host()) return add_layer_norm(x, Tensor(), w, b);
    return at::layer_norm(x.to(torch::kFloat32), {cfg.hidden_size}, w, b, cfg.layer_norm_eps).to(x.scalar_type());
  }

  // LayerNorm(round(y + residual)) of bfloat16 rows on the host (residual undefined: y alone).
  Tensor add_layer_norm(const Tensor& y, const Tensor& residual, const Tensor& w, const Tensor& b) const {
    Tensor out = torch::empty_like(y);
    ops::layer_norm_rows_bf16(bf16_bits(y), residual.defined() ? bf16_bits(residual) : nullptr,
                              w.data_ptr<float>(), b.data_ptr<float>(), bf16_bits(out), y.size(0), cfg.hidden_size,
                              static_cast<float>(cfg.layer_norm_eps));
    return out;
  }

  // hidden_act in place. A bfloat16 / float16 x is computed in float32 and rounded once, as torch
  // 2.x's kernels compute it (libtorch 1.13's CPU GELU rounds each step of its formula), in a
  // workspace: a fresh float32 copy of the FFN activations (38 MB at batch 8 x 384) is above glibc's
  // mmap threshold and would be page-faulted in again for every layer.
  void activation_(Tensor& x) {
    in_float32_(x, &buf_act32, [&](Tensor& f) {
      if (cfg.hidden_act == "gelu") {
        at::gelu_(f, "none");
      } else if (cfg.hidden_act == "relu") {
        at::relu_(f);
      } else {
        at::gelu_(f, "tanh");  // gelu_new, gelu_pytorch_tanh
      }
    });
  }
  // The exact GELU in place, the same way (RobertaLMHead's, whatever hidden_act says).
  static void gelu_(Tensor& x) {
    in_float32_(x, nullptr, [](Tensor& f) { at::gelu_(f, "none"); });
  }
  // fn on x in float32: x itself, or a float32 copy (in `workspace` when given) copied back.
  template <class Fn>
  static void in_float32_(Tensor& x, Buffer* workspace, const Fn& fn) {
    if (x.scalar_type() == torch::kFloat32) {
      fn(x);
      return;
    }
    Tensor f = workspace != nullptr ? workspace->get(x.sizes().vec(), x.options().dtype(torch::kFloat32))
                                    : torch::empty_like(x, x.options().dtype(torch::kFloat32));
    f.copy_(x);
    fn(f);
    x.copy_(f);
  }

  // Scaled dot-product attention over the fused QKV buffer [B*L, 3H] into ctx [B*L, H].
  // mask: [B, L] attention mask (1 token, 0 padding); mask_add: the same as a float32 additive mask
  // for the torch path (0 or float's lowest value; any value that makes exp() underflow to 0 gives
  // HF's result, which adds its dtype's lowest value).
  void attention(const Tensor& qkv, const std::int64_t* mask, const Tensor& mask_add, std::int64_t batch,
                 std::int64_t seq, Tensor& ctx) {
    const std::int64_t H = attn_width(), nh = heads, d = cfg.head_dim();
    if (fast_fp32() || bf16_on_host()) {
      ops::AttentionShape a;
      a.batch = batch;
      a.queries = a.keys = seq;
      a.heads = a.kv_heads = nh;
      a.head_dim = d;
      a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
      // Products on bfloat16 operands where the CPU has them: for a bfloat16 model the same results as
      // float32 products of its bfloat16 values up to the order of the sums; for float32 compute a
      // chosen mixed precision (quantization.attention = "bf16").
      a.bf16_products = ops::have_bf16_gemm() && (bf16_on_host() || attention_bf16);
      // q, k and v in the fused rows [B*L, 3H] that start at `base` (float32 or bfloat16 values).
      auto fused = [&](auto base) {
        using Rows = std::conditional_t<std::is_same_v<decltype(base), const float*>, ops::HeadRows, ops::HeadRowsBf16>;
        return std::array<Rows, 3>{Rows{base, seq * 3 * H, d, 3 * H}, Rows{base + H, seq * 3 * H, d, 3 * H},
                                   Rows{base + 2 * H, seq * 3 * H, d, 3 * H}};
      };
      if (!bf16_on_host()) {
        const auto [q, k, v] = fused(static_cast<const float*>(qkv.data_ptr<float>()));
        ops::attention_f32(a, q, k, v, mask, ctx.data_ptr<float>(), seq * H, H);
        return;
      }
      // bfloat16 (host): rounding where HF's bfloat16 attention stores a tensor: q . k, its
      // `/ sqrt(head_dim)` (nothing left to do when the scale is folded into the query weights: a
      // power of two commutes with the rounding), the probabilities and the context. The products
      // accumulate in float32 and round once, as torch 2.x's bfloat16 matmul does (libtorch 1.13's
      // at::matmul on bfloat16 does not, on CPUs with native bfloat16 products). With bfloat16
      // products the op reads q, k and v in place; without, from a float32 copy (exact).
      a.bf16 = true;
      a.scale = 1.0f;
      a.score_divisor = scale_folded ? 0.0f : static_cast<float>(std::sqrt(static_cast<double>(d)));
      Tensor out = buf_ctx32.get(ctx.sizes().vec(), on_device(torch::kFloat32));
      if (a.bf16_products) {
        const auto [q, k, v] = fused(static_cast<const std::uint16_t*>(bf16_bits(qkv)));
        ops::attention_bf16(a, q, k, v, mask, out.data_ptr<float>(), seq * H, H);
      } else {
        Tensor in = buf_qkv32.get(qkv.sizes().vec(), on_device(torch::kFloat32));
        in.copy_(qkv);
        const auto [q, k, v] = fused(static_cast<const float*>(in.data_ptr<float>()));
        ops::attention_f32(a, q, k, v, mask, out.data_ptr<float>(), seq * H, H);
      }
      ctx.copy_(out);  // exact: the op's results are bfloat16 values
      return;
    }
    // Torch path (float16, float32 without oneDNN, any run off the host), one sequence at a time so the scores stay
    // in cache. The products run in the compute dtype like HF; the scores are converted to float32
    // for the mask and softmax, which is what torch's bfloat16 softmax does inside anyway (its own
    // kernel is slower than the conversion), and the probabilities are rounded back for P @ V.
    // The 1/sqrt(head_dim) scale was folded into the query weights at load when it is a power of
    // two (exact in any dtype); otherwise it is applied here.
    Tensor qkv5 = qkv.view({batch, seq, 3, nh, d});
    for (std::int64_t b = 0; b < batch; ++b) {
      Tensor q = qkv5[b].select(1, 0).permute({1, 0, 2});    // [nh, L, d]
      Tensor k_t = qkv5[b].select(1, 1).permute({1, 2, 0});  // [nh, d, L]
      Tensor v = qkv5[b].select(1, 2).permute({1, 0, 2});    // [nh, L, d]
      Tensor scores = buf_scores.get({nh, seq, seq}, on_device(torch::kFloat32));
      scores.copy_(model::matmul(q, k_t));
      if (!scale_folded) scores.div_(std::sqrt(static_cast<double>(d)));
      scores.add_(mask_add[b].view({1, 1, seq}));
      at::_softmax_out(scores, scores, -1, false);
      Tensor c = model::matmul(scores.to(st), v);  // [nh, L, d]
      ctx.narrow(0, b * seq, seq).view({seq, nh, d}).copy_(c.permute({1, 0, 2}));
    }
  }

  // Final hidden states [B*L, H] in the compute dtype. If `hidden` is given, float32 copies of the
  // embedding output and every layer's output are appended to it.
  Tensor encode(const std::int64_t* ids, const std::int64_t* mask, const std::int64_t* type_ids, std::int64_t batch,
                std::int64_t seq, std::vector<std::vector<float>>* hidden) {
    check_batch(ids, mask, batch, seq);
    const std::int64_t H = cfg.hidden_size, M = batch * seq;

    Tensor pos = position_ids(ids, batch, seq);
    Tensor x = word_emb.index_select(0, model::int64_on(ids, {M}, device));
    add_token_types(x, type_ids, batch, seq);
    x.add_(pos_emb.index_select(0, pos));
    Tensor h = layer_norm(x, emb_ln_w, emb_ln_b);
    x = Tensor();

    // Additive mask like HF: (1 - mask) * lowest value (applied to float32 scores on every path).
    Tensor mask_t = model::int64_on(mask, {batch, seq}, device);
    Tensor mask_add = (mask_t == 0).to(torch::kFloat32).mul_(std::numeric_limits<float>::lowest());

    auto keep = [&](const Tensor& t) {
      if (hidden != nullptr) hidden->push_back(model::host_floats(t));
    };
    keep(h);

    for (const Layer& L : layers) {
      const std::int64_t A = attn_width();
      Tensor qkv = buf_qkv.get({M, 3 * A}, on_device());
      if (fast_fp32()) {
        L.qkv->forward(h.data_ptr<float>(), M, H, qkv.data_ptr<float>(), 3 * A, 1.0f, 0.0f);
      } else {
        torch_linear(qkv, h, L.qkv, 0.0f);
      }
      Tensor ctx = buf_ctx.get({M, A}, on_device());
      attention(qkv, mask, mask_add, batch, seq, ctx);
      Tensor a = residual_layer_norm(L.attn_out, ctx, h, L.attn_ln_w, L.attn_ln_b);
      h = Tensor();

      const std::int64_t I = inter;
      Tensor act = buf_inter.get({M, I}, on_device());
      if (fast_fp32()) {
        L.inter->forward(a.data_ptr<float>(), M, H, act.data_ptr<float>(), I, 1.0f, 0.0f);
      } else {
        torch_linear(act, a, L.inter, 0.0f);
      }
      activation_(act);
      h = residual_layer_norm(L.out, act, a, L.out_ln_w, L.out_ln_b);
      keep(h);
    }
    return h;
  }

  // The projections as linear sites, four per layer.
  std::vector<model::LinearSlot> slots() override {
    const std::int64_t H = cfg.hidden_size, A = attn_width(), I = inter;
    const EncoderFamily& f = *cfg.family;
    std::vector<model::LinearSlot> out;
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const std::string p = encoder_prefix + f.layers + std::to_string(i) + ".";
      Layer& L = layers[i];
      out.push_back({{p + f.query, p + f.key, p + f.value}, {A, A, A}, &L.qkv});
      out.push_back({{p + f.attn_out}, {H}, &L.attn_out});
      out.push_back({{p + f.inter}, {I}, &L.inter});
      out.push_back({{p + f.out}, {H}, &L.out});
    }
    return out;
  }

  std::vector<Tensor*> tensors() override {
    std::vector<Tensor*> out{&word_emb, &pos_emb, &type_emb, &emb_ln_w, &emb_ln_b, &qa_w_t, &qa_b,
                                   &lm_dense_w_t, &lm_dense_b, &lm_ln_w, &lm_ln_b, &decoder_w, &decoder_b};
    for (auto& L : layers) {
      for (Tensor* t : {&L.attn_ln_w, &L.attn_ln_b, &L.out_ln_w, &L.out_ln_b}) out.push_back(t);
    }
    return out;
  }

  // y = x @ w^T + b for w [N, K] as stored (the tied decoder), in the compute dtype.
  Tensor linear_nt(const Tensor& x, const Tensor& w, const Tensor& b) const {
    if (fast_fp32()) {
      const std::int64_t m = x.size(0), k = x.size(1), n = w.size(0);
      // A fresh buffer (contiguous() would alias the bias itself when m == 1).
      Tensor y = torch::empty({m, n}, b.options());
      y.copy_(b.view({1, n}).expand({m, n}));
      ops::sgemm('N', 'T', m, n, k, 1.0f, x.data_ptr<float>(), k, w.data_ptr<float>(), k, 1.0f, y.data_ptr<float>(),
                   n);
      return y;
    }
    return at::addmm(b, x, w.t());
  }
};

RobertaModel::RobertaModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RobertaModel::~RobertaModel() = default;

std::unique_ptr<RobertaModel> RobertaModel::load(const ModelLoad& how_to) {
  torch::InferenceMode guard;

  auto impl = std::make_unique<Impl>();
  Impl& m = *impl;
  m.cfg = RobertaConfig::from_json_file((fs::path(how_to.dir) / "config.json").string());
  const EncoderFamily& f = *m.cfg.family;
  m.head = head_from_architectures(f, m.cfg.architectures,
                                   (fs::path(how_to.dir) / "config.json").string() + ": architectures");
  m.begin_load(how_to);

  Checkpoint ckpt(m.dir);
  m.files = ckpt.files();
  WeightReader r(ckpt, f.prefix, m.st, m.dtype == DType::fp16);
  const auto& c = m.cfg;
  const std::int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  m.encoder_prefix = r.encoder_prefix();

  // This rank's heads and intermediate columns (see the file comment).
  const std::int64_t T = m.tp != nullptr ? m.tp->size() : 1, rank = m.tp != nullptr ? m.tp->rank() : 0;
  const std::int64_t nh = c.num_attention_heads, d = c.head_dim();
  if (T > 1) {
    const std::string cfg_file = (fs::path(how_to.dir) / "config.json").string();
    for (auto [key, value] : {std::pair<const char*, std::int64_t>{"num_attention_heads", nh}, {"intermediate_size", I}}) {
      if (value % T != 0) {
        throw InputError("parallel.tensor_parallel", "= " + std::to_string(T) + ": cannot split " + cfg_file + ": " +
                                                         key + " " + std::to_string(value) + " is not divisible by " +
                                                         std::to_string(T));
      }
    }
  }
  m.heads = nh / T;
  m.inter = I / T;
  const std::int64_t h0 = rank * m.heads * d, A = m.heads * d, i0 = rank * m.inter;
  const quant::Shard heads_part = T > 1 ? quant::Shard::columns(h0, h0 + A) : quant::Shard::whole();
  const quant::Shard attn_out_part = T > 1 ? quant::Shard::rows(h0, h0 + A, rank == 0) : quant::Shard::whole();
  const quant::Shard inter_part = T > 1 ? quant::Shard::columns(i0, i0 + m.inter) : quant::Shard::whole();
  const quant::Shard out_part = T > 1 ? quant::Shard::rows(i0, i0 + m.inter, rank == 0) : quant::Shard::whole();

  m.word_emb = r.encoder("embeddings.word_embeddings.weight", {V, H});
  m.pos_emb = r.encoder("embeddings.position_embeddings.weight", {c.max_position_embeddings, H});
  if (f.type_embeddings != nullptr) {
    m.type_emb = r.encoder(std::string(f.type_embeddings) + ".weight", {c.type_vocab_size, H});
  }
  // LayerNorm parameters are kept in float32 (after rounding to the run dtype); see layer_norm().
  auto ln = [](const Tensor& t) { return t.to(torch::kFloat32); };
  m.emb_ln_w = ln(r.encoder(std::string(f.embeddings_norm) + ".weight", {H}));
  m.emb_ln_b = ln(r.encoder(std::string(f.embeddings_norm) + ".bias", {H}));

  {
    // Off the float32 path, 1/sqrt(head_dim) is folded into the query projection when that is exact.
    const double root = std::sqrt(static_cast<double>(c.head_dim()));
    const bool power_of_two = root == std::floor(root) && (static_cast<std::int64_t>(root) & (static_cast<std::int64_t>(root) - 1)) == 0;
    m.scale_folded = !m.fast_fp32() && power_of_two;
  }
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = f.layers + std::to_string(i) + ".";
    Layer L;
    const model::LinearLoad how{r.checkpoint(), m.quant, m.st, m.dtype == DType::fp16, true, r.used()};
    auto linear = [&](const std::string& name, std::int64_t in, std::int64_t out, const quant::Shard& shard) {
      return model::load_linear(how, m.encoder_prefix + p + name, in, out, true, shard);
    };
    quant::LinearPtr q = linear(f.query, H, H, heads_part);
    if (m.scale_folded) {
      // Only float layers reach here (quantized models take the sgemm path).
      const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim()));  // a power of two: exact
      const auto& d = quant::as_dense(*q);
      q = std::make_unique<quant::DenseLinear>(d.weight().t() * scale, d.bias() * scale, true);
    }
    std::vector<quant::LinearPtr> qkv;
    qkv.push_back(std::move(q));
    qkv.push_back(linear(f.key, H, H, heads_part));
    qkv.push_back(linear(f.value, H, H, heads_part));
    L.qkv = quant::concat_outputs(std::move(qkv));
    L.attn_out = linear(f.attn_out, H, H, attn_out_part);
    L.attn_ln_w = ln(r.encoder(p + f.attn_norm + ".weight", {H}));
    L.attn_ln_b = ln(r.encoder(p + f.attn_norm + ".bias", {H}));
    L.inter = linear(f.inter, H, I, inter_part);
    L.out = linear(f.out, I, H, out_part);
    if (T > 1) {
      L.attn_out->set_row_group(m.tp);
      L.out->set_row_group(m.tp);
    }
    L.out_ln_w = ln(r.encoder(p + f.out_norm + ".weight", {H}));
    L.out_ln_b = ln(r.encoder(p + f.out_norm + ".bias", {H}));
    m.layers.push_back(std::move(L));
  }

  if (m.head == EncoderHead::question_answering) {
    m.qa_w_t = pre_transposed(r.head("qa_outputs.weight", {2, H}));
    m.qa_b = r.head("qa_outputs.bias", {2});
  } else {
    const std::string dense = f.mlm_dense, norm = f.mlm_norm, bias = f.mlm_bias, decoder = f.mlm_decoder;
    m.lm_dense_w_t = pre_transposed(r.head(dense + ".weight", {H, H}));
    m.lm_dense_b = r.head(dense + ".bias", {H});
    m.lm_ln_w = ln(r.head(norm + ".weight", {H}));
    m.lm_ln_b = ln(r.head(norm + ".bias", {H}));
    // HF ties the head's bias and the decoder's bias (one parameter); a saved decoder bias wins.
    const std::string decoder_bias = decoder + ".bias", decoder_weight = decoder + ".weight";
    m.decoder_b = r.has(decoder_bias) ? r.head(decoder_bias, {V}) : r.head(bias, {V});
    if (r.has(decoder_bias) && r.has(bias)) r.head(bias, {V});  // shape check
    if (c.tie_word_embeddings) {
      // HF re-ties after loading: a saved decoder weight is ignored, the word embeddings are used.
      if (r.has(decoder_weight)) r.head(decoder_weight, {V, H});  // shape check only
      m.decoder_w = m.word_emb;
    } else {
      m.decoder_w = r.head(decoder_weight, {V, H});
    }
  }
  r.check_no_unexpected();
  m.finish_load(/*transposed=*/true);
  return std::unique_ptr<RobertaModel>(new RobertaModel(std::move(impl)));
}

const RobertaConfig& RobertaModel::config() const { return impl_->cfg; }

std::string RobertaModel::architecture() const { return encoder_architecture(*impl_->cfg.family, impl_->head); }
bool RobertaModel::uses_token_types() const { return impl_->type_emb.defined() && impl_->cfg.type_vocab_size > 1; }
std::int64_t RobertaModel::vocab_size() const { return impl_->cfg.vocab_size; }

namespace {
ModelDims dims_from(const RobertaConfig& c, const std::string& path) {
  return {.config_json = path,
          .layers = c.num_hidden_layers,
          .heads = c.num_attention_heads,
          .kv_heads = c.num_attention_heads,
          .head_dim = c.head_dim(),
          .vocab = c.vocab_size,
          .max_positions = c.max_sequence_length(),
          .rotary = false};
}
}  // namespace

ModelDims RobertaModel::dims_of(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  return dims_from(RobertaConfig::from_json_file(path), path);
}
ModelDims RobertaModel::dims() const { return dims_from(impl_->cfg, (fs::path(impl_->dir) / "config.json").string()); }
std::int64_t RobertaModel::pad_token_id() const { return impl_->cfg.pad_token_id; }
std::int64_t RobertaModel::max_sequence_length() const { return impl_->cfg.max_sequence_length(); }

model::Weights& RobertaModel::weights() const { return *impl_; }
EncoderHead RobertaModel::head() const { return impl_->head; }

std::string RobertaModel::use_bf16_attention_products() {
  Impl& m = *impl_;
  if (m.bf16_on_host()) return "attention products bfloat16 (the model's own)";
  if (!m.fast_fp32()) {
    throw InputError("quantization.attention", "= \"bf16\" is for models computing in float32 on the host; this one computes " +
                                                   std::string(c10::toString(m.st)) + " on " + m.device.str());
  }
  if (!ops::have_bf16_gemm()) {
    throw InputError("quantization.attention",
                     "= \"bf16\" needs a CPU with AVX512-BF16 products (and a build with oneDNN's matmul); this one has none");
  }
  m.attention_bf16 = true;
  return "attention products bfloat16 (float32 accumulation)";
}
DType RobertaModel::dtype() const { return impl_->dtype; }
const std::string& RobertaModel::dir() const { return impl_->dir; }

void RobertaModel::question_answering(const std::int64_t* ids, const std::int64_t* mask, const std::int64_t* type_ids,
                                      std::int64_t batch, std::int64_t seq, std::vector<float>& start,
                                      std::vector<float>& end) {
  if (impl_->head != EncoderHead::question_answering) {
    const EncoderFamily& f = *impl_->cfg.family;
    throw InputError(impl_->dir + "/config.json: architectures",
                     std::string("the model is ") + encoder_architecture(f, impl_->head) +
                         "; a question-answering run needs " + encoder_architecture(f, EncoderHead::question_answering));
  }
  torch::InferenceMode guard;
  Tensor h = impl_->encode(ids, mask, type_ids, batch, seq, nullptr);
  const std::vector<float> logits = model::host_floats(at::addmm(impl_->qa_b, h, impl_->qa_w_t));  // [M, 2]
  const std::int64_t M = batch * seq;
  const float* p = logits.data();
  start.resize(M);
  end.resize(M);
  for (std::int64_t i = 0; i < M; ++i) {
    start[i] = p[2 * i];
    end[i] = p[2 * i + 1];
  }
}

void RobertaModel::masked_lm(const std::int64_t* ids, const std::int64_t* mask, const std::int64_t* type_ids,
                             std::int64_t batch, std::int64_t seq,
                             const std::vector<std::pair<std::int64_t, std::int64_t>>& positions,
                             std::vector<float>& logits) {
  Impl& m = *impl_;
  if (m.head != EncoderHead::masked_lm) {
    const EncoderFamily& f = *m.cfg.family;
    const char* mlm = f.mlm_architecture != nullptr ? f.mlm_architecture : "a masked-LM head (none for this family)";
    throw InputError(m.dir + "/config.json: architectures", std::string("the model is ") +
                                                                encoder_architecture(f, m.head) +
                                                                "; a masked-LM run needs " + mlm);
  }
  for (const auto& [row, pos] : positions) {
    if (row < 0 || row >= batch || pos < 0 || pos >= seq) {
      throw std::invalid_argument("RobertaModel::masked_lm: position (" + std::to_string(row) + ", " +
                                  std::to_string(pos) + ") outside the batch");
    }
  }
  torch::InferenceMode guard;
  Tensor h = m.encode(ids, mask, type_ids, batch, seq, nullptr);
  const std::int64_t n = static_cast<std::int64_t>(positions.size());
  logits.clear();
  if (n == 0) return;
  std::vector<std::int64_t> rows(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) rows[i] = positions[i].first * seq + positions[i].second;
  const Tensor idx = model::int64_on(rows.data(), {n}, m.device);
  // RobertaLMHead: dense -> exact GELU (whatever hidden_act says) -> LayerNorm -> decoder; BERT's
  // BertPredictionHeadTransform applies hidden_act instead.
  Tensor x = at::addmm(m.lm_dense_b, h.index_select(0, idx), m.lm_dense_w_t);
  if (m.cfg.family->mlm_head_hidden_act) {
    m.activation_(x);
  } else {
    m.gelu_(x);
  }
  x = m.layer_norm(x, m.lm_ln_w, m.lm_ln_b);
  logits = model::host_floats(m.linear_nt(x, m.decoder_w, m.decoder_b));
}

std::vector<std::vector<float>> RobertaModel::hidden_states(const std::int64_t* ids, const std::int64_t* mask,
                                                            const std::int64_t* type_ids, std::int64_t batch,
                                                            std::int64_t seq) {
  torch::InferenceMode guard;
  std::vector<std::vector<float>> out;
  impl_->encode(ids, mask, type_ids, batch, seq, &out);
  return out;
}

std::string RobertaModel::weights_sha256() const {
  if (impl_->sha256.empty()) {
    std::vector<fs::path> paths(impl_->files.begin(), impl_->files.end());
    impl_->sha256 = sha256_files(paths);
  }
  return impl_->sha256;
}

}  // namespace evalrun
