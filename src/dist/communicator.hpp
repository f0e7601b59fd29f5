// What a tensor-parallel model needs from its group of ranks: sum float buffers across the group.
// Plain C++ with no MPI in it, so src/model depends on this interface only; dist/mpi_world.hpp makes
// the MPI one (MpiWorld::split).
#pragma once

#include <cstddef>

namespace evalrun {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place: every rank's data becomes the element-wise sum over the group, the same bits on every
  // rank (the ranks of a group then make the same decisions, e.g. the same greedy token).
  virtual void allreduce_sum(float* data, std::size_t count) = 0;
  // In place: the element-wise maximum over the group (per-row activation scales of a row-parallel
  // quantized layer).
  virtual void allreduce_max(float* data, std::size_t count) = 0;
  // Wall time spent inside allreduce_sum so far, and the number of calls.
  double allreduce_seconds() const { return seconds_; }
  std::size_t allreduce_calls() const { return calls_; }

 protected:
  double seconds_ = 0;
  std::size_t calls_ = 0;
};

}  // namespace evalrun
