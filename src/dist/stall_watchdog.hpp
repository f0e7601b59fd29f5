// Stops a job whose rank went silent (SIGSTOP, a stuck filesystem, a deadlocked device call) instead of
// leaving every other rank waiting in a collective forever.
//
// Every rank runs a watchdog thread that sends a small heartbeat every second (at most a quarter of
// the timeout) on its own duplicate of the world communicator: the other ranks to rank 0, rank 0 to
// every other rank. A heartbeat says whether the rank is running its shard and how long ago its last
// batch finished. A rank is silent when
//   - no heartbeat came from it for `timeout` seconds: its process is stopped or hung as a whole
//     (rank 0 watches every rank, the others watch rank 0); or
//   - it is running its shard and its last batch finished more than max(timeout, 10 x its slowest
//     batch so far) ago: its main thread is stuck while the process lives.
// Then the watchdog that sees it prints one line naming the silent ranks and their hosts and ends the
// job with MPI_Abort(1); the journal keeps what was finished, so `--resume` continues.
// The threads need MPI_THREAD_MULTIPLE (MpiWorld asks for it); without it, or with timeout 0, there is
// no watchdog.
#pragma once

#include <memory>
#include <string>

namespace evalrun {

class MpiWorld;

class StallWatchdog {
 public:
  // Collective over the world (duplicates the communicator, exchanges host names). `resume_hint` ends
  // the message ("the journal ... is kept: run again with --resume").
  StallWatchdog(const MpiWorld& world, double timeout_seconds, std::string resume_hint);
  ~StallWatchdog();  // stops this rank's thread; not collective
  StallWatchdog(const StallWatchdog&) = delete;
  StallWatchdog& operator=(const StallWatchdog&) = delete;

  // Main thread. Between begin_work() and end_work() the rank runs its shard and reports each
  // finished batch with progress(); outside (loading, waiting for peers, writing) only the heartbeat
  // counts.
  void begin_work();
  void progress();
  void end_work();

  double timeout() const;  // 0: no watchdog

  struct State;

 private:
  std::unique_ptr<State> state_;
};

// begin_work() for its lifetime, end_work() however the scope is left (a rank whose run threw waits
// for its peers in collective_step; it is not stuck).
class WatchedWork {
 public:
  explicit WatchedWork(StallWatchdog& w) : w_(w) { w_.begin_work(); }
  ~WatchedWork() { w_.end_work(); }
  WatchedWork(const WatchedWork&) = delete;
  WatchedWork& operator=(const WatchedWork&) = delete;

 private:
  StallWatchdog& w_;
};

}  // namespace evalrun
