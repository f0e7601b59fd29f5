#include "io/rank_rows.hpp"

#include <exception>
#include <stdexcept>

#include "common/logging.hpp"
#include "dist/serialize.hpp"

namespace evalrun {

void RowsLayout::create(H5Writer& out, const std::string& path, RowType type, std::int64_t cols,
                        const std::vector<std::uint64_t>& rows_per_item) {
  Dataset d{path, {0}};
  d.first_row.reserve(rows_per_item.size() + 1);
  for (auto n : rows_per_item) d.first_row.push_back(d.first_row.back() + n);
  out.create_rows(path, type, static_cast<std::int64_t>(d.first_row.back()), cols, /*row_chunk=*/4);
  temp_path = out.temp_path();
  final_path = out.final_path();
  datasets.push_back(std::move(d));
}

std::string RowsLayout::to_bytes() const {
  ByteWriter w;
  w.put_string(temp_path);
  w.put_string(final_path);
  w.put<std::uint64_t>(datasets.size());
  for (const auto& d : datasets) {
    w.put_string(d.path);
    w.put_vector(d.first_row);
  }
  return w.take();
}

RowsLayout RowsLayout::from_bytes(const std::string& bytes) {
  RowsLayout l;
  ByteReader r(bytes);
  l.temp_path = r.get_string();
  l.final_path = r.get_string();
  const auto n = r.get<std::uint64_t>();
  for (std::uint64_t i = 0; i < n; ++i) {
    Dataset d;
    d.path = r.get_string();
    d.first_row = r.get_vector<std::uint64_t>();
    l.datasets.push_back(std::move(d));
  }
  return l;
}

void RankRows::add_block(const std::string& dataset, Block block) { blocks_[dataset].push_back(std::move(block)); }

void RankRows::add(const std::string& dataset, std::uint64_t item, std::vector<float> rows) {
  Block b;
  b.item = item;
  b.f32 = std::move(rows);
  add_block(dataset, std::move(b));
}

void RankRows::add(const std::string& dataset, std::uint64_t item, std::vector<std::uint16_t> rows) {
  Block b;
  b.item = item;
  b.u16 = std::move(rows);
  add_block(dataset, std::move(b));
}

void RankRows::add(const std::string& dataset, std::uint64_t item, std::vector<std::int64_t> rows) {
  Block b;
  b.item = item;
  b.i64 = std::move(rows);
  add_block(dataset, std::move(b));
}

std::size_t RankRows::bytes() const {
  std::size_t n = 0;
  for (const auto& [path, blocks] : blocks_)
    for (const auto& b : blocks) n += b.bytes();
  return n;
}

std::size_t RankRows::items() const {
  std::size_t n = 0;
  for (const auto& [path, blocks] : blocks_) n += blocks.size();
  return n;
}

void RankRows::write(const RowsLayout& layout, bool parallel) const {
  H5RowWriter file(layout.temp_path, layout.final_path, parallel);
  std::exception_ptr failed;  // the first failure; the collective sequence goes on without writes
  for (const auto& [path, blocks] : blocks_) {
    bool known = false;
    for (const auto& d : layout.datasets) known = known || d.path == path;
    if (!known && !blocks.empty() && !failed)
      failed = std::make_exception_ptr(std::logic_error("rank rows: " + path + " is not in the file's layout"));
  }
  std::size_t rows_written = 0;
  for (const auto& d : layout.datasets) {
    try {
      file.open(d.path);
    } catch (...) {
      if (!failed) failed = std::current_exception();
      continue;
    }
    const auto it = blocks_.find(d.path);
    if (failed || it == blocks_.end()) continue;
    try {
      for (const auto& b : it->second) {
        if (b.item + 1 >= d.first_row.size()) throw std::logic_error("rank rows: item outside " + d.path);
        const auto first = static_cast<std::int64_t>(d.first_row[b.item]);
        const auto rows = static_cast<std::int64_t>(d.first_row[b.item + 1]) - first;
        const std::size_t values = b.values();
        if (values != static_cast<std::size_t>(rows * file.cols())) {
          throw std::logic_error("rank rows: item " + std::to_string(b.item) + " of " + d.path + " has " +
                                 std::to_string(values) + " values for " + std::to_string(rows) + " rows of " +
                                 std::to_string(file.cols()));
        }
        if (!b.f32.empty()) file.write(first, rows, b.f32.data());
        if (!b.u16.empty()) file.write(first, rows, b.u16.data());
        if (!b.i64.empty()) file.write(first, rows, b.i64.data());
        rows_written += static_cast<std::size_t>(rows);
      }
    } catch (...) {
      failed = std::current_exception();
    }
  }
  try {
    file.close();
  } catch (...) {
    if (!failed) failed = std::current_exception();
  }
  if (failed) std::rethrow_exception(failed);
  log().debug("rows: this rank wrote {} rows of {} item(s), {} bytes, into {}", rows_written, items(), bytes(),
              layout.temp_path);
}

}  // namespace evalrun
