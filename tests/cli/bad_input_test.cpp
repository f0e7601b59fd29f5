// A table of malformed inputs (config, checkpoint, tokenizer files, data sets, reference files, jobs
// files; outputs that name an input; files nested or sized past the parsers' limits) run through the
// real binary, every command. Each must end with exit status 2 — never a signal or a crash — and one
// error line that names what is wrong and where (the file, key, tensor or sample); none may touch the
// earlier result file the run would have written to, nor any other file the case set up.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
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
      {"checkpoint: pytorch_model.bin naming a global outside the allow list",
       [&](P d) {
         // A state dict written by CPython's pickler (the fuzz seed) whose rebuild function is renamed.
         std::string bin = slurp(fs::path(kSrc) / "fuzz/corpus/torch_bin/ordered_proto2.bin");
         const auto at = bin.find("_rebuild_tensor_v2");
         if (at != std::string::npos) bin.replace(at, 18, "_rebuild_tensor_vX");
         fs::remove(d / "qa" / "model.safetensors");
         spit(d / "qa" / "pytorch_model.bin", bin);
         return BadInput::config(d, qa(d));
       },
       {"pytorch_model.bin", "data.pkl byte", "pickle global 'torch._utils._rebuild_tensor_vX' is not allowed"}},
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
      // Files on which the system libhdf5 crashes (tests/data/hostile_h5/README.md).
      {"reference: HDF5 crashes on it (inspect)", [&](P) { return "inspect " + kSrc + "/tests/data/hostile_h5/crash-2.h5"; },
       {"crash-2.h5", "the HDF5 library crashed reading it", "damaged"}},
      {"reference: HDF5 crashes on it (compare)",
       [&](P) { return "compare " + kSrc + "/tests/data/hostile_h5/crash-1.h5 " + (BadInput::base_ / "earlier.h5").string(); },
       {"crash-1.h5", "the HDF5 library crashed reading it"}},
      {"reference: HDF5 crashes on the candidate (compare)",
       [&](P) { return "compare " + (BadInput::base_ / "earlier.h5").string() + " " + kSrc + "/tests/data/hostile_h5/crash-2.h5"; },
       {"crash-2.h5", "the HDF5 library crashed reading it"}},
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


// --- helpers for the rows below: each returns the arguments of one evalrun command -------------------
using P = const fs::path&;
std::string S(P p) { return p.string(); }
fs::path earlier() { return BadInput::base_ / "earlier.h5"; }
// Writes `text` to d/name and returns the path.
std::string W(P d, const std::string& name, const std::string& text) {
  fs::create_directories((d / name).parent_path());
  spit(d / name, text);
  return S(d / name);
}
std::string deep(std::size_t n, char open, char close, const std::string& inner = "") {
  return std::string(n, open) + inner + std::string(n, close);
}
std::string deep_inline(std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n; ++i) s += "{a = ";
  return s + "1" + std::string(n, '}');
}
std::string dotted(std::size_t n) {
  std::string s = "a";
  for (std::size_t i = 0; i < n; ++i) s += ".b";
  return s;
}
std::string qa_cfg(P d, const std::string& extra = "") { return BadInput::config(d, BadInput::qa_config(d) + extra); }
std::string mlm_cfg(P d, const std::string& data) { return BadInput::config(d, BadInput::mlm_config(d, data)); }
std::string gen_cfg(P d, const std::string& data, const std::string& extra = "") {
  return BadInput::config(d, BadInput::gen_config(d, data) + extra);
}
std::string ppl_cfg(P d, const std::string& corpus) {
  return BadInput::config(d, "[run]\nname = \"p\"\n[model]\npath = \"" + S(d / "llama") +
                                 "\"\n[task]\nkind = \"perplexity\"\ndataset = \"" + corpus +
                                 "\"\ncontext_length = 16\n[output]\npath = \"" + S(earlier()) + "\"\n");
}
std::string set(const std::string& key, const std::string& value) { return " --set " + key + "=" + value; }
std::string squad_copy(P d) { return W(d, "squad.json", slurp(kSrc + "/data/demo_squad.json")); }
std::string ref_copy(P d, const std::string& name = "ref.h5") { return W(d, name, slurp(earlier())); }
std::string prompts(P d) { return W(d, "p.jsonl", "{\"id\": \"a\", \"prompt\": \"Once upon\"}\n"); }
std::string mlm_data(P d) { return W(d, "m.jsonl", "{\"id\": \"a\", \"text\": \"x <mask> y\"}\n"); }
std::string compare_args(P d, const std::string& rest) { return "compare " + ref_copy(d) + " " + S(earlier()) + rest; }
std::string jobs(P d, const std::string& body) { return W(d, "jobs.toml", body); }
std::string one_job(P d, const std::string& reference, const std::string& extra = "") {
  return jobs(d, "[[run]]\nname = \"a\"\nconfig = \"" + qa_cfg(d) + "\"\nreference = \"" + reference + "\"\n" + extra);
}
void edit_config_json(P d, const char* model, const std::function<void(json&)>& f) {
  BadInput::edit_json(d / model / "config.json", f);
}
std::string quant_cfg(P d) { return qa_cfg(d, "[quantization]\nmethod = \"int8\"\ndirect = true\n"); }
std::string big(std::size_t n) { return std::string(n, 'x'); }
// A benchmark task-file run (tasks/<task>.toml unless `task_file` is a path) on the tiny Llama.
std::string task_cfg(P d, const std::string& kind, const std::string& task_file, const std::string& extra = "") {
  return BadInput::config(d, "[run]\nname = \"t\"\n[model]\npath = \"" + S(d / "llama") + "\"\n[task]\nkind = \"" + kind +
                                 "\"\ntask_file = \"" + task_file + "\"\n" + extra + "[output]\npath = \"" + S(earlier()) +
                                 "\"\n");
}
std::string shipped(const std::string& task) { return kSrc + "/tasks/" + task + ".toml"; }
// A safetensors file whose header is `header` verbatim.
std::string raw_safetensors(P d, const std::string& header) {
  const std::uint64_t n = header.size();
  std::string b(reinterpret_cast<const char*>(&n), 8);
  return W(d, "qa/model.safetensors", b + header);
}

std::vector<Case> guard_cases() {
  const std::string e = S(earlier());
  std::vector<Case> c = {
      // --- outputs never overwrite inputs: run ---------------------------------------------------------
      {"guard: output.path is the data set", [](P d) { return qa_cfg(d) + set("output.path", S(d) + "/squad.json") + set("task.dataset", squad_copy(d)); }, {"output.path", "task.dataset", "squad.json"}},
      {"guard: output.path is the config file", [](P d) { return qa_cfg(d) + set("output.path", S(d / "cfg.toml")); }, {"output.path", "the config file"}},
      {"guard: output.path is the model's config.json", [](P d) { return qa_cfg(d) + set("output.path", S(d / "qa/config.json")); }, {"output.path", "model.path", "config.json"}},
      {"guard: output.path is the model's weights", [](P d) { return qa_cfg(d) + set("output.path", S(d / "qa/model.safetensors")); }, {"output.path", "model.path", "model.safetensors"}},
      {"guard: output.path is a tokenizer file", [](P d) { return qa_cfg(d) + set("model.tokenizer", S(d / "mlm")) + set("output.path", S(d / "mlm/vocab.json")); }, {"output.path", "model.tokenizer", "vocab.json"}},
      {"guard: output.path is a symlink to the data set", [](P d) { const auto q = squad_copy(d); fs::create_symlink(q, d / "link.h5"); return qa_cfg(d) + set("task.dataset", q) + set("output.path", S(d / "link.h5")); }, {"output.path", "task.dataset"}},
      {"guard: output.path is a hard link of the data set", [](P d) { const auto q = squad_copy(d); fs::create_hard_link(q, d / "hard.h5"); return qa_cfg(d) + set("task.dataset", q) + set("output.path", S(d / "hard.h5")); }, {"output.path", "task.dataset"}},
      {"guard: output.path is the data set spelt with ..", [](P d) { const auto q = squad_copy(d); return qa_cfg(d) + set("task.dataset", q) + set("output.path", S(d / "qa/../squad.json")); }, {"output.path", "task.dataset"}},
      {"guard: output.path is an existing directory", [](P d) { fs::create_directories(d / "out.h5"); return qa_cfg(d) + set("output.path", S(d / "out.h5")); }, {"output.path", "is a directory, expected a file"}},
      {"guard: output.path is the model directory", [](P d) { return qa_cfg(d) + set("output.path", S(d / "qa")); }, {"output.path", "is a directory"}},
      {"guard: predictions_json is output.path", [](P d) { return qa_cfg(d) + set("output.predictions_json", S(earlier())); }, {"output.predictions_json", "output.path"}},
      {"guard: predictions_json is the data set", [](P d) { const auto q = squad_copy(d); return qa_cfg(d) + set("task.dataset", q) + set("output.predictions_json", q); }, {"output.predictions_json", "task.dataset"}},
      {"guard: predictions_json is the config file", [](P d) { return qa_cfg(d) + set("output.predictions_json", S(d / "cfg.toml")); }, {"output.predictions_json", "the config file"}},
      {"guard: predictions_json is a directory", [](P d) { fs::create_directories(d / "preds"); return qa_cfg(d) + set("output.predictions_json", S(d / "preds")); }, {"output.predictions_json", "is a directory"}},
      {"guard: predictions_json is a hard link of the data set", [](P d) { const auto q = squad_copy(d); fs::create_hard_link(q, d / "p.json"); return qa_cfg(d) + set("task.dataset", q) + set("output.predictions_json", S(d / "p.json")); }, {"output.predictions_json", "task.dataset"}},
      {"guard: predictions_json and output.path the same new file", [](P d) { return qa_cfg(d) + set("output.path", S(d / "new.out")) + set("output.predictions_json", S(d / "new.out")); }, {"output.predictions_json", "output.path", "two outputs"}},
      {"guard: data set inside the journal directory", [](P d) { const auto q = W(d, "out.h5.journal/squad.json", slurp(kSrc + "/data/demo_squad.json")); return qa_cfg(d) + set("task.dataset", q) + set("output.path", S(d / "out.h5")); }, {"the journal directory", "task.dataset"}},
      {"guard: output.path is the golden file", [](P d) { const auto g = ref_copy(d, "g.h5"); return gen_cfg(d, prompts(d), "[validation]\ngolden = \"" + g + "\"\n") + set("output.path", g); }, {"output.path", "validation.golden"}},
      {"guard: output.path is the calibration data set", [](P d) { const auto q = squad_copy(d); return quant_cfg(d) + set("quantization.calibration_dataset", q) + set("output.path", q); }, {"output.path", "quantization.calibration_dataset"}},
      {"guard: output.path is a prompt file of a directory data set", [](P d) { W(d, "pd/a.txt", "Once upon"); return gen_cfg(d, S(d / "pd")) + set("output.path", S(d / "pd/a.txt")); }, {"output.path", "task.dataset", "a.txt"}},
      {"guard: output.path is a prompt file of a glob", [](P d) { W(d, "pg/a.txt", "Once"); W(d, "pg/b.txt", "Twice"); return gen_cfg(d, S(d) + "/pg/*.txt") + set("output.path", S(d / "pg/b.txt")); }, {"output.path", "task.dataset", "b.txt"}},
      {"guard: output.path is the prompts file", [](P d) { const auto p = prompts(d); return gen_cfg(d, p) + set("output.path", p); }, {"output.path", "task.dataset"}},
      {"guard: output.path is the mlm data set", [](P d) { const auto m = mlm_data(d); return mlm_cfg(d, m) + set("output.path", m); }, {"output.path", "task.dataset"}},
      {"guard: output.path is the perplexity corpus", [](P d) { const auto t = W(d, "c.txt", "Once upon a time there was a tiny model."); return ppl_cfg(d, t) + set("output.path", t); }, {"output.path", "task.dataset"}},
      {"guard: --dry-run refuses output.path = data set", [](P d) { const auto q = squad_copy(d); return qa_cfg(d) + set("task.dataset", q) + set("output.path", q) + " --dry-run"; }, {"output.path", "task.dataset"}},
      {"guard: output.path in the file is the data set", [](P d) { const auto q = squad_copy(d); return BadInput::config(d, "[run]\nname = \"x\"\n[model]\npath = \"" + S(d / "qa") + "\"\n[task]\nkind = \"qa\"\ndataset = \"" + q + "\"\n[output]\npath = \"" + q + "\"\n"); }, {"cfg.toml", "output.path", "task.dataset"}},
      // --- compare, thresholds, batch, submit, quantize, make-model --------------------------------------
      {"guard: compare --report is the reference", [](P d) { return compare_args(d, " --report " + S(d / "ref.h5")); }, {"--report", "the reference"}},
      {"guard: compare --json is the candidate", [e](P d) { return compare_args(d, " --json " + e); }, {"--json", "the candidate"}},
      {"guard: compare --html is the reference", [](P d) { return compare_args(d, " --html " + S(d / "ref.h5")); }, {"--html", "the reference"}},
      {"guard: compare --report = --json", [](P d) { return compare_args(d, " --report " + S(d / "r.out") + " --json " + S(d / "r.out")); }, {"--json", "--report", "two outputs"}},
      {"guard: compare --report is the thresholds file", [](P d) { const auto t = W(d, "t.toml", "[qa]\n"); return compare_args(d, " --thresholds " + t + " --report " + t); }, {"--report", "--thresholds"}},
      {"guard: compare --report is a directory", [](P d) { fs::create_directories(d / "rep"); return compare_args(d, " --report " + S(d / "rep")); }, {"--report", "is a directory"}},
      {"guard: compare --json is a symlink to the reference", [](P d) { const auto a = compare_args(d, ""); fs::create_symlink(d / "ref.h5", d / "r.json"); return a + " --json " + S(d / "r.json"); }, {"--json", "the reference"}},
      {"guard: compare --report is a hard link of the candidate", [](P d) { const auto c2 = ref_copy(d, "cand.h5"); fs::create_hard_link(c2, d / "r.md"); return "compare " + ref_copy(d) + " " + c2 + " --report " + S(d / "r.md"); }, {"--report", "the candidate"}},
      {"guard: compare reference is a directory", [e](P d) { fs::create_directories(d / "refdir"); return "compare " + S(d / "refdir") + " " + e; }, {"the reference", "is a directory"}},
      {"guard: compare candidate is a directory", [](P d) { fs::create_directories(d / "cdir"); return "compare " + ref_copy(d) + " " + S(d / "cdir"); }, {"the candidate", "is a directory"}},
      {"guard: compare --thresholds is a directory", [](P d) { fs::create_directories(d / "tdir"); return compare_args(d, " --thresholds " + S(d / "tdir")); }, {"--thresholds", "is a directory"}},
      {"guard: thresholds --out is the reference", [e](P d) { const auto r = ref_copy(d); return "thresholds " + r + " " + e + " --out " + r; }, {"--out", "the reference"}},
      {"guard: thresholds --out is a run", [](P d) { const auto r = ref_copy(d); const auto r2 = ref_copy(d, "r2.h5"); return "thresholds " + r + " " + r2 + " --out " + r2; }, {"--out", "the run"}},
      {"guard: thresholds --out is a directory", [e](P d) { fs::create_directories(d / "t"); return "thresholds " + ref_copy(d) + " " + e + " --out " + S(d / "t"); }, {"--out", "is a directory"}},
      {"guard: thresholds --out is a hard link of the reference", [e](P d) { const auto r = ref_copy(d); fs::create_hard_link(r, d / "t.toml"); return "thresholds " + r + " " + e + " --out " + S(d / "t.toml"); }, {"--out", "the reference"}},
      {"guard: thresholds reference is a directory", [e](P d) { fs::create_directories(d / "rd"); return "thresholds " + S(d / "rd") + " " + e + " --out " + S(d / "t.toml"); }, {"the reference", "is a directory"}},
      {"guard: batch --outputs would replace the reference", [](P d) { const auto r = ref_copy(d, "outs/run1.h5"); return "batch " + one_job(d, r) + " --outputs " + S(d / "outs"); }, {"--outputs", "run #1 reference"}},
      {"guard: batch --reports would replace the reference", [](P d) { const auto r = ref_copy(d, "reps/01-a.json"); return "batch " + one_job(d, r) + " --reports " + S(d / "reps"); }, {"--reports", "run #1 reference"}},
      {"guard: batch --outputs would replace the jobs file's log", [](P d) { const auto r = ref_copy(d); const auto j = one_job(d, r); fs::create_directories(d / "o"); fs::rename(j, d / "o/run1.log"); return "batch " + S(d / "o/run1.log") + " --outputs " + S(d / "o"); }, {"--outputs", "the jobs file"}},
      {"guard: batch --outputs would replace a run's config", [](P d) { const auto r = ref_copy(d); fs::create_directories(d / "o"); const auto cfg = S(d / "o/run1.h5"); fs::copy_file(qa_cfg(d), cfg); return "batch " + jobs(d, "[[run]]\nconfig = \"" + cfg + "\"\nreference = \"" + r + "\"\n") + " --outputs " + S(d / "o"); }, {"--outputs", "run #1 config"}},
      {"guard: batch --reports would replace the thresholds", [](P d) { const auto t = W(d, "rp/01-a.md", "[qa]\n"); return "batch " + one_job(d, ref_copy(d), "thresholds = \"" + t + "\"\n") + " --reports " + S(d / "rp"); }, {"--reports", "run #1 thresholds"}},
      {"guard: batch jobs file is a directory", [](P d) { fs::create_directories(d / "jobs.toml"); return "batch " + S(d / "jobs.toml"); }, {"jobs.toml", "is a directory"}},
      {"guard: batch job config is a directory", [](P d) { fs::create_directories(d / "cdir"); return "batch " + jobs(d, "[[run]]\nconfig = \"" + S(d / "cdir") + "\"\nreference = \"" + ref_copy(d) + "\"\n"); }, {"jobs.toml:2", "run.config", "is a directory"}},
      {"guard: batch job reference is a directory", [](P d) { fs::create_directories(d / "rdir"); return "batch " + one_job(d, S(d / "rdir")); }, {"jobs.toml:4", "run.reference", "is a directory"}},
      {"guard: batch job thresholds is a directory", [](P d) { fs::create_directories(d / "tdir"); return "batch " + one_job(d, ref_copy(d), "thresholds = \"" + S(d / "tdir") + "\"\n"); }, {"jobs.toml:5", "run.thresholds", "is a directory"}},
      {"guard: submit --dir would replace the reference", [](P d) { const auto r = ref_copy(d, "sub/results/run1.h5"); return "submit " + one_job(d, r) + " --dry-run --dir " + S(d / "sub"); }, {"--outputs", "run #1 reference"}},
      {"guard: submit --dir would replace the jobs file", [](P d) { const auto j = one_job(d, ref_copy(d)); fs::create_directories(d / "sub"); fs::rename(j, d / "sub/summary.md"); return "submit " + S(d / "sub/summary.md") + " --dry-run --dir " + S(d / "sub"); }, {"--dir", "the jobs file"}},
      {"guard: quantize --out is the model directory", [](P d) { return "quantize " + quant_cfg(d) + " --out " + S(d / "qa"); }, {"--out", "model.path"}},
      {"guard: quantize --out holds the data set", [](P d) { const auto q = W(d, "qout/squad.json", slurp(kSrc + "/data/demo_squad.json")); return "quantize " + quant_cfg(d) + set("task.dataset", q) + " --out " + S(d / "qout"); }, {"--out", "task.dataset"}},
      {"guard: make-model --out is --tokenizer-from", [](P d) { return "make-model --preset tiny --out " + S(d / "qa") + " --tokenizer-from " + S(d / "qa"); }, {"--out", "--tokenizer-from", "qa/config.json"}},
      {"guard: make-model --out is a symlink to --tokenizer-from", [](P d) { fs::create_directory_symlink(d / "mlm", d / "alias"); return "make-model --preset tiny --out " + S(d / "alias") + " --tokenizer-from " + S(d / "mlm"); }, {"--out", "--tokenizer-from"}},
      // --- parsers with limits: TOML --------------------------------------------------------------------
      {"limits: config array nested 5000 deep", [](P d) { return qa_cfg(d, "[run]\nx = " + deep(5000, '[', ']') + "\n"); }, {"cfg.toml:", "nested more than 64"}},
      {"limits: config inline table nested 5000 deep", [](P d) { return qa_cfg(d, "[run]\nx = " + deep_inline(5000) + "\n"); }, {"cfg.toml:", "nested more than 64"}},
      {"limits: config array nested 65 deep", [](P d) { return qa_cfg(d, "[run]\nx = " + deep(65, '[', ']') + "\n"); }, {"cfg.toml:", "nested more than 64"}},
      {"limits: config array nested over lines", [](P d) { std::string a; for (int i = 0; i < 100; ++i) a += "[\n"; return qa_cfg(d, "[run]\nx = " + a + "\n"); }, {"cfg.toml:", "nested more than 64"}},
      {"limits: config dotted key 5000 parts", [](P d) { return qa_cfg(d, dotted(5000) + " = 1\n"); }, {"cfg.toml:", "dotted key"}},
      {"limits: config table header 5000 parts", [](P d) { return qa_cfg(d, "[" + dotted(5000) + "]\nx = 1\n"); }, {"cfg.toml:", "dotted key"}},
      {"limits: --set value nested 5000 deep", [](P d) { return qa_cfg(d) + " --set 'run.x=" + deep(5000, '[', ']') + "'"; }, {"--set run.x", "nested more than 64"}},
      {"limits: --set value inline tables 5000 deep", [](P d) { return qa_cfg(d) + " --set 'run.x=" + deep_inline(5000) + "'"; }, {"--set run.x", "nested more than 64"}},
      {"limits: thresholds file nested 5000 deep", [](P d) { return compare_args(d, " --thresholds " + W(d, "t.toml", "[qa]\nx = " + deep_inline(5000) + "\n")); }, {"t.toml:2", "nested more than 64"}},
      {"limits: thresholds file dotted key 5000 parts", [](P d) { return compare_args(d, " --thresholds " + W(d, "t.toml", "[qa]\n" + dotted(5000) + " = 1\n")); }, {"t.toml:2", "dotted key"}},
      {"limits: jobs file nested 5000 deep", [](P d) { return "batch " + jobs(d, "[batch]\nname = " + deep(5000, '[', ']') + "\n"); }, {"jobs.toml:2", "nested more than 64"}},
      {"limits: jobs file inline tables 5000 deep", [](P d) { return "batch " + jobs(d, "x = " + deep_inline(5000) + "\n"); }, {"jobs.toml:1", "nested more than 64"}},
      {"limits: config file over 16 MiB", [](P d) { return qa_cfg(d, "# " + big(17 << 20) + "\n"); }, {"cfg.toml", "at most 16777216 bytes"}},
      {"limits: 10 MB dtype value is quoted shortened", [](P d) { return BadInput::config(d, BadInput::qa_config(d) + "[parallel]\n") + set("model.dtype", big(100000)); }, {"model.dtype", "(100000 bytes)"}},
      {"limits: 10 MB enum value is quoted shortened", [](P d) { return BadInput::config(d, BadInput::qa_config(d) + "[parallel]\n") + set("output.logits", big(100000)); }, {"output.logits", "(100000 bytes)"}},
      {"limits: 10 MB run.name is quoted shortened", [](P d) { return BadInput::config(d, "[run]\nname = \"" + big(10000000) + "/\"\n"); }, {"run.name", "(10000001 bytes)"}},
      // qa_config ends in [output], so the key lands there.
      {"limits: 10 MB unknown key is quoted shortened", [](P d) { return qa_cfg(d, big(10000000) + " = 1\n"); }, {"cfg.toml:", "unknown key 'output.xxx", "(10000007 bytes)"}},
      {"limits: 10 MB unknown section is shortened", [](P d) { return qa_cfg(d, "[" + big(10000000) + "]\n"); }, {"cfg.toml:", "unknown section", "bytes)"}},
      {"limits: 100 kB --set text is shortened", [](P d) { return qa_cfg(d) + " --set " + big(100000); }, {"--set 'xxx", "(100000 bytes)"}},
      {"limits: 10 MB output path placeholder is shortened", [](P d) { return qa_cfg(d) + set("output.path", big(100000) + "%q"); }, {"output.path", "(100002 bytes)", "%q"}},
      // --- parsers with limits: JSON --------------------------------------------------------------------
      {"limits: config.json nested 100000 deep", [](P d) { spit(d / "qa/config.json", "{\"a\": " + deep(100000, '[', ']') + "}"); return qa_cfg(d); }, {"config.json:1", "nested more than 64"}},
      {"limits: config.json objects nested deep", [](P d) { std::string s; for (int i = 0; i < 1000; ++i) s += "{\"a\":\n"; spit(d / "qa/config.json", s); return qa_cfg(d); }, {"config.json:65", "nested more than 64"}},
      {"limits: vocab.json nested deep", [](P d) { spit(d / "qa/vocab.json", "{\"a\": " + deep(100000, '[', ']') + "}"); return qa_cfg(d); }, {"vocab.json:1", "nested more than 64"}},
      {"limits: tokenizer.json nested deep", [](P d) { spit(d / "qa/tokenizer.json", deep(100000, '[', ']')); return qa_cfg(d); }, {"tokenizer.json:1", "nested more than 64"}},
      {"limits: tokenizer_config.json nested deep", [](P d) { spit(d / "mlm/tokenizer_config.json", "{\"x\": " + deep(100000, '[', ']') + "}"); return mlm_cfg(d, kSrc + "/data/demo_mlm.jsonl"); }, {"tokenizer_config.json:1", "nested more than 64"}},
      {"limits: safetensors header nested deep", [](P d) { raw_safetensors(d, "{\"a\": " + deep(100000, '[', ']') + "}"); return qa_cfg(d); }, {"model.safetensors", "nested more than 64"}},
      {"limits: safetensors index nested deep", [](P d) { spit(d / "qa/model.safetensors.index.json", deep(100000, '{', '}')); return qa_cfg(d); }, {"model.safetensors.index.json:1", "nested more than 64"}},
      {"limits: SQuAD file nested deep", [](P d) { return qa_cfg(d) + set("task.dataset", W(d, "s.json", "{\"data\": " + deep(100000, '[', ']') + "}")); }, {"s.json:1", "nested more than 64"}},
      {"limits: SQuAD jsonl line nested deep", [](P d) { return qa_cfg(d) + set("task.dataset", W(d, "s.jsonl", "\n" + deep(100000, '[', ']') + "\n")); }, {"s.jsonl:2", "nested more than 64"}},
      {"limits: mlm jsonl line nested deep", [](P d) { return mlm_cfg(d, W(d, "m.jsonl", "{\"id\": \"a\", \"text\": \"x <mask> y\"}\n" + deep(100000, '[', ']') + "\n")); }, {"m.jsonl:2", "nested more than 64"}},
      {"limits: prompts jsonl line nested deep", [](P d) { return gen_cfg(d, W(d, "p.jsonl", "{\"id\": \"a\", \"prompt\": \"x\"}\n\n" + deep(100000, '{', '}') + "\n")); }, {"p.jsonl:3", "nested more than 64"}},
      {"limits: brackets inside JSON strings do not count", [](P d) { return mlm_cfg(d, W(d, "m.jsonl", "{\"id\": \"a\", \"text\": \"" + deep(100, '[', ']') + " no mask\"}\n")); }, {"m.jsonl", "no <mask> token"}},
      {"limits: a 10 MB broken JSON string is shortened", [](P d) { spit(d / "qa/config.json", "{\"a\": \"" + big(10000000) + "\\q\"}"); return qa_cfg(d); }, {"config.json", "bytes)"}},
      {"limits: a 10 MB broken jsonl line is shortened", [](P d) { return mlm_cfg(d, W(d, "m.jsonl", "{\"id\": \"" + big(10000000) + "\\q\"}\n")); }, {"m.jsonl:1", "bytes)"}},
      // --- empty data sets, refused alike ----------------------------------------------------------------
      {"empty: SQuAD without questions", [](P d) { return qa_cfg(d) + set("task.dataset", W(d, "s.json", "{\"data\": []}")); }, {"s.json", "no samples"}},
      {"empty: SQuAD paragraphs without qas", [](P d) { return qa_cfg(d) + set("task.dataset", W(d, "s.json", "{\"data\": [{\"title\": \"t\", \"paragraphs\": [{\"context\": \"A b.\", \"qas\": []}]}]}")); }, {"s.json", "no samples"}},
      {"empty: SQuAD jsonl empty file", [](P d) { return qa_cfg(d) + set("task.dataset", W(d, "s.jsonl", "")); }, {"s.jsonl", "no samples"}},
      {"empty: SQuAD jsonl blank lines", [](P d) { return qa_cfg(d) + set("task.dataset", W(d, "s.jsonl", "\n  \n\n")); }, {"s.jsonl", "no samples"}},
      {"empty: mlm jsonl empty file", [](P d) { return mlm_cfg(d, W(d, "m.jsonl", "")); }, {"m.jsonl", "no samples"}},
      {"empty: mlm text file blank", [](P d) { return mlm_cfg(d, W(d, "m.txt", "\n\n")); }, {"m.txt", "no samples"}},
      {"empty: prompts jsonl empty", [](P d) { return gen_cfg(d, W(d, "p.jsonl", "\n")); }, {"p.jsonl", "no prompts"}},
      {"empty: prompt directory without txt", [](P d) { W(d, "pd/a.md", "x"); return gen_cfg(d, S(d / "pd")); }, {"pd", "no *.txt"}},
      {"empty: prompt glob matching nothing", [](P d) { return gen_cfg(d, S(d) + "/none-*.txt"); }, {"none-*.txt", "no prompt files"}},
      {"empty: perplexity corpus blank", [](P d) { return ppl_cfg(d, W(d, "c.txt", "")); }, {"c.txt", "empty"}},
      // --- blamed on the right file ------------------------------------------------------------------------
      // Every place a tokenizer names its mask token, removed: the error names the tokenizer's vocabulary.
      {"blame: no mask token names the tokenizer's vocab",
       [](P d) {
         BadInput::edit_json(d / "mlm/vocab.json", [](json& j) { j.erase("<mask>"); });
         BadInput::edit_json(d / "mlm/tokenizer_config.json", [](json& j) {
           j.erase("mask_token");
           for (auto it = j["added_tokens_decoder"].begin(); it != j["added_tokens_decoder"].end();) {
             it = it.value()["content"] == "<mask>" ? j["added_tokens_decoder"].erase(it) : std::next(it);
           }
         });
         BadInput::edit_json(d / "mlm/special_tokens_map.json", [](json& j) { j.erase("mask_token"); });
         return mlm_cfg(d, kSrc + "/data/demo_mlm.jsonl");
       },
       {"mlm/vocab.json", "no mask token"}},
      {"blame: QA data set is a directory", [](P d) { fs::create_directories(d / "sq"); return qa_cfg(d) + set("task.dataset", S(d / "sq")); }, {"task.dataset", "is a directory, expected a file"}},
      {"blame: mlm data set is a directory", [](P d) { fs::create_directories(d / "md"); return mlm_cfg(d, S(d / "md")); }, {"task.dataset", "is a directory, expected a file"}},
      {"blame: perplexity corpus is a directory", [](P d) { fs::create_directories(d / "cd"); return ppl_cfg(d, S(d / "cd")); }, {"task.dataset", "is a directory, expected a file"}},
      {"blame: golden is a directory", [](P d) { fs::create_directories(d / "gd"); return gen_cfg(d, prompts(d), "[validation]\ngolden = \"" + S(d / "gd") + "\"\n"); }, {"validation.golden", "is a directory, expected a file"}},
      {"blame: calibration data set is a directory", [](P d) { fs::create_directories(d / "cal"); return quant_cfg(d) + set("quantization.calibration_dataset", S(d / "cal")); }, {"quantization.calibration_dataset", "is a directory"}},
      {"blame: config file is a directory", [](P d) { fs::create_directories(d / "c.toml"); return S(d / "c.toml"); }, {"c.toml", "is a directory, expected a file"}},
      {"blame: vocab.json is a directory", [](P d) { fs::remove(d / "qa/vocab.json"); fs::create_directories(d / "qa/vocab.json"); return qa_cfg(d); }, {"vocab.json", "is a directory, expected a file"}},
      {"blame: tokenizer_config.json is a directory", [](P d) { fs::remove(d / "mlm/tokenizer_config.json"); fs::create_directories(d / "mlm/tokenizer_config.json"); return mlm_cfg(d, kSrc + "/data/demo_mlm.jsonl"); }, {"tokenizer_config.json", "is a directory"}},
      {"blame: config.json is a directory", [](P d) { fs::remove(d / "qa/config.json"); fs::create_directories(d / "qa/config.json"); return qa_cfg(d); }, {"config.json", "is a directory"}},
      {"blame: golden is not a result file", [](P d) { return gen_cfg(d, prompts(d), "[validation]\ngolden = \"" + W(d, "g.h5", "not hdf5") + "\"\n"); }, {"g.h5"}},
      {"blame: golden is a QA result", [e](P d) { return gen_cfg(d, prompts(d), "[validation]\ngolden = \"" + e + "\"\n") + set("output.path", S(d / "o.h5")); }, {"earlier.h5", "generate"}},
      // --- config.json values a family does not implement ----------------------------------------------------
      {"model: RoBERTa hidden_act swish", [](P d) { edit_config_json(d, "qa", [](json& j) { j["hidden_act"] = "swish"; }); return qa_cfg(d); }, {"config.json: hidden_act", "swish"}},
      {"model: RoBERTa relative positions", [](P d) { edit_config_json(d, "qa", [](json& j) { j["position_embedding_type"] = "relative_key"; }); return qa_cfg(d); }, {"config.json: position_embedding_type", "relative_key"}},
      {"model: RoBERTa as a decoder", [](P d) { edit_config_json(d, "qa", [](json& j) { j["is_decoder"] = true; }); return qa_cfg(d); }, {"config.json: is_decoder"}},
      {"model: RoBERTa layer_norm_eps 0", [](P d) { edit_config_json(d, "qa", [](json& j) { j["layer_norm_eps"] = 0; }); return qa_cfg(d); }, {"config.json: layer_norm_eps"}},
      {"model: RoBERTa model_type bert", [](P d) { edit_config_json(d, "qa", [](json& j) { j["model_type"] = "bert"; }); return qa_cfg(d); }, {"config.json: model_type", "bert"}},
      {"model: Llama hidden_act gelu", [](P d) { edit_config_json(d, "llama", [](json& j) { j["hidden_act"] = "gelu"; }); return gen_cfg(d, prompts(d)); }, {"config.json: hidden_act", "gelu"}},
      {"model: Llama rope_scaling linear factor 0.5", [](P d) { edit_config_json(d, "llama", [](json& j) { j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 0.5}}; }); return gen_cfg(d, prompts(d)); }, {"config.json: rope_scaling.factor", "0.5"}},
      {"model: Llama rope_scaling yarn", [](P d) { edit_config_json(d, "llama", [](json& j) { j["rope_scaling"] = {{"type", "yarn"}, {"factor", 2.0}}; }); return gen_cfg(d, prompts(d)); }, {"config.json: rope_scaling.rope_type", "yarn"}},
      {"model: Llama attention_bias", [](P d) { edit_config_json(d, "llama", [](json& j) { j["attention_bias"] = true; }); return gen_cfg(d, prompts(d)); }, {"config.json: attention_bias"}},
      {"model: Llama mlp_bias", [](P d) { edit_config_json(d, "llama", [](json& j) { j["mlp_bias"] = true; }); return gen_cfg(d, prompts(d)); }, {"config.json: mlp_bias"}},
      {"model: Llama model_type mistral", [](P d) { edit_config_json(d, "llama", [](json& j) { j["model_type"] = "mistral"; }); return gen_cfg(d, prompts(d)); }, {"config.json: model_type", "mistral"}},
      {"model: Llama kv heads not dividing", [](P d) { edit_config_json(d, "llama", [](json& j) { j["num_key_value_heads"] = 3; }); return gen_cfg(d, prompts(d)); }, {"config.json: num_key_value_heads"}},
      {"model: Llama rope_theta 0", [](P d) { edit_config_json(d, "llama", [](json& j) { j["rope_theta"] = 0; }); return gen_cfg(d, prompts(d)); }, {"config.json: rope_theta"}},
      // --- benchmark task files (multiple_choice, generate_until, loglikelihood) --------------------------
      {"task file: loglikelihood few-shot without a task file",
       [](P d) {
         return BadInput::config(d, "[run]\nname = \"l\"\n[model]\npath = \"" + S(d / "llama") + "\"\n[task]\nkind = \"loglikelihood\"\n" +
                                        "dataset = \"" + W(d, "r.jsonl", "{\"context\": \"a\", \"continuation\": \" b\"}\n") +
                                        "\"\nnum_fewshot = 1\n[output]\npath = \"" + S(earlier()) + "\"\n");
       },
       {"cfg.toml:", "task.num_fewshot needs task.task_file"}},
      {"task file: another output type", [](P d) { return task_cfg(d, "loglikelihood", shipped("arc_easy")); }, {"arc_easy.toml: output_type", "loglikelihood"}},
      {"task file: missing", [](P d) { return task_cfg(d, "multiple_choice", S(d / "nope.toml")); }, {"nope.toml"}},
      {"task file: unknown key",
       [](P d) { return task_cfg(d, "loglikelihood", W(d, "t.toml", "name = \"t\"\noutput_type = \"loglikelihood\"\ndoc_to_text = \"{{text}}\"\ndoc_to_target = \"x\"\nbogus = 1\n")); },
       {"t.toml", "bogus"}},
      {"task file: a document lacks a templated field",
       [](P d) { return task_cfg(d, "loglikelihood", shipped("lambada_openai"), "dataset = \"" + W(d, "l.jsonl", "{\"txt\": \"a b\"}\n") + "\"\n"); },
       {"l.jsonl:1", "text"}},
      {"task file: data set empty",
       [](P d) { return task_cfg(d, "generate_until", shipped("gsm8k"), "dataset = \"" + W(d, "g.jsonl", "\n") + "\"\n"); },
       {"g.jsonl"}},
      {"task file: lm_eval_json is the result file",
       [](P d) { return task_cfg(d, "loglikelihood", shipped("lambada_openai")) + set("output.lm_eval_json", S(earlier())); },
       {"output.lm_eval_json", "output.path"}},
      {"task file: samples_jsonl is the data set",
       [](P d) {
         const std::string data = W(d, "l.jsonl", slurp(kSrc + "/tasks/samples/lambada_openai.jsonl"));
         return task_cfg(d, "loglikelihood", shipped("lambada_openai"), "dataset = \"" + data + "\"\n") + set("output.samples_jsonl", data);
       },
       {"output.samples_jsonl", "task.dataset"}},
      // --- more config, data, reference and jobs rows -------------------------------------------------------
      {"config: batch_size 0", [](P d) { return qa_cfg(d) + set("task.batch_size", "0"); }, {"task.batch_size"}},
      {"config: unknown task kind", [](P d) { return qa_cfg(d) + set("task.kind", "summarize"); }, {"task.kind", "summarize"}},
      {"config: unknown device", [](P d) { return qa_cfg(d) + set("model.device", "tpu"); }, {"model.device", "tpu"}},
      {"config: run.name with a slash", [](P d) { return qa_cfg(d) + set("run.name", "a/b"); }, {"run.name", "a/b"}},
      {"config: unknown section", [](P d) { return qa_cfg(d, "[modle]\npath = \"x\"\n"); }, {"cfg.toml:", "modle"}},
      {"config: a section given as a value", [](P d) { return BadInput::config(d, "model = 1\n" + BadInput::qa_config(d)); }, {"cfg.toml:"}},
      {"config: duplicate key", [](P d) { return qa_cfg(d, "[run]\nseed = 1\nseed = 2\n"); }, {"cfg.toml:"}},
      {"config: invalid UTF-8", [](P d) { return qa_cfg(d, "# \xff\xfe\n"); }, {"cfg.toml:", "UTF-8"}},
      {"config: negative threads", [](P d) { return qa_cfg(d) + set("run.threads", "-1"); }, {"run.threads"}},
      {"config: output.top_k without topk logits", [](P d) { return qa_cfg(d) + set("output.top_k", "3"); }, {"output.top_k"}},
      {"config: an int8 lm_head for an encoder", [](P d) { return qa_cfg(d) + set("quantization.lm_head", "int8"); },
       {"quantization.lm_head applies only to task.kind = "}},
      {"config: logprobs16 logits for qa", [](P d) { return qa_cfg(d) + set("output.logits", "logprobs16"); },
       {"output.logits = \"logprobs16\" is not stored by task.kind = \"qa\""}},
      {"config: logits for a loglikelihood task file", [](P d) { return task_cfg(d, "loglikelihood", shipped("lambada_openai")) + set("output.logits", "topk"); },
       {"output.logits = \"topk\" is not stored by task.kind = \"loglikelihood\" (it stores \"none\")"}},
      {"data: SQuAD answers not a list", [](P d) { return qa_cfg(d) + set("task.dataset", W(d, "s.json", "{\"data\": [{\"title\": \"t\", \"paragraphs\": [{\"context\": \"A b.\", \"qas\": [{\"id\": \"q1\", \"question\": \"A?\", \"answers\": 3}]}]}]}")); }, {"s.json", "q1"}},
      {"data: SQuAD jsonl line malformed", [](P d) { return qa_cfg(d) + set("task.dataset", W(d, "s.jsonl", "{\"id\": \n")); }, {"s.jsonl:1"}},
      {"data: mlm targets do not match masks", [](P d) { return mlm_cfg(d, W(d, "m.jsonl", "{\"id\": \"a\", \"text\": \"x <mask> y\", \"targets\": [\"p\", \"q\"]}\n")); }, {"m.jsonl", "a"}},
      {"data: prompt not a string", [](P d) { return gen_cfg(d, W(d, "p.jsonl", "{\"id\": \"a\", \"prompt\": 5}\n")); }, {"p.jsonl:1", "prompt"}},
      {"data: prompts jsonl not an object", [](P d) { return gen_cfg(d, W(d, "p.jsonl", "[1, 2]\n")); }, {"p.jsonl:1", "object"}},
      {"checkpoint: header length zero", [](P d) { raw_safetensors(d, ""); return qa_cfg(d); }, {"model.safetensors"}},
      {"checkpoint: duplicate tensor in the header", [](P d) { raw_safetensors(d, "{\"a\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [0, 0]}, \"a\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [0, 0]}}"); return qa_cfg(d); }, {"model.safetensors", "defined twice"}},
      {"checkpoint: index not JSON", [](P d) { spit(d / "qa/model.safetensors.index.json", "{"); return qa_cfg(d); }, {"model.safetensors.index.json"}},
      {"reference: candidate missing", [](P d) { return "compare " + ref_copy(d) + " " + S(d / "gone.h5"); }, {"gone.h5"}},
      {"reference: thresholds syntax error", [](P d) { return compare_args(d, " --thresholds " + W(d, "t.toml", "[qa\n")); }, {"t.toml:1"}},
      {"reference: thresholds unknown section", [](P d) { return compare_args(d, " --thresholds " + W(d, "t.toml", "[translate]\n")); }, {"t.toml", "translate"}},
      {"reference: thresholds value a string", [](P d) { return compare_args(d, " --thresholds " + W(d, "t.toml", "[qa]\nmax_logit_diff = \"big\"\n")); }, {"t.toml:2", "max_logit_diff"}},
      {"reference: thresholds run missing", [](P d) { return "thresholds " + ref_copy(d) + " " + S(d / "gone.h5") + " --out " + S(d / "t.toml"); }, {"gone.h5"}},
      {"jobs: unknown key", [](P d) { return "batch " + jobs(d, "[[run]]\nconfg = \"x\"\n"); }, {"jobs.toml:2", "confg"}},
      {"jobs: run without config", [](P d) { return "batch " + jobs(d, "[[run]]\nreference = \"" + ref_copy(d) + "\"\n"); }, {"jobs.toml", "run.config"}},
      {"jobs: ranks 0", [](P d) { return "batch " + jobs(d, "[batch]\nranks = 0\n"); }, {"jobs.toml:2", "batch.ranks"}},
      {"jobs: set not an array", [](P d) { return "batch " + one_job(d, ref_copy(d), "set = \"task.batch_size=2\"\n"); }, {"jobs.toml:5", "run.set"}},
      {"jobs: config missing", [](P d) { return "batch " + jobs(d, "[[run]]\nconfig = \"" + S(d / "nope.toml") + "\"\nreference = \"" + ref_copy(d) + "\"\n"); }, {"jobs.toml:2", "nope.toml"}},
      {"jobs: --only past the end", [](P d) { return "batch " + one_job(d, ref_copy(d)) + " --only 5"; }, {"--only", "5"}},
      {"jobs: no runs", [](P d) { return "batch " + jobs(d, "[batch]\nname = \"x\"\n"); }, {"jobs.toml", "no [[run]]"}},
      {"make-model: --group-size without --gptq", [](P d) { return "make-model --preset tiny --out " + S(d / "m2") + " --group-size 64"; }, {"--group-size", "--gptq"}},
      {"quantize: without direct int8", [](P d) { return "quantize " + qa_cfg(d) + " --out " + S(d / "q8"); }, {"quantization", "direct"}},
  };
  return c;
}

// Every regular file under `dir` with its content (symlinks not followed).
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && !e.is_symlink()) files[e.path().string()] = slurp(e.path());
  }
  return files;
}

// The table runs in shards, each a test of its own that ctest can run beside the others: under the
// sanitizers every case's evalrun process takes about ten seconds, and the whole table in one test
// ran past an hour.
constexpr int kShards = 4;
class BadInputTable : public BadInput, public ::testing::WithParamInterface<int> {};

TEST_P(BadInputTable, EveryMalformedInputIsOneClearErrorWithExitTwo) {
  const std::string earlier = slurp(base_ / "earlier.h5");
  auto all = cases();
  for (auto& c : guard_cases()) all.push_back(std::move(c));
  ASSERT_GE(all.size(), 150u);
  const auto shard = static_cast<std::size_t>(GetParam());
  for (std::size_t n = all.size() * shard / kShards; n < all.size() * (shard + 1) / kShards; ++n) {
    const Case& c = all[n];
    SCOPED_TRACE(c.name);
    const fs::path dir = base_ / ("case" + std::to_string(n));
    fs::create_directories(dir);
    for (const char* m : {"qa", "mlm", "llama"}) fs::copy(base_ / m, dir / m, fs::copy_options::recursive);
    const std::string args = c.setup(dir);
    const auto before = snapshot(dir);  // every earlier file of the case: data sets, references, reports
    // 120 s, times the sanitizer build's factor: there every allocation records a full stack, and a
    // case with a 10 MB value takes about half a minute.
    const auto r = run_process("timeout " + std::to_string(120 * EVALRUN_TEST_TIMEOUT_FACTOR) + " " + kBin + " " + args);
    EXPECT_EQ(r.exit_code, 2) << r.output;  // run_process reports a signal as -1
    std::size_t error_lines = 0;
    std::istringstream lines(r.output);
    for (std::string l; std::getline(lines, l);) {
      if (l.find("evalrun: error") == std::string::npos) continue;
      ++error_lines;
      EXPECT_LT(l.size(), 1500u) << "an error line echoes a long value whole: " << l.substr(0, 300);
    }
    EXPECT_EQ(error_lines, 1u) << r.output;
    for (const auto& e : c.expect) EXPECT_NE(r.output.find(e), std::string::npos) << "expected '" << e << "' in:\n" << r.output;
    EXPECT_TRUE(slurp(base_ / "earlier.h5") == earlier) << "the earlier result file changed";
    for (const auto& [path, text] : before) {
      EXPECT_TRUE(fs::exists(path) && slurp(path) == text) << path << " changed";
    }
    fs::remove_all(dir);
  }
}
INSTANTIATE_TEST_SUITE_P(Shard, BadInputTable, ::testing::Range(0, kShards));

}  // namespace
