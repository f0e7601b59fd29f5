// config: TOML -> RunSpec, every validation rule and the message each one gives.
#include "config/config.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/errors.hpp"
#include "test_util.hpp"

namespace evalrun {
namespace {

#define EXPECT_HAS(text, part)                               \
  EXPECT_NE(std::string(text).find(part), std::string::npos) \
      << "message: " << (text) << "\n   lacks: " << (part)

// Lines 1..7; a key appended to it lands in [task] on line 8.
const std::string kQa =
    "[run]\n"
    "name = \"t\"\n"
    "[model]\n"
    "path = \"models/m\"\n"
    "[task]\n"
    "kind = \"qa\"\n"
    "dataset = \"dev.json\"\n";

const std::string kMlm =
    "[run]\n"
    "name = \"m\"\n"
    "[model]\n"
    "path = \"models/m\"\n"
    "[task]\n"
    "kind = \"mlm\"\n"
    "dataset = \"sentences.jsonl\"\n";

// The message of the InputError that parsing `text` (as "cfg.toml") throws; a test failure if none.
std::string error_of(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    parse_run_spec(text, "cfg.toml", overrides);
  } catch (const InputError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an InputError: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no error for:\n" << text;
  return "";
}

void expect_same(const RunSpec& a, const RunSpec& b) {
  EXPECT_EQ(a.run.name, b.run.name);
  EXPECT_EQ(a.run.threads, b.run.threads);
  EXPECT_EQ(a.model.path, b.model.path);
  EXPECT_EQ(a.model.tokenizer, b.model.tokenizer);
  EXPECT_EQ(a.model.dtype, b.model.dtype);
  EXPECT_EQ(a.model.device, b.model.device);
  EXPECT_EQ(a.task.kind, b.task.kind);
  EXPECT_EQ(a.task.dataset, b.task.dataset);
  EXPECT_EQ(a.task.batch_size, b.task.batch_size);
  EXPECT_EQ(a.task.max_samples, b.task.max_samples);
  EXPECT_EQ(a.task.max_seq_length, b.task.max_seq_length);
  EXPECT_EQ(a.task.doc_stride, b.task.doc_stride);
  EXPECT_EQ(a.task.n_best_size, b.task.n_best_size);
  EXPECT_EQ(a.task.max_answer_length, b.task.max_answer_length);
  EXPECT_EQ(a.task.version_2_with_negative, b.task.version_2_with_negative);
  EXPECT_EQ(a.task.null_score_diff_threshold, b.task.null_score_diff_threshold);
  EXPECT_EQ(a.task.pad_to_max_length, b.task.pad_to_max_length);
  EXPECT_EQ(a.task.top_k, b.task.top_k);
  EXPECT_EQ(a.parallel.tensor_parallel, b.parallel.tensor_parallel);
  EXPECT_EQ(a.output.path, b.output.path);
  EXPECT_EQ(a.output.logits, b.output.logits);
  EXPECT_EQ(a.output.top_k, b.output.top_k);
  EXPECT_EQ(a.output.predictions_json, b.output.predictions_json);
  EXPECT_EQ(a.validation.golden, b.validation.golden);
}

const std::string kFullQa = R"(# every key a QA run accepts
[run]
name = "roberta.squad-v2_fp32"
threads = 3

[model]
path = "models/roberta-base"
tokenizer = "models/tok"
dtype = "bf16"
device = "cuda"

[task]
kind = "qa"
dataset = "data/dev-v2.0.json"
batch_size = 16
max_samples = 100
max_seq_length = 256
doc_stride = 64
n_best_size = 10
max_answer_length = 25
version_2_with_negative = true
null_score_diff_threshold = -1.25
pad_to_max_length = true

[parallel]
tensor_parallel = 2

[output]
path = "out/x.h5"
logits = "topk"
top_k = 7
predictions_json = "out/\"pred\" \\ ü.json"
)";

TEST(ConfigLoad, FullQaConfigSetsEveryField) {
  RunSpec s = parse_run_spec(kFullQa, "full.toml");
  EXPECT_EQ(s.config_path, "full.toml");
  EXPECT_EQ(s.run.name, "roberta.squad-v2_fp32");
  EXPECT_EQ(s.run.threads, 3);
  EXPECT_EQ(s.model.path, "models/roberta-base");
  EXPECT_EQ(s.model.tokenizer, "models/tok");
  EXPECT_EQ(s.model.dtype, DType::bf16);
  EXPECT_EQ(s.model.device, Device::cuda);
  EXPECT_EQ(s.task.kind, TaskKind::qa);
  EXPECT_EQ(s.task.dataset, "data/dev-v2.0.json");
  EXPECT_EQ(s.task.batch_size, 16);
  EXPECT_EQ(s.task.max_samples, 100);
  EXPECT_EQ(s.task.max_seq_length, 256);
  EXPECT_EQ(s.task.doc_stride, 64);
  EXPECT_EQ(s.task.n_best_size, 10);
  EXPECT_EQ(s.task.max_answer_length, 25);
  EXPECT_TRUE(s.task.version_2_with_negative);
  EXPECT_DOUBLE_EQ(s.task.null_score_diff_threshold, -1.25);
  EXPECT_TRUE(s.task.pad_to_max_length);
  EXPECT_EQ(s.parallel.tensor_parallel, 2);
  EXPECT_EQ(s.output.path, "out/x.h5");
  EXPECT_EQ(s.output.logits, LogitsMode::topk);
  EXPECT_EQ(s.output.top_k, 7);
  EXPECT_EQ(s.output.predictions_json, "out/\"pred\" \\ ü.json");
}

TEST(ConfigLoad, FullMlmConfig) {
  RunSpec s = parse_run_spec(kMlm + "top_k = 3\nbatch_size = 2\n[output]\nlogits = \"none\"\n", "cfg.toml");
  EXPECT_EQ(s.task.kind, TaskKind::mlm);
  EXPECT_EQ(s.task.top_k, 3);
  EXPECT_EQ(s.task.batch_size, 2);
  EXPECT_EQ(s.output.logits, LogitsMode::none);
}

TEST(ConfigLoad, DefaultsForUnsetKeys) {
  RunSpec s = parse_run_spec(kQa, "cfg.toml");
  const RunSpec d;  // the struct's defaults are the documented ones
  EXPECT_EQ(s.run.threads, 0);
  EXPECT_EQ(s.model.dtype, DType::fp32);
  EXPECT_EQ(s.model.device, Device::cpu);
  EXPECT_EQ(s.task.batch_size, 8);
  EXPECT_EQ(s.task.max_samples, 0);
  EXPECT_EQ(s.task.max_seq_length, 384);
  EXPECT_EQ(s.task.doc_stride, 128);
  EXPECT_EQ(s.task.n_best_size, 20);
  EXPECT_EQ(s.task.max_answer_length, 30);
  EXPECT_FALSE(s.task.version_2_with_negative);
  EXPECT_EQ(s.task.null_score_diff_threshold, d.task.null_score_diff_threshold);
  EXPECT_FALSE(s.task.pad_to_max_length);
  EXPECT_EQ(s.task.top_k, 5);
  EXPECT_EQ(s.parallel.tensor_parallel, 1);
  EXPECT_EQ(s.output.logits, LogitsMode::full);
  EXPECT_EQ(s.output.top_k, 20);
  EXPECT_EQ(s.output.predictions_json, "");
  // Filled-in defaults that depend on other keys.
  EXPECT_EQ(s.output.path, "results/t.h5");
  EXPECT_EQ(s.model.tokenizer, "models/m");
}

TEST(ConfigLoad, EmptyOutputPathMeansResultsName) {
  RunSpec s = parse_run_spec(kQa + "[output]\npath = \"\"\n", "cfg.toml");
  EXPECT_EQ(s.output.path, "results/t.h5");
}

TEST(ConfigLoad, OutputPathSlurmPlaceholders) {
  ::setenv("SLURM_JOB_ID", "4242", 1);
  ::setenv("SLURM_ARRAY_JOB_ID", "4240", 1);
  ::setenv("SLURM_ARRAY_TASK_ID", "3", 1);
  RunSpec s = parse_run_spec(kQa + "[output]\npath = \"r/%j/%A_%a/100%%.h5\"\n", "cfg.toml");
  EXPECT_EQ(s.output.path, "r/4242/4240_3/100%.h5");
  ::unsetenv("SLURM_JOB_ID");
  ::unsetenv("SLURM_ARRAY_JOB_ID");
  ::unsetenv("SLURM_ARRAY_TASK_ID");
  s = parse_run_spec(kQa + "[output]\npath = \"r/%j.h5\"\n", "cfg.toml");
  EXPECT_EQ(s.output.path, "r/local.h5");
  const std::string e = error_of(kQa + "[output]\npath = \"r/%x.h5\"\n");
  EXPECT_NE(e.find("cfg.toml: output.path"), std::string::npos) << e;
  EXPECT_NE(e.find("'%x'"), std::string::npos) << e;
}

TEST(ConfigLoad, PathsStoredAsGiven) {
  RunSpec s = parse_run_spec(
      "[run]\nname=\"x\"\n[model]\npath=\"../m/./r\"\n[task]\nkind=\"qa\"\ndataset=\"./d.json\"\n", "c.toml");
  EXPECT_EQ(s.model.path, "../m/./r");
  EXPECT_EQ(s.task.dataset, "./d.json");
}

TEST(ConfigLoad, IntegerAcceptedForFloat) {
  RunSpec s =
      parse_run_spec(kQa + "version_2_with_negative = true\nnull_score_diff_threshold = 2\n", "cfg.toml");
  EXPECT_DOUBLE_EQ(s.task.null_score_diff_threshold, 2.0);
}

TEST(ConfigLoad, DottedAndInlineTablesAreSections) {
  RunSpec s = parse_run_spec(
      "run.name = \"x\"\nmodel = { path = \"p\" }\ntask.kind = \"mlm\"\ntask.dataset = \"d\"\n", "c.toml");
  EXPECT_EQ(s.run.name, "x");
  EXPECT_EQ(s.model.path, "p");
  EXPECT_EQ(s.task.kind, TaskKind::mlm);
}

// ---- syntax -------------------------------------------------------------------------------------

TEST(ConfigSyntax, MissingValueNamesFileAndLine) {
  std::string m = error_of(kQa + "batch_size =\n");
  EXPECT_HAS(m, "cfg.toml:8:");
  EXPECT_HAS(m, "TOML syntax error");
  EXPECT_HAS(m, "batch_size");
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

TEST(ConfigSyntax, UnterminatedString) {
  std::string m = error_of("[run]\nname = \"abc\n");
  EXPECT_HAS(m, "cfg.toml:2:");
  EXPECT_HAS(m, "TOML syntax error");
}

TEST(ConfigSyntax, DuplicateKeyPointsAtSecond) {
  std::string m = error_of(kQa + "kind = \"mlm\"\n");
  EXPECT_HAS(m, "cfg.toml:8:");
  EXPECT_HAS(m, "already exists");
}

TEST(ConfigSyntax, TableDefinedTwice) {
  std::string m = error_of(kQa + "[model]\n");
  EXPECT_HAS(m, "cfg.toml:8:");
  EXPECT_HAS(m, "TOML syntax error");
}

TEST(ConfigSyntax, BareWordValue) {
  std::string m = error_of("[run]\nname = t\n");
  EXPECT_HAS(m, "cfg.toml:2:");
  EXPECT_HAS(m, "TOML syntax error");
}

// ---- unknown sections and keys ------------------------------------------------------------------

// run.seed seeded nothing (no run draws random numbers) and was removed: an old config gets an error
// that says so, in the file and through --set.
TEST(ConfigRemoved, RunSeedIsAnErrorThatSaysWhy) {
  std::string m = error_of("[run]\nseed = 0\n" + kQa.substr(6));
  EXPECT_HAS(m, "cfg.toml:2");
  EXPECT_HAS(m, "run.seed was removed: nothing in a run is random");
  EXPECT_HAS(m, "make-model --seed");
  EXPECT_HAS(m, "delete it from the config");
  m = error_of(kQa, {"run.seed=3"});
  EXPECT_HAS(m, "run.seed was removed");
  EXPECT_EQ(describe_config_keys().find("run.seed"), std::string::npos);
}

// task.kind's values, the keys that apply only to some tasks, and perplexity's logits default come
// from the task registry.
TEST(ConfigTasks, KindValuesAndApplicabilityComeFromTheRegistry) {
  // A value of the right type and range for each per-task key.
  auto value_for = [](const std::string& key) -> std::string {
    for (const char* b : {"version_2_with_negative", "pad_to_max_length", "no_early_termination", "share_context"})
      if (key.find(b) != std::string::npos) return "true";
    if (key == "task.prompt_set") return "chat";
    if (key == "quantization.lm_head") return "int8";
    if (key == "quantization.attention") return "bf16";
    for (const char* s : {"output.predictions_json", "validation.golden", "task.task_file", "output.lm_eval_json",
                          "output.samples_jsonl"})
      if (key == s) return "x";
    return "20";
  };
  for (const auto& t : task_registry()) {
    EXPECT_HAS(describe_config_keys(), std::string(t.name) + " = " + t.summary);
    for (const auto& key : t.keys) {
      // Set on every task that does not list it, the key is refused naming the task kinds that do.
      for (const auto& other : task_registry()) {
        if (other.applies(key)) continue;
        const std::string base = "[run]\nname = \"r\"\n[model]\npath = \"m\"\n[task]\nkind = \"" +
                                 std::string(other.name) + "\"\ndataset = \"d\"\n" +
                                 (other.task_file == TaskFileUse::required ? "task_file = \"t\"\n" : "");
        const std::string m = error_of(base, {key + "=" + value_for(key)});
        EXPECT_HAS(m, key + " applies only to task.kind = ");
        EXPECT_HAS(m, std::string("\"") + t.name + "\"");
        EXPECT_HAS(m, std::string("(this run has task.kind = \"") + other.name + "\")");
      }
    }
    const RunSpec s = parse_run_spec("[run]\nname = \"r\"\n[model]\npath = \"m\"\n[task]\nkind = \"" +
                                         std::string(t.name) + "\"\ndataset = \"d\"\n" +
                                         (t.task_file == TaskFileUse::required ? "task_file = \"t\"\n" : ""),
                                     "cfg.toml");
    EXPECT_EQ(s.task.kind, t.kind);
    EXPECT_EQ(s.output.logits, t.logits_modes.front()) << t.name;
    // every other output.logits value is refused naming the key, its line and what the task stores
    for (const char* mode : {"none", "topk", "full", "logprobs16"}) {
      const bool stored = std::any_of(t.logits_modes.begin(), t.logits_modes.end(),
                                      [&](LogitsMode m) { return std::string(to_string(m)) == mode; });
      const std::string cfg = "[run]\nname = \"r\"\n[model]\npath = \"m\"\n[task]\nkind = \"" + std::string(t.name) +
                              "\"\ndataset = \"d\"\n" +
                              (t.task_file == TaskFileUse::required ? "task_file = \"t\"\n" : "") +
                              "[output]\nlogits = \"" + mode + "\"\n";
      if (stored) {
        EXPECT_EQ(to_string(parse_run_spec(cfg, "cfg.toml").output.logits), std::string(mode)) << t.name;
        continue;
      }
      try {
        parse_run_spec(cfg, "cfg.toml");
        ADD_FAILURE() << t.name << " accepted output.logits = " << mode;
      } catch (const InputError& e) {
        const std::string m = e.what();
        EXPECT_HAS(m, "cfg.toml:");
        EXPECT_HAS(m, std::string("output.logits = \"") + mode + "\" is not stored by task.kind = \"" + t.name + "\"");
      }
    }
  }
}

// loglikelihood reads raw requests (task.dataset) or a loglikelihood task file (task.task_file);
// what only a task file gives meaning to is refused without one.
TEST(ConfigTasks, LoglikelihoodTaskFileIsOptional) {
  const std::string base = "[run]\nname = \"r\"\n[model]\npath = \"m\"\n[task]\nkind = \"loglikelihood\"\n";
  EXPECT_HAS(error_of(base), "task.dataset (or task.task_file) is required");
  EXPECT_EQ(parse_run_spec(base + "dataset = \"d.jsonl\"\n", "cfg.toml").task.task_file, "");
  const RunSpec s = parse_run_spec(base + "task_file = \"tasks/lambada_openai.toml\"\nnum_fewshot = 2\n", "cfg.toml");
  EXPECT_EQ(s.task.task_file, "tasks/lambada_openai.toml");
  EXPECT_EQ(s.task.num_fewshot, 2);
  for (const char* key : {"task.num_fewshot=1", "task.fewshot_seed=3", "output.lm_eval_json=\"r.json\"",
                          "output.samples_jsonl=\"s.jsonl\""}) {
    const std::string m = error_of(base + "dataset = \"d.jsonl\"\n", {key});
    EXPECT_HAS(m, "needs task.task_file");
    EXPECT_HAS(m, std::string(key).substr(0, std::string(key).find('=')));
  }
}

TEST(ConfigUnknown, KeySuggestsClosest) {
  std::string m = error_of(kQa + "batchsize = 4\n");
  EXPECT_HAS(m, "cfg.toml:8");
  EXPECT_HAS(m, "unknown key 'task.batchsize' (did you mean 'task.batch_size'?)");
}

TEST(ConfigUnknown, KeyInWrongSectionSuggestsOtherSection) {
  std::string m = error_of(kQa + "dtype = \"bf16\"\n");
  EXPECT_HAS(m, "cfg.toml:8");
  EXPECT_HAS(m, "unknown key 'task.dtype' (did you mean 'model.dtype'?)");
}

TEST(ConfigUnknown, KeyWithoutCloseMatchListsKeys) {
  std::string m = error_of(kQa + "[parallel]\nzzzzzzzz = 1\n");
  EXPECT_HAS(m, "cfg.toml:9");
  EXPECT_HAS(m, "unknown key 'parallel.zzzzzzzz'");
  EXPECT_HAS(m, "tensor_parallel");
}

TEST(ConfigUnknown, SectionSuggestsClosest) {
  std::string m = error_of(kQa + "[modle]\ndtype = \"bf16\"\n");
  EXPECT_HAS(m, "cfg.toml:8");
  EXPECT_HAS(m, "unknown section [modle] (did you mean [model]?)");
}

TEST(ConfigUnknown, TopLevelKeyBelongsInSection) {
  std::string m = error_of("threads = 3\n" + kQa);
  EXPECT_HAS(m, "cfg.toml:1");
  EXPECT_HAS(m, "unknown key 'threads'");
  EXPECT_HAS(m, "run.threads");
}

TEST(ConfigUnknown, NestedTableIsUnknownKey) {
  std::string m = error_of(kQa + "[task.extra]\nx = 1\n");
  EXPECT_HAS(m, "unknown key 'task.extra'");
  EXPECT_HAS(m, "cfg.toml:8");
}

TEST(ConfigUnknown, FirstErrorInFileOrderIsReported) {
  std::string m = error_of(kQa + "zeta_key = 1\nalpha_key = 2\n");
  EXPECT_HAS(m, "task.zeta_key");
  EXPECT_HAS(m, "cfg.toml:8");
}

// ---- types --------------------------------------------------------------------------------------

TEST(ConfigType, StringWhereIntegerExpected) {
  std::string m = error_of(kQa + "batch_size = \"8\"\n");
  EXPECT_HAS(m, "cfg.toml:8");
  EXPECT_HAS(m, "task.batch_size");
  EXPECT_HAS(m, "expected an integer, got a string");
}

TEST(ConfigType, FloatWhereIntegerExpected) {
  std::string m = error_of(kQa + "batch_size = 4.0\n");
  EXPECT_HAS(m, "task.batch_size: expected an integer, got a float");
}

TEST(ConfigType, IntegerWhereStringExpected) {
  std::string m = error_of("[run]\nname = 5\n[model]\npath=\"p\"\n[task]\nkind=\"qa\"\ndataset=\"d\"\n");
  EXPECT_HAS(m, "cfg.toml:2");
  EXPECT_HAS(m, "run.name: expected a string, got an integer");
}

TEST(ConfigType, StringWhereBooleanExpected) {
  std::string m = error_of(kQa + "pad_to_max_length = \"yes\"\n");
  EXPECT_HAS(m, "task.pad_to_max_length: expected a boolean");
  EXPECT_HAS(m, "got a string");
}

TEST(ConfigType, BooleanWhereFloatExpected) {
  std::string m = error_of(kQa + "version_2_with_negative = true\nnull_score_diff_threshold = false\n");
  EXPECT_HAS(m, "cfg.toml:9");
  EXPECT_HAS(m, "task.null_score_diff_threshold: expected a number, got a boolean");
}

TEST(ConfigType, EnumMustBeString) {
  std::string m =
      error_of("[run]\nname=\"x\"\n[model]\npath=\"p\"\ndtype = 16\n[task]\nkind=\"qa\"\ndataset=\"d\"\n");
  EXPECT_HAS(m, "cfg.toml:5");
  EXPECT_HAS(m, "model.dtype: expected a string, got an integer");
}

TEST(ConfigType, SectionMustBeTable) {
  std::string m = error_of("parallel = 2\n" + kQa);
  EXPECT_HAS(m, "cfg.toml:1");
  EXPECT_HAS(m, "'parallel' must be a section");
}

// ---- ranges and enum values ---------------------------------------------------------------------

struct RangeCase {
  std::string base;
  std::string lines;
  std::string location;
  std::string expect;
};

class ConfigRange : public ::testing::TestWithParam<RangeCase> {};

TEST_P(ConfigRange, OutOfRangeIsNamed) {
  const auto& c = GetParam();
  std::string m = error_of(c.base + c.lines);
  EXPECT_HAS(m, c.location);
  EXPECT_HAS(m, c.expect);
}

INSTANTIATE_TEST_SUITE_P(
    Keys, ConfigRange,
    ::testing::Values(
        RangeCase{kQa, "batch_size = 0\n", "cfg.toml:8", "task.batch_size: must be >= 1, got 0"},
        RangeCase{kQa, "batch_size = 3000000000\n", "cfg.toml:8", "task.batch_size: must be <= 2147483647"},
        RangeCase{kQa, "max_seq_length = 15\n", "cfg.toml:8",
                  "task.max_seq_length: must be in [16, 8192], got 15"},
        RangeCase{kQa, "max_seq_length = 8193\n", "cfg.toml:8", "must be in [16, 8192], got 8193"},
        RangeCase{kQa, "doc_stride = 0\n", "cfg.toml:8", "task.doc_stride: must be >= 1, got 0"},
        RangeCase{kQa, "max_seq_length = 256\ndoc_stride = 256\n", "cfg.toml:9",
                  "task.doc_stride must be in [1, task.max_seq_length) = [1, 256), got 256"},
        RangeCase{kQa, "max_seq_length = 128\n", "cfg.toml:8", "got 128 (the default)"},
        RangeCase{kQa, "n_best_size = 0\n", "cfg.toml:8", "task.n_best_size: must be >= 1, got 0"},
        RangeCase{kQa, "max_answer_length = -3\n", "cfg.toml:8",
                  "task.max_answer_length: must be >= 1, got -3"},
        RangeCase{kMlm, "top_k = 0\n", "cfg.toml:8", "task.top_k: must be >= 1, got 0"},
        RangeCase{kQa, "max_samples = -1\n", "cfg.toml:8", "task.max_samples: must be >= 0, got -1"},
        RangeCase{kQa, "[parallel]\ntensor_parallel = 0\n", "cfg.toml:9",
                  "parallel.tensor_parallel: must be >= 1, got 0"},
        RangeCase{kQa, "[output]\nlogits = \"topk\"\ntop_k = 0\n", "cfg.toml:10",
                  "output.top_k: must be >= 1, got 0"},
        RangeCase{kQa, "version_2_with_negative = true\nnull_score_diff_threshold = nan\n", "cfg.toml:9",
                  "task.null_score_diff_threshold: must be a finite number"},
        RangeCase{kQa, "version_2_with_negative = true\nnull_score_diff_threshold = -inf\n", "cfg.toml:9",
                  "must be a finite number"},
        RangeCase{"[run]\nthreads = -1\n" + kQa.substr(6), "", "cfg.toml:2",
                  "run.threads: must be >= 0, got -1"}));

TEST(ConfigRangeEdges, BoundsAreInclusive) {
  RunSpec s = parse_run_spec(kQa + "max_seq_length = 16\ndoc_stride = 15\nmax_samples = 0\n", "cfg.toml");
  EXPECT_EQ(s.task.max_seq_length, 16);
  EXPECT_EQ(s.task.doc_stride, 15);
  s = parse_run_spec(kMlm + "max_seq_length = 8192\n", "cfg.toml");
  EXPECT_EQ(s.task.max_seq_length, 8192);
}

TEST(ConfigRangeEdges, DocStrideNotCheckedForMlm) {
  // The QA-only default doc_stride (128) must not make a short MLM run invalid.
  RunSpec s = parse_run_spec(kMlm + "max_seq_length = 64\n", "cfg.toml");
  EXPECT_EQ(s.task.max_seq_length, 64);
}

TEST(ConfigEnum, UnknownValueListsAllowed) {
  std::string m = error_of(
      "[run]\nname=\"x\"\n[model]\npath=\"p\"\ndtype = \"int3\"\n[task]\nkind=\"qa\"\ndataset=\"d\"\n");
  EXPECT_HAS(m, "cfg.toml:5");
  EXPECT_HAS(m, "model.dtype: 'int3' is not allowed; allowed values: fp32, bf16, fp16");
}

TEST(ConfigEnum, CaseTypoGetsSuggestion) {
  std::string m = error_of(
      "[run]\nname=\"x\"\n[model]\npath=\"p\"\ndevice = \"CUDA\"\n[task]\nkind=\"qa\"\ndataset=\"d\"\n");
  EXPECT_HAS(m, "model.device: 'CUDA' is not allowed; allowed values: cpu, cuda, aiu (did you mean 'cuda'?)");
}

TEST(ConfigEnum, TaskKindAndLogits) {
  std::string m =
      error_of("[run]\nname=\"x\"\n[model]\npath=\"p\"\n[task]\nkind=\"summarize\"\ndataset=\"d\"\n");
  EXPECT_HAS(m, "cfg.toml:6");
  EXPECT_HAS(m, "task.kind: 'summarize' is not allowed; allowed values: qa, mlm, generate, perplexity, loglikelihood");
  m = error_of(kQa + "[output]\nlogits = \"top-k\"\n");
  EXPECT_HAS(m, "cfg.toml:9");
  EXPECT_HAS(m, "allowed values: none, topk, full, logprobs16 (did you mean 'topk'?)");
}

// ---- required keys ------------------------------------------------------------------------------

TEST(ConfigRequired, EachRequiredKeyIsNamed) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"name = \"t\"\n", "run.name is required"},
      {"path = \"models/m\"\n", "model.path is required"},
      {"kind = \"qa\"\n", "task.kind is required"},
      {"dataset = \"dev.json\"\n", "task.dataset is required"},
  };
  for (const auto& [line, expect] : cases) {
    std::string text = kQa;
    text.erase(text.find(line), line.size());
    std::string m = error_of(text);
    EXPECT_HAS(m, "cfg.toml: ");
    EXPECT_HAS(m, expect);
  }
}

TEST(ConfigRequired, EmptyFile) {
  std::string m = error_of("");
  EXPECT_HAS(m, "cfg.toml: run.name is required");
}

TEST(ConfigRequired, EmptyPathRejected) {
  std::string m = error_of("[run]\nname=\"x\"\n[model]\npath=\"\"\n[task]\nkind=\"qa\"\ndataset=\"d\"\n");
  EXPECT_HAS(m, "cfg.toml:4");
  EXPECT_HAS(m, "model.path: must not be empty");
}

TEST(ConfigRequired, RunNameMustBeAFileName) {
  for (const std::string bad : {"my run", "a/b", "x:y", ""}) {
    std::string m =
        error_of("[run]\nname=\"" + bad + "\"\n[model]\npath=\"p\"\n[task]\nkind=\"qa\"\ndataset=\"d\"\n");
    EXPECT_HAS(m, "cfg.toml:2");
    EXPECT_HAS(m, "run.name: ");
  }
  std::string m = error_of("[run]\nname=\"a/b\"\n[model]\npath=\"p\"\n[task]\nkind=\"qa\"\ndataset=\"d\"\n");
  EXPECT_HAS(m, "cannot be used as a file name");
}

// ---- options that do not apply ------------------------------------------------------------------

TEST(ConfigApplies, QaKeysOnMlmRun) {
  for (const std::string key : {"doc_stride = 64", "n_best_size = 3", "max_answer_length = 9",
                                "version_2_with_negative = false", "pad_to_max_length = true"}) {
    std::string m = error_of(kMlm + key + "\n");
    std::string name = key.substr(0, key.find(' '));
    EXPECT_HAS(m, "cfg.toml:8");
    EXPECT_HAS(m, "task." + name + " applies only to task.kind = \"qa\"");
  }
  std::string m = error_of(kMlm + "[output]\npredictions_json = \"p.json\"\n");
  EXPECT_HAS(m, "cfg.toml:9");
  EXPECT_HAS(m, "output.predictions_json applies only to task.kind = \"qa\"");
}

TEST(ConfigApplies, NullThresholdOnMlmRun) {
  std::string m = error_of(kMlm + "null_score_diff_threshold = 1.0\n");
  EXPECT_HAS(m, "task.null_score_diff_threshold applies only to task.kind = \"qa\"");
}

TEST(ConfigApplies, MlmTopKOnQaRun) {
  std::string m = error_of(kQa + "top_k = 4\n");
  EXPECT_HAS(m, "cfg.toml:8");
  EXPECT_HAS(m, "task.top_k applies only to task.kind = \"mlm\"");
}

TEST(ConfigApplies, OutputTopKNeedsTopkLogits) {
  std::string m = error_of(kQa + "[output]\ntop_k = 4\n");  // logits defaults to "full"
  EXPECT_HAS(m, "cfg.toml:9");
  EXPECT_HAS(m, "output.top_k applies only to output.logits = \"topk\"");
  m = error_of(kQa + "[output]\nlogits = \"none\"\ntop_k = 4\n");
  EXPECT_HAS(m, "cfg.toml:10");
  EXPECT_HAS(m, "output.logits = \"none\"");
}

TEST(ConfigApplies, NullThresholdNeedsVersion2) {
  std::string m = error_of(kQa + "null_score_diff_threshold = 0.5\n");
  EXPECT_HAS(m, "cfg.toml:8");
  EXPECT_HAS(m, "task.null_score_diff_threshold applies only when task.version_2_with_negative = true");
  m = error_of(kQa + "version_2_with_negative = false\nnull_score_diff_threshold = 0.5\n");
  EXPECT_HAS(m, "cfg.toml:9");
}

// ---- overrides ----------------------------------------------------------------------------------

TEST(ConfigOverride, ValuesParsedAsToml) {
  RunSpec s = parse_run_spec(
      kQa, "cfg.toml",
      {"task.batch_size=4", "model.dtype=bf16", "run.name = \"quoted\"", "task.pad_to_max_length=true",
       "task.version_2_with_negative=true", "task.null_score_diff_threshold=-0.5", "output.path=out/r.h5"});
  EXPECT_EQ(s.task.batch_size, 4);
  EXPECT_EQ(s.model.dtype, DType::bf16);
  EXPECT_EQ(s.run.name, "quoted");
  EXPECT_TRUE(s.task.pad_to_max_length);
  EXPECT_DOUBLE_EQ(s.task.null_score_diff_threshold, -0.5);
  EXPECT_EQ(s.output.path, "out/r.h5");  // a bare path is not TOML: taken as a string
}

TEST(ConfigOverride, ReplacesFileValueAndAddsSection) {
  RunSpec s = parse_run_spec(kQa + "batch_size = 2\n", "cfg.toml",
                             {"task.batch_size=32", "parallel.tensor_parallel=4"});
  EXPECT_EQ(s.task.batch_size, 32);
  EXPECT_EQ(s.parallel.tensor_parallel, 4);
}

TEST(ConfigOverride, LastOneWins) {
  RunSpec s = parse_run_spec(kQa, "cfg.toml", {"task.batch_size=3", "task.batch_size=5"});
  EXPECT_EQ(s.task.batch_size, 5);
}

TEST(ConfigOverride, OverrideCanSwitchTaskKind) {
  // Applied before validation: kind=mlm plus an mlm-only key is a valid run.
  RunSpec s = parse_run_spec(kQa, "cfg.toml", {"task.kind=mlm", "task.top_k=2"});
  EXPECT_EQ(s.task.kind, TaskKind::mlm);
  EXPECT_EQ(s.task.top_k, 2);
}

TEST(ConfigOverride, WrongTypeNamesTheOverride) {
  std::string m = error_of(kQa + "batch_size = 2\n", {"task.batch_size=four"});
  EXPECT_HAS(m, "cfg.toml: --set task.batch_size: expected an integer, got a string");
  EXPECT_EQ(m.find("cfg.toml:8"), std::string::npos) << m;
}

TEST(ConfigOverride, UnknownKeyNamesTheOverride) {
  std::string m = error_of(kQa, {"task.batchsize=4"});
  EXPECT_HAS(m, "--set task.batchsize");
  EXPECT_HAS(m, "unknown key 'task.batchsize' (did you mean 'task.batch_size'?)");
}

TEST(ConfigOverride, UnknownSectionNamesTheOverride) {
  std::string m = error_of(kQa, {"tsak.batch_size=4"});
  EXPECT_HAS(m, "--set tsak.batch_size");
  EXPECT_HAS(m, "unknown section [tsak] (did you mean [task]?)");
}

TEST(ConfigOverride, RangeAndApplicabilityNameTheOverride) {
  std::string m = error_of(kQa, {"task.max_seq_length=4"});
  EXPECT_HAS(m, "--set task.max_seq_length");
  EXPECT_HAS(m, "must be in [16, 8192], got 4");
  m = error_of(kQa, {"task.top_k=4"});
  EXPECT_HAS(m, "--set task.top_k");
  EXPECT_HAS(m, "task.top_k applies only to task.kind = \"mlm\"");
}

TEST(ConfigOverride, MalformedOverrides) {
  std::string m = error_of(kQa, {"task.batch_size"});
  EXPECT_HAS(m, "--set task.batch_size");
  EXPECT_HAS(m, "section.key=value");
  m = error_of(kQa, {"batch_size=4"});
  EXPECT_HAS(m, "--set batch_size=4");
  EXPECT_HAS(m, "section.key=value");
  m = error_of(kQa, {"task.=4"});
  EXPECT_HAS(m, "section.key=value");
  m = error_of(kQa, {"a.b.c=4"});
  EXPECT_HAS(m, "section.key=value");
}

TEST(ConfigOverride, EmptyValueIsEmptyString) {
  std::string m = error_of(kQa, {"model.path="});
  EXPECT_HAS(m, "--set model.path");
  EXPECT_HAS(m, "must not be empty");
}

// Found by fuzz/config_fuzz.cpp: a bare-word value with invalid UTF-8 was kept as a string, and the
// config_text stored in the result file then failed to parse ("invalid utf8 sequence").
TEST(ConfigOverride, InvalidUtf8ValueIsRefused) {
  std::string m = error_of(kQa, {"output.path=results/\xd9\xf5.h5"});
  EXPECT_HAS(m, "--set output.path");
  EXPECT_HAS(m, "not valid UTF-8");
  // Valid UTF-8 in a bare word still round-trips.
  RunSpec a = parse_run_spec(kQa, "cfg.toml", {"output.path=results/caf\xc3\xa9.h5"});
  EXPECT_EQ(a.output.path, "results/caf\xc3\xa9.h5");
  EXPECT_EQ(parse_run_spec(a.config_text, "again.toml").output.path, a.output.path);
}

// Found by fuzz/config_fuzz.cpp: invalid UTF-8 inside a TOML literal string made toml11 3.7 read past
// its buffer (ASan heap-buffer-overflow) on the way to its own error; the text is now checked first.
TEST(ConfigSyntax, InvalidUtf8NamesTheLine) {
  // kQa has 7 lines; "[output]" is line 8, the bad line 9.
  for (const std::string bad : {"path = '''a\xff'''\n", "path = 'a\xff'\n", "path = \"a\xc3\"\n", "# \xe2\x82\n"}) {
    const std::string m = error_of(kQa + "[output]\n" + bad);
    EXPECT_HAS(m, "cfg.toml:9");
    EXPECT_HAS(m, "not valid UTF-8");
  }
  // UTF-8 text is fine, in comments and strings.
  EXPECT_NO_THROW(parse_run_spec("# caf\xc3\xa9\n" + kQa + "[output]\npath = 'r\xc3\xa9sultat.h5'\n", "cfg.toml"));
}

// ---- config_text round trip ---------------------------------------------------------------------

TEST(ConfigText, FullConfigReparsesToSameSpec) {
  RunSpec a = parse_run_spec(kFullQa, "full.toml");
  RunSpec b = parse_run_spec(a.config_text, "again.toml");
  expect_same(a, b);
  EXPECT_EQ(b.config_text, a.config_text);
  EXPECT_HAS(a.config_text, "[task]\n");
  EXPECT_EQ(a.config_text.find("# every key"), std::string::npos);  // comments are not kept
}

TEST(ConfigText, RecordsOverridesAndNotDefaults) {
  RunSpec a = parse_run_spec(kQa, "cfg.toml", {"task.batch_size=4", "model.dtype=bf16"});
  EXPECT_HAS(a.config_text, "batch_size = 4\n");
  EXPECT_HAS(a.config_text, "dtype = \"bf16\"\n");
  EXPECT_EQ(a.config_text.find("max_seq_length"), std::string::npos) << a.config_text;
  RunSpec b = parse_run_spec(a.config_text, "again.toml");
  expect_same(a, b);
}

TEST(ConfigText, MlmAndFloatsRoundTrip) {
  RunSpec a = parse_run_spec(kMlm + "top_k = 9\n", "cfg.toml", {"task.batch_size=1"});
  expect_same(a, parse_run_spec(a.config_text, "again.toml"));
  RunSpec q =
      parse_run_spec(kQa + "version_2_with_negative = true\nnull_score_diff_threshold = 0.1\n", "c.toml");
  EXPECT_HAS(q.config_text, "null_score_diff_threshold = 0.1\n");
  expect_same(q, parse_run_spec(q.config_text, "again.toml"));
}

// ---- files --------------------------------------------------------------------------------------

TEST(ConfigFile, LoadFromFileRecordsPath) {
  auto dir = evalrun::testing::make_temp_dir("evalrun-config");
  auto path = (dir / "run.toml").string();
  std::ofstream(path) << kQa;
  RunSpec s = load_run_spec(path, {"task.batch_size=2"});
  EXPECT_EQ(s.config_path, path);
  EXPECT_EQ(s.task.batch_size, 2);
  std::ofstream(path) << kQa << "batchsize = 1\n";
  try {
    load_run_spec(path);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_HAS(e.what(), path + ":8");
  }
  std::filesystem::remove_all(dir);
}

TEST(ConfigFile, MissingFileIsInputError) {
  EXPECT_THROW(load_run_spec("/nonexistent/evalrun/none.toml"), InputError);
}

TEST(ConfigDescribe, ListsEveryKey) {
  std::string t = describe_config_keys();
  for (const char* key : {"run.name",
                          "run.threads",
                          "model.path",
                          "model.tokenizer",
                          "model.dtype",
                          "model.device",
                          "task.kind",
                          "task.dataset",
                          "task.batch_size",
                          "task.max_samples",
                          "task.max_seq_length",
                          "task.doc_stride",
                          "task.n_best_size",
                          "task.max_answer_length",
                          "task.version_2_with_negative",
                          "task.null_score_diff_threshold",
                          "task.pad_to_max_length",
                          "task.top_k",
                          "parallel.tensor_parallel",
                          "output.path",
                          "output.logits",
                          "output.top_k",
                          "output.predictions_json",
                          "validation.golden"})
    EXPECT_HAS(t, std::string("| ") + key + " ");
  EXPECT_HAS(t, "fp32, bf16, fp16");
  EXPECT_HAS(t, "16..8192");
  EXPECT_HAS(t, "results/<run.name>.h5");
}

TEST(ConfigExamples, EveryConfigInRepoParses) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(EVALRUN_SOURCE_DIR) / "configs";
  int n = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".toml") continue;
    SCOPED_TRACE(entry.path().string());
    EXPECT_NO_THROW({
      try {
        RunSpec s = load_run_spec(entry.path().string());
        EXPECT_FALSE(s.run.name.empty());
      } catch (const InputError& e) {
        ADD_FAILURE() << e.what();
      }
    });
    ++n;
  }
  EXPECT_GE(n, 2) << "expected the example configs in " << dir;
}

TEST(ConfigExamples, RobertaSquadPair) {
  const std::string dir = std::string(EVALRUN_SOURCE_DIR) + "/configs/";
  RunSpec fp32 = load_run_spec(dir + "roberta_squad_fp32.toml");
  RunSpec bf16 = load_run_spec(dir + "roberta_squad_bf16.toml");
  EXPECT_EQ(fp32.model.dtype, DType::fp32);
  EXPECT_EQ(bf16.model.dtype, DType::bf16);
  EXPECT_EQ(fp32.task.kind, TaskKind::qa);
  EXPECT_EQ(fp32.task.dataset, bf16.task.dataset);
  EXPECT_NE(fp32.output.path, bf16.output.path);
}

}  // namespace
}  // namespace evalrun

// --- decoder tasks -------------------------------------------------------------------------------

namespace evalrun {
namespace {
const std::string kGen = "[run]\nname=\"g\"\n[model]\npath=\"m\"\n[task]\nkind=\"generate\"\n";
}  // namespace

TEST(ConfigDecoder, GenerateKeysParse) {
  auto spec = parse_run_spec(kGen + "dataset=\"p.jsonl\"\nmax_new_tokens=24\nmax_prompt_length=64\n"
                                    "fixed_prompt_length=64\nno_early_termination=true\n",
                             "cfg.toml");
  EXPECT_EQ(spec.task.kind, TaskKind::generate);
  EXPECT_EQ(spec.task.max_new_tokens, 24);
  EXPECT_EQ(spec.task.max_prompt_length, 64);
  EXPECT_EQ(spec.task.fixed_prompt_length, 64);
  EXPECT_TRUE(spec.task.no_early_termination);
  auto builtin = parse_run_spec(kGen + "prompt_set=\"chat\"\n", "cfg.toml");
  EXPECT_EQ(builtin.task.prompt_set, "chat");
  EXPECT_EQ(builtin.task.dataset, "");
  auto ppl = parse_run_spec(
      "[run]\nname=\"p\"\n[model]\npath=\"m\"\n[task]\nkind=\"perplexity\"\ndataset=\"w.txt\"\n"
      "context_length=128\nstride=64\n",
      "cfg.toml");
  EXPECT_EQ(ppl.task.context_length, 128);
  EXPECT_EQ(ppl.task.stride, 64);
}

TEST(ConfigDecoder, EncoderOptionOnDecoderRunIsRefused) {
  std::string m = error_of(kGen + "dataset=\"p.jsonl\"\npad_to_max_length=true\n");
  EXPECT_HAS(m, "cfg.toml:8");
  EXPECT_HAS(m, "task.pad_to_max_length applies only to task.kind = \"qa\" (this run has task.kind = \"generate\")");
  m = error_of(kGen + "dataset=\"p.jsonl\"\nmax_seq_length=128\n");
  EXPECT_HAS(m, "task.max_seq_length applies only to task.kind = \"qa\" or \"mlm\"");
}

TEST(ConfigDecoder, DecoderOptionOnEncoderRunIsRefused) {
  std::string m = error_of(kQa + "max_new_tokens=5\n");
  EXPECT_HAS(m, "task.max_new_tokens applies only to task.kind = \"generate\"");
}

TEST(ConfigDecoder, PromptSourceRules) {
  EXPECT_HAS(error_of(kGen), "task.dataset (or task.prompt_set) is required");
  EXPECT_HAS(error_of(kGen + "dataset=\"p.jsonl\"\nprompt_set=\"code\"\n"), "not both");
  EXPECT_HAS(error_of(kGen + "prompt_set=\"poems\"\n"), "allowed values: chat, code");
}

TEST(ConfigDecoder, PaddingAndWindowRules) {
  EXPECT_HAS(error_of(kGen + "dataset=\"p\"\nfixed_prompt_length=32\nmin_pad_length=16\n"), "exclude each other");
  EXPECT_HAS(error_of(kGen + "dataset=\"p\"\nfixed_prompt_length=32\nmax_prompt_length=64\n"),
             "larger than task.fixed_prompt_length");
  std::string m = error_of(
      "[run]\nname=\"p\"\n[model]\npath=\"m\"\n[task]\nkind=\"perplexity\"\ndataset=\"w.txt\"\n"
      "context_length=64\nstride=128\n");
  EXPECT_HAS(m, "cfg.toml:9");
  EXPECT_HAS(m, "task.stride (128) must not exceed task.context_length (64)");
}

// --- [validation] -----------------------------------------------------------------------------

TEST(ConfigValidation, GoldenIsOffByDefaultAndParsesOnGenerate) {
  EXPECT_EQ(parse_run_spec(kGen + "dataset=\"p.jsonl\"\n", "cfg.toml").validation.golden, "");
  auto spec = parse_run_spec(kGen + "dataset=\"p.jsonl\"\n[validation]\ngolden = \"results/ref.h5\"\n", "cfg.toml");
  EXPECT_EQ(spec.validation.golden, "results/ref.h5");
  // stored in config_text under its own section and parses back to the same spec
  EXPECT_HAS(spec.config_text, "[validation]\ngolden = \"results/ref.h5\"\n");
  auto again = parse_run_spec(spec.config_text, "again.toml");
  EXPECT_EQ(again.validation.golden, "results/ref.h5");
  // and as an override, creating the section
  auto over = parse_run_spec(kGen + "dataset=\"p.jsonl\"\n", "cfg.toml", {"validation.golden=r.h5"});
  EXPECT_EQ(over.validation.golden, "r.h5");
}

TEST(ConfigValidation, GoldenAppliesOnlyToGenerate) {
  std::string m = error_of(kQa + "[validation]\ngolden = \"ref.h5\"\n");
  EXPECT_HAS(m, "cfg.toml:9");
  EXPECT_HAS(m, "validation.golden applies only to task.kind = \"generate\" (this run has task.kind = \"qa\")");
  m = error_of(
      "[run]\nname=\"p\"\n[model]\npath=\"m\"\n[task]\nkind=\"perplexity\"\ndataset=\"w.txt\"\n"
      "[validation]\ngolden=\"ref.h5\"\n");
  EXPECT_HAS(m, "validation.golden applies only to task.kind = \"generate\"");
  m = error_of(kQa, {"validation.golden=ref.h5"});
  EXPECT_HAS(m, "--set validation.golden");
}

TEST(ConfigValidation, GoldenMustBeANonEmptyStringAndKeysAreChecked) {
  EXPECT_HAS(error_of(kGen + "dataset=\"p\"\n[validation]\ngolden = \"\"\n"), "validation.golden: must not be empty");
  EXPECT_HAS(error_of(kGen + "dataset=\"p\"\n[validation]\ngolden = 3\n"), "expected a string, got an integer");
  EXPECT_HAS(error_of(kGen + "dataset=\"p\"\n[validation]\ngoldn = \"r.h5\"\n"),
             "unknown key 'validation.goldn' (did you mean 'validation.golden'?)");
  // a key of [validation] written under [task] is pointed to its section
  EXPECT_HAS(error_of(kGen + "dataset=\"p\"\ngolden = \"r.h5\"\n"), "did you mean 'validation.golden'?");
  EXPECT_HAS(error_of(kGen + "dataset=\"p\"\n[validaton]\ngolden = \"r.h5\"\n"),
             "unknown section [validaton] (did you mean [validation]?)");
}

}  // namespace evalrun
