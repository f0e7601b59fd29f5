#include "dist/stall_watchdog.hpp"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "common/errors.hpp"
#include "common/logging.hpp"
#include "dist/mpi_world.hpp"

namespace evalrun {
namespace {

using SteadyClock = std::chrono::steady_clock;
constexpr int kTag = 77;
constexpr int kHostChars = 64;
// A batch may take up to this many times the slowest one seen before its rank counts as stuck (the
// first batches of a generate run are the slowest: the KV cache grows).
constexpr double kBatchFactor = 10.0;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now().time_since_epoch()).count();
}
double seconds(std::int64_t ns) { return static_cast<double>(ns) * 1e-9; }

struct Beat {
  double progress_age = 0;   // seconds since the last finished batch (or begin_work)
  double slowest_batch = 0;  // seconds
  int working = 0;           // running its shard
  int pad = 0;
};

std::string fmt_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

}  // namespace

struct StallWatchdog::State {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  double timeout = 0;
  std::string hint;
  std::vector<std::string> hosts;
  std::vector<long> pids;

  std::atomic<int> working{0};
  std::atomic<std::int64_t> last_progress{0};
  std::atomic<std::int64_t> slowest{0};

  std::mutex m;
  std::condition_variable cv;
  bool stop = false;
  std::thread thread;

  double limit_for(double slowest_batch) const { return std::max(timeout, kBatchFactor * slowest_batch); }
  std::string who(int r) const {
    return "rank " + std::to_string(r) + " (host " + hosts[static_cast<std::size_t>(r)] + ", pid " +
           std::to_string(pids[static_cast<std::size_t>(r)]) + ")";
  }
  Beat mine() const {
    Beat b;
    b.working = working.load();
    b.progress_age = seconds(now_ns() - last_progress.load());
    b.slowest_batch = seconds(slowest.load());
    return b;
  }
  [[noreturn]] void fire(const std::string& what) const {
    std::fprintf(stderr, "evalrun: failed (rank %d): stalled: %s; %s\n", rank, what.c_str(), hint.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, kExitFailed);
    std::_Exit(kExitFailed);  // not reached
  }
  void loop();
};

void StallWatchdog::State::loop() {
  const auto period = std::chrono::duration<double>(std::min(1.0, timeout / 4));
  std::vector<std::int64_t> heard(static_cast<std::size_t>(size), now_ns());
  std::vector<Beat> beats(static_cast<std::size_t>(size));
  // One outgoing heartbeat per peer at a time: to a stopped peer they would only pile up.
  std::vector<Beat> out(static_cast<std::size_t>(size));
  std::vector<MPI_Request> sending(static_cast<std::size_t>(size), MPI_REQUEST_NULL);
  std::vector<int> peers;
  for (int r = 0; r < size; ++r) {
    if (r != rank && (rank == 0 || r == 0)) peers.push_back(r);
  }
  for (;;) {
    {
      std::unique_lock lock(m);
      if (cv.wait_for(lock, period, [&] { return stop; })) break;
    }
    const Beat me = mine();
    for (int r : peers) {
      auto& req = sending[static_cast<std::size_t>(r)];
      int done = 1;
      if (req != MPI_REQUEST_NULL) MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      if (!done) continue;
      out[static_cast<std::size_t>(r)] = me;
      MPI_Isend(&out[static_cast<std::size_t>(r)], sizeof(Beat), MPI_BYTE, r, kTag, comm, &req);
    }
    for (;;) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kTag, comm, &flag, &st) != MPI_SUCCESS || !flag) break;
      Beat b;
      MPI_Recv(&b, sizeof(Beat), MPI_BYTE, st.MPI_SOURCE, kTag, comm, MPI_STATUS_IGNORE);
      heard[static_cast<std::size_t>(st.MPI_SOURCE)] = now_ns();
      beats[static_cast<std::size_t>(st.MPI_SOURCE)] = b;
    }
    const std::int64_t now = now_ns();
    // Stopped or hung processes first: the ranks waiting for them may look stuck as well.
    std::string frozen;
    for (int r : peers) {
      const double quiet = seconds(now - heard[static_cast<std::size_t>(r)]);
      if (quiet > timeout) {
        frozen += (frozen.empty() ? "" : ", ") + who(r) + " sent no heartbeat for " + fmt_seconds(quiet);
      }
    }
    if (!frozen.empty()) {
      fire(frozen + " (run.stall_timeout = " + fmt_seconds(timeout) + "): stopped or hung");
    }
    std::string stuck;
    auto check = [&](int r, const Beat& b, double since_beat) {
      const double age = b.progress_age + since_beat, limit = limit_for(b.slowest_batch);
      if (b.working && age > limit) {
        stuck += (stuck.empty() ? "" : ", ") + who(r) + " finished no batch for " + fmt_seconds(age) +
                 " (limit max(run.stall_timeout, " + std::to_string(static_cast<int>(kBatchFactor)) +
                 " x its slowest batch of " + fmt_seconds(b.slowest_batch) + ") = " + fmt_seconds(limit) + ")";
      }
    };
    check(rank, me, 0);
    if (rank == 0) {
      for (int r : peers) check(r, beats[static_cast<std::size_t>(r)], seconds(now - heard[static_cast<std::size_t>(r)]));
    }
    if (!stuck.empty()) fire(stuck);
  }
  for (auto& req : sending) {
    if (req != MPI_REQUEST_NULL) MPI_Request_free(&req);  // a small send completes on its own
  }
}

StallWatchdog::StallWatchdog(const MpiWorld& world, double timeout_seconds, std::string resume_hint) {
  if (timeout_seconds <= 0 || world.size() == 1) return;  // one rank: nobody waits for a stalled peer
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    if (world.is_root()) log().warn("run.stall_timeout: MPI offers no MPI_THREAD_MULTIPLE: no stall watchdog");
    return;
  }
  auto s = std::make_unique<State>();
  s->rank = world.rank();
  s->size = world.size();
  s->timeout = timeout_seconds;
  s->hint = std::move(resume_hint);
  MPI_Comm_dup(MPI_COMM_WORLD, &s->comm);
  char host[kHostChars] = {0};
  gethostname(host, sizeof host - 1);
  std::vector<char> hosts(static_cast<std::size_t>(s->size) * kHostChars);
  MPI_Allgather(host, kHostChars, MPI_CHAR, hosts.data(), kHostChars, MPI_CHAR, s->comm);
  long pid = static_cast<long>(::getpid());
  s->pids.resize(static_cast<std::size_t>(s->size));
  MPI_Allgather(&pid, 1, MPI_LONG, s->pids.data(), 1, MPI_LONG, s->comm);
  for (int r = 0; r < s->size; ++r) {
    const char* h = hosts.data() + static_cast<std::size_t>(r) * kHostChars;
    s->hosts.emplace_back(h, strnlen(h, kHostChars));
  }
  s->last_progress = now_ns();
  State* raw = s.get();
  s->thread = std::thread([raw] { raw->loop(); });
  state_ = std::move(s);
  log().info("stall watchdog: a rank silent for {} s stops the job (run.stall_timeout)", timeout_seconds);
}

StallWatchdog::~StallWatchdog() {
  if (!state_) return;
  {
    std::lock_guard lock(state_->m);
    state_->stop = true;
  }
  state_->cv.notify_all();
  state_->thread.join();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&state_->comm);
}

void StallWatchdog::begin_work() {
  if (!state_) return;
  state_->last_progress = now_ns();
  state_->working = 1;
}

void StallWatchdog::progress() {
  if (!state_) return;
  const std::int64_t now = now_ns(), took = now - state_->last_progress.exchange(now);
  if (took > state_->slowest.load()) state_->slowest = took;
}

void StallWatchdog::end_work() {
  if (state_) state_->working = 0;
}

double StallWatchdog::timeout() const { return state_ ? state_->timeout : 0; }

}  // namespace evalrun
