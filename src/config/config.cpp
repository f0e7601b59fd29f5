// TOML -> RunSpec. One table (kKeys) lists every key with its type, range, applicability and the
// RunSpec field it sets; parsing, validation, describe_config_keys() and the serialised config_text
// all walk that table, so adding a key is one entry there plus the field in run_spec.hpp.
#include "config/config.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <toml.hpp>

#include "common/errors.hpp"
#include "common/parse_limits.hpp"
#include "common/text.hpp"
#include "common/toml_file.hpp"
#include "common/utf8.hpp"
#include "task/registry.hpp"

namespace evalrun {
namespace {

enum class Kind { string, integer, floating, boolean, enumeration };
// A key's value once its type is checked (only the member matching the Kind is meaningful).
struct Scalar {
  std::string s;
  std::int64_t i = 0;
  double f = 0.0;
  bool b = false;
  std::size_t choice = 0;  // index into KeySpec::choices
};

struct KeySpec {
  const char* section = "";
  const char* key = "";
  Kind kind = Kind::string;
  std::vector<std::string> choices = {};  // enumeration values, in RunSpec enum order
  std::int64_t min = 0;                   // integers, inclusive
  std::int64_t max = 0;
  // Set on a run of a task whose registry row (task/registry.cpp) does not name it, it is an error,
  // not silently ignored. false: applies to every task.
  bool per_task = false;
  bool required = false;
  const char* default_note = "";  // shown by describe_config_keys()
  const char* allowed_note = "";  // "" = derived from choices / min / max
  const char* help = "";
  void (*apply)(RunSpec&, const Scalar&) = nullptr;  // stores the checked value in its RunSpec field
  // Extra check on the value; returns "" or what is wrong (the key is prefixed by the caller).
  std::string (*check)(const Scalar&) = nullptr;

  std::string full() const { return std::string(section) + "." + key; }
};

constexpr std::int64_t kIntMax = INT_MAX;
constexpr std::int64_t kI64Max = std::numeric_limits<std::int64_t>::max();

std::string check_run_name(const Scalar& v) {
  if (v.s.empty()) return "must not be empty";
  for (char c : v.s) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
              c == '_' || c == '-';
    if (!ok) return quote_short(v.s) + " cannot be used as a file name: use only letters, digits, '.', '_' and '-'";
  }
  return "";
}

// Slurm's filename patterns in output paths, as sbatch --output knows them: %j job id, %A array
// master job id, %a array task id, %% a literal %. Outside a Slurm job they become "local".
std::string expand_job_placeholders(const std::string& path, const std::string& key) {
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0' ? std::string(v) : std::string("local");
  };
  std::string out;
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (path[i] != '%') {
      out += path[i];
      continue;
    }
    const char next = i + 1 < path.size() ? path[i + 1] : '\0';
    if (next == 'j') out += env("SLURM_JOB_ID");
    else if (next == 'A') out += env("SLURM_ARRAY_JOB_ID");
    else if (next == 'a') out += env("SLURM_ARRAY_TASK_ID");
    else if (next == '%') out += '%';
    else throw InputError(key, quote_short(path) + ": unknown placeholder '%" + std::string(1, next) +
                                   "' (known: %j job id, %A array job id, %a array task id, %% a literal %)");
    ++i;
  }
  return out;
}

std::string check_not_empty(const Scalar& v) { return v.s.empty() ? "must not be empty" : ""; }

std::string check_finite(const Scalar& v) { return std::isfinite(v.f) ? "" : "must be a finite number"; }

// task.kind's values and help come from the task registry (in TaskKind order, as the enum's choices).
std::vector<std::string> task_kind_names() {
  std::vector<std::string> names;
  for (const auto& t : task_registry()) names.push_back(t.name);
  return names;
}

const std::string& task_kind_help() {
  static const std::string help = [] {
    std::string out;
    for (const auto& t : task_registry())
      out += std::string(out.empty() ? "" : "; ") + t.name + " = " + t.summary + " (" + to_string(t.role) + ")";
    return out;
  }();
  return help;
}

void check_task_keys(const std::vector<KeySpec>& keys);

// Keys older configs may still hold, and why they went: an error saying so beats "unknown key".
const char* removed_key(const std::string& full) {
  if (full == "run.seed") {
    return "nothing in a run is random (generation is greedy, calibration takes the first examples, "
           "inference has no dropout), so it changed nothing; `evalrun make-model --seed` seeds random weights";
  }
  return nullptr;
}

std::string check_non_negative(const Scalar& v) {
  return std::isfinite(v.f) && v.f >= 0 ? "" : "must be a finite number >= 0";
}

const std::vector<KeySpec>& key_specs() {
  // clang-format off
  static const std::vector<KeySpec> keys = {
      // [run]
      {.section = "run", .key = "name", .kind = Kind::string, .required = true, .default_note = "(required)", .allowed_note = "[A-Za-z0-9._-]+",
       .help = "run name; the result file is results/<name>.h5 unless output.path is set",
       .apply = [](RunSpec& r, const Scalar& v) { r.run.name = v.s; }, .check = check_run_name},
      {.section = "run", .key = "threads", .kind = Kind::integer, .max = kIntMax, .default_note = "0",
       .help = "torch intra-op threads per rank; 0 = cores on the node / ranks on the node",
       .apply = [](RunSpec& r, const Scalar& v) { r.run.threads = static_cast<int>(v.i); }},
      {.section = "run", .key = "stall_timeout", .kind = Kind::floating, .default_note = "600", .allowed_note = ">= 0 (seconds)",
       .help = "a rank silent this long (no heartbeat; or, running its shard, no finished batch for max(this, 10 x its slowest batch)) stops the job with exit 1 naming it; the journal is kept for --resume. 0 = no watchdog",
       .apply = [](RunSpec& r, const Scalar& v) { r.run.stall_timeout = v.f; }, .check = check_non_negative},
      {.section = "run", .key = "max_batch_bytes", .kind = Kind::integer, .max = kI64Max, .default_note = "0",
       .help = "memory one batch may need (KV cache, attention scores, logits kept), checked before the run; 0 = half the node's physical memory / ranks on the node",
       .apply = [](RunSpec& r, const Scalar& v) { r.run.max_batch_bytes = v.i; }},
      // [model]
      {.section = "model", .key = "path", .kind = Kind::string, .required = true, .default_note = "(required)", .allowed_note = "directory",
       .help = "Hugging Face checkpoint directory (config.json + *.safetensors or pytorch_model*.bin, docs/models.md)",
       .apply = [](RunSpec& r, const Scalar& v) { r.model.path = v.s; }, .check = check_not_empty},
      {.section = "model", .key = "tokenizer", .kind = Kind::string, .default_note = "model.path", .allowed_note = "directory",
       .help = "tokenizer directory (vocab.json + merges.txt, or tokenizer.json)",
       .apply = [](RunSpec& r, const Scalar& v) { r.model.tokenizer = v.s; }},
      {.section = "model", .key = "dtype", .kind = Kind::enumeration, .choices = {"fp32", "bf16", "fp16"}, .default_note = "\"fp32\"",
       .help = "compute precision of the weights and activations",
       .apply = [](RunSpec& r, const Scalar& v) { r.model.dtype = static_cast<DType>(v.choice); }},
      {.section = "model", .key = "device", .kind = Kind::enumeration, .choices = {"cpu", "cuda", "aiu"}, .default_note = "\"cpu\"",
       .help = "where the model runs: the host (cpu), the whole model on cuda:<local rank> (a build with CUDA), or the host with its projections on an AIU through its backend plugin (docs/devices.md)",
       .apply = [](RunSpec& r, const Scalar& v) { r.model.device = static_cast<Device>(v.choice); }},
      // [task]
      {.section = "task", .key = "kind", .kind = Kind::enumeration, .choices = task_kind_names(), .required = true, .default_note = "(required)",
       .help = task_kind_help().c_str(),
       .apply = [](RunSpec& r, const Scalar& v) { r.task.kind = task_registry()[v.choice].kind; }},
      {.section = "task", .key = "dataset", .kind = Kind::string, .default_note = "(required)", .allowed_note = "file, dir, glob",
       .help = "qa: SQuAD JSON / jsonl; mlm: jsonl {\"id\",\"text\",\"targets\"?} or a text file; generate: jsonl {\"id\",\"prompt\"}, a .txt file (one prompt), a directory or glob of .txt files; perplexity: a text file; loglikelihood: jsonl {\"context\",\"continuation\"} (or, with task.task_file, the task file's documents); multiple_choice / generate_until: the task file's documents in place of its own",
       .apply = [](RunSpec& r, const Scalar& v) { r.task.dataset = v.s; }, .check = check_not_empty},
      {.section = "task", .key = "batch_size", .kind = Kind::integer, .min = 1, .max = kIntMax, .default_note = "8",
       .help = "sequences per forward pass on each rank (results do not depend on it)",
       .apply = [](RunSpec& r, const Scalar& v) { r.task.batch_size = static_cast<int>(v.i); }},
      {.section = "task", .key = "max_samples", .kind = Kind::integer, .max = kI64Max, .default_note = "0",
       .help = "0 = every example; otherwise the first N examples in file order (perplexity: the first N windows; loglikelihood: the first N requests)",
       .apply = [](RunSpec& r, const Scalar& v) { r.task.max_samples = v.i; }},
      {.section = "task", .key = "max_seq_length", .kind = Kind::integer, .min = 16, .max = 8192, .per_task = true, .default_note = "384",
       .help = "encoders: tokens per sequence (question + context for qa)",
       .apply = [](RunSpec& r, const Scalar& v) { r.task.max_seq_length = static_cast<int>(v.i); }},
      {.section = "task", .key = "doc_stride", .kind = Kind::integer, .min = 1, .max = kIntMax, .per_task = true, .default_note = "128", .allowed_note = "1..max_seq_length-1",
       .help = "qa only: overlap in tokens between windows of a long context",
       .apply = [](RunSpec& r, const Scalar& v) { r.task.doc_stride = static_cast<int>(v.i); }},
      {.section = "task", .key = "n_best_size", .kind = Kind::integer, .min = 1, .max = kIntMax, .per_task = true, .default_note = "20",
       .help = "qa only: start/end candidates considered per window",
       .apply = [](RunSpec& r, const Scalar& v) { r.task.n_best_size = static_cast<int>(v.i); }},
      {.section = "task", .key = "max_answer_length", .kind = Kind::integer, .min = 1, .max = kIntMax, .per_task = true, .default_note = "30",
       .help = "qa only: longest answer in tokens",
       .apply = [](RunSpec& r, const Scalar& v) { r.task.max_answer_length = static_cast<int>(v.i); }},
      {.section = "task", .key = "version_2_with_negative", .kind = Kind::boolean, .per_task = true, .default_note = "false",
       .help = "qa only: SQuAD 2.0 (questions may have no answer)",
       .apply = [](RunSpec& r, const Scalar& v) { r.task.version_2_with_negative = v.b; }},
      {.section = "task", .key = "null_score_diff_threshold", .kind = Kind::floating, .per_task = true, .default_note = "0.0", .allowed_note = "finite",
       .help = "qa only, with version_2_with_negative: predict no answer when null score - best span score > this",
       .apply = [](RunSpec& r, const Scalar& v) { r.task.null_score_diff_threshold = v.f; }, .check = check_finite},
      {.section = "task", .key = "pad_to_max_length", .kind = Kind::boolean, .per_task = true, .default_note = "false",
       .help = "qa only: pad every window to max_seq_length (else to the longest in the batch)",
       .apply = [](RunSpec& r, const Scalar& v) { r.task.pad_to_max_length = v.b; }},
      {.section = "task", .key = "top_k", .kind = Kind::integer, .min = 1, .max = kIntMax, .per_task = true, .default_note = "5",
       .help = "mlm only: predictions kept per <mask>",
       .apply = [](RunSpec& r, const Scalar& v) { r.task.top_k = static_cast<int>(v.i); }},
      {.section = "task", .key = "prompt_set", .kind = Kind::enumeration, .choices = {"chat", "code"}, .per_task = true, .default_note = "(none)",
       .help = "generate only, instead of task.dataset: a built-in prompt set with its template",
       .apply = [](RunSpec& r, const Scalar& v) { r.task.prompt_set = v.choice == 0 ? "chat" : "code"; }},
      {.section = "task", .key = "max_new_tokens", .kind = Kind::integer, .min = 1, .max = kIntMax, .per_task = true, .default_note = "100",
       .help = "generate only: tokens generated per prompt (fewer when it stops at EOS)",
       .apply = [](RunSpec& r, const Scalar& v) { r.task.max_new_tokens = static_cast<int>(v.i); }},
      {.section = "task", .key = "max_prompt_length", .kind = Kind::integer, .max = kIntMax, .per_task = true, .default_note = "0",
       .help = "generate only: 0 = no limit; longer prompts keep their first N tokens (as the seed inference.py)",
       .apply = [](RunSpec& r, const Scalar& v) { r.task.max_prompt_length = static_cast<int>(v.i); }},
      {.section = "task", .key = "min_pad_length", .kind = Kind::integer, .max = kIntMax, .per_task = true, .default_note = "0",
       .help = "generate only: left-pad shorter prompts to at least N tokens (simulates a longer input)",
       .apply = [](RunSpec& r, const Scalar& v) { r.task.min_pad_length = static_cast<int>(v.i); }},
      {.section = "task", .key = "fixed_prompt_length", .kind = Kind::integer, .max = kIntMax, .per_task = true, .default_note = "0",
       .help = "generate only: 0 = off; left-pad every prompt to exactly N tokens, a longer prompt is an error",
       .apply = [](RunSpec& r, const Scalar& v) { r.task.fixed_prompt_length = static_cast<int>(v.i); }},
      {.section = "task", .key = "no_early_termination", .kind = Kind::boolean, .per_task = true, .default_note = "false",
       .help = "generate only: keep generating past EOS up to max_new_tokens (every prompt's logits rows are then known "
               "before the run: the ranks write them as they finish instead of holding them)",
       .apply = [](RunSpec& r, const Scalar& v) { r.task.no_early_termination = v.b; }},
      {.section = "task", .key = "context_length", .kind = Kind::integer, .max = kIntMax, .per_task = true, .default_note = "0",
       .help = "perplexity only: tokens per window; 0 = the model's max_position_embeddings",
       .apply = [](RunSpec& r, const Scalar& v) { r.task.context_length = static_cast<int>(v.i); }},
      {.section = "task", .key = "stride", .kind = Kind::integer, .max = kIntMax, .per_task = true, .default_note = "0",
       .help = "perplexity only: window start step; 0 = context_length (no overlap); each token is scored once",
       .apply = [](RunSpec& r, const Scalar& v) { r.task.stride = static_cast<int>(v.i); }},
      {.section = "task", .key = "task_file", .kind = Kind::string, .per_task = true, .default_note = "(required)", .allowed_note = "file",
       .help = "multiple_choice / generate_until (required), loglikelihood (optional: LAMBADA-style task files): the benchmark task file (tasks/*.toml: templates, choices, few-shot, stop strings, filters; docs/tasks.md)",
       .apply = [](RunSpec& r, const Scalar& v) { r.task.task_file = v.s; }, .check = check_not_empty},
      {.section = "task", .key = "num_fewshot", .kind = Kind::integer, .max = 1000, .per_task = true, .default_note = "0",
       .help = "task-file runs (multiple_choice / generate_until / loglikelihood): few-shot examples before each document, drawn with fewshot_seed as lm-eval draws them",
       .apply = [](RunSpec& r, const Scalar& v) { r.task.num_fewshot = static_cast<int>(v.i); }},
      {.section = "task", .key = "fewshot_seed", .kind = Kind::integer, .max = kI64Max, .per_task = true, .default_note = "1234",
       .help = "task-file runs: seed of the few-shot draw (lm-eval's default 1234)",
       .apply = [](RunSpec& r, const Scalar& v) { r.task.fewshot_seed = static_cast<std::uint64_t>(v.i); }},
      {.section = "task", .key = "share_context", .kind = Kind::boolean, .per_task = true, .default_note = "true",
       .help = "multiple_choice only: run each document's context once for all its choices (false: every choice alone; same results)",
       .apply = [](RunSpec& r, const Scalar& v) { r.task.share_context = v.b; }},
      // [quantization]
      {.section = "quantization", .key = "method", .kind = Kind::enumeration, .choices = {"auto", "none", "gptq", "int8", "fp8"}, .default_note = "\"auto\"",
       .help = "what the checkpoint must hold: auto = whatever it holds (float, or its config.json quantization_config); otherwise a mismatch is an error. int8 with direct = true quantizes a float checkpoint",
       .apply = [](RunSpec& r, const Scalar& v) { r.quantization.method = std::vector<std::string>{"auto", "none", "gptq", "int8", "fp8"}[v.choice]; }},
      {.section = "quantization", .key = "direct", .kind = Kind::boolean, .default_note = "false",
       .help = "with method = \"int8\": quantize a float checkpoint to INT8 W8A8 in memory before the run (as `evalrun quantize` would)",
       .apply = [](RunSpec& r, const Scalar& v) { r.quantization.direct = v.b; }},
      {.section = "quantization", .key = "weights", .kind = Kind::enumeration, .choices = {"per_channel", "per_tensor"}, .default_note = "\"per_channel\"",
       .help = "direct only: one weight scale per output channel, or one per layer",
       .apply = [](RunSpec& r, const Scalar& v) { r.quantization.weights = v.choice == 0 ? "per_channel" : "per_tensor"; }},
      {.section = "quantization", .key = "activations", .kind = Kind::enumeration, .choices = {"per_token", "per_tensor_symm", "per_tensor_asymm"}, .default_note = "\"per_token\"",
       .help = "direct only: activation scales per token (dynamic), or one per layer from calibration (symmetric, or asymmetric with a zero point)",
       .apply = [](RunSpec& r, const Scalar& v) { r.quantization.activations = std::vector<std::string>{"per_token", "per_tensor_symm", "per_tensor_asymm"}[v.choice]; }},
      {.section = "quantization", .key = "smoothquant", .kind = Kind::boolean, .default_note = "false",
       .help = "direct only: SmoothQuant, moving activation outliers into the weights with per-channel scales from calibration",
       .apply = [](RunSpec& r, const Scalar& v) { r.quantization.smoothquant = v.b; }},
      {.section = "quantization", .key = "smoothquant_alpha", .kind = Kind::floating, .default_note = "0.5", .allowed_note = "0..1",
       .help = "direct only, with smoothquant: migration strength s_j = max|X_j|^alpha / max|W_j|^(1-alpha)",
       .apply = [](RunSpec& r, const Scalar& v) { r.quantization.smoothquant_alpha = v.f; },
       .check = [](const Scalar& v) { return v.f >= 0.0 && v.f <= 1.0 ? std::string() : std::string("must be in [0, 1]"); }},
      {.section = "quantization", .key = "calibration_dataset", .kind = Kind::string, .default_note = "task.dataset", .allowed_note = "file",
       .help = "direct only: data set (same format as task.dataset) whose first calibration_samples examples calibrate the activation scales",
       .apply = [](RunSpec& r, const Scalar& v) { r.quantization.calibration_dataset = v.s; }, .check = check_not_empty},
      {.section = "quantization", .key = "calibration_samples", .kind = Kind::integer, .min = 1, .max = kIntMax, .default_note = "128",
       .help = "direct only: examples run to calibrate",
       .apply = [](RunSpec& r, const Scalar& v) { r.quantization.calibration_samples = static_cast<int>(v.i); }},
      {.section = "quantization", .key = "lm_head", .kind = Kind::enumeration, .choices = {"float", "int8"}, .per_task = true, .default_note = "\"float\"",
       .help = "decoders: the output projection as the checkpoint stores it (float), or quantized in memory to INT8 W8A8 (per-channel weights, per-token activations); for quantized runs, whose decode step a float lm_head dominates",
       .apply = [](RunSpec& r, const Scalar& v) { r.quantization.lm_head = v.choice == 0 ? "float" : "int8"; }},
      {.section = "quantization", .key = "attention", .kind = Kind::enumeration, .choices = {"float", "bf16"}, .per_task = true, .default_note = "\"float\"",
       .help = "encoders (qa, mlm) computing in float32 on the host: the attention's two products in float32, or on bfloat16 operands with float32 accumulation (needs AVX512-BF16; about twice the float32 rate; for INT8 runs, whose attention is then the larger part of a forward pass; effect on logits in docs/models.md)",
       .apply = [](RunSpec& r, const Scalar& v) { r.quantization.attention = v.choice == 0 ? "float" : "bf16"; }},
      // [parallel]
      {.section = "parallel", .key = "tensor_parallel", .kind = Kind::integer, .min = 1, .max = kIntMax, .default_note = "1",
       .help = "ranks sharing one model replica; the world size must be a multiple of it",
       .apply = [](RunSpec& r, const Scalar& v) { r.parallel.tensor_parallel = static_cast<int>(v.i); }},
      {.section = "parallel", .key = "concurrent_loads", .kind = Kind::integer, .min = 0, .max = kIntMax, .default_note = "0 (all ranks)",
       .help = "ranks that read the checkpoint at the same time (the others wait their turn), to bound a node's peak memory and I/O",
       .apply = [](RunSpec& r, const Scalar& v) { r.parallel.concurrent_loads = static_cast<int>(v.i); }},
      // [output]
      {.section = "output", .key = "path", .kind = Kind::string, .default_note = "results/<run.name>.h5", .allowed_note = "file",
       .help = "HDF5 result file; %j, %A and %a become the Slurm job id, array job id and array task id (\"local\" outside Slurm)",
       .apply = [](RunSpec& r, const Scalar& v) { r.output.path = v.s; }},
      {.section = "output", .key = "logits", .kind = Kind::enumeration, .choices = {"none", "topk", "full", "logprobs16"}, .default_note = "\"full\" (perplexity and the task-file tasks: \"none\")",
       .help = "logits stored in the result file: none, the top-k of each row, every value, or (generate, perplexity) every row's log-probabilities quantized to 16 bits (half of full; error bound in the result-file docs)",
       .apply = [](RunSpec& r, const Scalar& v) { r.output.logits = static_cast<LogitsMode>(v.choice); }},
      {.section = "output", .key = "top_k", .kind = Kind::integer, .min = 1, .max = kIntMax, .default_note = "20",
       .help = "only with logits = \"topk\": values kept per logits row",
       .apply = [](RunSpec& r, const Scalar& v) { r.output.top_k = static_cast<int>(v.i); }},
      {.section = "output", .key = "predictions_json", .kind = Kind::string, .per_task = true, .default_note = "\"\" (not written)", .allowed_note = "file",
       .help = "qa only: also write predictions in the official SQuAD evaluation script's format",
       .apply = [](RunSpec& r, const Scalar& v) { r.output.predictions_json = v.s; }},
      {.section = "output", .key = "lm_eval_json", .kind = Kind::string, .per_task = true, .default_note = "\"\" (not written)", .allowed_note = "file",
       .help = "task-file runs (multiple_choice / generate_until / loglikelihood): also write lm-evaluation-harness's results JSON layout",
       .apply = [](RunSpec& r, const Scalar& v) { r.output.lm_eval_json = v.s; }},
      {.section = "output", .key = "samples_jsonl", .kind = Kind::string, .per_task = true, .default_note = "\"\" (not written)", .allowed_note = "file",
       .help = "task-file runs: also write lm-evaluation-harness's samples JSONL (a line per document, generate_until one per filter, with its hashes)",
       .apply = [](RunSpec& r, const Scalar& v) { r.output.samples_jsonl = v.s; }},
      // [validation]
      {.section = "validation", .key = "golden", .kind = Kind::string, .per_task = true, .default_note = "\"\" (off)", .allowed_note = "file",
       .help = "generate only: an evalrun generate result file; its /generated/ids are fed instead of this run's own tokens (teacher forcing) and this run's logits recorded at every step; its prompts must equal this run's",
       .apply = [](RunSpec& r, const Scalar& v) { r.validation.golden = v.s; }, .check = check_not_empty},
      // [aiu]
      {.section = "aiu", .key = "plugin", .kind = Kind::string, .default_note = "$EVALRUN_AIU_PLUGIN", .allowed_note = "file",
       .help = "model.device = \"aiu\" only: the backend plugin (shared library, docs/devices.md) that runs the projections",
       .apply = [](RunSpec& r, const Scalar& v) { r.aiu.plugin = v.s; }, .check = check_not_empty},
      {.section = "aiu", .key = "vfio_mode", .kind = Kind::enumeration, .choices = {"PF", "VF"}, .default_note = "\"PF\"",
       .help = "model.device = \"aiu\" only: the card as a PCI physical or virtual function (FLEX_DEVICE)",
       .apply = [](RunSpec& r, const Scalar& v) { r.aiu.vfio_mode = v.choice == 0 ? "PF" : "VF"; }},
      {.section = "aiu", .key = "compile_dynamic", .kind = Kind::enumeration, .choices = {"static", "symbolic"}, .default_note = "\"static\"",
       .help = "model.device = \"aiu\" only: compile one program per input shape (static) or one with symbolic batch and sequence sizes",
       .apply = [](RunSpec& r, const Scalar& v) { r.aiu.compile_dynamic = v.choice == 0 ? "static" : "symbolic"; }},
  };
  // clang-format on
  static const bool checked = (check_task_keys(keys), true);
  (void)checked;
  return keys;
}

// The registry rows and the per_task flags must agree: a key a row names that is not per_task (or not
// a key), or a per_task key no row names, is a programming error caught on the first config load.
void check_task_keys(const std::vector<KeySpec>& keys) {
  for (const auto& t : task_registry()) {
    for (const auto& name : t.keys) {
      const bool found = std::any_of(keys.begin(), keys.end(), [&](const KeySpec& k) { return k.per_task && k.full() == name; });
      if (!found) throw std::logic_error(std::string("task registry: task ") + t.name + " names '" + name + "', not a per_task config key");
    }
  }
  for (const auto& k : keys) {
    if (!k.per_task) continue;
    const bool named = std::any_of(task_registry().begin(), task_registry().end(), [&](const TaskInfo& t) { return t.applies(k.full()); });
    if (!named) throw std::logic_error("config key " + k.full() + " is per_task but no task registry row names it");
  }
}

const std::vector<std::string>& section_names() {
  static const std::vector<std::string> names = {"run", "model", "task", "quantization", "parallel", "output", "validation", "aiu"};
  return names;
}

const KeySpec* find_spec(std::string_view section, std::string_view key) {
  for (const auto& k : key_specs())
    if (section == k.section && key == k.key) return &k;
  return nullptr;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

std::string type_phrase(toml::value_t t) {
  switch (t) {
    case toml::value_t::boolean:
      return "a boolean";
    case toml::value_t::integer:
      return "an integer";
    case toml::value_t::floating:
      return "a float";
    case toml::value_t::string:
      return "a string";
    case toml::value_t::offset_datetime:
    case toml::value_t::local_datetime:
      return "a date-time";
    case toml::value_t::local_date:
      return "a date";
    case toml::value_t::local_time:
      return "a time";
    case toml::value_t::array:
      return "an array";
    case toml::value_t::table:
      return "a table";
    default:
      return "nothing";
  }
}

const char* kind_phrase(Kind k) {
  switch (k) {
    case Kind::string:
      return "a string";
    case Kind::integer:
      return "an integer";
    case Kind::floating:
      return "a number";
    case Kind::boolean:
      return "a boolean (true or false)";
    case Kind::enumeration:
      return "a string";
  }
  return "?";
}

// ---- TOML text helpers ----------------------------------------------------------------------------

std::string trim(std::string_view s) {
  const char* ws = " \t\r\n";
  auto b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return "";
  auto e = s.find_last_not_of(ws);
  return std::string(s.substr(b, e - b + 1));
}

// toml11's multi-line report ("[error] toml::parse_x: what\n --> file\n | \n 5 | text\n | ^--- hint")
// condensed to one line; `line` receives the last source line number it points at.
std::string condense_syntax_error(const std::string& report, std::uint32_t& line) {
  std::istringstream in(report);
  std::string first, text, hint, l;
  std::getline(in, first);
  while (std::getline(in, l)) {
    auto bar = l.find(" | ");
    if (bar == std::string::npos) continue;
    std::string num = trim(l.substr(0, bar));
    std::string rest = l.substr(bar + 3);
    if (!num.empty() && std::all_of(num.begin(), num.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      line = static_cast<std::uint32_t>(std::stoul(num));
      text = trim(rest);
    } else if (num.empty()) {
      auto mark = rest.find("--- ");
      if (mark == std::string::npos) mark = rest.find("~ ");
      if (mark != std::string::npos) hint = trim(rest.substr(rest.find(' ', mark) + 1));
    }
  }
  if (first.rfind("[error] ", 0) == 0) first.erase(0, 8);
  if (first.rfind("toml::", 0) == 0) {
    auto colon = first.find(": ");
    if (colon != std::string::npos) first.erase(0, colon + 2);
  }
  std::string msg = "TOML syntax error: " + trim(first);
  if (!hint.empty() && hint != "here") msg += " (" + hint + ")";
  if (!text.empty()) msg += " in: " + text;
  return msg;
}

std::string format_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

// One value as TOML, on one line; floats in their shortest round-trip form.
std::string format_value(const toml::value& v) {
  switch (v.type()) {
    case toml::value_t::string:
      return format_string(v.as_string().str);
    case toml::value_t::integer:
      return std::to_string(v.as_integer());
    case toml::value_t::boolean:
      return v.as_boolean() ? "true" : "false";
    case toml::value_t::floating: {
      double f = v.as_floating();
      if (std::isnan(f)) return "nan";
      if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
      char buf[64];
      auto res = std::to_chars(buf, buf + sizeof buf, f);
      std::string s(buf, res.ptr);
      if (s.find_first_of(".e") == std::string::npos) s += ".0";
      return s;
    }
    default: {
      std::string s = toml::format(v, 0);
      while (!s.empty() && s.back() == '\n') s.pop_back();
      return s;
    }
  }
}

// Text from the command line in a message: as it is, or quoted and shortened when long.
std::string shown(const std::string& text) { return text.size() <= 100 ? text : quote_short(text); }

// ---- the loader ---------------------------------------------------------------------------------

struct Override {
  std::string section, key, text;
  toml::value value;
};

class Loader {
 public:
  explicit Loader(std::string origin) : origin_(std::move(origin)) {}

  RunSpec load(const std::string& text, const std::vector<std::string>& overrides) {
    root_ = parse_text(text);
    for (const auto& o : overrides) apply_override(parse_override(o));
    check_structure();
    RunSpec spec;
    spec.config_path = origin_;
    read_values(spec);
    check_required();
    check_applicability(spec);
    if (spec.output.path.empty()) spec.output.path = "results/" + spec.run.name + ".h5";
    spec.output.path = expand_job_placeholders(spec.output.path, origin_ + ": output.path");
    spec.output.predictions_json = expand_job_placeholders(spec.output.predictions_json, origin_ + ": output.predictions_json");
    spec.output.lm_eval_json = expand_job_placeholders(spec.output.lm_eval_json, origin_ + ": output.lm_eval_json");
    spec.output.samples_jsonl = expand_job_placeholders(spec.output.samples_jsonl, origin_ + ": output.samples_jsonl");
    if (spec.model.tokenizer.empty()) spec.model.tokenizer = spec.model.path;
    // The task's first logits mode when unset (perplexity: full logits of a corpus would dwarf it).
    if (!set_keys_.count("output.logits")) spec.output.logits = task_info(spec.task.kind).logits_modes.front();
    spec.config_text = serialise();
    return spec;
  }

 private:
  std::string origin_;
  toml::value root_;
  std::map<std::string, std::string> overridden_;  // full key -> the "--set" text that set it
  std::set<std::string> set_keys_;                 // full keys present after overrides

  toml::value parse_text(const std::string& text) {
    // Before toml11 sees the text: its error path for invalid UTF-8 inside a literal string reads past
    // the heap block (found by fuzz_config), deep nesting overflows its stack (common/parse_limits.hpp).
    check_toml_limits(text, origin_);
    std::istringstream in(text);
    try {
      return toml::parse(in, kTomlFileSource);
    } catch (const toml::syntax_error& e) {
      std::uint32_t line = e.location().line();
      std::string msg = condense_syntax_error(e.what(), line);
      throw InputError(origin_ + ":" + std::to_string(line), clip_text(msg));  // it quotes the line
    } catch (const std::exception& e) {
      std::string first = e.what();
      first = first.substr(0, first.find('\n'));
      throw InputError(origin_, "cannot parse TOML: " + clip_text(first));
    }
  }

  Override parse_override(const std::string& text) const {
    auto bad = [&](const std::string& why) { return InputError(origin_ + ": --set " + shown(text), why); };
    auto eq = text.find('=');
    if (eq == std::string::npos) throw bad("an override must look like section.key=value (no '=' found)");
    Override o;
    o.text = text;
    std::string lhs = trim(std::string_view(text).substr(0, eq));
    std::string rhs = trim(std::string_view(text).substr(eq + 1));
    auto dot = lhs.find('.');
    if (dot == std::string::npos || dot == 0 || dot + 1 == lhs.size() ||
        lhs.find('.', dot + 1) != std::string::npos)
      throw bad("an override must look like section.key=value, e.g. task.batch_size=4 (got key " + quote_short(lhs) +
                ")");
    o.section = lhs.substr(0, dot);
    o.key = lhs.substr(dot + 1);
    // TOML text is UTF-8; a bare-word value that is not would be kept as a string that the stored
    // config_text could not be parsed back from (found by fuzz/config_fuzz.cpp).
    if (find_invalid_utf8(rhs) != std::string::npos) throw bad("the value is not valid UTF-8");
    // A TOML value if it is one (4, true, "x", 0.5); otherwise the text itself as a string, so
    // `--set model.dtype=bf16` needs no shell-escaped quotes.
    o.value = toml::value(rhs);
    check_toml_limits("v = " + rhs, origin_ + ": --set " + shown(lhs));
    try {
      std::istringstream in("v = " + rhs + "\n");
      toml::value parsed = toml::parse(in, "--set");
      if (parsed.is_table() && parsed.as_table().size() == 1 && parsed.contains("v"))
        o.value = parsed.at("v");
    } catch (const std::exception&) {
    }
    return o;
  }

  void apply_override(const Override& o) {
    auto& root = root_.as_table();
    auto it = root.find(o.section);
    if (it == root.end()) it = root.emplace(o.section, toml::table{}).first;
    if (!it->second.is_table())
      throw InputError(
          origin_ + ": --set " + shown(o.text),
          quote_short(o.section) + " is " + type_phrase(it->second.type()) + " in the file, not a section");
    it->second.as_table()[o.key] = o.value;
    overridden_[o.section + "." + o.key] = o.text;
  }

  // "file:line" for a key from the file, "file: --set key" for one from an override, "file" if unknown.
  std::string where(const std::string& full_key, const toml::value* v) const {
    if (auto it = overridden_.find(full_key); it != overridden_.end()) return origin_ + ": --set " + shown(full_key);
    if (v != nullptr) {
      const auto loc = v->location();
      if (loc.file_name() == kTomlFileSource && loc.line() > 0) return origin_ + ":" + std::to_string(loc.line());
    }
    return origin_;
  }

  // Sort key so entries are checked (and the first error reported) in file order, overrides last.
  std::pair<std::uint64_t, std::string> order(const std::string& full_key, const toml::value& v) const {
    if (overridden_.count(full_key)) return {std::numeric_limits<std::uint64_t>::max(), full_key};
    const auto loc = v.location();
    // Sections a --set created have no place in the file: they come after it too.
    return {loc.file_name() == kTomlFileSource ? loc.line() : std::numeric_limits<std::uint64_t>::max(), full_key};
  }

  template <typename Table>
  std::vector<std::pair<std::string, const toml::value*>> in_file_order(const Table& t,
                                                                        const std::string& prefix) const {
    std::vector<std::pair<std::string, const toml::value*>> out;
    for (const auto& [k, v] : t) out.emplace_back(k, &v);
    std::sort(out.begin(), out.end(), [&](const auto& a, const auto& b) {
      return order(prefix + a.first, *a.second) < order(prefix + b.first, *b.second);
    });
    return out;
  }

  void check_structure() {
    for (const auto& [section, table] : in_file_order(root_.as_table(), "")) {
      const bool known =
          std::find(section_names().begin(), section_names().end(), section) != section_names().end();
      if (!known) {
        // A section not in the file was created by a --set: name that override.
        std::string w = where(section, table);
        if (table->location().file_name() != kTomlFileSource)
          for (const auto& [k, text] : overridden_)
            if (k.rfind(section + ".", 0) == 0) w = where(k, nullptr);
        std::string msg;
        if (table->is_table()) {
          msg = "unknown section " + shown("[" + section + "]");
          auto guess = closest_match(section, section_names());
          if (!guess.empty()) msg += " (did you mean [" + guess + "]?)";
        } else {
          msg = "unknown key " + quote_short(section);
          msg += suggestion_for_top_level_key(section);
        }
        msg += "; sections are " + join(section_names(), ", ");
        throw InputError(w, msg);
      }
      if (!table->is_table())
        throw InputError(where(section, table), quote_short(section) + " must be a section, got " + type_phrase(table->type()));
      for (const auto& [key, value] : in_file_order(table->as_table(), section + ".")) {
        const std::string full = section + "." + key;
        if (const char* why = removed_key(full))
          throw InputError(where(full, value), full + " was removed: " + why + "; delete it from the config");
        if (find_spec(section, key) == nullptr)
          throw InputError(where(full, value),
                           "unknown key " + quote_short(full) + suggestion_for_key(section, key));
        set_keys_.insert(full);
      }
    }
  }

  // "(did you mean 'task.batch_size'?)": a near spelling in the same section, else the same key
  // name in another section (task.dtype -> model.dtype).
  static std::string suggestion_for_key(const std::string& section, const std::string& key) {
    std::vector<std::string> same;
    for (const auto& k : key_specs())
      if (section == k.section) same.push_back(k.key);
    auto guess = closest_match(key, same);
    if (!guess.empty()) return " (did you mean '" + section + "." + guess + "'?)";
    for (const auto& k : key_specs())
      if (key == k.key) return " (did you mean '" + k.full() + "'?)";
    std::vector<std::string> all;
    for (const auto& k : key_specs()) all.push_back(k.full());
    guess = closest_match(section + "." + key, all);
    if (!guess.empty()) return " (did you mean '" + guess + "'?)";
    return "; keys of [" + section + "] are " + join(same, ", ");
  }

  // A bare key at the top of the file: it belongs in a section.
  static std::string suggestion_for_top_level_key(const std::string& key) {
    for (const auto& k : key_specs())
      if (key == k.key) return " (did you mean '" + k.full() + "'? keys belong in a section)";
    return "";
  }

  const toml::value* find_value(const KeySpec& k) const {
    const auto& root = root_.as_table();
    auto s = root.find(k.section);
    if (s == root.end()) return nullptr;
    const auto& t = s->second.as_table();
    auto v = t.find(k.key);
    return v == t.end() ? nullptr : &v->second;
  }

  Scalar typed(const KeySpec& k, const toml::value& v) const {
    const std::string full = k.full();
    // "--set task.batch_size" already names the key; a file location does not.
    const std::string prefix = overridden_.count(full) ? "" : full + ": ";
    auto fail = [&](const std::string& what) { return InputError(where(full, &v), prefix + what); };
    auto wrong_type = [&]() {
      return fail(std::string("expected ") + kind_phrase(k.kind) + ", got " + type_phrase(v.type()));
    };
    Scalar out;
    switch (k.kind) {
      case Kind::string:
        if (!v.is_string()) throw wrong_type();
        out.s = v.as_string().str;
        break;
      case Kind::boolean:
        if (!v.is_boolean()) throw wrong_type();
        out.b = v.as_boolean();
        break;
      case Kind::floating:
        if (v.is_integer()) {
          out.f = static_cast<double>(v.as_integer());
        } else if (v.is_floating()) {
          out.f = v.as_floating();
        } else {
          throw wrong_type();
        }
        break;
      case Kind::integer: {
        if (!v.is_integer()) throw wrong_type();
        out.i = v.as_integer();
        if (out.i < k.min || out.i > k.max) {
          std::string range = k.max == kIntMax || k.max == kI64Max
                                  ? ">= " + std::to_string(k.min)
                                  : "in [" + std::to_string(k.min) + ", " + std::to_string(k.max) + "]";
          if (out.i > k.max && (k.max == kIntMax || k.max == kI64Max)) range = "<= " + std::to_string(k.max);
          throw fail("must be " + range + ", got " + std::to_string(out.i));
        }
        break;
      }
      case Kind::enumeration: {
        if (!v.is_string()) throw wrong_type();
        out.s = v.as_string().str;
        auto it = std::find(k.choices.begin(), k.choices.end(), out.s);
        if (it == k.choices.end()) {
          std::string msg = quote_short(out.s) + " is not allowed; allowed values: " + join(k.choices, ", ");
          // A case slip ("BF16") is the likeliest typo; else the nearest spelling.
          std::string guess;
          for (const auto& c : k.choices)
            if (std::equal(c.begin(), c.end(), out.s.begin(), out.s.end(), [](char a, char b) {
                  return std::tolower(static_cast<unsigned char>(a)) ==
                         std::tolower(static_cast<unsigned char>(b));
                }))
              guess = c;
          if (guess.empty()) guess = closest_match(out.s, k.choices);
          if (!guess.empty()) msg += " (did you mean '" + guess + "'?)";
          throw fail(msg);
        }
        out.choice = static_cast<std::size_t>(it - k.choices.begin());
        break;
      }
    }
    if (k.check != nullptr) {
      std::string problem = k.check(out);
      if (!problem.empty()) throw fail(problem);
    }
    return out;
  }

  void read_values(RunSpec& spec) const {
    // In file order, so the first problem in the file is the one reported.
    std::vector<std::pair<std::pair<std::uint64_t, std::string>, const KeySpec*>> present;
    for (const auto& k : key_specs())
      if (const toml::value* v = find_value(k)) present.push_back({order(k.full(), *v), &k});
    std::sort(present.begin(), present.end());
    for (const auto& [ord, k] : present) k->apply(spec, typed(*k, *find_value(*k)));
  }

  void check_required() const {
    for (const auto& k : key_specs()) {
      if (!k.required || set_keys_.count(k.full())) continue;
      throw InputError(origin_,
                       k.full() + " is required: add '" + k.key + " = ...' under [" + k.section + "]");
    }
  }

  void check_applicability(const RunSpec& spec) const {
    const std::string kind = to_string(spec.task.kind);
    for (const auto& k : key_specs()) {
      const std::string full = k.full();
      if (!set_keys_.count(full)) continue;
      const toml::value* v = find_value(k);
      if (k.per_task && !task_info(spec.task.kind).applies(full)) {
        std::string kinds;
        for (const auto& t : task_registry()) {
          if (!t.applies(full)) continue;
          kinds += std::string(kinds.empty() ? "" : " or ") + "\"" + t.name + "\"";
        }
        throw InputError(where(full, v), full + " applies only to task.kind = " + kinds +
                                             " (this run has task.kind = \"" + kind + "\")");
      }
    }
    if (set_keys_.count("output.logits")) {
      const auto& modes = task_info(spec.task.kind).logits_modes;
      if (std::find(modes.begin(), modes.end(), spec.output.logits) == modes.end()) {
        std::string stored;
        for (auto m : modes) stored += std::string(stored.empty() ? "" : ", ") + "\"" + to_string(m) + "\"";
        throw InputError(where("output.logits", find_value(*find_spec("output", "logits"))),
                         std::string("output.logits = \"") + to_string(spec.output.logits) + "\" is not stored by task.kind = \"" +
                             kind + "\" (it stores " + stored + ")");
      }
    }
    if (set_keys_.count("output.top_k") && spec.output.logits != LogitsMode::topk) {
      throw InputError(
          where("output.top_k", find_value(*find_spec("output", "top_k"))),
          std::string(
              "output.top_k applies only to output.logits = \"topk\" (this run has output.logits = \"") +
              to_string(spec.output.logits) + "\")");
    }
    for (const char* key : {"plugin", "vfio_mode", "compile_dynamic"}) {
      const std::string full = std::string("aiu.") + key;
      if (set_keys_.count(full) && spec.model.device != Device::aiu) {
        throw InputError(where(full, find_value(*find_spec("aiu", key))),
                         full + " applies only to model.device = \"aiu\" (this run has model.device = \"" +
                             to_string(spec.model.device) + "\")");
      }
    }
    if (set_keys_.count("task.null_score_diff_threshold") && !spec.task.version_2_with_negative) {
      throw InputError(
          where("task.null_score_diff_threshold",
                find_value(*find_spec("task", "null_score_diff_threshold"))),
          "task.null_score_diff_threshold applies only when task.version_2_with_negative = true");
    }
    const bool has_dataset = set_keys_.count("task.dataset") > 0;
    const bool has_prompt_set = set_keys_.count("task.prompt_set") > 0;
    if (has_dataset && has_prompt_set) {
      throw InputError(where("task.prompt_set", find_value(*find_spec("task", "prompt_set"))),
                       "set either task.dataset or task.prompt_set, not both");
    }
    const TaskFileUse task_file_use = task_info(spec.task.kind).task_file;
    const bool has_task_file = set_keys_.count("task.task_file") > 0;
    if (task_file_use == TaskFileUse::required && !has_task_file) {
      throw InputError(origin_, std::string("task.task_file is required for task.kind = \"") + to_string(spec.task.kind) +
                                    "\": add 'task_file = \"tasks/....toml\"' under [task]");
    }
    if (task_file_use == TaskFileUse::optional && !has_task_file) {
      // What only a task file gives meaning to: few-shot examples, lm-eval's output files.
      for (const char* key : {"task.num_fewshot", "task.fewshot_seed", "output.lm_eval_json", "output.samples_jsonl"}) {
        if (set_keys_.count(key) == 0) continue;
        const std::string k(key);
        const auto dot = k.find('.');
        throw InputError(where(k, find_value(*find_spec(k.substr(0, dot), k.substr(dot + 1)))),
                         k + " needs task.task_file (a task file's documents); this run reads raw requests from task.dataset");
      }
    }
    if (!has_dataset && !has_prompt_set && !has_task_file) {
      const bool prompt_set = task_info(spec.task.kind).applies("task.prompt_set");
      throw InputError(origin_, task_file_use == TaskFileUse::optional
                                    ? "task.dataset (or task.task_file) is required: add 'dataset = ...' under [task]"
                                : prompt_set ? "task.dataset (or task.prompt_set) is required: add 'dataset = ...' under [task]"
                                             : "task.dataset is required: add 'dataset = ...' under [task]");
    }
    if (set_keys_.count("task.fixed_prompt_length") && spec.task.fixed_prompt_length > 0) {
      if (set_keys_.count("task.min_pad_length") && spec.task.min_pad_length > 0) {
        throw InputError(where("task.min_pad_length", find_value(*find_spec("task", "min_pad_length"))),
                         "task.min_pad_length and task.fixed_prompt_length exclude each other (fixed_prompt_length "
                         "already pads every prompt to its length)");
      }
      if (spec.task.max_prompt_length > 0 && spec.task.max_prompt_length > spec.task.fixed_prompt_length) {
        throw InputError(where("task.max_prompt_length", find_value(*find_spec("task", "max_prompt_length"))),
                         "task.max_prompt_length (" + std::to_string(spec.task.max_prompt_length) +
                             ") is larger than task.fixed_prompt_length (" +
                             std::to_string(spec.task.fixed_prompt_length) + ")");
      }
    }
    if (task_info(spec.task.kind).applies("task.stride") && spec.task.stride > 0 && spec.task.context_length > 0 &&
        spec.task.stride > spec.task.context_length) {
      throw InputError(where("task.stride", find_value(*find_spec("task", "stride"))),
                       "task.stride (" + std::to_string(spec.task.stride) + ") must not exceed task.context_length (" +
                           std::to_string(spec.task.context_length) + "): tokens between windows would never be scored");
    }
    // Direct quantization settings only mean something with direct = true (and direct only for int8).
    if (spec.quantization.direct && spec.quantization.method != "int8") {
      throw InputError(where("quantization.direct", find_value(*find_spec("quantization", "direct"))),
                       "quantization.direct = true needs quantization.method = \"int8\" (got \"" +
                           spec.quantization.method + "\")");
    }
    if (spec.quantization.direct && spec.model.dtype == DType::bf16) {
      throw InputError(where("model.dtype", find_value(*find_spec("model", "dtype"))),
                       "direct INT8 quantization takes float32 activations: use model.dtype = \"fp32\"");
    }
    for (const char* key : {"weights", "activations", "smoothquant", "smoothquant_alpha", "calibration_dataset",
                            "calibration_samples"}) {
      const std::string full = std::string("quantization.") + key;
      if (set_keys_.count(full) && !spec.quantization.direct) {
        throw InputError(where(full, find_value(*find_spec("quantization", key))),
                         full + " applies only with quantization.direct = true (a quantized checkpoint carries its own settings)");
      }
    }
    if (set_keys_.count("quantization.smoothquant_alpha") && !spec.quantization.smoothquant) {
      throw InputError(where("quantization.smoothquant_alpha", find_value(*find_spec("quantization", "smoothquant_alpha"))),
                       "quantization.smoothquant_alpha applies only with quantization.smoothquant = true");
    }
    if (task_info(spec.task.kind).applies("task.doc_stride") && spec.task.doc_stride >= spec.task.max_seq_length) {
      // Blame doc_stride where the user set it; else the max_seq_length that made the default too big.
      const bool stride_set = set_keys_.count("task.doc_stride") > 0;
      const std::string blame = stride_set ? "doc_stride" : "max_seq_length";
      const std::string stride = std::to_string(spec.task.doc_stride) + (stride_set ? "" : " (the default)");
      throw InputError(where("task." + blame, find_value(*find_spec("task", blame))),
                       "task.doc_stride must be in [1, task.max_seq_length) = [1, " +
                           std::to_string(spec.task.max_seq_length) + "), got " + stride);
    }
  }

  // The final table as TOML, sections and keys in the documented order.
  std::string serialise() const {
    std::string out;
    for (const auto& section : section_names()) {
      std::string body;
      for (const auto& k : key_specs()) {
        if (section != k.section) continue;
        if (const toml::value* v = find_value(k))
          body += std::string(k.key) + " = " + format_value(*v) + "\n";
      }
      if (body.empty()) continue;
      if (!out.empty()) out += "\n";
      out += "[" + section + "]\n" + body;
    }
    return out;
  }
};

std::string allowed_text(const KeySpec& k) {
  if (*k.allowed_note) return k.allowed_note;
  if (k.kind == Kind::enumeration) return join(k.choices, ", ");
  if (k.kind == Kind::boolean) return "true, false";
  if (k.kind == Kind::integer) {
    if (k.max == kIntMax || k.max == kI64Max) return ">= " + std::to_string(k.min);
    return std::to_string(k.min) + ".." + std::to_string(k.max);
  }
  return "";
}

const char* type_name(Kind k) {
  switch (k) {
    case Kind::string:
      return "string";
    case Kind::integer:
      return "integer";
    case Kind::floating:
      return "float";
    case Kind::boolean:
      return "boolean";
    case Kind::enumeration:
      return "string";
  }
  return "?";
}

}  // namespace

RunSpec parse_run_spec(const std::string& toml_text, const std::string& origin,
                       const std::vector<std::string>& overrides) {
  return Loader(origin).load(toml_text, overrides);
}

RunSpec load_run_spec(const std::string& path, const std::vector<std::string>& overrides) {
  return parse_run_spec(read_file(path), path, overrides);
}

std::string describe_config_keys() {
  std::vector<std::vector<std::string>> rows = {{"key", "type", "default", "allowed", "description"}};
  for (const auto& k : key_specs())
    rows.push_back({k.full(), type_name(k.kind), k.default_note, allowed_text(k), k.help});
  std::vector<std::size_t> width(rows[0].size(), 0);
  for (const auto& r : rows)
    for (std::size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  auto line = [&](const std::vector<std::string>& r) {
    std::string s = "|";
    for (std::size_t c = 0; c < r.size(); ++c) {
      std::string cell = r[c];
      if (c + 1 < r.size()) cell.resize(width[c], ' ');
      s += " " + cell + " |";
    }
    return s + "\n";
  };
  std::string out = line(rows[0]);
  std::vector<std::string> rule;
  for (std::size_t c = 0; c < width.size(); ++c)
    rule.push_back(std::string(c + 1 < width.size() ? width[c] : 3, '-'));
  out += line(rule);
  for (std::size_t i = 1; i < rows.size(); ++i) out += line(rows[i]);
  return out;
}

}  // namespace evalrun
