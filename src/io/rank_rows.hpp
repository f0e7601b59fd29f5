// The rows of a result file's per-token datasets (every logit of a generated token, a scored token
// or a mask, their 16-bit log-probabilities, their top-k values and ids) never travel to rank 0: each
// rank writes its own rows into the file, at the place rank 0 allocated for them (RowsLayout::create:
// contiguous datasets, H5Writer::create_rows), with positioned writes into the closed file. When:
//  - during the run, when every item's row count is known before it (perplexity windows, MLM masks,
//    generation without early termination): rank 0 lays the datasets out in the run's rows file (in
//    the journal directory) before any rank runs; each rank writes an item's rows as its batch ends
//    (write_as_added: a writer thread of the rank writes them while it computes on), so no rank holds
//    more than RankRows::kPendingBytes of them, and syncs them before its journal records the item,
//    whose record then carries no rows: a resumed run completes the same file. Rank 0 then adds the
//    file's other parts to it (H5Writer::reopen) and renames it into place;
//  - after the run, otherwise (a generated text's length is known when it ends): each rank keeps its
//    rows in a scratch file (spill_to; its journal records carry them too), rank 0 writes the file's
//    other parts and lays the rows out, and every rank writes what it kept (write). Rows taken from a
//    journal are rank 0's to write.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "io/hdf5_file.hpp"

namespace evalrun {

// The row datasets of a run whose every item's row count is known before it runs: for each, its
// element type, columns and rows per item (TaskFlow::plan_rows).
struct RowsPlan {
  struct Dataset {
    std::string path;
    RowType type = RowType::f32;
    std::int64_t cols = 0;
    std::vector<std::uint64_t> rows_per_item;
  };
  std::vector<Dataset> datasets;
  bool empty() const { return datasets.empty(); }
  std::set<std::string> paths() const;
};

// Where each item's rows start, from the rows per item: {0, n0, n0 + n1, ...}.
std::vector<std::uint64_t> first_rows(const std::vector<std::uint64_t>& rows_per_item);

// Where each work item's rows lie, broadcast from rank 0 to every rank.
struct RowsLayout {
  struct Dataset {
    std::string path;
    RowType type = RowType::f32;
    std::int64_t cols = 0;
    std::uint64_t offset = 0;              // of row 0, in bytes from the start of the file
    std::vector<std::uint64_t> first_row;  // item i: rows [first_row[i], first_row[i + 1])
  };
  std::string temp_path, final_path;  // the file the rows go into, and where it is committed
  std::vector<Dataset> datasets;

  // rank 0: creates `path` in `out`, rows_per_item[i] rows of `cols` for item i, in item order.
  void create(H5Writer& out, const std::string& path, RowType type, std::int64_t cols,
              const std::vector<std::uint64_t>& rows_per_item);
  // rank 0: every dataset of `plan` created in `out` ...
  static RowsLayout lay_out(H5Writer& out, const RowsPlan& plan);
  // ... or found there as create() left them (a resumed run's rows file); InputError naming the
  // file and dataset when one is not.
  static RowsLayout existing(H5Writer& out, const RowsPlan& plan);
  bool empty() const { return datasets.empty(); }
  const Dataset* find(const std::string& path) const;
  std::set<std::string> paths() const;
  std::string to_bytes() const;
  static RowsLayout from_bytes(const std::string& bytes);
};

class PositionedWriter;

class RankRows {
 public:
  RankRows();
  ~RankRows();
  RankRows(const RankRows&) = delete;
  RankRows& operator=(const RankRows&) = delete;

  // From here on add() hands each item's rows to a writer thread, which writes them into the file of
  // `layout` (PositionedWriter: direct I/O where the file system takes it) while the rank computes
  // on; the rank keeps nothing, and waits only when more than kPendingBytes are not written yet.
  void write_as_added(const RowsLayout& layout);
  bool writes_as_added() const { return file_ != nullptr; }
  // From here on add() neither keeps nor writes (a tensor-parallel group's other ranks: the first
  // rank of the group writes the group's rows).
  void drop_all() { drop_ = true; }
  // Without write_as_added: the rows kept until the end go to `path`, a scratch file of this rank
  // (made on the first add(), written by the writer thread during the run, removed by clear()),
  // instead of staying in memory; write() reads them back one item at a time.
  void spill_to(const std::string& path);

  // Item `item`'s rows of `dataset`, row-major (its whole share: one call per item and dataset).
  // A write of the writer thread that failed is thrown by the next add(), sync() or close().
  void add(const std::string& dataset, std::uint64_t item, std::vector<float> rows);
  void add(const std::string& dataset, std::uint64_t item, std::vector<std::uint16_t> rows);
  void add(const std::string& dataset, std::uint64_t item, std::vector<std::int64_t> rows);
  // Runs `after_written` on the writer thread once the rows added so far are written and synced (the
  // journal records their items then: a record on disk means its rows are), at once without one.
  void then(std::function<void()> after_written);
  // The rows added so far are on disk, and the `then`s added so far have run (write_as_added).
  void sync();
  // Syncs, ends the writer thread and closes the file write_as_added opened ...
  void close();
  // ... or, on the way out of a failed run, ends the writer thread after what is queued, and closes.
  void stop() noexcept;

  // After the run: writes the rows kept into the file of `layout`.
  void write(const RowsLayout& layout);
  void clear();  // forgets the rows kept, and removes the scratch file
  std::size_t bytes() const;
  std::size_t items() const;
  // The time this rank's own thread spent on its rows: waiting for the writer thread, syncing, and
  // writing after the run (the rows' share of the rank's wall time) ...
  double write_seconds() const { return seconds_; }
  // ... and the writer thread's time writing them meanwhile.
  double background_seconds() const;
  bool direct_io() const;  // the last file written, by direct I/O

  // Rows handed to the writer thread and not yet written, at most (one item's rows may be more).
  static constexpr std::size_t kPendingBytes = std::size_t{256} << 20;

 private:
  struct Block {
    std::string dataset;
    std::uint64_t item = 0;
    std::vector<float> f32;
    std::vector<std::uint16_t> u16;
    std::vector<std::int64_t> i64;  // one of the three holds the rows
    std::size_t values() const { return f32.size() + u16.size() + i64.size(); }
    std::size_t bytes() const { return f32.size() * 4 + u16.size() * 2 + i64.size() * 8; }
    RowType type() const { return !u16.empty() ? RowType::u16 : !i64.empty() ? RowType::i64 : RowType::f32; }
    const void* data() const;
  };
  struct Spilled {  // a block in the scratch file
    std::string dataset;
    std::uint64_t item = 0;
    RowType type = RowType::f32;
    std::size_t values = 0;
    std::uint64_t offset = 0;
  };
  struct Writer;  // the writer thread and its queue
  void add_block(Block block);
  void open_spill();
  [[noreturn]] void throw_spill_error(const Spilled& s, int err) const;
  // Where item `item`'s rows of `dataset` go in the file of `layout` (std::logic_error when `values`
  // of `type` do not fit there).
  static std::uint64_t offset_of(const RowsLayout& layout, const std::string& dataset, std::uint64_t item, RowType type,
                                 std::size_t values);
  // WriteError naming the rows of a write that failed with `err`.
  [[noreturn]] static void throw_write_error(const RowsLayout& layout, const std::string& dataset, std::uint64_t item,
                                             int err);
  [[noreturn]] void throw_sync_error(int err) const;  // of write_as_added's file
  std::map<std::string, std::vector<Block>> blocks_;  // by dataset path
  RowsLayout layout_;  // write_as_added's
  std::unique_ptr<PositionedWriter> file_;
  std::string spill_path_;  // spill_to's
  std::unique_ptr<PositionedWriter> spill_;
  std::uint64_t spill_end_ = 0;
  std::vector<Spilled> spilled_;
  std::unique_ptr<Writer> writer_;  // of file_ or spill_
  bool drop_ = false, direct_ = false;
  double seconds_ = 0, background_seconds_ = 0;
};

}  // namespace evalrun
