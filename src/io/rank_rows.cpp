#include "io/rank_rows.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <utility>

#include "common/logging.hpp"
#include "dist/serialize.hpp"
#include "io/positioned_reader.hpp"
#include "io/positioned_writer.hpp"
#include "io/text_file.hpp"

namespace evalrun {
namespace {

double seconds_between(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::unique_ptr<PositionedWriter> open_rows_file(const RowsLayout& layout) {
  try {
    return std::make_unique<PositionedWriter>(layout.temp_path);
  } catch (const std::system_error& e) {
    throw WriteError(layout.final_path, "the result file " + layout.temp_path,
                     std::string("cannot open it on this rank (is the output directory on a file system every rank "
                                 "sees?): ") +
                         std::strerror(e.code().value()));
  }
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

// A rank's writer thread: writes the blocks handed to it in order, each at its offset in `file`, and
// runs each `then` once every block before it is written and synced; after the first failure (kept
// for the rank's thread to throw) it drops the rest, `then`s included.
struct RankRows::Writer {
  struct Job {
    Block block;
    std::uint64_t offset = 0;
    std::function<void()> then;  // set: a marker, no block
  };
  PositionedWriter& file;
  std::function<void(const Block*, int)> fail;  // throws the WriteError for a block's write (null: the sync)
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<Job> queue;
  std::size_t pending_bytes = 0;  // of the blocks queued or being written
  bool stop = false;
  std::exception_ptr failure;
  double seconds = 0;
  std::thread thread;

  Writer(PositionedWriter& f, std::function<void(const Block*, int)> on_failure)
      : file(f), fail(std::move(on_failure)), thread([this] { run(); }) {}
  ~Writer() { finish(); }
  // Ends the thread after what is queued.
  void finish() {
    if (!thread.joinable()) return;
    {
      std::lock_guard lock(mutex);
      stop = true;
    }
    changed.notify_all();
    thread.join();
  }
  void run() {
    std::unique_lock lock(mutex);
    for (;;) {
      changed.wait(lock, [&] { return stop || !queue.empty(); });
      if (queue.empty()) return;  // stopped, and nothing left
      Job& job = queue.front();
      const bool failed = failure != nullptr;
      lock.unlock();
      const auto t0 = std::chrono::steady_clock::now();
      std::exception_ptr error;
      try {
        if (failed) {
        } else if (job.then) {
          if (const int e = file.sync()) fail(nullptr, e);
          job.then();
        } else if (const int e = file.write(job.offset, job.block.data(), job.block.bytes())) {
          fail(&job.block, e);
        }
      } catch (...) {
        error = std::current_exception();
      }
      const std::size_t bytes = job.block.bytes();
      lock.lock();
      seconds += seconds_between(t0);
      if (error && !failure) failure = error;
      pending_bytes -= bytes;
      queue.pop_front();
      changed.notify_all();
    }
  }
  // Waits until `done` holds (under the lock); throws the writer's failure.
  template <class Done>
  void wait_until(Done done) {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return failure || done(); });
    if (failure) std::rethrow_exception(failure);
  }
  void drain() { wait_until([&] { return queue.empty(); }); }
  void push(Job job) {
    const std::size_t bytes = job.block.bytes();
    // Room for it, or nothing else pending: one item's rows may be more than the bound alone.
    wait_until([&] { return pending_bytes == 0 || pending_bytes + bytes <= kPendingBytes; });
    {
      std::lock_guard lock(mutex);
      pending_bytes += bytes;
      queue.push_back(std::move(job));
    }
    changed.notify_all();
  }
};

RankRows::RankRows() = default;

RankRows::~RankRows() {
  stop();
  spill_.reset();
  if (!spill_path_.empty()) ::unlink(spill_path_.c_str());
}

void RankRows::stop() noexcept {
  if (writer_) {
    writer_->finish();
    background_seconds_ += writer_->seconds;
  }
  writer_.reset();
  file_.reset();
}

void RankRows::write_as_added(const RowsLayout& layout) {
  if (file_) throw std::logic_error("rank rows: the rows file is open already");
  layout_ = layout;
  file_ = open_rows_file(layout_);
  direct_ = file_->direct();
  writer_ = std::make_unique<Writer>(*file_, [this](const Block* b, int e) {
    if (b == nullptr) throw_sync_error(e);
    throw_write_error(layout_, b->dataset, b->item, e);
  });
}

void RankRows::spill_to(const std::string& path) {
  if (writer_) throw std::logic_error("rank rows: spill_to while rows are being written");
  spill_path_ = path;
}

void RankRows::then(std::function<void()> after_written) {
  if (!file_) {
    after_written();
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  writer_->push({Block{}, 0, std::move(after_written)});
  seconds_ += seconds_between(t0);
}

const void* RankRows::Block::data() const {
  if (!u16.empty()) return u16.data();
  if (!i64.empty()) return i64.data();
  return f32.data();
}

void RankRows::add_block(Block block) {
  if (drop_ || block.values() == 0) return;
  if (file_) {
    const std::uint64_t offset = offset_of(layout_, block.dataset, block.item, block.type(), block.values());
    const auto t0 = std::chrono::steady_clock::now();
    writer_->push({std::move(block), offset, {}});
    seconds_ += seconds_between(t0);
    return;
  }
  if (spill_path_.empty()) {
    blocks_[block.dataset].push_back(std::move(block));
    return;
  }
  // Kept until the end, in the scratch file: at a block boundary, so its writes are direct.
  if (!spill_) open_spill();
  const std::uint64_t offset = PositionedWriter::block_boundary_at_or_after(spill_end_);
  spill_end_ = offset + block.bytes();
  spilled_.push_back({block.dataset, block.item, block.type(), block.values(), offset});
  const auto t0 = std::chrono::steady_clock::now();
  if (writer_) {
    writer_->push({std::move(block), offset, {}});
  } else if (const int e = spill_->write(offset, block.data(), block.bytes())) {  // after the run (rank 0)
    throw_spill_error(spilled_.back(), e);
  }
  seconds_ += seconds_between(t0);
}

void RankRows::open_spill() {
  const int fd = ::open(spill_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw WriteError(spill_path_, "the rows this rank keeps until the end of the run", std::strerror(errno));
  ::close(fd);
  spill_ = std::make_unique<PositionedWriter>(spill_path_);
  writer_ = std::make_unique<Writer>(*spill_, [this](const Block* b, int e) {
    Spilled s{};
    if (b != nullptr) s = {b->dataset, b->item, b->type(), b->values(), 0};
    throw_spill_error(s, e);
  });
}

void RankRows::throw_spill_error(const Spilled& s, int e) const {
  throw WriteError(spill_path_,
                   s.dataset.empty() ? std::string("the rows this rank keeps until the end of the run")
                                     : "item " + std::to_string(s.item) + "'s rows of " + s.dataset +
                                           ", which this rank keeps until the end of the run",
                   std::strerror(e));
}

void RankRows::add(const std::string& dataset, std::uint64_t item, std::vector<float> rows) {
  Block b;
  b.dataset = dataset;
  b.item = item;
  b.f32 = std::move(rows);
  add_block(std::move(b));
}

void RankRows::add(const std::string& dataset, std::uint64_t item, std::vector<std::uint16_t> rows) {
  Block b;
  b.dataset = dataset;
  b.item = item;
  b.u16 = std::move(rows);
  add_block(std::move(b));
}

void RankRows::add(const std::string& dataset, std::uint64_t item, std::vector<std::int64_t> rows) {
  Block b;
  b.dataset = dataset;
  b.item = item;
  b.i64 = std::move(rows);
  add_block(std::move(b));
}

std::uint64_t RankRows::offset_of(const RowsLayout& layout, const std::string& dataset, std::uint64_t item,
                                  RowType type, std::size_t values) {
  const RowsLayout::Dataset* d = layout.find(dataset);
  if (d == nullptr) throw std::logic_error("rank rows: " + dataset + " is not in the file's layout");
  if (item + 1 >= d->first_row.size()) throw std::logic_error("rank rows: item outside " + dataset);
  if (type != d->type) throw std::logic_error("rank rows: item " + std::to_string(item) + " of " + dataset +
                                              " has another element type than the dataset");
  const std::uint64_t first = d->first_row[item], rows = d->first_row[item + 1] - first;
  const auto cols = static_cast<std::uint64_t>(d->cols);
  if (values != rows * cols) {
    throw std::logic_error("rank rows: item " + std::to_string(item) + " of " + dataset + " has " +
                           std::to_string(values) + " values for " + std::to_string(rows) + " rows of " +
                           std::to_string(cols));
  }
  return d->offset + first * cols * row_type_bytes(d->type);
}

void RankRows::throw_write_error(const RowsLayout& layout, const std::string& dataset, std::uint64_t item, int e) {
  const RowsLayout::Dataset& d = *layout.find(dataset);
  const std::uint64_t first = d.first_row[item], last = d.first_row[item + 1] - 1;
  throw WriteError(layout.final_path,
                   dataset + " rows " + std::to_string(first) + " to " + std::to_string(last) + " (in " +
                       layout.temp_path + ")",
                   std::strerror(e));
}

void RankRows::throw_sync_error(int e) const {
  throw WriteError(layout_.final_path, "the rows in " + layout_.temp_path + " (syncing them to disk)", std::strerror(e));
}

void RankRows::sync() {
  if (!file_) return;
  const auto t0 = std::chrono::steady_clock::now();
  writer_->drain();  // the journal's `then`s too
  if (const int e = file_->sync()) throw_sync_error(e);
  seconds_ += seconds_between(t0);
}

void RankRows::close() {
  if (writer_) {
    const auto t0 = std::chrono::steady_clock::now();
    writer_->drain();
    seconds_ += seconds_between(t0);
  }
  sync();
  stop();
}

double RankRows::background_seconds() const {
  if (!writer_) return background_seconds_;
  std::lock_guard lock(writer_->mutex);
  return background_seconds_ + writer_->seconds;
}

bool RankRows::direct_io() const { return direct_; }

std::size_t RankRows::bytes() const {
  std::size_t n = 0;
  for (const auto& [path, blocks] : blocks_)
    for (const auto& b : blocks) n += b.bytes();
  for (const auto& s : spilled_) n += s.values * row_type_bytes(s.type);
  return n;
}

std::size_t RankRows::items() const {
  std::size_t n = spilled_.size();
  for (const auto& [path, blocks] : blocks_) n += blocks.size();
  return n;
}

void RankRows::write(const RowsLayout& layout) {
  if (blocks_.empty() && spilled_.empty()) return;
  close();  // the scratch file's writes done
  const auto t0 = std::chrono::steady_clock::now();
  auto file = open_rows_file(layout);
  direct_ = file->direct();
  for (const auto& [path, blocks] : blocks_) {
    for (const auto& b : blocks) {
      const std::uint64_t at = offset_of(layout, b.dataset, b.item, b.type(), b.values());
      if (const int e = file->write(at, b.data(), b.bytes())) throw_write_error(layout, b.dataset, b.item, e);
    }
  }
  if (!spilled_.empty()) {
    // One item's rows at a time, read back from the scratch file directly, the next item's on a
    // second thread while this one's are written (io/positioned_reader.hpp).
    const auto bytes_of = [](const Spilled& s) { return s.values * row_type_bytes(s.type); };
    std::vector<std::uint64_t> to;
    std::size_t most = 0;
    for (const auto& s : spilled_) {
      to.push_back(offset_of(layout, s.dataset, s.item, s.type, s.values));
      most = std::max(most, bytes_of(s));
    }
    std::unique_ptr<PositionedReader> in;
    try {
      in = std::make_unique<PositionedReader>(spill_path_, most);
    } catch (const std::system_error& e) {
      throw WriteError(layout.final_path, "the rows kept in " + spill_path_, std::strerror(e.code().value()));
    }
    for (std::size_t k = 0; k < spilled_.size(); ++k) {
      const Spilled& s = spilled_[k];
      const char* rows = nullptr;
      try {
        rows = in->read(s.offset, bytes_of(s));
      } catch (const std::system_error& e) {
        throw WriteError(layout.final_path, "the rows kept in " + spill_path_ + " (reading them back)",
                         std::strerror(e.code().value()));
      }
      if (k + 1 < spilled_.size()) in->prefetch(spilled_[k + 1].offset, bytes_of(spilled_[k + 1]));
      if (const int e = file->write(to[k], rows, bytes_of(s))) throw_write_error(layout, s.dataset, s.item, e);
    }
  }
  file.reset();
  seconds_ += seconds_between(t0);
  log().debug("rows: this rank wrote {} item(s), {} bytes, into {}{}", items(), bytes(), layout.temp_path,
              direct_ ? " (direct I/O)" : "");
}

void RankRows::clear() {
  stop();
  blocks_.clear();
  spilled_.clear();
  spill_end_ = 0;
  spill_.reset();
  if (!spill_path_.empty()) ::unlink(spill_path_.c_str());
}

}  // namespace evalrun
