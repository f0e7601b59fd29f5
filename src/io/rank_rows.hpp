// The rows of a result file's per-token datasets (every logit of a generated token, a scored token
// or a mask, their 16-bit log-probabilities, their top-k values and ids) stay on the rank that
// computed them, so that rank 0 never holds more than its own share: rank 0 writes the file's small
// parts, lays these datasets out in it (RowsLayout::create) and closes it; then every rank writes its
// own rows where the layout puts them (RankRows::write: parallel HDF5 over MPI-IO), and rank 0 renames
// the file into place. Rows a run took from an interrupted run's journal are rank 0's to write.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/hdf5_file.hpp"

namespace evalrun {

// Where each work item's rows lie, broadcast from rank 0 to every rank.
struct RowsLayout {
  struct Dataset {
    std::string path;
    std::vector<std::uint64_t> first_row;  // item i: rows [first_row[i], first_row[i + 1])
  };
  std::string temp_path, final_path;  // the closed, uncommitted file (H5Writer::close)
  std::vector<Dataset> datasets;

  // rank 0: creates `path` in `out`, rows_per_item[i] rows of `cols` for item i, in item order.
  void create(H5Writer& out, const std::string& path, RowType type, std::int64_t cols,
              const std::vector<std::uint64_t>& rows_per_item);
  bool empty() const { return datasets.empty(); }
  std::string to_bytes() const;
  static RowsLayout from_bytes(const std::string& bytes);
};

class RankRows {
 public:
  // Item `item`'s rows of `dataset`, row-major (its whole share: one call per item and dataset).
  void add(const std::string& dataset, std::uint64_t item, std::vector<float> rows);
  void add(const std::string& dataset, std::uint64_t item, std::vector<std::uint16_t> rows);
  void add(const std::string& dataset, std::uint64_t item, std::vector<std::int64_t> rows);
  void clear() { blocks_.clear(); }
  std::size_t bytes() const;
  std::size_t items() const;
  // Every rank together (parallel: the job has more than one rank): writes the rows into the
  // datasets of `layout`. A rank's failure does not leave the others in a collective call: it goes on
  // opening every dataset, writes nothing more, closes with them and throws then.
  void write(const RowsLayout& layout, bool parallel) const;

 private:
  struct Block {
    std::uint64_t item = 0;
    std::vector<float> f32;
    std::vector<std::uint16_t> u16;
    std::vector<std::int64_t> i64;  // one of the three holds the rows
    std::size_t values() const { return f32.size() + u16.size() + i64.size(); }
    std::size_t bytes() const { return f32.size() * 4 + u16.size() * 2 + i64.size() * 8; }
  };
  void add_block(const std::string& dataset, Block block);
  std::map<std::string, std::vector<Block>> blocks_;  // by dataset path
};

}  // namespace evalrun
