// A table of malformed inputs (config, checkpoint, tokenizer files, data sets, reference files) run
// through the real binary. Each must end with exit status 2 — never a signal or a crash — and one
// error line that names what is wrong and where (the file, key, tensor or sample); none may touch the
// earlier result file the run would have written to.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "io/hdf5_file.hpp"
#include "io/journal.hpp"
#include "process_util.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace evalrun::testing;

namespace {

const std::string kBin = EVALRUN_BIN;
const std::string kSrc = EVALRUN_SOURCE_DIR;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
void spit(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary | std::ios::trunc) << text; }

// A safetensors file split into its header (JSON) and data, and put back together.
struct Safetensors {
  json header;
  std::string data;
  explicit Safetensors(const fs::path& p) {
    const std::string b = slurp(p);
    std::uint64_t n = 0;
    std::memcpy(&n, b.data(), 8);
    header = json::parse(b.substr(8, n));
    data = b.substr(8 + n);
  }
  std::string bytes() const {
    const std::string h = header.dump();
    const std::uint64_t n = h.size();
    std::string out(reinterpret_cast<const char*>(&n), 8);
    return out + h + data;
  }
};

struct Case {
  std::string name;
  // Prepares the case inside `dir` (fresh copies of the models live in dir/qa, dir/mlm, dir/llama) and
  // returns the evalrun arguments.
  std::function<std::string(const fs::path& dir)> setup;
  std::vector<std::string> expect;  // substrings of the error line: what and where
};

class BadInput : public ::testing::Test {
 public:  // the case table below uses these helpers
  static void SetUpTestSuite() {
    base_ = make_temp_dir("evalrun-bad-input");
    for (const auto& [name, args] : std::vector<std::pair<std::string, std::string>>{
             {"qa", "--head qa --preset tiny --seed 4"},
             {"mlm", "--head mlm --preset tiny --seed 4"},
             {"llama", "--preset tiny-llama --seed 4"}}) {
      auto r = run_process(kBin + " make-model " + args + " --out " + (base_ / name).string());
      ASSERT_EQ(r.exit_code, 0) << r.output;
    }
    // The earlier result every case's run would overwrite.
    std::ofstream(base_ / "ok.toml") << qa_config(base_);
    auto r = run_process(kBin + " " + (base_ / "ok.toml").string() + " --set output.path=" + (base_ / "earlier.h5").string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(base_); }

  static std::string qa_config(const fs::path& dir) {
    return "[run]\nname = \"qa\"\nthreads = 1\n[model]\npath = \"" + (dir / "qa").string() +
           "\"\n[task]\nkind = \"qa\"\ndataset = \"" + kSrc + "/data/demo_squad.json\"\nmax_seq_length = 64\n" +
           "doc_stride = 16\n[output]\npath = \"" + (base_ / "earlier.h5").string() + "\"\n";
  }
  static std::string mlm_config(const fs::path& dir, const std::string& dataset) {
    return "[run]\nname = \"mlm\"\n[model]\npath = \"" + (dir / "mlm").string() + "\"\n[task]\nkind = \"mlm\"\ndataset = \"" +
           dataset + "\"\n[output]\npath = \"" + (base_ / "earlier.h5").string() + "\"\n";
  }
  static std::string gen_config(const fs::path& dir, const std::string& dataset) {
    return "[run]\nname = \"gen\"\n[model]\npath = \"" + (dir / "llama").string() + "\"\n[task]\nkind = \"generate\"\n" +
           "dataset = \"" + dataset + "\"\nmax_new_tokens = 2\n[output]\npath = \"" + (base_ / "earlier.h5").string() + "\"\n";
  }
  // Writes `text` as dir/cfg.toml and returns the argument that runs it.
  static std::string config(const fs::path& dir, const std::string& text) {
    spit(dir / "cfg.toml", text);
    return (dir / "cfg.toml").string();
  }
  static void edit_json(const fs::path& p, const std::function<void(json&)>& f) {
    json j = json::parse(slurp(p));
    f(j);
    spit(p, j.dump(2));
  }
  static void edit_safetensors(const fs::path& p, const std::function<void(Safetensors&)>& f) {
    Safetensors s(p);
    f(s);
    spit(p, s.bytes());
  }

  static inline fs::path base_;
};

std::vector<Case> cases() {
  using P = const fs::path&;
  auto qa = [](P d) { return BadInput::qa_config(d); };
  std::vector<Case> c = {
      // --- config -----------------------------------------------------------------------------------
      {"config: unknown key", [&](P d) { return BadInput::config(d, qa(d) + "[run]\nseeed = 1\n"); }, {"cfg.toml"}},
      {"config: misspelt key", [&](P d) { return BadInput::config(d, qa(d) + "batchsize = 2\n"); }, {"cfg.toml:", "batchsize"}},
      {"config: wrong type", [&](P d) { return BadInput::config(d, qa(d) + "[parallel]\ntensor_parallel = \"2\"\n"); },
       {"cfg.toml:", "parallel.tensor_parallel"}},
      {"config: out of range", [&](P d) { return BadInput::config(d, qa(d) + "[parallel]\ntensor_parallel = 0\n"); },
       {"cfg.toml:", "parallel.tensor_parallel"}},
      {"config: syntax error", [&](P d) { return BadInput::config(d, "[run\nname = \"x\"\n"); }, {"cfg.toml:1"}},
      {"config: missing model.path",
       [&](P d) { return BadInput::config(d, "[run]\nname = \"x\"\n[task]\nkind = \"qa\"\ndataset = \"d.json\"\n"); },
       {"cfg.toml", "model.path"}},
      {"config: option of another task",
       [&](P d) { return BadInput::config(d, BadInput::mlm_config(d, kSrc + "/data/demo_mlm.jsonl") + "doc_stride = 8\n"); },
       {"cfg.toml:", "task.doc_stride"}},
      {"config: unknown dtype",
       [&](P d) { return BadInput::config(d, qa(d)) + " --set model.dtype=fp64"; }, {"model.dtype", "fp64"}},
      {"config: file missing", [&](P d) { return (d / "nope.toml").string(); }, {"nope.toml"}},
      {"config: override without =", [&](P d) { return BadInput::config(d, qa(d)) + " --set task.batch_size"; },
       {"task.batch_size"}},
      {"config: override of unknown section", [&](P d) { return BadInput::config(d, qa(d)) + " --set foo.bar=1"; },
       {"foo"}},
      {"config: model directory missing",
       [&](P d) { return BadInput::config(d, qa(d)) + " --set model.path=" + (d / "no-model").string(); }, {"no-model"}},
      {"config: direct quantization without int8",
       [&](P d) { return BadInput::config(d, qa(d) + "[quantization]\ndirect = true\n"); }, {"cfg.toml:", "quantization.direct"}},
      {"config: unknown output placeholder",
       [&](P d) { return BadInput::config(d, qa(d)) + " --set output.path=" + (d / "r-%q.h5").string(); }, {"output.path", "%q"}},
      {"config: doc_stride >= max_seq_length",
       [&](P d) { return BadInput::config(d, qa(d)) + " --set task.doc_stride=64"; }, {"task.doc_stride"}},
      // --- checkpoint -------------------------------------------------------------------------------
      {"checkpoint: truncated file",
       [&](P d) {
         const auto p = d / "qa" / "model.safetensors";
         spit(p, slurp(p).substr(0, 5000));
         return BadInput::config(d, qa(d));
       },
       {"model.safetensors"}},
      {"checkpoint: header length past the end",
       [&](P d) {
         const auto p = d / "qa" / "model.safetensors";
         std::string b = slurp(p);
         const std::uint64_t n = 1ULL << 40;
         std::memcpy(b.data(), &n, 8);
         spit(p, b);
         return BadInput::config(d, qa(d));
       },
       {"model.safetensors"}},
      {"checkpoint: header is not JSON",
       [&](P d) {
         const auto p = d / "qa" / "model.safetensors";
         std::string b = slurp(p);
         b[8] = '#';
         spit(p, b);
         return BadInput::config(d, qa(d));
       },
       {"model.safetensors"}},
      {"checkpoint: offsets past the end",
       [&](P d) {
         BadInput::edit_safetensors(d / "qa" / "model.safetensors", [](Safetensors& s) {
           s.header["qa_outputs.bias"]["data_offsets"] = {0, 1 << 30};
         });
         return BadInput::config(d, qa(d));
       },
       {"model.safetensors", "qa_outputs.bias"}},
      {"checkpoint: unknown dtype",
       [&](P d) {
         BadInput::edit_safetensors(d / "qa" / "model.safetensors",
                                    [](Safetensors& s) { s.header["qa_outputs.bias"]["dtype"] = "F128"; });
         return BadInput::config(d, qa(d));
       },
       {"model.safetensors", "qa_outputs.bias"}},
      {"checkpoint: integer weights",
       [&](P d) {
         BadInput::edit_safetensors(d / "qa" / "model.safetensors",
                                    [](Safetensors& s) { s.header["qa_outputs.bias"]["dtype"] = "I32"; });
         return BadInput::config(d, qa(d));
       },
       {"qa_outputs.bias", "I32"}},
      {"checkpoint: NaN weight",
       [&](P d) {
         BadInput::edit_safetensors(d / "qa" / "model.safetensors", [](Safetensors& s) {
           const std::size_t at = s.header["qa_outputs.weight"]["data_offsets"][0].get<std::size_t>() + 8;
           const float nan = std::nanf("");
           std::memcpy(s.data.data() + at, &nan, 4);
         });
         return BadInput::config(d, qa(d));
       },
       {"qa_outputs.weight", "NaN"}},
      {"checkpoint: missing tensor",
       [&](P d) {
         BadInput::edit_safetensors(d / "qa" / "model.safetensors", [](Safetensors& s) {
           s.header["qa_outputs.renamed"] = s.header["qa_outputs.weight"];
           s.header.erase("qa_outputs.weight");
         });
         return BadInput::config(d, qa(d));
       },
       {"qa_outputs.weight", "missing"}},
      {"checkpoint: wrong shape",
       [&](P d) {
         BadInput::edit_safetensors(d / "qa" / "model.safetensors",
                                    [](Safetensors& s) { s.header["qa_outputs.weight"]["shape"] = {32, 2}; });
         return BadInput::config(d, qa(d));
       },
       {"qa_outputs.weight", "shape"}},
      {"checkpoint: config.json not JSON",
       [&](P d) {
         spit(d / "qa" / "config.json", "{\"hidden_size\": 32,");
         return BadInput::config(d, qa(d));
       },
       {"config.json"}},
      {"checkpoint: config.json without hidden_size",
       [&](P d) {
         BadInput::edit_json(d / "qa" / "config.json", [](json& j) { j.erase("hidden_size"); });
         return BadInput::config(d, qa(d));
       },
       {"config.json", "hidden_size"}},
      {"checkpoint: unknown architecture",
       [&](P d) {
         BadInput::edit_json(d / "qa" / "config.json", [](json& j) { j["architectures"] = {"BertForQuestionAnswering"}; });
         return BadInput::config(d, qa(d));
       },
       {"architectures", "BertForQuestionAnswering"}},
      {"checkpoint: index names a missing shard",
       [&](P d) {
         spit(d / "qa" / "model.safetensors.index.json",
              "{\"weight_map\": {\"qa_outputs.bias\": \"model-00002-of-00002.safetensors\"}}");
         fs::remove(d / "qa" / "model.safetensors");
         return BadInput::config(d, qa(d));
       },
       {"model-00002-of-00002.safetensors"}},
      {"checkpoint: unexpected tensor",
       [&](P d) {
         BadInput::edit_safetensors(d / "qa" / "model.safetensors", [](Safetensors& s) {
           // a well-formed extra tensor with data of its own
           const std::size_t at = s.data.size();
           s.data += std::string(8, '\0');
           s.header["classifier.weight"] = {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {at, at + 8}}};
         });
         return BadInput::config(d, qa(d));
       },
       {"classifier.weight", "unexpected"}},
      {"checkpoint: unknown quantization method",
       [&](P d) {
         BadInput::edit_json(d / "qa" / "config.json", [](json& j) { j["quantization_config"] = {{"quant_method", "awq"}}; });
         return BadInput::config(d, qa(d));
       },
       {"quantization_config", "awq"}},
      {"checkpoint: no safetensors at all",
       [&](P d) {
         fs::remove(d / "qa" / "model.safetensors");
         return BadInput::config(d, qa(d));
       },
       {"qa"}},
      // --- tokenizer --------------------------------------------------------------------------------
      {"tokenizer: vocab.json missing",
       [&](P d) {
         fs::remove(d / "qa" / "vocab.json");
         return BadInput::config(d, qa(d));
       },
       {"vocab.json"}},
      {"tokenizer: vocab.json not JSON",
       [&](P d) {
         spit(d / "qa" / "vocab.json", "{\"<s>\": 0, ");
         return BadInput::config(d, qa(d));
       },
       {"vocab.json"}},
      {"tokenizer: merges.txt missing",
       [&](P d) {
         fs::remove(d / "qa" / "merges.txt");
         return BadInput::config(d, qa(d));
       },
       {"merges.txt"}},
      {"tokenizer: merge of an unknown token",
       [&](P d) {
         std::ofstream(d / "qa" / "merges.txt", std::ios::app) << "zzqx yyqw\n";
         return BadInput::config(d, qa(d));
       },
       {"merges.txt"}},
      {"tokenizer: tokenizer_config.json not JSON",
       [&](P d) {
         spit(d / "mlm" / "tokenizer_config.json", "{\"add_prefix_space\": ");
         return BadInput::config(d, BadInput::mlm_config(d, kSrc + "/data/demo_mlm.jsonl"));
       },
       {"tokenizer_config.json"}},
      // --- data sets --------------------------------------------------------------------------------
      {"data: SQuAD file not JSON",
       [&](P d) {
         spit(d / "squad.json", "{\"data\": [");
         return BadInput::config(d, qa(d)) + " --set task.dataset=" + (d / "squad.json").string();
       },
       {"squad.json"}},
      {"data: SQuAD without data",
       [&](P d) {
         spit(d / "squad.json", "{\"version\": \"1.1\"}");
         return BadInput::config(d, qa(d)) + " --set task.dataset=" + (d / "squad.json").string();
       },
       {"squad.json", "data"}},
      {"data: SQuAD question without id",
       [&](P d) {
         spit(d / "squad.json", "{\"data\": [{\"title\": \"t\", \"paragraphs\": [{\"context\": \"A b c.\", \"qas\": "
                                "[{\"question\": \"What?\", \"answers\": []}]}]}]}");
         return BadInput::config(d, qa(d)) + " --set task.dataset=" + (d / "squad.json").string();
       },
       {"squad.json", "id"}},
      {"data: data set missing",
       [&](P d) { return BadInput::config(d, qa(d)) + " --set task.dataset=" + (d / "none.json").string(); }, {"none.json"}},
      {"data: mlm line not JSON",
       [&](P d) {
         spit(d / "m.jsonl", "{\"id\": \"a\", \"text\": \"x <mask> y\"}\n{\"id\": \"b\", \"text\": \n");
         return BadInput::config(d, BadInput::mlm_config(d, (d / "m.jsonl").string()));
       },
       {"m.jsonl:2"}},
      {"data: mlm text without <mask>",
       [&](P d) {
         spit(d / "m.jsonl", "{\"id\": \"a\", \"text\": \"no mask here\"}\n");
         return BadInput::config(d, BadInput::mlm_config(d, (d / "m.jsonl").string()));
       },
       {"m.jsonl", "<mask>"}},
      {"data: duplicate prompt id",
       [&](P d) {
         spit(d / "p.jsonl", "{\"id\": \"x\", \"prompt\": \"one\"}\n{\"id\": \"x\", \"prompt\": \"two\"}\n");
         return BadInput::config(d, BadInput::gen_config(d, (d / "p.jsonl").string()));
       },
       {"p.jsonl", "x"}},
      {"data: empty prompt",
       [&](P d) {
         spit(d / "p.jsonl", "{\"id\": \"e1\", \"prompt\": \"\"}\n");
         return BadInput::config(d, BadInput::gen_config(d, (d / "p.jsonl").string()));
       },
       {"p.jsonl", "e1"}},
      {"data: prompt not UTF-8",
       [&](P d) {
         spit(d / "p.txt", "Once upon \xff\xfe a time");
         return BadInput::config(d, BadInput::gen_config(d, (d / "p.txt").string()));
       },
       {"p.txt", "UTF-8"}},
      {"data: empty corpus",
       [&](P d) {
         spit(d / "c.txt", "");
         return BadInput::config(d, "[run]\nname = \"p\"\n[model]\npath = \"" + (d / "llama").string() +
                                        "\"\n[task]\nkind = \"perplexity\"\ndataset = \"" + (d / "c.txt").string() +
                                        "\"\ncontext_length = 16\n[output]\npath = \"" +
                                        (BadInput::base_ / "earlier.h5").string() + "\"\n");
       },
       {"c.txt", "empty"}},
      {"data: golden file missing",
       [&](P d) {
         return BadInput::config(d, BadInput::gen_config(d, kSrc + "/tests/data/decoder_prompts.jsonl") +
                                        "[validation]\ngolden = \"" + (d / "gold.h5").string() + "\"\n");
       },
       {"gold.h5"}},
      // --- the run journal (--resume) -----------------------------------------------------------------
      {"journal: damaged fingerprint with --resume",
       [&](P d) {
         fs::create_directories(d / "out.h5.journal");
         spit(d / "out.h5.journal" / "fingerprint.json", "{\"format\": 1, \"run_id\": ");
         return BadInput::config(d, qa(d)) + " --set output.path=" + (d / "out.h5").string() + " --resume";
       },
       {"out.h5.journal/fingerprint.json", "remove the directory"}},
      {"journal: finished items of an interrupted run, no --resume",
       [&](P d) {
         fs::create_directories(d / "out.h5.journal");
         spit(d / "out.h5.journal" / "fingerprint.json",
              "{\"format\": 1, \"run_id\": \"00000000000000ab\", \"model_sha256\": \"m\", \"inputs_sha256\": \"i\", "
              "\"config\": {}}");
         evalrun::JournalWriter((d / "out.h5.journal" / "00000000000000ab.rank0.evj").string()).add(0, "x");
         return BadInput::config(d, qa(d)) + " --set output.path=" + (d / "out.h5").string();
       },
       {"out.h5.journal", "1 finished work items", "--resume"}},
      {"journal: another run's journal with --resume",
       [&](P d) {
         fs::create_directories(d / "out.h5.journal");
         spit(d / "out.h5.journal" / "fingerprint.json",
              "{\"format\": 1, \"run_id\": \"00000000000000ab\", \"model_sha256\": \"m\", \"inputs_sha256\": \"i\", "
              "\"config\": {\"task.kind\": \"\\\"mlm\\\"\"}}");
         return BadInput::config(d, qa(d)) + " --set output.path=" + (d / "out.h5").string() + " --resume";
       },
       {"fingerprint.json", "cannot resume", "task.kind = \"qa\" (was \"mlm\")", "the model's config.json or weights"}},
      {"config: model directory missing, tokenizer elsewhere",
       [&](P d) {
         return BadInput::config(d, qa(d)) + " --set model.tokenizer=" + (d / "qa").string() + " --set model.path=" +
                (d / "no-model").string();
       },
       {"no-model", "does not exist"}},
      // --- reference files (compare) ----------------------------------------------------------------
      {"reference: not HDF5",
       [&](P d) {
         spit(d / "ref.h5", "this is not an HDF5 file");
         return "compare " + (d / "ref.h5").string() + " " + (BadInput::base_ / "earlier.h5").string();
       },
       {"ref.h5"}},
      {"reference: truncated HDF5",
       [&](P d) {
         spit(d / "ref.h5", slurp(BadInput::base_ / "earlier.h5").substr(0, 3000));
         return "compare " + (d / "ref.h5").string() + " " + (BadInput::base_ / "earlier.h5").string();
       },
       {"ref.h5"}},
      {"reference: file missing",
       [&](P d) { return "compare " + (d / "nothing.h5").string() + " " + (BadInput::base_ / "earlier.h5").string(); },
       {"nothing.h5"}},
      {"reference: HDF5 that is no result file",
       [&](P d) {
         evalrun::H5Writer w((d / "other.h5").string());
         w.write("/values", std::vector<double>{1.0, 2.0});
         w.commit();
         return "compare " + (d / "other.h5").string() + " " + (BadInput::base_ / "earlier.h5").string();
       },
       {"other.h5"}},
      {"reference: thresholds file with an unknown key",
       [&](P d) {
         spit(d / "t.toml", "[qa]\nmax_logit_dif = 0.1\n");
         return "compare " + (BadInput::base_ / "earlier.h5").string() + " " + (BadInput::base_ / "earlier.h5").string() +
                " --thresholds " + (d / "t.toml").string();
       },
       {"t.toml:2", "max_logit_dif"}},
      {"reference: jobs file with a missing reference",
       [&](P d) {
         spit(d / "jobs.toml", "[[run]]\nconfig = \"" + BadInput::config(d, qa(d)) + "\"\nreference = \"" +
                                   (d / "gone.h5").string() + "\"\n");
         return "batch " + (d / "jobs.toml").string();
       },
       {"jobs.toml:3", "gone.h5"}},
  };
  return c;
}

TEST_F(BadInput, EveryMalformedInputIsOneClearErrorWithExitTwo) {
  const std::string earlier = slurp(base_ / "earlier.h5");
  const auto all = cases();
  ASSERT_GE(all.size(), 40u);
  int n = 0;
  for (const auto& c : all) {
    SCOPED_TRACE(c.name);
    const fs::path dir = base_ / ("case" + std::to_string(n++));
    fs::create_directories(dir);
    for (const char* m : {"qa", "mlm", "llama"}) fs::copy(base_ / m, dir / m, fs::copy_options::recursive);
    const std::string args = c.setup(dir);
    const auto r = run_process("timeout 120 " + kBin + " " + args);
    EXPECT_EQ(r.exit_code, 2) << r.output;  // run_process reports a signal as -1
    std::size_t error_lines = 0;
    std::istringstream lines(r.output);
    for (std::string l; std::getline(lines, l);) error_lines += l.find("evalrun: error") != std::string::npos;
    EXPECT_EQ(error_lines, 1u) << r.output;
    for (const auto& e : c.expect) EXPECT_NE(r.output.find(e), std::string::npos) << "expected '" << e << "' in:\n" << r.output;
    EXPECT_TRUE(slurp(base_ / "earlier.h5") == earlier) << "the earlier result file changed";
    fs::remove_all(dir);
  }
}

}  // namespace
