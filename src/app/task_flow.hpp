// One task's part in a run. run_command drives every flow through the same collective steps:
//   rank 0: prepare() reads and tokenizes the data set and returns one work shard per rank
//           (and optionally data every rank needs, e.g. a token stream);
//   every rank: load() loads the model (its part of it, with tensor parallelism: `tp` is the rank's
//           group, null without) and checks its shard against it; run() runs the shard (the ranks
//           of a tensor-parallel group get the same shard and run it together);
//   rank 0: finish() gathers every rank's results, post-processes and writes the result file, laying
//           out the vocabulary-wide datasets (io/rank_rows.hpp) unless plan_rows() let rank 0 lay
//           them out before the run, in the rows file finish() then completes;
//   every rank: writes its own rows of those (rank_rows(): as run() finishes them when laid out
//           before the run, else after finish() what run() kept); rank 0 commits the file.
// Shards and results travel as byte buffers (dist/serialize.hpp) so MPI knows nothing of tasks; the
// rows of every logit stay on their rank.
// Resuming (resume/run_journal.hpp): prepare() leaves out the items an interrupted run finished; run()
// hands each batch's finished items to a sink (the rank's journal); finish() gets the journaled
// records as one more gathered buffer.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "app/result_file.hpp"
#include "dist/communicator.hpp"
#include "dist/serialize.hpp"
#include "config/run_spec.hpp"
#include "device/backend.hpp"
#include "io/hdf5_file.hpp"
#include "io/rank_rows.hpp"
#include "model/model.hpp"
#include "resume/run_journal.hpp"
#include "task/batch_done.hpp"

namespace evalrun {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0);

struct RunTimes {
  double prepare = 0, load = 0, inference = 0, model_total = 0;
  double allreduce = 0;  // rank 0's time in tensor-parallel all-reduces
  std::size_t resumed_items = 0;  // taken from an interrupted run's journal
  Clock::time_point start = Clock::now();
};

struct PreparedWork {
  std::vector<std::string> shards;  // one per rank
  std::string shared;               // broadcast to every rank ("" when not needed)
  std::size_t samples = 0, items = 0;  // items: all of them, done before or not
  // sha256 over every work item's input and `shared` (all items, also those left out): what the
  // results depend on besides the config and the model (data set, tokenizer, preprocessing).
  std::string inputs_sha256;
};

// Receives the items of each finished batch: (global index, the record that follows the index in the
// gathered buffer). Empty: not called.
using ItemSink = std::function<void(const FinishedItems&)>;

// What finish() leaves: rank 0's result file, written but not committed, and where the ranks' own
// rows go in it (empty: nowhere); no file when finish() committed it itself (tasks without such rows,
// which write their other outputs after the result file).
struct FinishedFile {
  std::optional<H5Writer> out;
  RowsLayout rows;
};

class TaskFlow {
 public:
  virtual ~TaskFlow() = default;
  // `skip`: indices of items already finished (resumed); they get into no shard.
  virtual PreparedWork prepare(const RunSpec& spec, int ranks, const std::set<std::uint64_t>& skip) = 0;  // rank 0
  virtual void load(const RunSpec& spec, const std::string& shard, const std::string& shared,
                    Provenance& provenance, Communicator* tp) = 0;                       // every rank
  virtual std::string run(const RunSpec& spec, bool report_progress, const ItemSink& sink) = 0;  // every rank
  virtual FinishedFile finish(const RunSpec& spec, const std::vector<std::string>& gathered, RunTimes& times,
                              Provenance provenance) = 0;                                // rank 0
  // rank 0, after prepare(): the record an interrupted run journaled for work item `index` (below the
  // item count) must parse as this task's record, use every byte (from_bytes, dist/serialize.hpp),
  // and fit the item (its sizes); std::runtime_error saying what does not (run_journal.hpp names the
  // file and record).
  virtual void check_record(std::uint64_t index, const std::string& payload) const = 0;
  // rank 0, after load(): the run's row datasets when every item's row count is known before the run
  // (the ranks then write their rows as they finish them, io/rank_rows.hpp); empty otherwise.
  virtual RowsPlan plan_rows(const RunSpec&) const { return {}; }
  // Every rank, before run(): where plan_rows()'s datasets were laid out (finish() completes that file).
  void set_rows_before_run(RowsLayout layout) { rows_before_run_ = std::move(layout); }

  // The device backend load() hands the model to (run_command sets it before load).
  void set_backend(std::shared_ptr<device::Backend> backend) { backend_ = std::move(backend); }
  // The vocabulary-wide rows this rank writes into the file itself: those its run() computed (kept
  // out of the records it returns) and, on rank 0, those finish() found in journaled records.
  RankRows& rank_rows() { return rows_; }

 protected:
  // How a flow loads its model: model.path and model.dtype on the backend's device, expecting the
  // quantization `method`, with this rank's tensor-parallel group.
  ModelLoad model_load(const RunSpec& spec, const std::string& method, Communicator* tp) const;
  // After a flow loads its model: direct INT8 quantization when the run asks for it (calibrating on
  // `calibration`, the serialized CalibrationSet rank 0 sent every rank), the projections handed to
  // the device backend, and what the result file records of the model.
  void install_model(const RunSpec& spec, Model& model, const std::string& calibration, Provenance& provenance);
  // finish(): the result file to write: the rows file laid out before the run, reopened, or a new one.
  H5Writer open_result(const RunSpec& spec) const;
  // finish(): lays out a row dataset in `out` after the run (RowsLayout::create), unless it was laid out
  // before the run.
  void lay_out_rows(RowsLayout& layout, H5Writer& out, const std::string& path, RowType type, std::int64_t cols,
                    const std::vector<std::uint64_t>& rows_per_item) const;

 private:
  // Gives the model's projections to the device backend and records the precision it computes in.
  void put_on_device(Model& model, Provenance& provenance);

  std::shared_ptr<device::Backend> backend_;
  RowsLayout rows_before_run_;

 protected:
  RankRows rows_;
};

// The flow of a task: app/flows/flows.cpp, one row per task of the registry (task/registry.hpp).
std::unique_ptr<TaskFlow> make_flow(TaskKind kind);

// --- helpers shared by the flows ------------------------------------------------------------------

// Logs "progress (rank 0 shard): done/total <unit>, rate, ETA" at most every 5 s.
struct Progress {
  explicit Progress(std::string unit) : unit(std::move(unit)) {}
  void operator()(std::size_t done, std::size_t total, double model_seconds);
  std::string unit;
  Clock::time_point start = Clock::now();
  Clock::time_point last = Clock::now();
};

std::string tokenizer_dir(const RunSpec& spec);
// sha256 over config.json and the weight files the loader reads (Checkpoint::input_files()).
std::string checkpoint_sha256(const std::string& dir);
// Throughput attributes on /metrics and the /timing group.
void write_timing(H5Writer& out, const RunTimes& t, const std::vector<double>& item_seconds, std::size_t items,
                  std::size_t tokens, std::size_t samples);
// Best k of each row: `group`/values float32 [rows, k] and `group`/indices int64 [rows, k]
// (-inf / -1 past a row's length); ties: lower index first.
void write_topk_rows(H5Writer& out, const std::string& group, const std::vector<std::vector<float>>& rows, int k);
// Walks the result buffers gathered from every rank. Each holds an item count, then per item its global
// index followed by what `read_item` consumes. Every index in [0, n) must come exactly once; `what`
// names the items in the error otherwise ("feature", "prompt", ...).
void read_gathered(const std::vector<std::string>& gathered, std::size_t n, const char* what,
                   const std::function<void(ByteReader&, std::size_t)>& read_item);
// The same walk for typed records (Record::read, dist/serialize.hpp): the records by global index.
template <class Record>
std::vector<Record> read_gathered_records(const std::vector<std::string>& gathered, std::size_t n, const char* what) {
  std::vector<Record> out(n);
  read_gathered(gathered, n, what, [&](ByteReader& r, std::size_t index) { out[index] = Record::read(r); });
  return out;
}
// What a rank that is not the first of its tensor-parallel group returns from run(): no items (the
// first rank of the group returns the group's results).
std::string no_results();
// Debug log of a rank's model load: checkpoint files with their tensors and bytes (dtypes stored),
// compute dtype, quantization, weight bytes, seconds, and the shard's items.
void log_model_load(const RunSpec& spec, const Provenance& prov, double seconds, std::size_t items, const char* unit);
// InputError naming quantization.direct for direct quantization with tensor parallelism (each rank
// would calibrate and quantize only its part of a layer, with other scales than a tp = 1 run).
void refuse_direct_with_tp(const RunSpec& spec);


// Builds one rank's result buffer in that layout, handing each batch's records to a sink as well.
class ResultRecords {
 public:
  explicit ResultRecords(ItemSink sink) : sink_(std::move(sink)) {}
  void add(std::uint64_t index, std::string record) { batch_.emplace_back(index, std::move(record)); }
  template <class Record>  // a typed record (Record::write)
  void add(std::uint64_t index, const Record& record) {
    add(index, to_bytes(record));
  }
  void end_batch();    // the batch's records go to the sink and into the buffer
  // The runners' per-batch callback (task/batch_done.hpp) for results that are typed records with an
  // `index`: each finished one added, then the batch ended.
  template <class Record>
  auto batch_done() {
    return [this](const std::vector<Record>& results, const std::vector<std::size_t>& done) {
      for (std::size_t i : done) add(results[i].index, results[i]);
      end_batch();
    };
  }
  std::string take();  // the buffer: item count, then index + record per item
 private:
  ItemSink sink_;
  FinishedItems batch_;
  std::string body_;
  std::uint64_t count_ = 0;
};
// The same layout for records finished by an interrupted run.
std::string records_buffer(const std::map<std::uint64_t, std::string>& records);
// For flows with rows (rank_rows()): each finished record's rows go to `rows` as its batch ends (`keep`
// moves them out of the record), and the record to the sink (the journal): without its rows when they
// were written into the file (synced before the journal), with them when the rank keeps them until
// the end (a resumed run takes them from the journal). The flow builds its buffer from the results
// (records_buffer_of), rows taken out.
template <class Record, class Keep>
BatchDone<Record> keep_and_journal(const ItemSink& sink, RankRows& rows, Keep keep) {
  return [&sink, &rows, keep](std::vector<Record>& results, const std::vector<std::size_t>& done) {
    FinishedItems items;
    for (std::size_t i : done) {
      Record& r = results[i];
      if (sink && !rows.writes_as_added()) items.emplace_back(r.index, to_bytes(r));
      keep(r);
      if (sink && rows.writes_as_added()) items.emplace_back(r.index, to_bytes(r));
    }
    if (sink) sink(items);
  };
}
// The buffer of typed records that carry their `index`, in their order.
template <class Record>
std::string records_buffer_of(const std::vector<Record>& records) {
  ResultRecords r(ItemSink{});
  for (const auto& record : records) r.add(record.index, record);
  return r.take();
}
// sha256 over `parts` in order (PreparedWork::inputs_sha256).
std::string inputs_digest(const std::vector<std::string>& parts);
// The work of a run split into `parts` balanced shards: positions into `items` (the whole work list,
// in global index order) of the items not in `skip`, balanced by `cost` (tokens an item feeds, one per
// item). Logs the plan at debug level: items and tokens per shard.
template <class Item>
std::vector<std::vector<std::size_t>> plan_shards(const std::vector<Item>& items, const std::vector<std::int64_t>& cost,
                                                  const std::set<std::uint64_t>& skip, int parts, const char* unit);
// The items at `positions`, as a shard (put_records).
template <class Item>
std::string shard_bytes(const std::vector<Item>& items, const std::vector<std::size_t>& positions) {
  std::vector<Item> chosen;
  for (std::size_t i : positions) chosen.push_back(items[i]);
  ByteWriter w;
  put_records(w, chosen);
  return w.take();
}
// The untemplated part of plan_shards: `todo` are positions, cost one per position.
std::vector<std::vector<std::size_t>> plan_shards_of(const std::vector<std::size_t>& todo,
                                                     const std::vector<std::int64_t>& cost, int parts, const char* unit);
template <class Item>
std::vector<std::vector<std::size_t>> plan_shards(const std::vector<Item>& items, const std::vector<std::int64_t>& cost,
                                                  const std::set<std::uint64_t>& skip, int parts, const char* unit) {
  std::vector<std::size_t> todo;
  std::vector<std::int64_t> todo_cost;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (skip.count(items[i].index)) continue;
    todo.push_back(i);
    todo_cost.push_back(cost[i]);
  }
  return plan_shards_of(todo, todo_cost, parts, unit);
}

}  // namespace evalrun
