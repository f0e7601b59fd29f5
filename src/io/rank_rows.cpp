#include "io/rank_rows.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "common/logging.hpp"
#include "dist/serialize.hpp"
#include "io/text_file.hpp"

namespace evalrun {
namespace {

double seconds_between(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int open_rows_file(const RowsLayout& layout) {
  const int fd = ::open(layout.temp_path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    throw WriteError(layout.final_path, "the result file " + layout.temp_path,
                     std::string("cannot open it on this rank (is the output directory on a file system every rank "
                                 "sees?): ") +
                         std::strerror(errno));
  }
  return fd;
}

}  // namespace

void RowsLayout::create(H5Writer& out, const std::string& path, RowType type, std::int64_t cols,
                        const std::vector<std::uint64_t>& rows_per_item) {
  Dataset d{path, type, cols, 0, first_rows(rows_per_item)};
  d.offset = out.create_rows(path, type, static_cast<std::int64_t>(d.first_row.back()), cols);
  temp_path = out.temp_path();
  final_path = out.final_path();
  datasets.push_back(std::move(d));
}

RowsLayout RowsLayout::lay_out(H5Writer& out, const RowsPlan& plan) {
  RowsLayout l;
  for (const auto& d : plan.datasets) l.create(out, d.path, d.type, d.cols, d.rows_per_item);
  return l;
}

RowsLayout RowsLayout::existing(H5Writer& out, const RowsPlan& plan) {
  RowsLayout l;
  l.temp_path = out.temp_path();
  l.final_path = out.final_path();
  for (const auto& p : plan.datasets) {
    Dataset d{p.path, p.type, p.cols, 0, first_rows(p.rows_per_item)};
    d.offset = out.rows_offset(p.path, p.type, static_cast<std::int64_t>(d.first_row.back()), p.cols);
    l.datasets.push_back(std::move(d));
  }
  return l;
}

const RowsLayout::Dataset* RowsLayout::find(const std::string& path) const {
  for (const auto& d : datasets) {
    if (d.path == path) return &d;
  }
  return nullptr;
}

std::vector<std::uint64_t> first_rows(const std::vector<std::uint64_t>& rows_per_item) {
  std::vector<std::uint64_t> first{0};
  first.reserve(rows_per_item.size() + 1);
  for (auto n : rows_per_item) first.push_back(first.back() + n);
  return first;
}

std::set<std::string> RowsPlan::paths() const {
  std::set<std::string> p;
  for (const auto& d : datasets) p.insert(d.path);
  return p;
}

std::set<std::string> RowsLayout::paths() const {
  std::set<std::string> p;
  for (const auto& d : datasets) p.insert(d.path);
  return p;
}

std::string RowsLayout::to_bytes() const {
  ByteWriter w;
  w.put_string(temp_path);
  w.put_string(final_path);
  w.put<std::uint64_t>(datasets.size());
  for (const auto& d : datasets) {
    w.put_string(d.path);
    w.put<std::uint8_t>(static_cast<std::uint8_t>(d.type));
    w.put<std::int64_t>(d.cols);
    w.put<std::uint64_t>(d.offset);
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
    d.type = static_cast<RowType>(r.get<std::uint8_t>());
    d.cols = r.get<std::int64_t>();
    d.offset = r.get<std::uint64_t>();
    d.first_row = r.get_vector<std::uint64_t>();
    l.datasets.push_back(std::move(d));
  }
  return l;
}

RankRows::~RankRows() {
  if (fd_ >= 0) ::close(fd_);
}

void RankRows::write_as_added(const RowsLayout& layout) {
  if (fd_ >= 0) throw std::logic_error("rank rows: the rows file is open already");
  fd_ = open_rows_file(layout);
  layout_ = layout;
}

const void* RankRows::Block::data() const {
  if (!u16.empty()) return u16.data();
  if (!i64.empty()) return i64.data();
  return f32.data();
}

void RankRows::add_block(const std::string& dataset, Block block) {
  if (drop_ || block.values() == 0) return;
  if (fd_ >= 0) {
    put(layout_, fd_, dataset, block);
    return;
  }
  blocks_[dataset].push_back(std::move(block));
}

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

void RankRows::put(const RowsLayout& layout, int fd, const std::string& dataset, const Block& b) {
  const RowsLayout::Dataset* d = layout.find(dataset);
  if (d == nullptr) throw std::logic_error("rank rows: " + dataset + " is not in the file's layout");
  if (b.item + 1 >= d->first_row.size()) throw std::logic_error("rank rows: item outside " + dataset);
  if (b.type() != d->type) throw std::logic_error("rank rows: item " + std::to_string(b.item) + " of " + dataset +
                                                  " has another element type than the dataset");
  const std::uint64_t first = d->first_row[b.item], rows = d->first_row[b.item + 1] - first;
  const auto cols = static_cast<std::uint64_t>(d->cols);
  if (b.values() != rows * cols) {
    throw std::logic_error("rank rows: item " + std::to_string(b.item) + " of " + dataset + " has " +
                           std::to_string(b.values()) + " values for " + std::to_string(rows) + " rows of " +
                           std::to_string(cols));
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::size_t elem = row_type_bytes(d->type);
  const char* p = static_cast<const char*>(b.data());
  std::size_t left = b.bytes();
  auto at = static_cast<off_t>(d->offset + first * cols * elem);
  while (left > 0) {
    const ssize_t n = ::pwrite(fd, p, left, at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      throw WriteError(layout.final_path,
                       dataset + " rows " + std::to_string(first) + " to " + std::to_string(first + rows - 1) +
                           " (in " + layout.temp_path + ")",
                       std::strerror(n < 0 ? errno : ENOSPC));
    }
    p += n;
    left -= static_cast<std::size_t>(n);
    at += n;
  }
  seconds_ += seconds_between(t0);
}

void RankRows::sync() {
  if (fd_ < 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  if (::fdatasync(fd_) != 0) {
    throw WriteError(layout_.final_path, "the rows in " + layout_.temp_path + " (syncing them to disk)",
                     std::strerror(errno));
  }
  seconds_ += seconds_between(t0);
}

void RankRows::close() {
  if (fd_ < 0) return;
  sync();
  ::close(std::exchange(fd_, -1));
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

void RankRows::write(const RowsLayout& layout) {
  if (blocks_.empty()) return;
  const int fd = open_rows_file(layout);
  try {
    for (const auto& [path, blocks] : blocks_) {
      for (const auto& b : blocks) put(layout, fd, path, b);
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  log().debug("rows: this rank wrote {} item(s), {} bytes, into {}", items(), bytes(), layout.temp_path);
}

}  // namespace evalrun
