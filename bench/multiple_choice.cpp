// Documents per second of the multiple_choice scoring (task/multiple_choice.hpp) for a 4-choice task,
// with the shared context (each document's context once in a KV cache) and with every choice scored
// alone, measured in one run on the same documents, and the largest |log-likelihood difference|
// between the two (float rounding only).
//   multiple_choice_bench [threads=2] [preset=llama-110m] [documents=32] [context tokens=96]
//                         [choice tokens=8] [batch=4]
// The preset (make-model's, random weights of a real shape) is written once to
// $TMPDIR/evalrun-bench-<preset> (seed 0) and reused. Documents are random token ids (a fixed seed):
// a BOS, `context` tokens, 4 choices of 1..`choice tokens` tokens each.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

#include "fixtures/make_model.hpp"
#include "model/registry.hpp"
#include "task/multiple_choice.hpp"

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const std::string preset = argc > 2 ? argv[2] : "llama-110m";
  const int documents = argc > 3 ? std::atoi(argv[3]) : 32;
  const int context = argc > 4 ? std::atoi(argv[4]) : 96;
  const int choice_tokens = argc > 5 ? std::atoi(argv[5]) : 8;
  const int batch = argc > 6 ? std::atoi(argv[6]) : 4;
  const std::string dir = (std::filesystem::temp_directory_path() / ("evalrun-bench-" + preset)).string();
  if (!std::filesystem::exists(std::filesystem::path(dir) / "model.safetensors")) {
    std::printf("writing %s preset to %s\n", preset.c_str(), dir.c_str());
    evalrun::make_llama_checkpoint(dir, preset, 0);
  }
  evalrun::set_compute_threads(threads);
  const auto model = evalrun::load_causal_lm({dir});
  const std::int64_t vocab = model->vocab_size();

  std::mt19937 rng(1);
  std::uniform_int_distribution<std::int64_t> id(3, vocab - 1);
  std::uniform_int_distribution<int> len(1, std::max(1, choice_tokens));
  std::vector<evalrun::McDocWork> docs;
  std::uint64_t request = 0;
  for (int d = 0; d < documents; ++d) {
    evalrun::McDocWork w;
    w.index = static_cast<std::uint64_t>(d);
    evalrun::LoglikTokens t;
    t.context = {1};
    for (int k = 0; k < context; ++k) t.context.push_back(id(rng));
    for (int c = 0; c < 4; ++c) {
      t.continuation.clear();
      for (int k = len(rng); k > 0; --k) t.continuation.push_back(id(rng));
      w.requests.push_back(evalrun::make_loglik_request(request++, t, 1 << 20, "bench"));
    }
    docs.push_back(std::move(w));
  }
  std::printf("%s, %d threads: %d documents x 4 choices, context %d tokens, choices 1..%d tokens, batch %d\n",
              preset.c_str(), threads, documents, context, choice_tokens, batch);
  std::vector<std::vector<evalrun::McDocScores>> results;
  double per_second[2] = {0, 0};
  for (bool share : {true, false}) {
    evalrun::McOptions o;
    o.batch_size = batch;
    o.share_context = share;
    evalrun::score_mc_documents(*model, {docs.front()}, o);  // warm-up
    const auto t0 = std::chrono::steady_clock::now();
    results.push_back(evalrun::score_mc_documents(*model, docs, o));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    per_second[share ? 0 : 1] = documents / s;
    std::printf("  %-22s %8.2f documents/s (%.3f s)\n", share ? "shared context" : "every choice alone",
                documents / s, s);
  }
  double max_diff = 0;
  for (std::size_t d = 0; d < docs.size(); ++d)
    for (std::size_t c = 0; c < 4; ++c)
      max_diff = std::max(max_diff, std::fabs(results[0][d].choices[c].loglikelihood -
                                              results[1][d].choices[c].loglikelihood));
  std::printf("  speed-up %.2fx, max |ll shared - alone| %.3g\n", per_second[0] / per_second[1], max_diff);
  return 0;
}
