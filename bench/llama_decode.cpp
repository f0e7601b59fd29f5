// Prefill and greedy-decode speed of the llama-110m preset (hidden 768, 12 layers, GQA 12/4, vocab
// 32000), against the memory-bandwidth bound of decoding: a batch-1 step has to read every weight
// once, so it cannot take less than weight bytes / memory bandwidth.
//   llama_decode_bench [threads=2] [prompt=128] [new=64] [checkpoint dir]
// Without a directory the preset is written once to $TMPDIR/evalrun-bench-llama-110m (seed 0) and
// reused. Bandwidth: memcpy of a 512 MiB buffer (far larger than any cache) split over the threads,
// counted as bytes read + bytes written per second (STREAM's "copy" convention, the larger of the
// two usual figures, so the bound is the stricter one). Per batch size (1, 8): prefill tokens/s (batch x prompt
// tokens in one forward), decode tokens/s (batch x new tokens, one token per row per step), ms per
// step, minor page faults per step, and the fraction of the bandwidth bound reached (meaningful at
// batch 1; larger batches trade it for throughput).
// With EVALRUN_DATA_DIR set it also times stories260K (200 new tokens after "Once upon a time").
#include <ATen/Parallel.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "model/llama.hpp"
#include "model/make_model.hpp"
#include "model/roberta.hpp"

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

// Bytes of weights one decode step reads (all layers, final norm, lm_head; not the embedding rows).
double weight_bytes(const evalrun::LlamaConfig& c, double bytes_per_value) {
  const double H = c.hidden_size, I = c.intermediate_size, qw = c.num_attention_heads * c.head_dim;
  const double kvw = c.num_key_value_heads * c.head_dim;
  const double per_layer = H * (qw + 2 * kvw) + qw * H + 3 * H * I + 2 * H;
  return (c.num_hidden_layers * per_layer + H + c.vocab_size * H) * bytes_per_value;
}

struct Timing {
  double prefill_s = 0, decode_s = 0;
  long faults_per_step = 0;
};

// Prefill `prompt` tokens per row, then `steps` greedy single-token steps; best of `reps`.
Timing run(evalrun::DecoderModel& model, std::int64_t batch, std::int64_t prompt, std::int64_t steps, int reps) {
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

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const std::int64_t prompt = argc > 2 ? std::atoll(argv[2]) : 128;
  const std::int64_t steps = argc > 3 ? std::atoll(argv[3]) : 64;
  std::string dir = argc > 4 ? argv[4] : "";
  if (dir.empty()) {
    dir = (std::filesystem::temp_directory_path() / "evalrun-bench-llama-110m").string();
    if (!std::filesystem::exists(std::filesystem::path(dir) / "model.safetensors")) {
      std::printf("writing llama-110m preset to %s\n", dir.c_str());
      evalrun::make_llama_checkpoint(dir, "llama-110m", 0);
    }
  }
  evalrun::set_compute_threads(threads);
  const double bw = measure_bandwidth();
  std::printf("threads %d: memcpy bandwidth %.2f GB/s (read + write)\n", threads, bw);

  for (auto dtype : {evalrun::DType::fp32, evalrun::DType::bf16}) {
    auto model = evalrun::DecoderModel::load(dir, dtype, evalrun::Device::cpu);
    const double wbytes = weight_bytes(model->config(), dtype == evalrun::DType::fp32 ? 4.0 : 2.0);
    for (std::int64_t batch : {1, 8}) {
      const Timing t = run(*model, batch, prompt, steps, 2);
      const double step_ms = t.decode_s / steps * 1e3;
      const double bound_ms = wbytes / (bw * 1e9) * 1e3;
      std::printf("%s batch %lld: prefill %lld tokens %.0f tok/s (%.1f ms); decode %.1f tok/s, %.2f ms/step, "
                  "%ld page faults/step; weights %.0f MB/step -> bandwidth bound %.2f ms/step: %.0f%% of it\n",
                  dtype == evalrun::DType::fp32 ? "fp32" : "bf16", static_cast<long long>(batch),
                  static_cast<long long>(prompt), batch * prompt / t.prefill_s, t.prefill_s * 1e3,
                  batch * steps / t.decode_s, step_ms, t.faults_per_step, wbytes / 1e6, bound_ms, 100.0 * bound_ms / step_ms);
    }
  }

  if (const char* data = std::getenv("EVALRUN_DATA_DIR"); data != nullptr && *data != '\0') {
    auto model = evalrun::DecoderModel::load(std::string(data) + "/models/stories260K", evalrun::DType::fp32,
                                             evalrun::Device::cpu);
    const Timing t = run(*model, 1, 5, 200, 3);
    std::printf("stories260K fp32 batch 1: prefill 5 tokens %.3f ms; decode %.0f tok/s (%.3f ms/step)\n",
                t.prefill_s * 1e3, 200 / t.decode_s, t.decode_s / 200 * 1e3);
  }
  return 0;
}
