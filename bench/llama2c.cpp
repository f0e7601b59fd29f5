#include "llama2c.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "io/safetensors.hpp"

namespace evalrun::bench {
namespace {

// Ids of the two pieces the prompt is made of; every other id i is the piece "[i]", so run.c's output
// parses back into ids.
constexpr std::int64_t kSpace = 3, kX = 4;

std::string piece(std::int64_t id) {
  if (id == kSpace) return " ";
  if (id == kX) return "x";
  std::string p = "[";  // appended piece by piece: GCC 12's -Wrestrict misfires on "[" + s + "]"
  p += std::to_string(id);
  p += ']';
  return p;
}

void put_i32(std::ofstream& out, std::int32_t v) { out.write(reinterpret_cast<const char*>(&v), sizeof v); }

// A float32 [rows, cols] tensor, checked.
const TensorView& f32(const Checkpoint& ckpt, const std::string& name, std::int64_t rows, std::int64_t cols) {
  const TensorView& t = ckpt.get(name);
  const bool shape_ok = cols == 0 ? t.shape == std::vector<std::int64_t>{rows}
                                  : t.shape == std::vector<std::int64_t>{rows, cols};
  if (t.dtype != TensorDType::F32 || !shape_ok) throw std::runtime_error("llama2.c export: " + name + " is not F32 of the expected shape");
  return t;
}

void put(std::ofstream& out, const TensorView& t) { out.write(reinterpret_cast<const char*>(t.data), static_cast<std::streamsize>(t.nbytes)); }

// transformers' q / k rows hold each head's rotary pairs as halves (i, i + d/2); llama2.c's run.c
// rotates adjacent pairs (2i, 2i + 1). Row 2i + s of a head in llama2.c's order is row s * d/2 + i of
// transformers' (llama2.c's export.py undoes the same permutation).
void put_unpermuted(std::ofstream& out, const TensorView& t, std::int64_t heads) {
  const std::int64_t rows = t.shape[0], cols = t.shape[1], d = rows / heads;
  const float* w = reinterpret_cast<const float*>(t.data);
  for (std::int64_t h = 0; h < heads; ++h) {
    for (std::int64_t r = 0; r < d; ++r) {
      const std::int64_t src = h * d + (r % 2) * (d / 2) + r / 2;
      out.write(reinterpret_cast<const char*>(w + src * cols), static_cast<std::streamsize>(sizeof(float) * cols));
    }
  }
}

void export_model(const std::string& hf_dir, const std::string& path, std::int64_t& vocab) {
  std::ifstream cf(hf_dir + "/config.json");
  const auto c = nlohmann::json::parse(cf);
  if (c.value("model_type", "") != "llama" || c.value("rope_theta", 10000.0) != 10000.0 ||
      c.value("rms_norm_eps", 1e-5) != 1e-5 || !c["rope_scaling"].is_null() || c.value("attention_bias", false)) {
    throw std::runtime_error("llama2.c export: run.c computes a plain Llama (rope_theta 10000, rms_norm_eps 1e-5, no biases): " +
                             hf_dir + "/config.json is not one");
  }
  const std::int64_t H = c["hidden_size"], I = c["intermediate_size"], L = c["num_hidden_layers"],
                     nh = c["num_attention_heads"], nkv = c.value("num_key_value_heads", nh);
  vocab = c["vocab_size"];
  const std::int64_t kv = H / nh * nkv, seq = c.value("max_position_embeddings", 2048), d = H / nh;
  const bool tied = c.value("tie_word_embeddings", false);
  const Checkpoint ckpt(hf_dir);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  for (std::int64_t v : {H, I, L, nh, nkv, tied ? vocab : -vocab, seq}) put_i32(out, static_cast<std::int32_t>(v));
  auto layer = [&](std::int64_t l, const std::string& name) { return "model.layers." + std::to_string(l) + "." + name; };
  put(out, f32(ckpt, "model.embed_tokens.weight", vocab, H));
  for (std::int64_t l = 0; l < L; ++l) put(out, f32(ckpt, layer(l, "input_layernorm.weight"), H, 0));
  for (std::int64_t l = 0; l < L; ++l) put_unpermuted(out, f32(ckpt, layer(l, "self_attn.q_proj.weight"), H, H), nh);
  for (std::int64_t l = 0; l < L; ++l) put_unpermuted(out, f32(ckpt, layer(l, "self_attn.k_proj.weight"), kv, H), nkv);
  for (std::int64_t l = 0; l < L; ++l) put(out, f32(ckpt, layer(l, "self_attn.v_proj.weight"), kv, H));
  for (std::int64_t l = 0; l < L; ++l) put(out, f32(ckpt, layer(l, "self_attn.o_proj.weight"), H, H));
  for (std::int64_t l = 0; l < L; ++l) put(out, f32(ckpt, layer(l, "post_attention_layernorm.weight"), H, 0));
  for (std::int64_t l = 0; l < L; ++l) put(out, f32(ckpt, layer(l, "mlp.gate_proj.weight"), I, H));
  for (std::int64_t l = 0; l < L; ++l) put(out, f32(ckpt, layer(l, "mlp.down_proj.weight"), H, I));
  for (std::int64_t l = 0; l < L; ++l) put(out, f32(ckpt, layer(l, "mlp.up_proj.weight"), I, H));
  put(out, f32(ckpt, "model.norm.weight", H, 0));
  const std::vector<float> unused_rope(static_cast<std::size_t>(seq * d), 0.0f);  // run.c skips these
  out.write(reinterpret_cast<const char*>(unused_rope.data()), static_cast<std::streamsize>(sizeof(float) * unused_rope.size()));
  if (!tied) put(out, f32(ckpt, "lm_head.weight", vocab, H));
  if (!out) throw std::runtime_error("llama2.c export: could not write " + path);
}

void write_tokenizer(const std::string& path, std::int64_t vocab) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  std::size_t longest = 0;
  for (std::int64_t i = 0; i < vocab; ++i) longest = std::max(longest, piece(i).size());
  put_i32(out, static_cast<std::int32_t>(longest));
  for (std::int64_t i = 0; i < vocab; ++i) {
    const float score = 0.0f;
    const std::string p = piece(i);
    out.write(reinterpret_cast<const char*>(&score), sizeof score);
    put_i32(out, static_cast<std::int32_t>(p.size()));
    out.write(p.data(), static_cast<std::streamsize>(p.size()));
  }
  if (!out) throw std::runtime_error("llama2.c export: could not write " + path);
}

std::string shell_output(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) throw std::runtime_error("could not run: " + cmd);
  std::string out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  if (pclose(p) != 0) throw std::runtime_error("failed: " + cmd + "\n" + out);
  return out;
}

}  // namespace

Llama2cRun run_llama2c(const std::string& checkout, const std::string& hf_dir, const std::string& work_dir,
                       int threads, std::int64_t prompt_tokens, std::int64_t new_tokens) {
  const std::string run_c = checkout + "/run.c";
  if (!std::filesystem::is_regular_file(run_c)) throw std::runtime_error("no run.c in the llama2.c checkout " + checkout);
  std::filesystem::create_directories(work_dir);
  std::int64_t vocab = 0;
  export_model(hf_dir, work_dir + "/model.bin", vocab);
  write_tokenizer(work_dir + "/tokenizer.bin", vocab);
  shell_output("cc -Ofast -march=native -fopenmp -o '" + work_dir + "/run' '" + run_c + "' -lm 2>&1");
  // run.c encodes BOS, a dummy-prefix space and then one piece per character of "xxx...".
  const std::string text(static_cast<std::size_t>(prompt_tokens - 2), 'x');
  const std::string out =
      shell_output("OMP_NUM_THREADS=" + std::to_string(threads) + " '" + work_dir + "/run' '" + work_dir +
                   "/model.bin' -z '" + work_dir + "/tokenizer.bin' -t 0 -n " +
                   std::to_string(prompt_tokens + new_tokens) + " -i '" + text + "' 2>&1");
  Llama2cRun r;
  r.prompt.assign(static_cast<std::size_t>(prompt_tokens), kX);
  r.prompt[0] = 1;
  r.prompt[1] = kSpace;
  const auto at = out.find("achieved tok/s: ");
  if (at == std::string::npos) throw std::runtime_error("run.c printed no tok/s:\n" + out);
  r.tokens_per_s = std::stod(out.substr(at + 16));
  // run.c echoes the prompt after BOS (the leading space stripped), then the generated pieces.
  std::size_t i = text.size();
  while (i < at && r.generated.size() < static_cast<std::size_t>(new_tokens)) {
    if (out[i] == ' ') {
      r.generated.push_back(kSpace), ++i;
    } else if (out[i] == 'x') {
      r.generated.push_back(kX), ++i;
    } else if (out[i] == '[') {
      const auto close = out.find(']', i);
      if (close == std::string::npos) break;
      r.generated.push_back(std::stoll(out.substr(i + 1, close - i - 1)));
      i = close + 1;
    } else {
      break;  // the newline before the timing line
    }
  }
  return r;
}

}  // namespace evalrun::bench
