// Prefill and greedy-decode speed of the llama-110m preset (hidden 768, 12 layers, GQA 12/4, vocab
// 32000), against the memory-bandwidth bound of decoding: a batch-1 step has to read every weight
// once, so it cannot take less than weight bytes / memory bandwidth.
//   llama_decode_bench [threads=2] [prompt=128] [new=64] [checkpoint dir] [variants=fp32,bf16,gptq,families]
//                      [family presets=real]
// Without a directory the preset is written once to $TMPDIR/evalrun-bench-llama-110m (seed 0) and
// reused. Bandwidth: memcpy of a 512 MiB buffer (far larger than any cache) split over the threads,
// counted as bytes read + bytes written per second (STREAM's "copy" convention, the larger of the
// two usual figures, so the bound is the stricter one), and a streaming read of a 512 MiB buffer (what
// a decode step does with its weights), whose bound each row prints too. Per batch size (1, 8): prefill tokens/s (batch x prompt
// tokens in one forward), decode tokens/s (batch x new tokens, one token per row per step), ms per
// step, minor page faults per step, and the fraction of the bandwidth bound reached (meaningful at
// batch 1; larger batches trade it for throughput).
// GPTQ: the same weights rounded to 4 bits (make-model --gptq, group 128, asymmetric; written once to
// $TMPDIR/evalrun-bench-llama-110m-gptq-g128) run with their weights packed, against fp32 in the same
// run: decode tokens/s and the resident bytes of the projections (Linear::resident_bytes) and of the
// whole model's weights (embedding and lm_head stay float32), printed as ratios. Variant fp8 (not in
// the default list): the same weights as FP8 e4m3, per-channel scales, dynamic activations (emulated:
// activations rounded to e4m3, products in float32; decode steps on the ops/fp8_rows kernel).
// Variant gptq-lm_head8 (not in the default list): the GPTQ weights with the lm_head quantized in
// memory to INT8 (quantization.lm_head = "int8"), printed against gptq as a ratio; fp8-lm_head8 the
// same for the FP8 weights. Variants int8 and
// int8-lm_head8 (not in the default list): the fp32 checkpoint's projections quantized in memory to
// INT8 W8A8 (per-channel weights, per-token activations: quantization.direct = true), the second with
// the lm_head in INT8 too, printed against fp32. Variant bf16-torch (not in the default list): the
// bfloat16 model on the torch path (LlamaModel::set_raw_bfloat16_path(false)), which bf16 ran on
// before the raw-buffer bfloat16 path, printed against fp32 as bf16 is.
// Variant families: one row per decoder preset (the make-model presets of every family), fp32 batch 1:
// decode tokens/s and the share of the same bandwidth bound, the bytes a step reads being every
// projection once (of a mixture-of-experts layer only the num_experts_per_tok routed experts, k / E
// of them), the final norm and lm_head. Which presets: "real" (the default: the real-shape ones, the
// presets not named tiny-*), "tiny" (every tiny-* preset, to check the rows quickly) or a list
// (tiny-mistral,llama-110m). Each is written once to $TMPDIR/evalrun-bench-<preset> (seed 0). The
// presets take turns (4 rounds, best of them each), and every row prints its weight bytes per second
// against the first preset's (the per-FLOP comparison of the families).
// Variant llama2c (not in the default list; LLAMA2C_DIR = a llama2.c checkout): the peer of issue 19.
// The llama-110m checkpoint is exported to llama2.c's float32 format (q / k rows permuted back to its
// adjacent-pair RoPE) with a tokenizer.bin of placeholder pieces in $TMPDIR/evalrun-bench-llama2c,
// the checkout's run.c is built there (cc -Ofast -march=native -fopenmp) and run greedily with the same
// thread count, prompt + new tokens long (bench/llama2c.hpp). Prints its tok/s, how many greedy tokens
// equal evalrun fp32's on the same prompt ids (a check of the export), and with fp32 in the list the
// ratio of evalrun's fp32 batch-1 decode to it.
// Variant fp32-rows (not in the default list): the crossover of the float32 decode-step row kernel
// (ops/f32_rows) and oneDNN's matmul: fp32 decode tokens/s at batch 1 .. ops::kF32RowsMax with every
// product of that many rows on the kernel and with none on it (ops::set_f32_rows_limit), the two
// taking turns (3 rounds, best of each), and the batch sizes where the kernel is faster. Variant
// int8-rows: the same for the INT8 row kernel (ops/int8_rows), on the int8-lm_head8 model, against
// the integer GEMM (oneDNN's matmul with VNNI, the exact AVX2 GEMM without); fp8-rows for
// the FP8 one (ops/fp8_rows) against the layer's float32 tiles + sgemm, on the fp8 model.
// With EVALRUN_DATA_DIR set it also times stories260K (200 new tokens after "Once upon a time").
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cpu.hpp"
#include "llama2c.hpp"
#include "model/llama.hpp"
#include "fixtures/make_model.hpp"
#include "fixtures/make_quantized.hpp"
#include "model/roberta.hpp"
#include "ops/f32_rows.hpp"
#include "ops/fp8_rows.hpp"
#include "ops/gemm.hpp"
#include "ops/int8_rows.hpp"
#include "quant/int8.hpp"

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

long minor_faults() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

// memcpy bandwidth in GB/s, bytes read + bytes written.
double measure_bandwidth() {
  const std::size_t n = std::size_t{512} << 20;
  std::vector<char> src(n, 1), dst(n, 0);  // touched once here, so no page faults while timing
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    auto t0 = Clock::now();
    at::parallel_for(0, static_cast<std::int64_t>(n), 1 << 22, [&](std::int64_t b, std::int64_t e) {
      std::memcpy(dst.data() + b, src.data() + b, static_cast<std::size_t>(e - b));
    });
    best = std::min(best, seconds_since(t0));
  }
  return 2.0 * static_cast<double>(n) / best / 1e9;
}

// The sum of n words, with AVX2 where the CPU has it (four independent 256-bit sums: a plain loop
// compiled for baseline x86-64 adds too slowly to keep up with the memory).
__attribute__((target("avx2"))) std::uint64_t sum_words_avx2(const std::uint64_t* p, std::int64_t n) {
  __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_add_epi64(s0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    s1 = _mm256_add_epi64(s1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
    s2 = _mm256_add_epi64(s2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
    s3 = _mm256_add_epi64(s3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
  }
  alignas(32) std::uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                     _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3)));
  std::uint64_t sum = lanes[0] + lanes[1] + lanes[2] + lanes[3];
  for (; i < n; ++i) sum += p[i];
  return sum;
}

std::uint64_t sum_words(const std::uint64_t* p, std::int64_t n) {
  if (__builtin_cpu_supports("avx2")) return sum_words_avx2(p, n);
  std::uint64_t sum = 0;
  for (std::int64_t i = 0; i < n; ++i) sum += p[i];
  return sum;
}

// Streaming-read bandwidth in GB/s: every 8-byte word of a 512 MiB buffer added up, split over the
// threads (what a decode step does with its weights: read them once, write almost nothing).
double measure_read_bandwidth() {
  const std::size_t n = (std::size_t{512} << 20) / sizeof(std::uint64_t);
  std::vector<std::uint64_t> buf(n, 1);
  double best = 1e30;
  std::uint64_t total = 0;
  for (int r = 0; r < 5; ++r) {
    std::vector<std::uint64_t> part(64, 0);
    auto t0 = Clock::now();
    at::parallel_for(0, static_cast<std::int64_t>(n), 1 << 19, [&](std::int64_t b, std::int64_t e) {
      part[static_cast<std::size_t>(at::get_thread_num()) % part.size()] += sum_words(buf.data() + b, e - b);
    });
    best = std::min(best, seconds_since(t0));
    for (std::uint64_t v : part) total += v;
  }
  if (total != 5 * n) std::printf("read probe: wrong sum\n");  // keeps the reads from being optimized away
  return static_cast<double>(n * sizeof(std::uint64_t)) / best / 1e9;
}

struct Timing {
  double prefill_s = 0, decode_s = 0;
  long faults_per_step = 0;
};

// Prefill `prompt` tokens per row, then `steps` greedy single-token steps; best of `reps`.
Timing run(evalrun::LlamaModel& model, std::int64_t batch, std::int64_t prompt, std::int64_t steps, int reps) {
  const std::int64_t V = model.config().vocab_size;
  std::vector<std::int64_t> ids(batch * prompt), pos(batch * prompt), mask(batch * (prompt + steps), 1);
  for (std::int64_t i = 0; i < batch * prompt; ++i) {
    ids[i] = 3 + (i * 7919) % (V - 3);
    pos[i] = i % prompt;
  }
  Timing best{1e30, 1e30, 0};
  std::vector<float> logits;
  for (int r = 0; r < reps + 1; ++r) {  // the first run warms up
    auto cache = model.new_cache(batch, prompt + steps);
    auto t0 = Clock::now();
    model.forward(ids.data(), pos.data(), mask.data(), batch, prompt, *cache, false, logits);
    const double prefill = seconds_since(t0);
    std::vector<std::int64_t> next(batch), next_pos(batch), step_mask;
    const long f0 = minor_faults();
    t0 = Clock::now();
    for (std::int64_t s = 0; s < steps; ++s) {
      for (std::int64_t b = 0; b < batch; ++b) {
        const float* row = logits.data() + b * V;
        next[b] = std::max_element(row, row + V) - row;
        next_pos[b] = prompt + s;
      }
      step_mask.assign(batch * (prompt + s + 1), 1);
      model.forward(next.data(), next_pos.data(), step_mask.data(), batch, 1, *cache, false, logits);
    }
    const double decode = seconds_since(t0);
    const long faults = (minor_faults() - f0) / steps;
    if (r == 0) continue;
    best.prefill_s = std::min(best.prefill_s, prefill);
    if (decode < best.decode_s) {
      best.decode_s = decode;
      best.faults_per_step = faults;
    }
  }
  return best;
}

// Greedy tokens of one prompt (batch 1), for the comparison with llama2.c.
std::vector<std::int64_t> greedy(evalrun::LlamaModel& model, const std::vector<std::int64_t>& prompt, std::int64_t steps) {
  const std::int64_t P = static_cast<std::int64_t>(prompt.size());
  std::vector<std::int64_t> pos(P), mask(P + steps, 1), out;
  for (std::int64_t i = 0; i < P; ++i) pos[i] = i;
  auto cache = model.new_cache(1, P + steps);
  std::vector<float> logits;
  model.forward(prompt.data(), pos.data(), mask.data(), 1, P, *cache, false, logits);
  for (std::int64_t s = 0; s < steps; ++s) {
    const std::int64_t next = std::max_element(logits.begin(), logits.end()) - logits.begin(), p = P + s;
    out.push_back(next);
    if (s + 1 < steps) model.forward(&next, &p, mask.data(), 1, 1, *cache, false, logits);
  }
  return out;
}

// The presets the families rows run: "real", "tiny" or a comma-separated list of preset names.
std::vector<std::string> family_presets(const std::string& which) {
  std::vector<std::string> out;
  if (which == "real" || which == "tiny") {
    for (const auto& p : evalrun::llama_presets()) {
      if ((p.rfind("tiny-", 0) == 0) == (which == "tiny")) out.push_back(p);
    }
    return out;
  }
  std::size_t start = 0;
  while (start <= which.size()) {
    const std::size_t comma = std::min(which.find(',', start), which.size());
    if (comma > start) out.push_back(which.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

void family_rows(const std::vector<std::string>& presets, double bw, std::int64_t prompt, std::int64_t steps) {
  struct Row {
    std::string preset;
    std::unique_ptr<evalrun::LlamaModel> model;
    double wbytes = 0;
    Timing best{1e30, 1e30, 0};
  };
  std::vector<Row> rows;
  for (const auto& preset : presets) {
    const std::string dir = (std::filesystem::temp_directory_path() / ("evalrun-bench-" + preset)).string();
    if (!std::filesystem::exists(std::filesystem::path(dir) / "model.safetensors")) {
      std::printf("writing the %s preset to %s\n", preset.c_str(), dir.c_str());
      evalrun::make_llama_checkpoint(dir, preset, 0);
    }
    Row r{preset, evalrun::LlamaModel::load({dir, evalrun::DType::fp32, "cpu"})};
    const auto& c = r.model->config();
    r.wbytes = 4.0 * (c.hidden_size + static_cast<double>(c.vocab_size) * c.hidden_size);
    for (const auto& site : r.model->linear_sites()) {
      const double bytes = static_cast<double>(site.layer->resident_bytes());
      const bool expert = site.prefixes.front().find(".experts.") != std::string::npos;
      r.wbytes += expert ? bytes * static_cast<double>(c.experts_per_token) / static_cast<double>(c.num_experts) : bytes;
    }
    rows.push_back(std::move(r));
  }
  // Round robin, best of kRounds per preset: the VM's neighbours slow whole stretches of a run down,
  // and taking turns spreads that over every preset instead of the one that happens to run then.
  constexpr int kRounds = 4;
  for (int round = 0; round < kRounds; ++round) {
    for (Row& r : rows) {
      const Timing t = run(*r.model, 1, prompt, steps, 1);
      if (t.decode_s < r.best.decode_s) r.best = t;
    }
  }
  const double first_rate = rows.empty() ? 0 : rows.front().wbytes / rows.front().best.decode_s;
  for (const Row& r : rows) {
    const double step_ms = r.best.decode_s / steps * 1e3, bound_ms = r.wbytes / (bw * 1e9) * 1e3;
    std::printf("family %s (%s) fp32 batch 1: decode %.1f tok/s, %.3f ms/step; weights %.1f MB/step -> "
                "bandwidth bound %.3f ms/step: %.0f%% of it; weight bytes/s %.2fx %s's\n",
                r.preset.c_str(), r.model->architecture().c_str(), steps / r.best.decode_s, step_ms, r.wbytes / 1e6,
                bound_ms, 100.0 * bound_ms / step_ms, r.wbytes / r.best.decode_s / first_rate,
                rows.front().preset.c_str());
  }
}

// The projections quantized in memory as quantization.direct = true does it: INT8 W8A8, per-channel
// weights, per-token activations.
void quantize_int8(evalrun::LlamaModel& model) {
  evalrun::quant::Int8Settings s;
  auto replace = [&](std::size_t i, evalrun::quant::LinearPtr l) { return model.replace_linear(i, std::move(l)); };
  auto sites = evalrun::quant::quantize_sites_int8(model.linear_sites(), replace, [] {}, s);
  for (std::size_t i = 0; i < sites.size(); ++i) {
    model.replace_linear(i, evalrun::quant::concat_outputs(std::move(sites[i].parts)));
  }
}

// The row kernel of a precision against the layer's other path (`other`: oneDNN's matmul, or FP8's
// float32 tiles + sgemm) at batch 1 .. kMax, taking turns (3 rounds, best of each); `limit` sets how
// many rows the kernel takes, `label` names the model's precision.
void rows_crossover(evalrun::LlamaModel& model, const char* label, const char* other, std::int64_t kMax,
                    std::int64_t in_use, void (*limit)(std::int64_t), std::int64_t prompt, std::int64_t steps) {
  std::vector<double> kernel(kMax + 1, 0.0), gemm(kMax + 1, 0.0);
  for (int round = 0; round < 3; ++round) {
    for (std::int64_t batch = 1; batch <= kMax; ++batch) {
      for (const bool on_kernel : {true, false}) {
        limit(on_kernel ? kMax : 0);
        const double tps = batch * steps / run(model, batch, prompt, steps, 1).decode_s;
        double& best = on_kernel ? kernel[batch] : gemm[batch];
        best = std::max(best, tps);
      }
    }
  }
  limit(in_use);
  std::string faster;
  for (std::int64_t batch = 1; batch <= kMax; ++batch) {
    std::printf("%s batch %lld decode: row kernel %.1f tok/s, %s %.1f tok/s: kernel x%.2f\n", label,
                static_cast<long long>(batch), kernel[batch], other, gemm[batch], kernel[batch] / gemm[batch]);
    if (kernel[batch] <= gemm[batch]) continue;
    if (!faster.empty()) faster += ',';
    faster += std::to_string(batch);
  }
  std::printf("%s row kernel faster at batch %s (it takes up to %lld rows)\n", label,
              faster.empty() ? "none" : faster.c_str(), static_cast<long long>(in_use));
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const std::int64_t prompt = argc > 2 ? std::atoll(argv[2]) : 128;
  const std::int64_t steps = argc > 3 ? std::atoll(argv[3]) : 64;
  std::string dir = argc > 4 ? argv[4] : "";
  const std::string variants = std::string(",") + (argc > 5 ? argv[5] : "fp32,bf16,gptq,families") + ",";
  const std::string families = argc > 6 ? argv[6] : "real";
  auto wanted = [&](const char* name) { return variants.find(std::string(",") + name + ",") != std::string::npos; };
  // Checked before any benchmark runs, not after minutes of them.
  std::string llama2c;
  if (wanted("llama2c")) {
    const char* checkout = std::getenv("LLAMA2C_DIR");
    if (checkout == nullptr || *checkout == '\0') {
      std::fprintf(stderr, "variant llama2c: set LLAMA2C_DIR to a llama2.c checkout (its run.c is built)\n");
      return 2;
    }
    llama2c = checkout;
  }
  const bool llama_110m = wanted("fp32") || wanted("fp32-rows") || wanted("int8-rows") || wanted("fp8-rows") || wanted("fp8-lm_head8") || wanted("int8") ||
                          wanted("int8-lm_head8") || wanted("bf16") || wanted("bf16-torch") || wanted("gptq") || wanted("fp8") || wanted("gptq-lm_head8") ||
                          wanted("llama2c");
  if (dir.empty() && llama_110m) {
    dir = (std::filesystem::temp_directory_path() / "evalrun-bench-llama-110m").string();
    if (!std::filesystem::exists(std::filesystem::path(dir) / "model.safetensors")) {
      std::printf("writing llama-110m preset to %s\n", dir.c_str());
      evalrun::make_llama_checkpoint(dir, "llama-110m", 0);
    }
  }
  evalrun::set_compute_threads(threads);
  const double bw = measure_bandwidth(), read_bw = measure_read_bandwidth();
  evalrun::bench::print_cpu();
  std::printf("threads %d: memcpy bandwidth %.2f GB/s (read + write); streaming read %.2f GB/s\n", threads, bw,
              read_bw);

  const std::string gptq_dir = dir + "-gptq-g128", fp8_dir = dir + "-fp8";
  if ((wanted("gptq") || wanted("gptq-lm_head8")) && !std::filesystem::exists(std::filesystem::path(gptq_dir) / "model.safetensors")) {
    std::printf("writing the GPTQ g128 version to %s\n", gptq_dir.c_str());
    std::filesystem::remove_all(gptq_dir);
    std::filesystem::copy(dir, gptq_dir);
    evalrun::quant::GptqSettings s;
    s.group_size = 128;
    s.sym = false;
    evalrun::make_gptq_checkpoint(gptq_dir, s, 0);
  }
  if ((wanted("fp8") || wanted("fp8-rows") || wanted("fp8-lm_head8")) && !std::filesystem::exists(std::filesystem::path(fp8_dir) / "model.safetensors")) {
    std::printf("writing the FP8 version to %s\n", fp8_dir.c_str());
    std::filesystem::remove_all(fp8_dir);
    std::filesystem::copy(dir, fp8_dir);
    evalrun::make_fp8_checkpoint(fp8_dir, evalrun::quant::Fp8Settings{}, true, 0);
  }

  struct Variant {
    const char* label;
    std::string dir;
    evalrun::DType dtype;
    bool lm_head_int8 = false;
    bool int8 = false;  // the float checkpoint's projections quantized in memory (direct INT8 W8A8, per_token)
    bool torch_path = false;  // bfloat16 on the torch path (LlamaModel::set_raw_bfloat16_path(false))
  };
  struct Result {
    double decode_tps[2] = {0, 0};
    double linear_bytes = 0, model_bytes = 0;
  };
  std::map<std::string, Result> results;
  for (const Variant& v : {Variant{"fp32", dir, evalrun::DType::fp32}, Variant{"bf16", dir, evalrun::DType::bf16},
                           Variant{"bf16-torch", dir, evalrun::DType::bf16, false, false, true},
                           Variant{"gptq", gptq_dir, evalrun::DType::fp32}, Variant{"fp8", fp8_dir, evalrun::DType::fp32},
                           Variant{"gptq-lm_head8", gptq_dir, evalrun::DType::fp32, true},
                           Variant{"fp8-lm_head8", fp8_dir, evalrun::DType::fp32, true},
                           Variant{"int8", dir, evalrun::DType::fp32, false, true},
                           Variant{"int8-lm_head8", dir, evalrun::DType::fp32, true, true}}) {
    if (!wanted(v.label)) continue;
    evalrun::LlamaModel::set_raw_bfloat16_path(!v.torch_path);
    auto model = evalrun::LlamaModel::load({v.dir, v.dtype, "cpu"});
    evalrun::LlamaModel::set_raw_bfloat16_path(true);
    if (v.int8) quantize_int8(*model);
    if (v.lm_head_int8) model->quantize_lm_head_int8();
    const auto& c = model->config();
    Result res;
    // Bytes a step streams per projection: what the layer holds, except INT8, which holds its weights
    // twice (as given and in oneDNN's layout) and reads one copy (a byte per weight, a scale per row).
    double step_linear = 0;
    for (const auto& site : model->linear_sites()) {
      const auto& l = *site.layer;
      res.linear_bytes += static_cast<double>(l.resident_bytes());
      step_linear += v.int8 ? static_cast<double>(l.in_features() + 4) * l.out_features()
                            : static_cast<double>(l.resident_bytes());
    }
    // embedding, lm_head, norms: float32 (bf16 runs: bfloat16)
    const double value_bytes = v.dtype == evalrun::DType::bf16 ? 2.0 : 4.0;
    res.model_bytes = res.linear_bytes + value_bytes * (2.0 * c.vocab_size * c.hidden_size +
                                                        (2.0 * c.num_hidden_layers + 1) * c.hidden_size);
    // Bytes one decode step reads: the projections as stored, the final norm and lm_head (int8: a byte
    // per weight and a float scale per row).
    const double head_bytes = v.lm_head_int8 ? static_cast<double>(c.vocab_size) * (c.hidden_size + 4.0)
                                             : value_bytes * static_cast<double>(c.vocab_size) * c.hidden_size;
    if (v.lm_head_int8)  // resident: the int8 weights and the row scales twice (as given, per row)
      res.model_bytes -= value_bytes * static_cast<double>(c.vocab_size) * c.hidden_size -
                         static_cast<double>(c.vocab_size) * (c.hidden_size + 8.0);
    const double wbytes = step_linear + value_bytes * c.hidden_size + head_bytes;
    int slot = 0;
    for (std::int64_t batch : {1, 8}) {
      const Timing t = run(*model, batch, prompt, steps, 2);
      const double step_ms = t.decode_s / steps * 1e3;
      const double bound_ms = wbytes / (bw * 1e9) * 1e3;
      res.decode_tps[slot++] = batch * steps / t.decode_s;
      std::printf("%s batch %lld: prefill %lld tokens %.0f tok/s (%.1f ms); decode %.1f tok/s, %.2f ms/step, "
                  "%ld page faults/step; weights %.0f MB/step -> bandwidth bound %.2f ms/step: %.0f%% of it; "
                  "read bound %.2f ms/step: %.0f%% of it\n",
                  v.label, static_cast<long long>(batch), static_cast<long long>(prompt), batch * prompt / t.prefill_s,
                  t.prefill_s * 1e3, batch * steps / t.decode_s, step_ms, t.faults_per_step, wbytes / 1e6, bound_ms,
                  100.0 * bound_ms / step_ms, wbytes / (read_bw * 1e9) * 1e3, 100.0 * wbytes / (read_bw * 1e9) * 1e3 / step_ms);
    }
    std::printf("%s (%s): projections %.1f MB resident, whole model %.1f MB\n", v.label, model->quantization().c_str(),
                res.linear_bytes / 1e6, res.model_bytes / 1e6);
    results[v.label] = res;
  }
  if (!llama2c.empty()) {
    const std::string work = (std::filesystem::temp_directory_path() / "evalrun-bench-llama2c").string();
    const auto c = evalrun::bench::run_llama2c(llama2c, dir, work, threads, prompt, steps);
    auto model = evalrun::LlamaModel::load({dir, evalrun::DType::fp32, "cpu"});
    const auto ours = greedy(*model, c.prompt, steps);
    std::size_t same = 0;
    while (same < ours.size() && same < c.generated.size() && ours[same] == c.generated[same]) ++same;
    std::printf("llama2.c run.c (%s, cc -Ofast -march=native -fopenmp, %d threads): %.1f tok/s over positions 1..%lld "
                "(its prompt runs one token per step too); greedy tokens equal to evalrun fp32's for the first %zu of "
                "%lld\n",
                llama2c.c_str(), threads, c.tokens_per_s, static_cast<long long>(prompt + steps - 1), same,
                static_cast<long long>(steps));
    if (results.count("fp32")) {
      std::printf("evalrun fp32 batch 1 decode vs llama2.c run.c (same run): x%.2f\n",
                  results["fp32"].decode_tps[0] / c.tokens_per_s);
    }
  }
  if (wanted("fp32-rows")) {
    auto model = evalrun::LlamaModel::load({dir, evalrun::DType::fp32, "cpu"});
    rows_crossover(*model, "fp32", "oneDNN matmul", evalrun::ops::kF32RowsMax, evalrun::ops::kF32RowsDefault,
                   evalrun::ops::set_f32_rows_limit, prompt, steps);
  }
  if (wanted("int8-rows")) {
    auto model = evalrun::LlamaModel::load({dir, evalrun::DType::fp32, "cpu"});
    quantize_int8(*model);
    model->quantize_lm_head_int8();
    // The GEMM: oneDNN's matmul where its integer kernels are exact (VNNI), else the exact AVX2 one.
    const char* gemm = evalrun::ops::have_onednn_igemm() ? "oneDNN matmul" : "exact AVX2 GEMM";
    rows_crossover(*model, "int8 (INT8 lm_head)", gemm, evalrun::ops::kInt8RowsMax, evalrun::ops::kInt8RowsMax,
                   evalrun::ops::set_int8_rows_limit, prompt, steps);
  }
  if (wanted("fp8-rows")) {
    auto model = evalrun::LlamaModel::load({fp8_dir, evalrun::DType::fp32, "cpu"});
    rows_crossover(*model, "fp8", "float32 tiles + sgemm", evalrun::ops::kFp8RowsMax, evalrun::ops::kFp8RowsMax,
                   evalrun::ops::set_fp8_rows_limit, prompt, steps);
  }
  if (wanted("families")) family_rows(family_presets(families), bw, prompt, steps);
  if (results.count("gptq") && results.count("gptq-lm_head8")) {
    const Result& g = results["gptq"];
    const Result& h = results["gptq-lm_head8"];
    std::printf("gptq with an int8 lm_head vs gptq (same run): decode tokens/s x%.2f at batch 1, x%.2f at batch 8; "
                "whole model x%.3f\n",
                h.decode_tps[0] / g.decode_tps[0], h.decode_tps[1] / g.decode_tps[1], h.model_bytes / g.model_bytes);
  }
  for (const char* q : {"bf16", "bf16-torch", "gptq", "gptq-lm_head8", "fp8", "fp8-lm_head8", "int8", "int8-lm_head8"}) {
    if (!results.count("fp32") || !results.count(q)) continue;
    const Result& f = results["fp32"];
    const Result& g = results[q];
    std::printf("%s vs fp32 (same run): decode tokens/s x%.2f at batch 1, x%.2f at batch 8; projections' "
                "resident bytes x%.3f of fp32 = x%.3f of their fp16 size; whole model x%.3f of fp32\n",
                q, g.decode_tps[0] / f.decode_tps[0], g.decode_tps[1] / f.decode_tps[1], g.linear_bytes / f.linear_bytes,
                2.0 * g.linear_bytes / f.linear_bytes, g.model_bytes / f.model_bytes);
  }

  if (const char* data = std::getenv("EVALRUN_DATA_DIR"); data != nullptr && *data != '\0') {
    auto model = evalrun::LlamaModel::load({std::string(data) + "/models/stories260K", evalrun::DType::fp32,
                                             "cpu"});
    const Timing t = run(*model, 1, 5, 200, 3);
    std::printf("stories260K fp32 batch 1: prefill 5 tokens %.3f ms; decode %.0f tok/s (%.3f ms/step)\n",
                t.prefill_s * 1e3, 200 / t.decode_s, t.decode_s / 200 * 1e3);
    if (!llama2c.empty()) {
      const auto c = evalrun::bench::run_llama2c(
          llama2c, std::string(data) + "/models/stories260K",
          (std::filesystem::temp_directory_path() / "evalrun-bench-llama2c-stories260K").string(), threads, 6, 200);
      std::printf("stories260K llama2.c run.c, %d threads: %.0f tok/s; evalrun's decode x%.2f of it\n", threads,
                  c.tokens_per_s, 200 / t.decode_s / c.tokens_per_s);
    }
  }
  return 0;
}
