// Llama-family decoder forward pass on libtorch tensors held by the model (no nn::Module, no
// autograd), with a preallocated key/value cache.
//
// Layout: activations are 2-D [batch * seq, hidden] row-major. q, k and v are fused into one weight
// with (heads + 2 * kv_heads) * head_dim outputs and gate and up into one with 2 * intermediate
// outputs, so a decode step reads each weight once, in 4 products per layer (see DecoderLayer). The cache holds, per layer,
// keys and values [batch, kv_heads, capacity, head_dim]; a step writes its rotated keys and values at
// positions [cached_length, cached_length + seq) and attends over [0, cached_length + seq).
//
// Two implementations of the same math:
//  * raw buffers on the host ("fast" path): float32 with oneDNN's sgemm (and every quantized model),
//    or a bfloat16 model: the kernels of src/ops (RMSNorm, RoPE, gated SiLU, attention as strided
//    sgemm calls straight on the fused QKV buffer and the cache, no permute copies) on float32
//    buffers. Work buffers live in Workspaces that grow to the largest batch seen and are reused, so
//    decode steps do not allocate big blocks (and do not page-fault; see model::tune_malloc_once).
//    A bfloat16 model (Impl::bf16) keeps bfloat16 values in those float32 buffers (its KV cache is
//    bfloat16, as the torch path's) and rounds them where the torch path below stores a bfloat16
//    tensor (ops/bfloat16.hpp), its products on bfloat16 weights (model::linear_bf16_floats): the
//    torch path's numbers to float rounding inside an operation, without its per-operation cost,
//    which was most of a bfloat16 decode step of a small model. Mixtral in bfloat16 stays on the
//    torch path.
//  * torch ops (float32 without oneDNN, bfloat16 Mixtral, and every run off the host: float32,
//    bfloat16 or float16 on a GPU), written like transformers' eager code so that bfloat16 rounds
//    where HF's model.to(torch.bfloat16) rounds: products, residual adds and the SiLU gate in
//    bfloat16; RMSNorm statistics, RoPE angles and softmax in float32. Its tensors (weights, cache,
//    activations) sit on the model's device (Weights::device); ids, positions and masks go there once
//    per call, and only the logits and hidden states come back (host_floats).
//
// Tensor parallelism (a Communicator of T ranks passed to load): rank r holds attention heads
// [r nh/T, (r+1) nh/T) and the key/value heads they read (split when T divides num_key_value_heads,
// otherwise each rank holds the one its query heads share), and intermediate columns
// [r I/T, (r+1) I/T). q/k/v and gate/up are column-parallel (each rank computes its own outputs
// fully); o_proj and down_proj are row-parallel: each rank multiplies its columns of the input and
// one sum all-reduce per layer and projection gives every rank the whole result, which it adds to the
// residual stream. Embeddings, norms and the LM head are replicated: every rank of the group then
// holds the same residual stream and the same logits (the decode loop needs whole logits on every
// rank to pick the same next token; splitting the LM head by vocabulary would need a gather of the
// logits per step in exchange for 1/T of its memory).
//
// Families: Mistral adds a sliding window (ops::AttentionShape::window on the fast path, the same
// bound in the torch path's mask; the cache keeps every key, the window is only a mask, as in
// transformers 4.39), Qwen2 biases on q, k and v (load_linear with bias, kept by concat_outputs;
// tensor parallelism splits them with their columns), tied embeddings and a large rope theta, which
// the Llama reader already covers. Mixtral replaces the gated MLP by a sparse mixture of experts
// (moe_fast / moe_torch: routing in ops/moe, each expert a w1 | w3 and a w2 projection); under tensor
// parallelism every expert splits like the dense MLP (w1 / w3 columns, w2 rows) rather than experts
// being spread over ranks, so every rank does the same work whatever the routing, and the weighted
// sum of the experts' partial outputs needs one all-reduce per layer, as the dense MLP does. Gemma
// (multi-query attention with a head_dim of its own, which the shapes above already allow) scales
// the embeddings by sqrt(hidden_size), normalizes with (1 + w) (ops::rms_norm_rows' weight offset;
// the norm weights are replicated, so tensor parallelism is unchanged) and gates its MLP with the
// tanh GELU (ops::GateActivation); all three are LlamaConfig fields its config reader sets.
// sum of the experts' partial outputs needs one all-reduce per layer, as the dense MLP does.
// StarCoder2 swaps RMSNorm for LayerNorm (weight and bias), the gated MLP for a plain one (c_fc ->
// tanh GELU -> c_proj, held in the gate_up / down slots) and has biases on every projection (the
// row-parallel o / down biases are added by rank 0 of the group only). GPT-2 and GPTBigCode add
// learned absolute positions (wpe, no RoPE) and the GPT-2 checkpoint layout: the fused c_attn is cut
// into its q, k and v columns at load (each rank reads its heads' columns of each), GPT-2's Conv1D
// weights [in, out] are transposed at load, and GPTBigCode's single multi-query key/value head is
// replicated on every rank of a tensor-parallel group (the existing "each rank holds the kv head its
// query heads share" case).
//
// Masking: a query attends to key j when key_mask[j] == 1 and j is not after the query. HF adds the
// dtype's lowest value to masked scores, which makes their probabilities exactly 0 whenever one key is
// allowed; a query with no allowed key at all (a padding position) gets a zero context here instead of
// HF's meaningless uniform average. Those rows only feed other padding rows, never a real token.
#include "model/llama.hpp"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>
#include <stdexcept>

#include "common/errors.hpp"
#include "common/logging.hpp"
#include "dist/communicator.hpp"
#include "io/safetensors.hpp"
#include "model/weights.hpp"
#include "model/loader_util.hpp"
#include "ops/activations.hpp"
#include "ops/attention.hpp"
#include "ops/bfloat16.hpp"
#include "ops/bf16_rows.hpp"
#include "ops/gemm.hpp"
#include "ops/moe.hpp"
#include "ops/norms.hpp"
#include "ops/rotary.hpp"
#include "quant/dense.hpp"
#include "quant/int8.hpp"

namespace evalrun {
namespace {

using torch::Tensor;
namespace fs = std::filesystem;

// Tests and benchmarks: false sends bfloat16 models loaded afterwards to the torch path.
bool g_raw_bfloat16 = true;

// Float projection weights stay [out, in] as stored, on both paths: the float32 path's products
// (ops::linear_f32) stream that layout at memory speed in decode steps and run oneDNN's matmul on it
// for more rows; the bfloat16 routes (ops/bf16_rows.hpp) take it as it is too. Quantized layers run on
// the float32 path only.
struct DecoderLayer {
  quant::LinearPtr qkv;      // (nh + 2 nkv) d outputs: q | k | v
  quant::LinearPtr o;        // nh d -> H
  quant::LinearPtr gate_up;  // 2 I outputs: gate | up; a plain MLP's c_fc: I outputs
  quant::LinearPtr down;     // I -> H
  Tensor attn_norm, mlp_norm;  // [H]
  Tensor attn_norm_b, mlp_norm_b;  // LayerNorm biases [H] (undefined with RMSNorm)
  // Mixtral: the router [E, H] (kept float, replicated) and per expert w1 | w3 and w2, in place of
  // gate_up and down (null then).
  struct Expert {
    quant::LinearPtr gate_up, down;
  };
  Tensor router;
  std::vector<Expert> experts;
};

// The torch path's [out, in] weight of a float layer.
const Tensor& weight_of(const quant::LinearPtr& layer) { return quant::as_dense(*layer).weight(); }
// Its bias (undefined when it has none: Qwen2's q|k|v has one).
const Tensor& bias_of(const quant::LinearPtr& layer) { return quant::as_dense(*layer).bias(); }

// arange(0, d, 2) / d in float32: the exponents of theta in the RoPE inverse frequencies.
Tensor rope_exponent(std::int64_t d) {
  return torch::arange(0, d, 2, torch::kInt64).to(torch::kFloat32) / static_cast<double>(d);
}

// RoPE inverse frequencies as transformers computes them, in float32 tensor arithmetic:
// 1 / theta^(arange(0, d, 2) / d), then for rope_type llama3 the wavelength-based smoothing of
// _compute_llama3_parameters: wavelengths above original_max / low_freq_factor are slowed down by
// `factor`, those below original_max / high_freq_factor are kept, the ones in between interpolated.
// (linear and dynamic scaling keep these and act per forward call: position_divisor, row_inv_freq.)
Tensor rope_inv_freq(const LlamaConfig& c) {
  Tensor inv_freq = torch::pow(c.rope_theta, rope_exponent(c.head_dim)).reciprocal();
  if (c.rope_type != "llama3") return inv_freq;
  const double factor = c.rope_factor, low = c.rope_low_freq_factor, high = c.rope_high_freq_factor;
  const double old_len = static_cast<double>(c.rope_original_max_position_embeddings);
  const double low_freq_wavelen = old_len / low, high_freq_wavelen = old_len / high;
  // Python's `scalar / tensor` is reciprocal(tensor) * scalar; written the same way to round the same.
  Tensor wavelen = inv_freq.reciprocal() * (2 * M_PI);
  Tensor scaled = torch::where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq);
  Tensor smooth = (wavelen.reciprocal() * old_len - low) / (high - low);
  Tensor smoothed = (1 - smooth) * scaled / factor + smooth * scaled;
  Tensor medium = torch::logical_not(wavelen < high_freq_wavelen).logical_and(torch::logical_not(wavelen > low_freq_wavelen));
  return torch::where(medium, smoothed, scaled).contiguous();
}

// Dynamic NTK scaling (transformers 4.39's LlamaDynamicNTKScalingRotaryEmbedding) for a forward
// call reaching length n = max position + 1 > max_position_embeddings: the base becomes
// theta * (factor * n / max_pos - (factor - 1))^(d / (d - 2)), computed in float32 tensor arithmetic
// as transformers does (n is an int64 tensor there, so the whole expression is float32).
Tensor dynamic_ntk_inv_freq(const LlamaConfig& c, std::int64_t n) {
  const std::int64_t d = c.head_dim;
  Tensor len = torch::scalar_tensor(n, torch::kInt64);
  Tensor ratio = len * c.rope_factor / c.max_position_embeddings - (c.rope_factor - 1);
  Tensor base = ratio.pow(static_cast<double>(d) / static_cast<double>(d - 2)) * c.rope_theta;
  return torch::pow(base, rope_exponent(d)).reciprocal().contiguous();
}

// Checkpoint prefixes of layer i's tensors (gate empty for a plain MLP, q/k/v empty when fused in qkv).
struct LayerNames {
  std::string prefix, attn_norm, q, k, v, qkv, o, mlp_norm, gate, up, down;
};

LayerNames layer_names(const LlamaConfig& c, std::int64_t i) {
  LayerNames n;
  if (c.gpt2_layout) {
    const std::string p = "transformer.h." + std::to_string(i) + ".";
    n.prefix = p;
    n.attn_norm = p + "ln_1";
    n.qkv = p + "attn.c_attn";
    n.o = p + "attn.c_proj";
    n.mlp_norm = p + "ln_2";
    n.up = p + "mlp.c_fc";
    n.down = p + "mlp.c_proj";
    return n;
  }
  const std::string p = "model.layers." + std::to_string(i) + ".";
  n.prefix = p;
  n.attn_norm = p + "input_layernorm";
  n.q = p + "self_attn.q_proj";
  n.k = p + "self_attn.k_proj";
  n.v = p + "self_attn.v_proj";
  n.o = p + "self_attn.o_proj";
  n.mlp_norm = p + "post_attention_layernorm";
  if (c.mlp == LlamaConfig::Mlp::gated) {
    n.gate = p + "mlp.gate_proj";
    n.up = p + "mlp.up_proj";
    n.down = p + "mlp.down_proj";
  } else {  // StarCoder2
    n.up = p + "mlp.c_fc";
    n.down = p + "mlp.c_proj";
  }
  return n;
}

struct LlamaCache final : KvCache {
  LlamaCache(std::int64_t batch, std::int64_t capacity) : KvCache(batch, capacity) {}
  void advance(std::int64_t n) { length_ += n; }
  std::vector<Tensor> k, v;  // per layer [batch, kv_heads, capacity, head_dim]
};

}  // namespace

struct LlamaModel::Impl : model::Weights {
  using Cache = LlamaCache;
  LlamaConfig cfg;

  Tensor embed;         // [V, H]
  Tensor positions_emb;  // learned positions [max_position_embeddings, H] (undefined with RoPE)
  Tensor lm_head;       // [V, H] (tied: the embeddings); undefined once quantized, unless tied
  // quantization.lm_head = "int8": the output projection as an Int8Linear (project() uses it).
  quant::LinearPtr lm_head_int8;
  Tensor final_norm, final_norm_b;  // [H] (the bias: LayerNorm only)
  std::vector<DecoderLayer> layers;
  Tensor inv_freq;  // float32 [d / 2]

  // This rank's part of the heads and intermediate columns (all of them without tensor parallelism).
  std::int64_t heads = 0, kv_heads = 0, inter = 0;

  // The raw-buffer path (see the file comment), fixed at load: use_sgemm, or bf16.
  bool fast = false;
  // A bfloat16 model on the raw-buffer path: float32 buffers hold bfloat16 values, rounded as the
  // torch path rounds; its norm weights (and GPT-2's positions) are held in float32 (exact).
  bool bf16 = false;

  model::Workspace buf_x, buf_a, buf_qkv, buf_ctx, buf_gu, buf_act, buf_rope, buf_final, buf_part;
  model::Workspace buf_router, buf_moe_in, buf_moe_out, buf_moe_acc;

  // Mixtral: the tokens routed to each expert, [layer][expert], over this model's forward calls (each
  // token counts once per expert it is routed to: a layer's counts sum to tokens x experts_per_token).
  // Only real tokens count: counted_rows marks the rows of the current call that are (padding rows
  // are routed too, their results unused); empty outside forward (hidden_states counts nothing).
  std::vector<std::vector<std::int64_t>> expert_load;
  std::vector<std::uint8_t> counted_rows;

  void count_routes(std::size_t layer, const std::int64_t* chosen, std::int64_t M) {
    if (counted_rows.empty()) return;
    if (expert_load.empty()) expert_load.assign(layers.size(), std::vector<std::int64_t>(cfg.num_experts, 0));
    const std::int64_t K = cfg.experts_per_token;
    for (std::int64_t m = 0; m < M; ++m) {
      if (counted_rows[m] == 0) continue;
      for (std::int64_t j = 0; j < K; ++j) ++expert_load[layer][chosen[m * K + j]];
    }
  }

  std::int64_t q_width() const { return heads * cfg.head_dim; }
  std::int64_t kv_width() const { return kv_heads * cfg.head_dim; }

  // y = x W^T (+ b) on the raw-buffer path: the layer's own float32 product, or for a bfloat16 model
  // the bfloat16 one, its result rounded to bfloat16.
  void linear(quant::Linear& layer, const float* x, std::int64_t M, std::int64_t ldx, float* y, std::int64_t ldy) {
    if (bf16) {
      const quant::DenseLinear& dense = quant::as_dense(layer);
      model::linear_bf16_floats(x, M, ldx, dense.weight(), dense.bias(), y, ldy);
    } else {
      layer.forward(x, M, ldx, y, ldy, 1.0f, 0.0f);
    }
  }

  // y[m, :] += alpha * (x[m, :] W^T) for a row-parallel layer: this rank's partial product, summed
  // over the group. Without tensor parallelism, one accumulating product. A bfloat16 model rounds
  // as HF's residual add: y = bf16(y + bf16(alpha * o)), o the bfloat16 product (summed in float32
  // and rounded, as Weights::summed).
  void row_parallel(quant::Linear& layer, const float* x, std::int64_t M, std::int64_t ldx, float* y, std::int64_t ldy,
                    float alpha) {
    if (bf16) {
      const std::int64_t N = layer.out_features();
      float* o = buf_part.get({M, N}, torch::kFloat32).data_ptr<float>();
      linear(layer, x, M, ldx, o, N);
      if (split()) {
        tp->allreduce_sum(o, static_cast<std::size_t>(M * N));
        ops::round_to_bf16(o, M * N);
      }
      for (std::int64_t m = 0; m < M; ++m) {
        for (std::int64_t n = 0; n < N; ++n) {
          const float add = alpha == 1.0f ? o[m * N + n] : ops::round_to_bf16(o[m * N + n] * alpha);
          y[m * ldy + n] = ops::round_to_bf16(y[m * ldy + n] + add);
        }
      }
      return;
    }
    if (!split()) {
      layer.forward(x, M, ldx, y, ldy, alpha, 1.0f);
      return;
    }
    const std::int64_t N = layer.out_features();
    float* part = buf_part.get({M, N}, torch::kFloat32).data_ptr<float>();
    layer.forward(x, M, ldx, part, N, 1.0f, 0.0f);
    tp->allreduce_sum(part, static_cast<std::size_t>(M * N));
    for (std::int64_t m = 0; m < M; ++m) {
      for (std::int64_t n = 0; n < N; ++n) y[m * ldy + n] += alpha * part[m * N + n];
    }
  }
  // RMSNorm's weight offset: Gemma scales by (1 + w).
  float norm_offset() const { return cfg.norm_weight_plus_one ? 1.0f : 0.0f; }
  float attention_scale() const {
    // Granite multiplies the scores by attention_multiplier (GPT-2 without scale_attn_weights by 1);
    // the others divide them by sqrt(head_dim).
    if (cfg.attention_multiplier != 0.0) return static_cast<float>(cfg.attention_multiplier);
    return static_cast<float>(1.0 / std::sqrt(static_cast<double>(cfg.head_dim)));
  }

  void check_inputs(const std::int64_t* ids, const std::int64_t* positions, const std::int64_t* key_mask,
                    std::int64_t batch, std::int64_t seq, const Cache& cache) const {
    if (ids == nullptr || positions == nullptr || key_mask == nullptr) {
      throw std::invalid_argument("LlamaModel::forward: null ids, positions or key_mask");
    }
    if (batch <= 0 || seq <= 0) throw std::invalid_argument("LlamaModel::forward: batch and seq must be positive");
    if (batch != cache.batch()) {
      throw std::invalid_argument("LlamaModel::forward: batch " + std::to_string(batch) + " but the cache has " +
                                  std::to_string(cache.batch()) + " rows");
    }
    if (cache.length() + seq > cache.capacity()) {
      throw std::invalid_argument("LlamaModel::forward: " + std::to_string(cache.length()) + " cached + " +
                                  std::to_string(seq) + " new positions exceed the cache capacity " +
                                  std::to_string(cache.capacity()));
    }
    for (std::int64_t i = 0; i < batch * seq; ++i) {
      if (ids[i] < 0 || ids[i] >= cfg.vocab_size) {
        throw InputError("input ids", "token id " + std::to_string(ids[i]) + " at [" + std::to_string(i / seq) +
                                          ", " + std::to_string(i % seq) + "] is outside the vocabulary (vocab_size " +
                                          std::to_string(cfg.vocab_size) + ")");
      }
      if (positions[i] < 0) throw std::invalid_argument("LlamaModel::forward: negative position");
      if (cfg.learned_positions && positions[i] >= cfg.max_position_embeddings) {
        throw InputError("input positions", "position " + std::to_string(positions[i]) + " at [" + std::to_string(i / seq) +
                                                ", " + std::to_string(i % seq) + "] is past the learned position table (" +
                                                std::to_string(cfg.max_position_embeddings) + " positions)");
      }
    }
  }

  // Linear rope scaling divides the positions by its factor.
  float position_divisor() const { return cfg.rope_type == "linear" ? static_cast<float>(cfg.rope_factor) : 1.0f; }

  // The inverse frequencies each row of a forward call rotates its new q / k with, float32
  // [batch, d/2]: inv_freq, except under dynamic NTK scaling for a row whose positions reach past
  // max_position_embeddings. transformers takes the length from the whole call (the largest
  // position in the batch); here each row uses its own, which is transformers' result for that row
  // alone, so a row's result does not depend on what it is batched with (or on the world size).
  // Cached keys keep the frequencies they were rotated with, as in transformers.
  Tensor row_inv_freq(const std::int64_t* positions, std::int64_t batch, std::int64_t seq) const {
    Tensor rows = inv_freq.unsqueeze(0).repeat({batch, 1});
    if (cfg.rope_type != "dynamic") return rows;
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int64_t n = *std::max_element(positions + b * seq, positions + (b + 1) * seq) + 1;
      if (n > cfg.max_position_embeddings) rows[b].copy_(dynamic_ntk_inv_freq(cfg, n));
    }
    return rows;
  }

  // cos / sin [batch * seq, d/2] float32 for the given positions (HF: float32 angle = inv_freq * position).
  void rope_tables(const std::int64_t* positions, std::int64_t batch, std::int64_t seq, float*& cos, float*& sin) {
    const std::int64_t half = cfg.head_dim / 2, M = batch * seq;
    Tensor t = buf_rope.get({2, M, half}, torch::kFloat32);
    cos = t.data_ptr<float>();
    sin = cos + M * half;
    const Tensor freqs = row_inv_freq(positions, batch, seq);
    for (std::int64_t b = 0; b < batch; ++b) {
      ops::rope_angles(freqs.data_ptr<float>() + b * half, half, positions + b * seq, seq, cos + b * seq * half,
                       sin + b * seq * half, position_divisor());
    }
  }

  // ---- float32 + sgemm path ------------------------------------------------------------------

  // The configured norm of M rows of x into out: RMSNorm, or LayerNorm with bias b.
  void norm_rows(const float* x, const Tensor& w, const Tensor& b, float* out, std::int64_t M) const {
    const float eps = static_cast<float>(cfg.norm_eps);
    if (cfg.norm == LlamaConfig::Norm::layer) {
      ops::layer_norm_rows(x, w.data_ptr<float>(), b.data_ptr<float>(), out, M, cfg.hidden_size, eps, bf16);
    } else {
      ops::rms_norm_rows(x, w.data_ptr<float>(), out, M, cfg.hidden_size, eps, norm_offset(), bf16);
    }
  }

  // Attention of one layer: rotated q in qkv (row stride W), keys / values already in the cache.
  void attention_fast(const float* qkv, std::int64_t W, const Cache& cache, std::size_t layer,
                      const std::int64_t* key_mask, std::int64_t batch, std::int64_t seq, float* ctx) {
    const std::int64_t d = cfg.head_dim, cap = cache.capacity(), qw = q_width();
    ops::AttentionShape a;
    a.batch = batch;
    a.queries = seq;
    a.keys = cache.length() + seq;
    a.heads = heads;
    a.kv_heads = kv_heads;
    a.head_dim = d;
    a.causal = true;
    a.first_query = cache.length();
    a.scale = attention_scale();
    a.window = cfg.sliding_window;
    a.bf16 = bf16;
    // HF divides by sqrt(head_dim) (Granite multiplies by its attention_multiplier).
    if (cfg.attention_multiplier == 0.0) a.score_divisor = static_cast<float>(std::sqrt(static_cast<double>(d)));
    const ops::HeadRows q{qkv, seq * W, d, W};
    if (bf16) {  // the cache holds bfloat16, as the torch path's
      const ops::HeadRowsBf16 k{cache_bits(cache.k[layer]), kv_heads * cap * d, cap * d, d};
      const ops::HeadRowsBf16 v{cache_bits(cache.v[layer]), kv_heads * cap * d, cap * d, d};
      ops::attention_bf16_cache(a, q, k, v, key_mask, ctx, seq * qw, qw);
      return;
    }
    const ops::HeadRows k{cache.k[layer].data_ptr<float>(), kv_heads * cap * d, cap * d, d};
    const ops::HeadRows v{cache.v[layer].data_ptr<float>(), kv_heads * cap * d, cap * d, d};
    ops::attention_f32(a, q, k, v, key_mask, ctx, seq * qw, qw);
  }

  // A bfloat16 cache tensor's values as raw 16-bit patterns.
  static std::uint16_t* cache_bits(const Tensor& t) { return reinterpret_cast<std::uint16_t*>(t.data_ptr()); }

  // Runs the layers; returns the residual stream [M, H] after the last layer.
  Tensor layers_fast(const std::int64_t* ids, const std::int64_t* positions, const std::int64_t* key_mask,
                     std::int64_t batch, std::int64_t seq, Cache& cache, std::vector<std::vector<float>>* hidden) {
    const auto& c = cfg;
    const std::int64_t M = batch * seq, H = c.hidden_size, I = inter, d = c.head_dim;
    const std::int64_t nh = heads, nkv = kv_heads, half = d / 2;
    const std::int64_t qw = q_width(), kvw = kv_width(), W = qw + 2 * kvw, cap = cache.capacity();
    const std::int64_t len0 = cache.length();
    const float rm = static_cast<float>(c.residual_multiplier);

    Tensor xt = buf_x.get({M, H}, torch::kFloat32);
    float* x = xt.data_ptr<float>();
    float em = static_cast<float>(c.embedding_multiplier);
    // Gemma multiplies by its normalizer as a tensor of the compute dtype.
    if (bf16 && c.embedding_multiplier_in_dtype) em = ops::round_to_bf16(em);
    for (std::int64_t m = 0; m < M; ++m) {
      float* xr = x + m * H;
      if (bf16) {  // the embeddings stay bfloat16 (a tied lm_head is the same tensor)
        const auto* e = reinterpret_cast<const std::uint16_t*>(embed.data_ptr()) + ids[m] * H;
        for (std::int64_t i = 0; i < H; ++i) xr[i] = ops::float_of_bf16(e[i]);
      } else {
        std::memcpy(xr, embed.data_ptr<float>() + ids[m] * H, sizeof(float) * H);
      }
      if (em != 1.0f) {
        for (std::int64_t i = 0; i < H; ++i) xr[i] *= em;
        if (bf16) ops::round_to_bf16(xr, H);
      }
      if (c.learned_positions) {  // GPT-2: wte + wpe
        const float* pe = positions_emb.data_ptr<float>() + positions[m] * H;
        for (std::int64_t i = 0; i < H; ++i) xr[i] += pe[i];
        if (bf16) ops::round_to_bf16(xr, H);
      }
    }
    auto keep = [&](const float* p) {
      if (hidden != nullptr) hidden->emplace_back(p, p + M * H);
    };
    keep(x);

    float *cos = nullptr, *sin = nullptr;
    const bool rope = !c.learned_positions;
    if (rope) rope_tables(positions, batch, seq, cos, sin);
    if (rope && bf16) {  // HF casts cos and sin to the compute dtype
      ops::round_to_bf16(cos, M * half);
      ops::round_to_bf16(sin, M * half);
    }
    float* a = buf_a.get({M, H}, torch::kFloat32).data_ptr<float>();
    float* qkv = buf_qkv.get({M, W}, torch::kFloat32).data_ptr<float>();
    float* ctx = buf_ctx.get({M, qw}, torch::kFloat32).data_ptr<float>();
    float* gu = buf_gu.get({M, 2 * I}, torch::kFloat32).data_ptr<float>();
    float* act = buf_act.get({M, I}, torch::kFloat32).data_ptr<float>();

    for (std::size_t l = 0; l < layers.size(); ++l) {
      const DecoderLayer& L = layers[l];
      norm_rows(x, L.attn_norm, L.attn_norm_b, a, M);
      linear(*L.qkv, a, M, H, qkv, W);
      // Rotate q and k, and store k and v in the cache.
      void* kc = cache.k[l].data_ptr();
      void* vc = cache.v[l].data_ptr();
      at::parallel_for(0, M, 16, [&](std::int64_t m0, std::int64_t m1) {
        for (std::int64_t m = m0; m < m1; ++m) {
          float* row = qkv + m * W;
          if (rope) {
            const float* cm = cos + m * half;
            const float* sm = sin + m * half;
            for (std::int64_t h = 0; h < nh + nkv; ++h) {
              if (bf16) {
                ops::rope_rotate_head_bf16(row + h * d, cm, sm, half);
              } else {
                ops::rope_rotate_head(row + h * d, cm, sm, half);
              }
            }
          }
          const std::int64_t b = m / seq, pos = len0 + m % seq;
          for (std::int64_t j = 0; j < nkv; ++j) {
            const std::int64_t slot = ((b * nkv + j) * cap + pos) * d;
            const float *key = row + qw + j * d, *value = row + qw + kvw + j * d;
            if (bf16) {  // bfloat16 values: exact
              for (std::int64_t i = 0; i < d; ++i) {
                static_cast<std::uint16_t*>(kc)[slot + i] = ops::bf16_of(key[i]);
                static_cast<std::uint16_t*>(vc)[slot + i] = ops::bf16_of(value[i]);
              }
            } else {
              std::memcpy(static_cast<float*>(kc) + slot, key, sizeof(float) * d);
              std::memcpy(static_cast<float*>(vc) + slot, value, sizeof(float) * d);
            }
          }
        }
      });
      attention_fast(qkv, W, cache, l, key_mask, batch, seq, ctx);
      // x += rm * (ctx @ W_o): HF adds residual + out * residual_multiplier.
      row_parallel(*L.o, ctx, M, qw, x, H, rm);

      norm_rows(x, L.mlp_norm, L.mlp_norm_b, a, M);
      if (!L.experts.empty()) {
        moe_fast(L, l, a, M, x, gu, act, rm);
      } else if (c.mlp == LlamaConfig::Mlp::gelu_tanh) {  // c_proj(gelu(c_fc a))
        linear(*L.gate_up, a, M, H, act, I);
        ops::gelu_tanh_rows(act, M, I, I, bf16);
        row_parallel(*L.down, act, M, I, x, H, rm);
      } else {
        linear(*L.gate_up, a, M, H, gu, 2 * I);
        ops::gated_activation_rows(gu, act, M, I, c.mlp_activation, bf16);
        row_parallel(*L.down, act, M, I, x, H, rm);
      }
      if (l + 1 < layers.size()) keep(x);
    }
    return xt;
  }

  // Mixtral's sparse MoE MLP on the fast path: route every row (ops/moe), run each expert on the
  // rows routed to it, and add sum_j w_j expert_j(a) to x, the experts in index order as transformers'
  // index_add_ does. Under tensor parallelism each expert is split like a dense MLP (w1 / w3 columns,
  // w2 rows); the weighted sum of this rank's partial outputs is summed over the group once per layer.
  void moe_fast(const DecoderLayer& L, std::size_t layer, const float* a, std::int64_t M, float* x, float* gu,
                float* act, float rm) {
    const std::int64_t H = cfg.hidden_size, I = inter, E = cfg.num_experts, K = cfg.experts_per_token;
    float* rl = buf_router.get({M, E}, torch::kFloat32).data_ptr<float>();
    ops::sgemm('N', 'T', M, E, H, 1.0f, a, H, L.router.data_ptr<float>(), H, 0.0f, rl, E);
    std::vector<std::int64_t> chosen(static_cast<std::size_t>(M * K));
    std::vector<float> w(static_cast<std::size_t>(M * K));
    ops::moe_route_top_k(rl, M, E, K, chosen.data(), w.data());
    count_routes(layer, chosen.data(), M);
    const auto per_expert = ops::moe_rows_per_expert(chosen.data(), w.data(), M, E, K);
    float* acc = buf_moe_acc.get({M, H}, torch::kFloat32).data_ptr<float>();
    float* xin = buf_moe_in.get({M, H}, torch::kFloat32).data_ptr<float>();
    float* y = buf_moe_out.get({M, H}, torch::kFloat32).data_ptr<float>();
    std::fill(acc, acc + M * H, 0.0f);
    for (std::int64_t e = 0; e < E; ++e) {
      const ops::ExpertRows& er = per_expert[e];
      const std::int64_t n = static_cast<std::int64_t>(er.rows.size());
      if (n == 0) continue;
      for (std::int64_t r = 0; r < n; ++r) std::memcpy(xin + r * H, a + er.rows[r] * H, sizeof(float) * H);
      L.experts[e].gate_up->forward(xin, n, H, gu, 2 * I, 1.0f, 0.0f);
      ops::gated_activation_rows(gu, act, n, I, cfg.mlp_activation);
      L.experts[e].down->forward(act, n, I, y, H, 1.0f, 0.0f);
      ops::moe_accumulate(er, y, H, acc);
    }
    if (split()) tp->allreduce_sum(acc, static_cast<std::size_t>(M * H));
    for (std::int64_t i = 0; i < M * H; ++i) x[i] += rm * acc[i];
  }

  // The same on torch tensors, written like MixtralSparseMoeBlock.forward (router logits in the
  // compute dtype, softmax in float32, top-k weights renormalized and cast back, index_add_).
  Tensor moe_torch(const DecoderLayer& L, std::size_t layer, const Tensor& a) {
    const std::int64_t I = inter, K = cfg.experts_per_token;
    Tensor p = torch::softmax(linear_t(a, L.router, Tensor()).to(torch::kFloat32), 1);
    auto top = torch::topk(p, K, -1);
    Tensor tw = std::get<0>(top), ti = std::get<1>(top);
    const Tensor chosen = ti.to(torch::kCPU).contiguous();
    count_routes(layer, chosen.data_ptr<std::int64_t>(), chosen.size(0));
    tw = (tw / tw.sum(-1, true)).to(a.scalar_type());
    Tensor out = torch::zeros_like(a);
    for (std::size_t e = 0; e < L.experts.size(); ++e) {
      Tensor hit = ti == static_cast<std::int64_t>(e);  // [M, K]
      Tensor rows = hit.any(-1).nonzero().squeeze(1);
      if (rows.numel() == 0) continue;
      Tensor we = (tw * hit.to(tw.scalar_type())).sum(-1).index_select(0, rows).unsqueeze(1);
      Tensor gu = linear_t(a.index_select(0, rows), L.experts[e].gate_up);
      Tensor h = gate_activation(gu.narrow(1, 0, I)) * gu.narrow(1, I, I);
      out.index_add_(0, rows, linear_t(h, L.experts[e].down) * we);
    }
    return out;
  }

  // ---- torch path (bfloat16, float32 without oneDNN, any run off the host) -------------------

  // LlamaRMSNorm, or nn.LayerNorm (computed in float32 around torch's bfloat16 kernel, as
  // RobertaModel does: the same values, much faster on the CPU).
  Tensor norm_t(const Tensor& x, const Tensor& w, const Tensor& b) const {
    Tensor xf = x.to(torch::kFloat32);
    if (cfg.norm == LlamaConfig::Norm::layer) {
      return at::layer_norm(xf, {cfg.hidden_size}, w.to(torch::kFloat32), b.to(torch::kFloat32), cfg.norm_eps)
          .to(x.scalar_type());
    }
    Tensor variance = xf.pow(2).mean(-1, true);
    Tensor normed = xf * torch::rsqrt(variance + cfg.norm_eps);
    // GemmaRMSNorm scales in float32 and casts after; LlamaRMSNorm casts, then scales in the dtype.
    if (cfg.norm_weight_plus_one) return (normed * (1.0 + w.to(torch::kFloat32))).to(x.scalar_type());
    return w * normed.to(x.scalar_type());
  }

  // The MLP gate's activation (transformers' ACT2FN: silu, gelu_pytorch_tanh, exact gelu), computed in
  // float32 and rounded once to g's dtype, as torch 2.x's kernels compute a bfloat16 / float16
  // activation (libtorch 1.13's CPU kernels round each step of the formula instead).
  Tensor gate_activation(const Tensor& g) const {
    const Tensor f = g.to(torch::kFloat32);
    switch (cfg.mlp_activation) {
      case ops::GateActivation::gelu_tanh: return at::gelu(f, "tanh").to(g.scalar_type());
      case ops::GateActivation::gelu: return at::gelu(f, "none").to(g.scalar_type());
      case ops::GateActivation::silu: break;
    }
    return torch::silu(f).to(g.scalar_type());
  }

  // t * s and t / s for a Python float s, computed in float32 and rounded once to t's dtype, as torch
  // 2.x computes a bfloat16 / float16 tensor times a scalar (libtorch 1.13's CPU kernels round s to
  // the tensor's dtype first). No-ops in dtype for float32.
  static Tensor times(const Tensor& t, double s) { return (t.to(torch::kFloat32) * s).to(t.scalar_type()); }
  static Tensor divided(const Tensor& t, double s) { return (t.to(torch::kFloat32) / s).to(t.scalar_type()); }

  // x W^T + b on the torch path; bfloat16 products where model::linear_bf16 routes them (decode steps
  // to the bf16 row kernel, more rows to float32 tiles on CPUs without AVX512-BF16).
  Tensor linear_t(const Tensor& x, const Tensor& w, const Tensor& b) const {
    const bool bf16 = x.scalar_type() == torch::kBFloat16 && w.scalar_type() == torch::kBFloat16 && w.is_contiguous() &&
                      (!b.defined() || (b.scalar_type() == torch::kBFloat16 && b.is_contiguous()));
    if (bf16) {
      const Tensor xc = x.contiguous();
      Tensor y = torch::empty({x.size(0), w.size(0)}, x.options());
      if (model::linear_bf16(y, xc, w, ops::Bf16Layout::out_in, b, 0.0f)) return y;
    }
    return b.defined() ? at::linear(x, w, b) : at::linear(x, w);
  }
  Tensor linear_t(const Tensor& x, const quant::LinearPtr& layer) const {
    return linear_t(x, weight_of(layer), bias_of(layer));
  }

  static Tensor rotate_half(const Tensor& t) {
    const std::int64_t half = t.size(-1) / 2;
    return torch::cat({-t.narrow(-1, half, half), t.narrow(-1, 0, half)}, -1);
  }

  Tensor layers_torch(const std::int64_t* ids, const std::int64_t* positions, const std::int64_t* key_mask,
                      std::int64_t batch, std::int64_t seq, Cache& cache, std::vector<std::vector<float>>* hidden) {
    const auto& c = cfg;
    const std::int64_t M = batch * seq, I = inter, d = c.head_dim;
    const std::int64_t nh = heads, nkv = kv_heads, groups = nh / nkv;
    const std::int64_t qw = q_width(), kvw = kv_width();
    const std::int64_t len0 = cache.length(), T = len0 + seq;
    auto keep = [&](const Tensor& t) {
      if (hidden != nullptr) hidden->push_back(model::host_floats(t));
    };

    Tensor x = embed.index_select(0, model::int64_on(ids, {M}, device));
    if (c.embedding_multiplier_in_dtype) {
      x = x * torch::scalar_tensor(c.embedding_multiplier, x.options());  // Gemma's normalizer tensor
    } else if (c.embedding_multiplier != 1.0) {
      x = times(x, c.embedding_multiplier);
    }
    const Tensor pos = model::int64_on(positions, {batch, seq}, device);
    if (c.learned_positions) x = x + positions_emb.index_select(0, pos.reshape({M}));  // GPT-2: wte + wpe
    keep(x);

    Tensor cos, sin;
    if (!c.learned_positions) {
      Tensor freqs = (pos.to(torch::kFloat32) / position_divisor()).unsqueeze(-1) *
                     row_inv_freq(positions, batch, seq).to(device).unsqueeze(1);  // [B, L, d/2]
      Tensor emb = torch::cat({freqs, freqs}, -1).unsqueeze(1);                        // [B, 1, L, d]
      cos = emb.cos().to(st);
      sin = emb.sin().to(st);
    }

    // Additive mask [B, 1, L, T] in float32: 0 where allowed, float's lowest elsewhere.
    const Tensor km = model::int64_on(key_mask, {batch, 1, 1, T}, device);
    const Tensor key_idx = torch::arange(T, on_device(torch::kInt64)).view({1, 1, 1, T});
    const Tensor query_idx = torch::arange(len0, T, on_device(torch::kInt64)).view({1, 1, seq, 1});
    Tensor allowed = (km != 0).logical_and(key_idx <= query_idx);
    // Mistral's sliding window: keys j <= p - W - 1 are masked as well.
    if (c.sliding_window > 0) allowed = allowed.logical_and(key_idx >= query_idx - c.sliding_window);
    Tensor mask_add = torch::zeros({batch, 1, seq, T}, on_device(torch::kFloat32))
                          .masked_fill(allowed.logical_not(), std::numeric_limits<float>::lowest());
    // Rows with nothing allowed get a zero context (see the file comment).
    Tensor any_allowed = allowed.any(-1, true).to(st);  // [B, 1, L, 1]

    for (std::size_t l = 0; l < layers.size(); ++l) {
      const DecoderLayer& L = layers[l];
      Tensor a = norm_t(x, L.attn_norm, L.attn_norm_b);
      Tensor qkv = linear_t(a, L.qkv);
      Tensor q = qkv.narrow(1, 0, qw).view({batch, seq, nh, d}).transpose(1, 2);
      Tensor k = qkv.narrow(1, qw, kvw).view({batch, seq, nkv, d}).transpose(1, 2);
      Tensor v = qkv.narrow(1, qw + kvw, kvw).view({batch, seq, nkv, d}).transpose(1, 2);
      if (cos.defined()) {
        q = q * cos + rotate_half(q) * sin;
        k = k * cos + rotate_half(k) * sin;
      }
      cache.k[l].narrow(2, len0, seq).copy_(k);
      cache.v[l].narrow(2, len0, seq).copy_(v);
      Tensor keys = cache.k[l].narrow(2, 0, T), values = cache.v[l].narrow(2, 0, T);
      if (groups > 1) {
        keys = keys.unsqueeze(2).expand({batch, nkv, groups, T, d}).reshape({batch, nh, T, d});
        values = values.unsqueeze(2).expand({batch, nkv, groups, T, d}).reshape({batch, nh, T, d});
      }
      Tensor scores = model::matmul(q, keys.transpose(2, 3));
      if (c.attention_multiplier != 0.0) {
        scores = times(scores, c.attention_multiplier);
      } else {
        scores = divided(scores, std::sqrt(static_cast<double>(d)));
      }
      Tensor probs = torch::softmax(scores.to(torch::kFloat32) + mask_add, -1).to(st);
      Tensor ctx = model::matmul(probs, values) * any_allowed;  // [B, nh, L, d]
      ctx = ctx.transpose(1, 2).reshape({M, qw});
      Tensor o = summed(linear_t(ctx, L.o));
      x = c.residual_multiplier == 1.0 ? x + o : x + times(o, c.residual_multiplier);

      a = norm_t(x, L.mlp_norm, L.mlp_norm_b);
      Tensor down;
      if (!L.experts.empty()) {
        down = summed(moe_torch(L, l, a));
      } else {
        Tensor gu = linear_t(a, L.gate_up);
        Tensor act = c.mlp == LlamaConfig::Mlp::gelu_tanh
                         ? at::gelu(gu.to(torch::kFloat32), "tanh").to(gu.scalar_type())
                         : gate_activation(gu.narrow(1, 0, I)) * gu.narrow(1, I, I);
        down = summed(linear_t(act, L.down));
      }
      x = c.residual_multiplier == 1.0 ? x + down : x + times(down, c.residual_multiplier);
      if (l + 1 < layers.size()) keep(x);
    }
    return x;
  }

  // ---- shared ------------------------------------------------------------------------------

  std::unique_ptr<LlamaCache> make_cache(std::int64_t batch, std::int64_t capacity) const {
    if (batch <= 0 || capacity <= 0) throw std::invalid_argument("LlamaModel::new_cache: batch and capacity must be positive");
    torch::InferenceMode guard;
    auto cache = std::make_unique<LlamaCache>(batch, capacity);
    // Zero-filled: the pages are touched now rather than during decode steps.
    for (std::int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
      cache->k.push_back(torch::zeros({batch, kv_heads, capacity, cfg.head_dim}, on_device()));
      cache->v.push_back(torch::zeros({batch, kv_heads, capacity, cfg.head_dim}, on_device()));
    }
    return cache;
  }

  // The projections as linear sites, four per layer.
  std::vector<model::LinearSlot> slots() override {
    std::vector<model::LinearSlot> out;
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const LayerNames n = layer_names(cfg, static_cast<std::int64_t>(i));
      DecoderLayer& L = layers[i];
      if (!n.qkv.empty()) {
        out.push_back({{n.qkv}, {q_width() + 2 * kv_width()}, &L.qkv});  // GPT-2's fused c_attn
      } else {
        out.push_back({{n.q, n.k, n.v}, {q_width(), kv_width(), kv_width()}, &L.qkv});
      }
      out.push_back({{n.o}, {cfg.hidden_size}, &L.o});
      for (std::size_t e = 0; e < L.experts.size(); ++e) {
        const std::string x = n.prefix + "block_sparse_moe.experts." + std::to_string(e) + ".";
        out.push_back({{x + "w1", x + "w3"}, {inter, inter}, &L.experts[e].gate_up});
        out.push_back({{x + "w2"}, {cfg.hidden_size}, &L.experts[e].down});
      }
      if (!L.experts.empty()) continue;
      if (n.gate.empty()) {
        out.push_back({{n.up}, {inter}, &L.gate_up});
      } else {
        out.push_back({{n.gate, n.up}, {inter, inter}, &L.gate_up});
      }
      out.push_back({{n.down}, {cfg.hidden_size}, &L.down});
    }
    return out;
  }

  std::vector<Tensor*> tensors() override {
    std::vector<Tensor*> out{&embed, &final_norm};
    if (lm_head.defined()) out.push_back(&lm_head);
    for (Tensor* t : {&positions_emb, &final_norm_b}) {
      if (t->defined()) out.push_back(t);
    }
    for (auto& L : layers) {
      for (Tensor* t : {&L.attn_norm, &L.mlp_norm, &L.attn_norm_b, &L.mlp_norm_b, &L.router}) {
        if (t->defined()) out.push_back(t);
      }
    }
    return out;
  }

  Tensor run_layers(const std::int64_t* ids, const std::int64_t* positions, const std::int64_t* key_mask,
                    std::int64_t batch, std::int64_t seq, Cache& cache, std::vector<std::vector<float>>* hidden) {
    Tensor x = fast ? layers_fast(ids, positions, key_mask, batch, seq, cache, hidden)
                         : layers_torch(ids, positions, key_mask, batch, seq, cache, hidden);
    cache.advance(seq);
    return x;
  }

  // Final norm of the selected rows of x [M, H] (all rows when rows is empty) in the compute dtype.
  Tensor final_normed(const Tensor& x, const std::vector<std::int64_t>& rows) {
    const std::int64_t H = cfg.hidden_size;
    if (fast) {
      const std::int64_t R = rows.empty() ? x.size(0) : static_cast<std::int64_t>(rows.size());
      Tensor sel = x;
      if (!rows.empty()) {
        sel = buf_final.get({2, R, H}, torch::kFloat32)[0];
        for (std::int64_t r = 0; r < R; ++r) {
          std::memcpy(sel.data_ptr<float>() + r * H, x.data_ptr<float>() + rows[r] * H, sizeof(float) * H);
        }
      }
      Tensor out = rows.empty() ? buf_final.get({R, H}, torch::kFloat32) : buf_final.get({2, R, H}, torch::kFloat32)[1];
      norm_rows(sel.data_ptr<float>(), final_norm, final_norm_b, out.data_ptr<float>(), R);
      return out;
    }
    Tensor sel = x;
    if (!rows.empty()) sel = x.index_select(0, model::int64_on(rows.data(), {static_cast<std::int64_t>(rows.size())}, device));
    return norm_t(sel, final_norm, final_norm_b);
  }

  std::size_t other_bytes() const override { return lm_head_int8 ? lm_head_int8->resident_bytes() : 0; }

  // logits [R, V] float32 = h [R, H] @ lm_head^T / logits_scaling.
  void project(const Tensor& h, std::vector<float>& logits) {
    const std::int64_t R = h.size(0), V = cfg.vocab_size, H = cfg.hidden_size;
    logits.resize(static_cast<std::size_t>(R * V));
    if (lm_head_int8 || fast) {  // raw float32 buffers
      const bool round = bf16 && !lm_head_int8;  // bfloat16 logits
      if (lm_head_int8) {
        const Tensor x = h.to(torch::kFloat32).contiguous();
        lm_head_int8->forward(x.data_ptr<float>(), R, H, logits.data(), V, 1.0f, 0.0f);
      } else if (round) {
        model::linear_bf16_floats(h.data_ptr<float>(), R, H, lm_head, Tensor(), logits.data(), V);
      } else {
        ops::linear_f32(h.data_ptr<float>(), R, H, lm_head.data_ptr<float>(), V, H, logits.data(), V, 1.0f, 0.0f);
      }
      if (cfg.logits_scaling != 1.0) {
        const float s = static_cast<float>(cfg.logits_scaling);
        for (float& v : logits) v = round ? ops::round_to_bf16(v / s) : v / s;
      }
      return;
    }
    Tensor y = linear_t(h, lm_head, Tensor());
    if (cfg.logits_scaling != 1.0) y = divided(y, cfg.logits_scaling);
    logits = model::host_floats(y);
  }
};

LlamaModel::LlamaModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
// The model lives as long as its run: the experts' load goes to the log when it ends.
LlamaModel::~LlamaModel() {
  try {
    log_expert_load();
  } catch (...) {  // logging must not throw out of a destructor
  }
}

const std::vector<std::vector<std::int64_t>>& LlamaModel::expert_load() const { return impl_->expert_load; }

void LlamaModel::log_expert_load() const {
  const Impl& m = *impl_;
  if (m.expert_load.empty()) return;
  // Under tensor parallelism every rank of a group routes the same tokens: its first rank reports.
  if (m.split() && m.tp->rank() != 0) return;
  for (std::size_t l = 0; l < m.expert_load.size(); ++l) {
    std::string counts;
    for (std::int64_t n : m.expert_load[l]) {
      if (!counts.empty()) counts += ' ';
      counts += std::to_string(n);
    }
    log().debug("layer {} experts load: {} (tokens routed on this rank)", l, counts);
  }
}

std::unique_ptr<LlamaModel> LlamaModel::load(const ModelLoad& how_to) {
  torch::InferenceMode guard;

  auto impl = std::make_unique<Impl>();
  Impl& m = *impl;
  m.cfg = LlamaConfig::from_json_file((fs::path(how_to.dir) / "config.json").string());
  m.begin_load(how_to);
  const auto& c = m.cfg;
  m.bf16 = g_raw_bfloat16 && m.on_host() && m.st == at::kBFloat16 && c.num_experts == 0;
  m.fast = m.use_sgemm || m.bf16;
  const std::int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size, d = c.head_dim;
  const std::int64_t nh = c.num_attention_heads, nkv = c.num_key_value_heads;
  const std::int64_t qw = nh * d, kvw = nkv * d;

  // This rank's heads, key/value heads and intermediate columns (see the file comment).
  const std::int64_t T = m.tp != nullptr ? m.tp->size() : 1, r = m.tp != nullptr ? m.tp->rank() : 0;
  if (T > 1) {
    const std::string where = "parallel.tensor_parallel";
    const std::string cfg_file = (fs::path(how_to.dir) / "config.json").string();
    auto refuse = [&](const std::string& why) {
      throw InputError(where, "= " + std::to_string(T) + ": cannot split " + cfg_file + ": " + why);
    };
    if (nh % T != 0) refuse("num_attention_heads " + std::to_string(nh) + " is not divisible by " + std::to_string(T));
    if (nkv % T != 0 && T % nkv != 0) {
      refuse("num_key_value_heads " + std::to_string(nkv) + " neither divides nor is divisible by " + std::to_string(T));
    }
    if (I % T != 0) refuse("intermediate_size " + std::to_string(I) + " is not divisible by " + std::to_string(T));
  }
  m.heads = nh / T;
  m.kv_heads = std::max<std::int64_t>(1, nkv / T);
  m.inter = I / T;
  const std::int64_t h0 = r * m.heads, kv0 = nkv >= T ? r * m.kv_heads : h0 / (nh / nkv), i0 = r * m.inter;
  auto column = [&](std::int64_t begin, std::int64_t width) {
    return T > 1 ? quant::Shard::columns(begin, begin + width) : quant::Shard::whole();
  };
  auto row = [&](std::int64_t begin, std::int64_t width) {
    return T > 1 ? quant::Shard::rows(begin, begin + width, r == 0) : quant::Shard::whole();
  };

  Checkpoint ckpt(m.dir);
  std::set<std::string> used;
  const bool half = m.dtype == DType::fp16;
  auto take = [&](const std::string& name, const std::vector<std::int64_t>& shape) {
    used.insert(name);
    return model::read_tensor(ckpt, name, shape, m.st, half);
  };
  const model::LinearLoad how{ckpt, m.quant, m.st, half, /*transposed=*/false, used, c.conv1d};
  const bool layer_norm = c.norm == LlamaConfig::Norm::layer;

  const std::string top = c.gpt2_layout ? "transformer." : "model.";
  m.embed = take(top + (c.gpt2_layout ? "wte.weight" : "embed_tokens.weight"), {V, H});
  if (c.learned_positions) m.positions_emb = take(top + "wpe.weight", {c.max_position_embeddings, H});
  const std::string final_norm = top + (c.gpt2_layout ? "ln_f" : "norm");
  m.final_norm = take(final_norm + ".weight", {H});
  if (layer_norm) m.final_norm_b = take(final_norm + ".bias", {H});
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const LayerNames n = layer_names(c, i);
    DecoderLayer L;
    auto linear = [&](const std::string& name, std::int64_t in, std::int64_t out, const quant::Shard& shard,
                      bool bias) { return model::load_linear(how, name, in, out, bias, shard); };
    std::vector<quant::LinearPtr> qkv, gate_up;
    // Biases (Qwen2's q/k/v, StarCoder2's and GPT-2's everywhere) are column-parallel like their
    // weights: each rank reads its outputs' part.
    const bool qkv_bias = c.qkv_bias || c.attention_bias;
    if (!n.qkv.empty()) {
      // The fused c_attn [q | k | v]: this rank's columns of each part, always cut out (T = 1 too).
      const std::int64_t fused = qw + 2 * kvw;
      for (const std::int64_t begin : {h0 * d, qw + kv0 * d, qw + kvw + kv0 * d}) {
        const std::int64_t width = begin < qw ? m.heads * d : m.kv_heads * d;
        qkv.push_back(linear(n.qkv, H, fused, quant::Shard::columns(begin, begin + width), qkv_bias));
      }
    } else {
      qkv.push_back(linear(n.q, H, qw, column(h0 * d, m.heads * d), qkv_bias));
      qkv.push_back(linear(n.k, H, kvw, column(kv0 * d, m.kv_heads * d), qkv_bias));
      qkv.push_back(linear(n.v, H, kvw, column(kv0 * d, m.kv_heads * d), qkv_bias));
    }
    L.qkv = quant::concat_outputs(std::move(qkv));
    L.o = linear(n.o, qw, H, row(h0 * d, m.heads * d), c.attention_bias);
    if (c.num_experts > 0) {
      // Mixtral: the router stays float and whole; each expert splits like the dense MLP.
      L.router = take(n.prefix + "block_sparse_moe.gate.weight", {c.num_experts, H});
      for (std::int64_t e = 0; e < c.num_experts; ++e) {
        const std::string x = n.prefix + "block_sparse_moe.experts." + std::to_string(e) + ".";
        DecoderLayer::Expert ex;
        std::vector<quant::LinearPtr> w13;
        w13.push_back(linear(x + "w1", H, I, column(i0, m.inter), false));
        w13.push_back(linear(x + "w3", H, I, column(i0, m.inter), false));
        ex.gate_up = quant::concat_outputs(std::move(w13));
        ex.down = linear(x + "w2", I, H, row(i0, m.inter), false);
        if (T > 1) ex.down->set_row_group(m.tp);
        L.experts.push_back(std::move(ex));
      }
    } else {
      if (!n.gate.empty()) gate_up.push_back(linear(n.gate, H, I, column(i0, m.inter), c.mlp_bias));
      gate_up.push_back(linear(n.up, H, I, column(i0, m.inter), c.mlp_bias));
      L.gate_up = quant::concat_outputs(std::move(gate_up));
      L.down = linear(n.down, I, H, row(i0, m.inter), c.mlp_bias);
      if (T > 1) L.down->set_row_group(m.tp);
    }
    if (T > 1) L.o->set_row_group(m.tp);
    L.attn_norm = take(n.attn_norm + ".weight", {H});
    L.mlp_norm = take(n.mlp_norm + ".weight", {H});
    if (layer_norm) {
      L.attn_norm_b = take(n.attn_norm + ".bias", {H});
      L.mlp_norm_b = take(n.mlp_norm + ".bias", {H});
    }
    m.layers.push_back(std::move(L));
    // Buffers some transformers versions save: recomputed (rotary inv_freq) or the causal mask
    // (GPT-2's attn.bias / attn.masked_bias), not weights.
    used.insert(n.prefix + "self_attn.rotary_emb.inv_freq");
    if (c.gpt2_layout) {
      used.insert(n.prefix + "attn.bias");
      used.insert(n.prefix + "attn.masked_bias");
    }
  }
  if (c.tie_word_embeddings) {
    // HF re-ties after loading: a saved lm_head.weight is ignored (its shape is still checked).
    if (ckpt.find("lm_head.weight") != nullptr) take("lm_head.weight", {V, H});
    m.lm_head = m.embed;
  } else {
    m.lm_head = take("lm_head.weight", {V, H});
  }
  for (const auto& name : ckpt.names()) {
    if (!used.count(name)) throw InputError(ckpt.dir() + ": tensor '" + name + "'", "unexpected tensor for this architecture");
  }
  if (m.bf16) {  // the raw-buffer kernels read these as float32 (bfloat16 values, exact)
    for (Tensor* t : {&m.final_norm, &m.final_norm_b, &m.positions_emb}) {
      if (t->defined()) *t = t->to(torch::kFloat32);
    }
    for (DecoderLayer& L : m.layers) {
      for (Tensor* t : {&L.attn_norm, &L.mlp_norm, &L.attn_norm_b, &L.mlp_norm_b}) {
        if (t->defined()) *t = t->to(torch::kFloat32);
      }
    }
  }
  if (!c.learned_positions) m.inv_freq = rope_inv_freq(c);  // stays on the host: rope tables are made there
  m.finish_load(/*transposed=*/false);
  return std::unique_ptr<LlamaModel>(new LlamaModel(std::move(impl)));
}

void LlamaModel::set_raw_bfloat16_path(bool enabled) { g_raw_bfloat16 = enabled; }

const LlamaConfig& LlamaModel::config() const { return impl_->cfg; }

std::string LlamaModel::architecture() const {
  return impl_->cfg.architectures.empty() ? impl_->cfg.model_type : impl_->cfg.architectures.front();
}
std::int64_t LlamaModel::vocab_size() const { return impl_->cfg.vocab_size; }

namespace {
ModelDims dims_from(const LlamaConfig& c, const std::string& path) {
  return {.config_json = path,
          .layers = c.num_hidden_layers,
          .heads = c.num_attention_heads,
          .kv_heads = c.num_key_value_heads > 0 ? c.num_key_value_heads : c.num_attention_heads,
          .head_dim = c.head_dim,
          .vocab = c.vocab_size,
          .max_positions = c.max_position_embeddings,
          .rotary = !c.learned_positions,
          .rope_extends = c.rope_type == "dynamic",
          .sliding_window = c.sliding_window};
}
}  // namespace

ModelDims LlamaModel::dims_of(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  return dims_from(LlamaConfig::from_json_file(path), path);
}
ModelDims LlamaModel::dims() const { return dims_from(impl_->cfg, (fs::path(impl_->dir) / "config.json").string()); }

model::Weights& LlamaModel::weights() const { return *impl_; }

std::string LlamaModel::quantize_lm_head_int8() {
  Impl& m = *impl_;
  if (m.lm_head_int8) return m.lm_head_int8->describe();
  quant::DenseLinear dense(m.lm_head.to(torch::kFloat32).contiguous(), Tensor(), /*transposed=*/false);
  const quant::LinearSite site{{"lm_head"}, {m.cfg.vocab_size}, &dense};
  auto parts = quant::quantize_site_int8(site, quant::Int8Settings{}, nullptr, /*smooth=*/false);
  m.lm_head_int8 = std::move(parts.front());
  if (!m.lm_head.is_same(m.embed)) m.lm_head = Tensor();  // tied: still the embeddings
  return m.lm_head_int8->describe();
}

std::unique_ptr<KvCache> LlamaModel::new_cache(std::int64_t batch, std::int64_t capacity) const {
  return impl_->make_cache(batch, capacity);
}

void LlamaModel::forward(const std::int64_t* ids, const std::int64_t* positions, const std::int64_t* key_mask,
                         std::int64_t batch, std::int64_t seq, KvCache& kv, bool all_positions,
                         std::vector<float>& logits) {
  Impl& m = *impl_;
  auto* own = dynamic_cast<LlamaCache*>(&kv);
  if (own == nullptr) throw std::invalid_argument("LlamaModel::forward: the cache was not made by a LlamaModel");
  LlamaCache& cache = *own;
  m.check_inputs(ids, positions, key_mask, batch, seq, cache);
  torch::InferenceMode guard;
  if (!m.layers.empty() && !m.layers[0].experts.empty()) {
    // Row b * seq + t is a real token when the mask lets it be a key (its own entry of key_mask).
    const std::int64_t T = cache.length() + seq;
    m.counted_rows.resize(static_cast<std::size_t>(batch * seq));
    for (std::int64_t b = 0; b < batch; ++b) {
      for (std::int64_t t = 0; t < seq; ++t) m.counted_rows[b * seq + t] = key_mask[b * T + cache.length() + t] == 1;
    }
  }
  Tensor x = m.run_layers(ids, positions, key_mask, batch, seq, cache, nullptr);
  m.counted_rows.clear();
  std::vector<std::int64_t> rows;
  if (!all_positions && seq > 1) {
    for (std::int64_t b = 0; b < batch; ++b) rows.push_back(b * seq + seq - 1);
  }
  m.project(m.final_normed(x, rows), logits);
}

std::vector<std::vector<float>> LlamaModel::hidden_states(const std::int64_t* ids, std::int64_t batch,
                                                            std::int64_t seq) {
  Impl& m = *impl_;
  auto own = m.make_cache(batch, seq);
  LlamaCache& cache = *own;
  std::vector<std::int64_t> positions(batch * seq), key_mask(batch * seq, 1);
  for (std::int64_t i = 0; i < batch * seq; ++i) positions[i] = i % seq;
  m.check_inputs(ids, positions.data(), key_mask.data(), batch, seq, cache);
  torch::InferenceMode guard;
  m.counted_rows.clear();  // not part of the run's expert load
  std::vector<std::vector<float>> out;
  Tensor x = m.run_layers(ids, positions.data(), key_mask.data(), batch, seq, cache, &out);
  out.push_back(model::host_floats(m.final_normed(x, {})));
  return out;
}

}  // namespace evalrun
