// The MPI world as the rest of evalrun sees it: rank/size, ranks per node, byte-buffer collectives and
// a collective error check so one rank's failure stops every rank with that rank's message instead of
// leaving the others blocked in a collective.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.hpp"

namespace evalrun {

// Whether this MPI library accepts CUDA device memory in its collectives (Open MPI built with CUDA:
// MPIX_Query_cuda_support at run time). False for an MPI that cannot say.
bool mpi_takes_cuda_memory();

class MpiWorld {
 public:
  MpiWorld(int* argc, char*** argv);  // MPI_Init (only once per process)
  ~MpiWorld();                        // MPI_Finalize
  MpiWorld(const MpiWorld&) = delete;
  MpiWorld& operator=(const MpiWorld&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_size() const { return local_size_; }  // ranks sharing this node
  int local_rank() const { return local_rank_; }  // this rank's index among them (by world rank)
  bool is_root() const { return rank_ == 0; }

  void barrier() const;
  // Root's buffer replaces everyone else's.
  void broadcast(std::string& bytes, int root = 0) const;
  // Root sends parts[r] to rank r and returns its own part; other ranks return what they receive.
  std::string scatter(const std::vector<std::string>& parts, int root = 0) const;
  // Every rank's buffer, in rank order, on root (empty vector elsewhere).
  std::vector<std::string> gather(const std::string& mine, int root = 0) const;

  // The ranks with the same `color` form one group, ordered by `key` (collective over the world).
  std::unique_ptr<Communicator> split(int color, int key) const;

  // Ends every rank of the job now with `code` (MPI_Abort), after logging nothing: for a failure
  // inside a group's collective, where the other ranks cannot reach collective_step's agreement.
  [[noreturn]] void abort(int code) const;

  // Runs `step` on every rank. If any rank's step throws, every rank learns it: the exception of the
  // lowest failing rank is re-thrown on that rank, and the others throw PeerFailed carrying its
  // message and exit code, so all ranks leave together.
  void collective_step(const std::function<void()>& step) const;

 private:
  int rank_ = 0;
  int size_ = 1;
  int local_size_ = 1;
  int local_rank_ = 0;
};

// Thrown on the ranks whose own step succeeded while another rank's failed.
struct PeerFailed {
  int rank;
  int exit_code;
  std::string message;
};

}  // namespace evalrun
