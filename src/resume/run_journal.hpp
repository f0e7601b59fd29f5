// Resuming an interrupted run (`evalrun run CONFIG --resume`).
//
// While a run goes, every rank appends each work item it finishes (its global index and the result
// record it sends to rank 0 at the end) to its own file in <output.path>.journal/:
//   fingerprint.json        what the results depend on; rank 0 writes it before any rank runs
//   <run id>.rank<R>.evj    rank R's finished items (io/journal.hpp: CRC-checked records, synced to
//                           disk at most once a second and when the rank's shard is done)
//   <run id>.rows.h5        the result file's row datasets, when the ranks write their rows into it
//                           during the run (io/rank_rows.hpp); its items' records then hold no rows,
//                           and the file, completed, becomes the result file
// The run id (in fingerprint.json) keeps files of another run at the same path apart. Per-rank files
// need no communication during the run; rank 0 reads every file it can see when resuming, so on a
// filesystem all ranks share nothing is lost, and items it cannot see are simply computed again.
//
// On --resume rank 0 checks the new run's fingerprint against the journal's (InputError naming every
// change), hands out only the items not yet done and merges the journaled records with the new ones.
// After the result file is written the directory is removed.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "config/run_spec.hpp"

namespace evalrun {

class JournalWriter;

// One batch's finished items as (global index, result record) pairs.
using FinishedItems = std::vector<std::pair<std::uint64_t, std::string>>;

// Config keys that may differ between an interrupted run and its resumption: results do not depend on
// them beyond float rounding (like the world size, which is no config key). Every other key must be
// the same, and set (or not set) in the same way.
const std::vector<std::string>& resume_free_keys();

// RunSpec::config_text as "section.key" -> value (TOML text as stored), e.g. "task.batch_size" -> "4".
std::map<std::string, std::string> config_entries(const std::string& config_text);

struct RunFingerprint {
  std::map<std::string, std::string> config;  // config_entries() without resume_free_keys()
  std::string model_sha256;                   // config.json and weights of model.path
  std::string inputs_sha256;                  // every prepared work item: data set, tokenizer, preprocessing
};

RunFingerprint run_fingerprint(const RunSpec& spec, std::string model_sha256, std::string inputs_sha256);

// What changed from `then` to `now`, one phrase per change ("task.max_new_tokens = 8 (was 4)");
// empty when a run with `then` may be resumed by one with `now`.
std::vector<std::string> fingerprint_changes(const RunFingerprint& then, const RunFingerprint& now);

// Rank 0's view of the journal directory of one output path.
class RunJournal {
 public:
  // Reads what an interrupted run left: its fingerprint and the items every rank finished.
  // resume = false and finished items there: InputError (add --resume, or remove the directory).
  // resume = true and no journal (or one without a fingerprint): a fresh run, with a log line.
  RunJournal(const std::string& output_path, bool resume);

  const std::string& dir() const { return dir_; }
  bool resuming() const { return then_.has_value(); }
  const std::map<std::uint64_t, std::string>& finished() const { return finished_; }
  std::set<std::uint64_t> finished_indices() const;
  std::map<std::uint64_t, std::string> take_finished() { return std::move(finished_); }

  // The new run's fingerprint and its number of work items, once its work is prepared. Resuming:
  // InputError naming the journal and every change unless the fingerprint equals the interrupted
  // run's. Then every finished item: InputError naming the journal file and record when its index is
  // not below `items`, or when check_record(index, payload) throws (a record that is not the task's,
  // or does not fit its item: TaskFlow::check_record).
  using RecordCheck = std::function<void(std::uint64_t index, const std::string& payload)>;
  void check(const RunFingerprint& now, std::uint64_t items, const RecordCheck& check_record);
  // Before any rank runs: a fresh run (re)creates the directory and writes its fingerprint.
  void start();
  const std::string& run_id() const { return run_id_; }
  // After the result file is written: removes the files evalrun wrote there, then the directory if
  // nothing else is in it (else a warning naming what is left).
  void remove();

  static std::string dir_for(const std::string& output_path) { return output_path + ".journal"; }
  // The run's rows file (after start(): of this run, or of the interrupted run being resumed).
  std::string rows_file() const;
  static std::string rank_file(const std::string& output_path, const std::string& run_id, int rank);
  // A rank's scratch file of the rows it keeps until the end (RankRows::spill_to): nothing reads it
  // on --resume (the journal's records carry those rows).
  static std::string kept_rows_file(const std::string& output_path, const std::string& run_id, int rank);

 private:
  std::string dir_;
  std::optional<RunFingerprint> then_;  // the interrupted run's, when resuming
  std::optional<RunFingerprint> now_;
  std::string run_id_;
  std::map<std::uint64_t, std::string> finished_;
  std::map<std::uint64_t, std::string> origin_;  // index -> "FILE: record at byte N" (for messages)
};

// One rank's side: appends each finished batch to its journal file and syncs it to disk with the first
// batch, then when at least `sync_interval` passed since the last sync (a crash loses at most that
// much work; syncing every batch of a small model would cost more than the batch), and on close().
// A batch whose rows the rank writes into the rows file is added once they are on disk there
// (RankRows::then).
class JournalAppender {
 public:
  JournalAppender(const std::string& output_path, const std::string& run_id, int rank,
                  std::chrono::milliseconds sync_interval = std::chrono::milliseconds(1000));
  ~JournalAppender();
  void add(const FinishedItems& items);
  void close();  // syncs what is pending

 private:
  std::unique_ptr<JournalWriter> writer_;
  std::chrono::milliseconds interval_;
  std::optional<std::chrono::steady_clock::time_point> last_sync_;  // none before the first batch
};

}  // namespace evalrun
