// RunSpec: the validated, immutable description of one run, built from a TOML file (config.hpp).
// Every field here has a config key of the same name in the section of the same name; README.md
// documents them all.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace evalrun {

enum class DType { fp32, bf16, fp16 };
enum class Device { cpu, cuda, aiu };
enum class TaskKind { qa, mlm };
enum class LogitsMode { none, topk, full };

const char* to_string(DType);
const char* to_string(Device);
const char* to_string(TaskKind);
const char* to_string(LogitsMode);

struct RunSection {
  std::string name;        // required; names results/<name>.h5 when output.path is not set
  std::uint64_t seed = 0;  // seeds torch (random init, any sampling)
  int threads = 0;         // torch intra-op threads per rank; 0 = cores on the node / ranks on the node
};

struct ModelSection {
  std::string path;         // Hugging Face checkpoint directory (config.json + safetensors)
  std::string tokenizer;    // tokenizer directory; "" = model.path
  DType dtype = DType::fp32;
  Device device = Device::cpu;
};

struct TaskSection {
  TaskKind kind = TaskKind::qa;
  std::string dataset;  // qa: SQuAD JSON / jsonl; mlm: jsonl {"id","text","targets"?} or text file
  int batch_size = 8;
  std::int64_t max_samples = 0;  // 0 = all; otherwise the first N examples (in file order)
  int max_seq_length = 384;
  // qa only
  int doc_stride = 128;
  int n_best_size = 20;
  int max_answer_length = 30;
  bool version_2_with_negative = false;
  double null_score_diff_threshold = 0.0;
  bool pad_to_max_length = false;
  // mlm only
  int top_k = 5;  // predictions kept per <mask>
};

struct ParallelSection {
  int tensor_parallel = 1;
};

struct OutputSection {
  std::string path;  // "" = results/<run.name>.h5
  LogitsMode logits = LogitsMode::full;
  int top_k = 20;                 // logits kept per row when logits = "topk"
  std::string predictions_json;   // qa: also write predictions in the official SQuAD script's format
};

struct RunSpec {
  std::string config_path;  // where it came from (for messages)
  std::string config_text;  // the TOML as given, with --set overrides applied, stored in the result file
  RunSection run;
  ModelSection model;
  TaskSection task;
  ParallelSection parallel;
  OutputSection output;
};

}  // namespace evalrun
