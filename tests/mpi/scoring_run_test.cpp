// task.kind = "multiple_choice", "generate_until" and "loglikelihood" with a task file (LAMBADA)
// through the real binary under mpirun, on the
// shipped task files (tasks/*.toml) and their samples: results do not depend on the number of ranks,
// the batch size or sharing the context (identical decisions and tokens, log-likelihoods within 1e-5);
// lm-eval's results JSON and samples JSONL are written; compare passes on two layouts; a task file of
// the other output type or a template naming a missing field is exit 2 naming the file.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <tuple>

#include "io/hdf5_file.hpp"
#include "process_util.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace evalrun;
using namespace evalrun::testing;

namespace {

const std::string kBin = EVALRUN_BIN;
const std::string kSrc = EVALRUN_SOURCE_DIR;

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class ScoringRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = make_temp_dir("evalrun-scoring-run");
    auto r = run_process(kBin + " make-model --preset tiny-llama --seed 5 --out " + (dir_ / "tiny-llama").string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::string config(const std::string& kind, const std::string& task) {
    const fs::path p = dir_ / (task + ".toml");
    std::ofstream(p) << "[run]\nname = \"s\"\nthreads = 1\n[model]\npath = \"" << (dir_ / "tiny-llama").string()
                     << "\"\n[task]\nkind = \"" << kind << "\"\ntask_file = \"" << kSrc << "/tasks/" << task << ".toml\"\n";
    return p.string();
  }

  // `evalrun run` of `cfg` under mpirun with `ranks`, writing `out` (returned) with `extra` --set options.
  static std::string run(const std::string& cfg, int ranks, const std::string& out, const std::string& extra = "") {
    auto r = run_process(mpirun(ranks) + kBin + " " + cfg + " --set output.path=" + quote((dir_ / out).string()) + extra);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return (dir_ / out).string();
  }

  static inline fs::path dir_;
};

TEST_F(ScoringRun, MultipleChoiceIndependentOfRanksBatchAndSharedContext) {
  for (const std::string task : {"arc_easy", "winogrande", "hellaswag"}) {
    const std::string cfg = config("multiple_choice", task);
    const auto ref = run(cfg, 1, task + "-n1-b1.h5", " --set task.batch_size=1");
    H5Reader a(ref);
    const auto ids = a.read_strings("/samples/id");
    ASSERT_FALSE(ids.empty()) << task;
    const auto la = a.read_f64("/loglikelihood/value");
    const auto acc = a.read_i64("/documents/acc");
    // acc agrees with the stored log-likelihoods: the first maximum of each document's choices is pred
    const auto first = a.read_i64("/documents/first_request"), count = a.read_i64("/documents/n_choices");
    const auto pred = a.read_i64("/documents/pred"), gold = a.read_i64("/documents/gold");
    double right = 0;
    for (std::size_t d = 0; d < ids.size(); ++d) {
      std::int64_t best = 0;
      for (std::int64_t k = 1; k < count[d]; ++k) {
        if (la[static_cast<std::size_t>(first[d] + k)] > la[static_cast<std::size_t>(first[d] + best)]) best = k;
      }
      EXPECT_EQ(pred[d], best) << task << " document " << d;
      EXPECT_EQ(acc[d], pred[d] == gold[d] ? 1 : 0) << task << " document " << d;
      right += acc[d];
    }
    EXPECT_DOUBLE_EQ(a.attr_double("/metrics", "acc"), right / static_cast<double>(ids.size())) << task;
    // (ranks, batch size, share_context)
    const std::vector<std::tuple<int, int, bool>> layouts = {{2, 8, true}, {4, 1, true}, {2, 3, false}, {1, 8, false}};
    for (const auto& [ranks, batch, share] : layouts) {
      std::string name = task;  // appended piece by piece: GCC 12's -Wrestrict misfires on "x" + std::string
      name += "-n";
      name += std::to_string(ranks);
      name += "-b";
      name += std::to_string(batch);
      name += share ? "-shared.h5" : "-alone.h5";
      H5Reader b(run(cfg, ranks, name,
                     " --set task.batch_size=" + std::to_string(batch) + " --set task.share_context=" + (share ? "true" : "false")));
      EXPECT_EQ(b.read_strings("/samples/id"), ids) << name;
      EXPECT_EQ(b.read_ragged_i64("/requests/input_ids"), a.read_ragged_i64("/requests/input_ids")) << name;
      EXPECT_EQ(b.read_i64("/documents/pred"), pred) << name;
      EXPECT_EQ(b.read_i64("/documents/pred_norm"), a.read_i64("/documents/pred_norm")) << name;
      const auto lb = b.read_f64("/loglikelihood/value");
      ASSERT_EQ(lb.size(), la.size()) << name;
      for (std::size_t i = 0; i < la.size(); ++i) EXPECT_NEAR(la[i], lb[i], 1e-5) << name << " request " << i;
    }
  }
}

TEST_F(ScoringRun, MultipleChoiceWritesLmEvalOutputAndComparePasses) {
  const std::string cfg = config("multiple_choice", "arc_easy");
  const fs::path json = dir_ / "arc.json", jsonl = dir_ / "arc.jsonl";
  const auto a = run(cfg, 2, "lm-a.h5",
                     " --set task.num_fewshot=1 --set output.lm_eval_json=" + quote(json.string()) +
                         " --set output.samples_jsonl=" + quote(jsonl.string()));
  const auto results = nlohmann::json::parse(read_all(json));
  H5Reader h(a);
  EXPECT_DOUBLE_EQ(results["results"]["arc_easy"]["acc,none"].get<double>(), h.attr_double("/metrics", "acc"));
  EXPECT_EQ(results["n-shot"]["arc_easy"].get<int>(), 1);
  std::istringstream lines(read_all(jsonl));
  std::string line;
  std::size_t n = 0;
  const auto prompts = h.read_strings("/documents/prompt");
  while (std::getline(lines, line)) {
    const auto s = nlohmann::json::parse(line);
    EXPECT_EQ(s["doc_id"].get<std::size_t>(), n);
    ASSERT_LT(n, prompts.size());
    EXPECT_EQ(s["arguments"][0][0].get<std::string>(), prompts[n]);  // the stored prompt, with its one shot
    EXPECT_NE(prompts[n].find("\n\n"), std::string::npos) << "1-shot prompt has the few-shot delimiter";
    EXPECT_EQ(s["doc_hash"].get<std::string>().size(), 64u);
    ++n;
  }
  EXPECT_EQ(n, prompts.size());
  const auto b = run(cfg, 1, "lm-b.h5", " --set task.num_fewshot=1 --set task.batch_size=1");
  auto r = run_process(kBin + " compare " + quote(a) + " " + quote(b));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("acc_mcnemar_p"), std::string::npos) << r.output;
  // 0-shot against 1-shot: other requests, not comparable
  const auto zero = run(cfg, 1, "lm-zero.h5");
  auto z = run_process(kBin + " compare " + quote(a) + " " + quote(zero));
  EXPECT_EQ(z.exit_code, 2) << z.output;
  EXPECT_NE(z.output.find("other requests"), std::string::npos) << z.output;
}

TEST_F(ScoringRun, GenerateUntilIndependentOfRanksAndBatch) {
  const std::string cfg = config("generate_until", "gsm8k");
  const std::string few = " --set task.max_samples=3";
  const fs::path json = dir_ / "gsm.json", jsonl = dir_ / "gsm.jsonl";
  H5Reader a(run(cfg, 1, "gsm-n1-b1.h5",
                 few + " --set task.batch_size=1 --set output.lm_eval_json=" + quote(json.string()) +
                     " --set output.samples_jsonl=" + quote(jsonl.string())));
  // lm-eval's layouts: exact_match per filter as the result file has it; a samples line per document
  // and filter, its response the stored (cut) response.
  const auto results = nlohmann::json::parse(read_all(json));
  for (const char* f : {"strict-match", "flexible-extract"}) {
    EXPECT_DOUBLE_EQ(results["results"]["gsm8k"][std::string("exact_match,") + f].get<double>(),
                     a.attr_double("/metrics", std::string("exact_match,") + f))
        << f;
  }
  EXPECT_EQ(results["configs"]["gsm8k"]["output_type"].get<std::string>(), "generate_until");
  {
    std::istringstream lines(read_all(jsonl));
    std::string line;
    std::size_t n = 0;
    const auto cut = a.read_strings("/generated/response");
    const auto strict = a.read_strings("/answers/strict-match/answer");
    while (std::getline(lines, line)) {
      const auto s = nlohmann::json::parse(line);
      const auto doc = s["doc_id"].get<std::size_t>();
      ASSERT_LT(doc, cut.size());
      EXPECT_EQ(s["resps"][0][0].get<std::string>(), cut[doc]);
      if (s["filter"] == "strict-match") {
        EXPECT_EQ(s["filtered_resps"][0].get<std::string>(), strict[doc]);
      }
      EXPECT_EQ(s["arguments"][0][1]["max_gen_toks"].get<int>(), 256);
      ++n;
    }
    EXPECT_EQ(n, 2 * cut.size());  // two filters
  }
  const auto gen = a.read_ragged_i64("/generated/ids");
  const auto responses = a.read_strings("/generated/response");
  ASSERT_EQ(gen.size(), 3u);
  for (const auto& r : responses) EXPECT_EQ(r.find("Question:"), std::string::npos) << "cut at the stop string: " << r;
  EXPECT_EQ(a.children("/answers"), (std::vector<std::string>{"flexible-extract", "strict-match"}));
  for (const auto& [ranks, batch] : std::vector<std::pair<int, int>>{{2, 2}, {2, 8}}) {
    std::string name = "gsm-n";
    name += std::to_string(ranks);
    name += "-b";
    name += std::to_string(batch);
    name += ".h5";
    const auto path = run(cfg, ranks, name, few + " --set task.batch_size=" + std::to_string(batch));
    H5Reader b(path);
    EXPECT_EQ(b.read_ragged_i64("/generated/ids"), gen) << name;
    EXPECT_EQ(b.read_strings("/answers/strict-match/answer"), a.read_strings("/answers/strict-match/answer")) << name;
    EXPECT_EQ(b.read_strings("/answers/flexible-extract/answer"), a.read_strings("/answers/flexible-extract/answer"))
        << name;
    auto r = run_process(kBin + " compare " + quote((dir_ / "gsm-n1-b1.h5").string()) + " " + quote(path));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("exact_match,strict-match_mcnemar_p"), std::string::npos) << r.output;
  }
}

// LAMBADA (tasks/lambada_openai.toml, output_type loglikelihood): one request per document, the same
// log-likelihoods as the same requests given raw (task.dataset of context/continuation lines, written
// here from the documents as lm-eval's templates split them), whatever the ranks and batch size; lm-eval's
// perplexity (exp of minus the mean log-likelihood) and acc (greedy share) from the stored values.
TEST_F(ScoringRun, LambadaTaskFileScoresLikeRawRequests) {
  const std::string cfg = config("loglikelihood", "lambada_openai");
  const fs::path json = dir_ / "lambada.json", jsonl = dir_ / "lambada.jsonl";
  H5Reader a(run(cfg, 1, "lambada-n1-b1.h5",
                 " --set task.batch_size=1 --set output.lm_eval_json=" + quote(json.string()) +
                     " --set output.samples_jsonl=" + quote(jsonl.string())));
  const auto ll = a.read_f64("/loglikelihood/value");
  const auto greedy = a.read_i64("/loglikelihood/is_greedy");
  ASSERT_EQ(ll.size(), 3u);
  EXPECT_EQ(a.read_strings("/samples/id"), (std::vector<std::string>{"doc-0", "doc-1", "doc-2"}));
  EXPECT_EQ(a.attr_string("/", "task_name"), "lambada_openai");
  double sum = 0, right = 0;
  for (std::size_t i = 0; i < ll.size(); ++i) {
    sum += ll[i];
    right += static_cast<double>(greedy[i]);
  }
  EXPECT_DOUBLE_EQ(a.attr_double("/metrics", "perplexity"), std::exp(-sum / 3.0));
  EXPECT_DOUBLE_EQ(a.attr_double("/metrics", "acc"), right / 3.0);
  EXPECT_GT(a.attr_double("/metrics", "perplexity_stderr"), 0.0);
  const auto results = nlohmann::json::parse(read_all(json));
  const auto& r = results["results"]["lambada_openai"];
  EXPECT_DOUBLE_EQ(r["perplexity,none"].get<double>(), a.attr_double("/metrics", "perplexity"));
  EXPECT_DOUBLE_EQ(r["perplexity_stderr,none"].get<double>(), a.attr_double("/metrics", "perplexity_stderr"));
  EXPECT_DOUBLE_EQ(r["acc,none"].get<double>(), a.attr_double("/metrics", "acc"));
  EXPECT_EQ(results["configs"]["lambada_openai"]["output_type"].get<std::string>(), "loglikelihood");
  EXPECT_FALSE(results["higher_is_better"]["lambada_openai"]["perplexity"].get<bool>());
  EXPECT_EQ(results["config"]["bootstrap_iters"].get<int>(), 100000);
  // The raw requests the templates make: all but the last word, then " " + the last word.
  const fs::path raw = dir_ / "lambada_raw.jsonl";
  {
    std::ofstream out(raw);
    std::istringstream docs(read_all(kSrc + "/tasks/samples/lambada_openai.jsonl"));
    std::istringstream samples(read_all(jsonl));
    std::string doc, sample;
    std::size_t n = 0;
    while (std::getline(docs, doc) && std::getline(samples, sample)) {
      const std::string text = nlohmann::json::parse(doc)["text"].get<std::string>();
      const auto cut = text.rfind(' ');
      const nlohmann::json q = {{"context", text.substr(0, cut)}, {"continuation", text.substr(cut)}};
      out << q.dump() << "\n";
      const auto s = nlohmann::json::parse(sample);
      EXPECT_EQ(s["doc_id"].get<std::size_t>(), n);
      EXPECT_EQ(s["arguments"][0][0], q["context"]);
      EXPECT_EQ(s["target"], q["continuation"]);
      EXPECT_EQ(s["resps"][0][0][0].get<double>(), ll[n]);
      EXPECT_EQ(s["acc"].get<int>(), greedy[n]);
      ++n;
    }
    EXPECT_EQ(n, 3u);
  }
  const fs::path raw_cfg = dir_ / "lambada_raw.toml";
  std::ofstream(raw_cfg) << "[run]\nname = \"s\"\nthreads = 1\n[model]\npath = \"" << (dir_ / "tiny-llama").string()
                         << "\"\n[task]\nkind = \"loglikelihood\"\ndataset = \"" << raw.string() << "\"\n";
  H5Reader plain(run(raw_cfg.string(), 1, "lambada-raw.h5", " --set task.batch_size=1"));
  EXPECT_EQ(plain.read_f64("/loglikelihood/value"), ll);
  EXPECT_EQ(plain.read_ragged_i64("/requests/continuation_ids"), a.read_ragged_i64("/requests/continuation_ids"));
  for (const auto& [ranks, batch] : std::vector<std::pair<int, int>>{{2, 3}, {4, 8}}) {
    std::string name = "lambada-n";
    name += std::to_string(ranks);
    name += "-b";
    name += std::to_string(batch);
    name += ".h5";
    const auto path = run(cfg, ranks, name, " --set task.batch_size=" + std::to_string(batch));
    H5Reader b(path);
    EXPECT_EQ(b.read_i64("/loglikelihood/is_greedy"), greedy) << name;
    const auto lb = b.read_f64("/loglikelihood/value");
    ASSERT_EQ(lb.size(), ll.size()) << name;
    for (std::size_t i = 0; i < ll.size(); ++i) EXPECT_NEAR(lb[i], ll[i], 1e-5) << name << " request " << i;
    auto c = run_process(kBin + " compare " + quote((dir_ / "lambada-n1-b1.h5").string()) + " " + quote(path));
    EXPECT_EQ(c.exit_code, 0) << c.output;
  }
  // A multiple_choice task file does not run as loglikelihood; a few-shot setting needs a task file.
  auto w = run_process(kBin + " " + config("loglikelihood", "arc_easy") + " --set output.path=" +
                       quote((dir_ / "never3.h5").string()));
  EXPECT_EQ(w.exit_code, 2) << w.output;
  EXPECT_NE(w.output.find("arc_easy.toml: output_type"), std::string::npos) << w.output;
  auto f = run_process(kBin + " " + raw_cfg.string() + " --set task.num_fewshot=1");
  EXPECT_EQ(f.exit_code, 2) << f.output;
  EXPECT_NE(f.output.find("task.num_fewshot needs task.task_file"), std::string::npos) << f.output;
}

TEST_F(ScoringRun, WrongOutputTypeAndMissingFieldAreExit2NamingTheFile) {
  // gsm8k is a generate_until task file
  auto r = run_process(kBin + " " + config("multiple_choice", "gsm8k") + " --set output.path=" +
                       quote((dir_ / "never.h5").string()));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("gsm8k.toml: output_type"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "never.h5"));
  // an ARC document without "question"
  const fs::path data = dir_ / "arc_bad.jsonl";
  std::ofstream(data) << R"({"id": "x", "choices": {"text": ["a", "b"], "label": ["A", "B"]}, "answerKey": "A"})" << "\n";
  auto m = run_process(kBin + " " + config("multiple_choice", "arc_easy") + " --set task.dataset=" + quote(data.string()) +
                       " --set output.path=" + quote((dir_ / "never2.h5").string()));
  EXPECT_EQ(m.exit_code, 2) << m.output;
  EXPECT_NE(m.output.find(data.string() + ":1"), std::string::npos) << m.output;
  EXPECT_NE(m.output.find("question"), std::string::npos) << m.output;
  // no task file
  const fs::path cfg = dir_ / "no_task_file.toml";
  std::ofstream(cfg) << "[run]\nname = \"s\"\n[model]\npath = \"" << (dir_ / "tiny-llama").string()
                     << "\"\n[task]\nkind = \"multiple_choice\"\n";
  auto t = run_process(kBin + " " + cfg.string());
  EXPECT_EQ(t.exit_code, 2) << t.output;
  EXPECT_NE(t.output.find("task.task_file is required"), std::string::npos) << t.output;
}

}  // namespace
