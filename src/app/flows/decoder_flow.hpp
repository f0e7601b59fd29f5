// What the decoder tasks (generate, perplexity, loglikelihood: causal LMs) share: the tokenizer on rank
// 0, direct INT8 quantization's calibration inputs sent beside the task's own shared data, loading
// the model and the checks of token ids against it. Each task's flow (generate_flow.cpp,
// perplexity_flow.cpp, loglikelihood_flow.cpp) prepares its items, runs them and writes its result file.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "app/direct_quant.hpp"
#include "app/task_flow.hpp"
#include "model/registry.hpp"
#include "task/mc_report.hpp"
#include "task/task_file.hpp"
#include "tokenizer/decoder_tokenizer.hpp"

namespace evalrun {

class DecoderFlow : public TaskFlow {
 public:
  using Calibration = CalibrationSet (*)(const RunSpec&);
  explicit DecoderFlow(Calibration calibration) : calibration_(calibration) {}

  PreparedWork prepare(const RunSpec& spec, int ranks, const std::set<std::uint64_t>& skip) final;
  void load(const RunSpec& spec, const std::string& shard, const std::string& shared, Provenance& prov,
            Communicator* tp) final;

 protected:
  // rank 0, with tokenizer_ loaded: the task's shards and shared data; `everything` gets every item
  // as one shard (for the inputs digest).
  virtual PreparedWork prepare_task(const RunSpec& spec, int ranks, const std::set<std::uint64_t>& skip,
                                    std::string& everything) = 0;
  // every rank, after the model is loaded: the task's shard and shared data (checked against `vocab`).
  // Returns the shard's item count (for the load log).
  virtual std::size_t load_task(const RunSpec& spec, const std::string& shard, const std::string& shared,
                                std::int64_t vocab) = 0;

  // output.logits = "topk" (generate, perplexity): an item's top-k values and ids, k per stored row,
  // go to rank_rows() as its logits would.
  void keep_topk_rows(std::uint64_t index, std::vector<float>& values, std::vector<std::int64_t>& ids);
  // The row datasets output.logits asks of generate and perplexity (their type and columns; `logits`:
  // the full rows' dataset), and those with `rows_per_item` rows per item.
  static std::vector<RowsPlan::Dataset> row_datasets(const RunSpec& spec, std::int64_t vocab, const char* logits);
  static RowsPlan plan_of(const RunSpec& spec, std::int64_t vocab, const char* logits,
                          const std::vector<std::uint64_t>& rows_per_item);

  std::optional<DecoderTokenizer> tokenizer_;  // rank 0
  std::unique_ptr<CausalLM> model_;

 private:
  Calibration calibration_;
};

// What the runners keep of each step's logits (output.logits): 0 none, -1 full rows, k > 0 top-k.
int keep_logits(const RunSpec& spec);
// InputError naming the model when an id is outside its vocabulary; `what` names the ids.
void check_ids_in_vocab(const std::vector<std::int64_t>& ids, std::int64_t vocab, const std::string& model_path,
                        const std::string& what);

// The tasks that read a benchmark task file (multiple_choice, generate_until): the run's task file,
// whose output_type must be the run's task.kind (InputError naming both otherwise) ...
TaskFile task_file_for(const RunSpec& spec);
// ... and its documents: task.dataset or the task file's own, with the run's few-shot settings; the
// first max_docs (0 = all).
std::vector<TaskDocument> task_documents(const RunSpec& spec, const TaskFile& task, std::size_t max_docs);
// A document's sample id in the result file: "doc-<doc_id>".
std::string document_sample_id(const TaskDocument& doc);
// What such a run's result file starts with: provenance, /samples (the document ids), the root
// attributes task_file and task_name, /documents/doc_id and /documents/prompt (the first request's
// context, few-shot examples included).
void write_task_documents(H5Writer& out, const RunSpec& spec, const Provenance& prov, const TaskFile& task,
                          const std::vector<TaskDocument>& docs);
// lm-eval's run facts of such a run (results JSON), and the writing of output.lm_eval_json (the results
// text) and output.samples_jsonl (one line each), when set, through a temporary name and a rename.
McRunInfo lm_eval_run_info(const RunSpec& spec, const TaskFile& task, std::size_t n_original);
void write_lm_eval_outputs(const RunSpec& spec, const std::string& results_json,
                           const std::vector<std::string>& sample_lines);
// Direct INT8's calibration inputs of such a task: the first calibration_samples documents of
// quantization.calibration_dataset (else the run's documents), turned into model inputs by `inputs`
// as the run feeds them. Empty when the settings need no calibration.
CalibrationSet task_file_calibration(
    const RunSpec& spec,
    const std::function<std::vector<std::vector<std::int64_t>>(const std::vector<TaskDocument>&, const DecoderTokenizer&)>& inputs);

}  // namespace evalrun
