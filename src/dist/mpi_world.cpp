#include "dist/mpi_world.hpp"

#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI's extensions: MPIX_Query_cuda_support
#endif

#include <chrono>
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <exception>
#include <stdexcept>

#include "common/errors.hpp"

namespace evalrun {

bool mpi_takes_cuda_memory() {
#if defined(MPIX_CUDA_AWARE_SUPPORT)
  // The macro says what the library was built with; the call what the loaded one supports.
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}
namespace {
void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw std::runtime_error(std::string("MPI call failed: ") + what);
}
int to_int_count(std::size_t n) {
  if (n > static_cast<std::size_t>(INT_MAX)) throw std::runtime_error("MPI message larger than 2 GiB");
  return static_cast<int>(n);
}
// A group split from the world. MPI_Allreduce gives every rank the same bits with Open MPI's
// algorithms for commutative operations (each element is reduced once, then distributed).
class MpiGroup final : public Communicator {
 public:
  explicit MpiGroup(MPI_Comm comm) : comm_(comm) {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiGroup() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allreduce_sum(float* data, std::size_t count) override { allreduce(data, count, MPI_SUM); }
  void allreduce_max(float* data, std::size_t count) override { allreduce(data, count, MPI_MAX); }

 private:
  void allreduce(float* data, std::size_t count, MPI_Op op) {
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t done = 0; done < count;) {
      const std::size_t n = std::min<std::size_t>(count - done, static_cast<std::size_t>(INT_MAX));
      check(MPI_Allreduce(MPI_IN_PLACE, data + done, static_cast<int>(n), MPI_FLOAT, op, comm_), "MPI_Allreduce(tensor parallel)");
      done += n;
    }
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++calls_;
  }

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
};

}  // namespace

std::unique_ptr<Communicator> MpiWorld::split(int color, int key) const {
  MPI_Comm comm;
  check(MPI_Comm_split(MPI_COMM_WORLD, color, key, &comm), "MPI_Comm_split");
  return std::make_unique<MpiGroup>(comm);
}

void MpiWorld::abort(int code) const {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();  // not reached
}

MpiWorld::MpiWorld(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  // MPI_THREAD_MULTIPLE: the stall watchdog's thread (stall_watchdog.hpp) sends heartbeats while the
  // main thread may be inside a collective. Where the library offers less, there is no watchdog.
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) check(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
  // Errors come back as codes (and our exceptions) rather than MPI aborting inside a call.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  MPI_Comm node;
  check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node), "split_type");
  MPI_Comm_size(node, &local_size_);
  MPI_Comm_rank(node, &local_rank_);
  MPI_Comm_free(&node);
}

MpiWorld::~MpiWorld() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void MpiWorld::barrier() const { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

void MpiWorld::broadcast(std::string& bytes, int root) const {
  unsigned long long n = bytes.size();
  check(MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, root, MPI_COMM_WORLD), "MPI_Bcast(size)");
  bytes.resize(n);
  check(MPI_Bcast(bytes.data(), to_int_count(n), MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
}

std::string MpiWorld::scatter(const std::vector<std::string>& parts, int root) const {
  if (rank_ == root) {
    if (static_cast<int>(parts.size()) != size_) throw std::logic_error("scatter: one part per rank expected");
    for (int r = 0; r < size_; ++r) {
      if (r == root) continue;
      unsigned long long n = parts[r].size();
      check(MPI_Send(&n, 1, MPI_UNSIGNED_LONG_LONG, r, 1, MPI_COMM_WORLD), "MPI_Send(size)");
      check(MPI_Send(parts[r].data(), to_int_count(n), MPI_BYTE, r, 2, MPI_COMM_WORLD), "MPI_Send");
    }
    return parts[root];
  }
  unsigned long long n = 0;
  check(MPI_Recv(&n, 1, MPI_UNSIGNED_LONG_LONG, root, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv(size)");
  std::string out(n, '\0');
  check(MPI_Recv(out.data(), to_int_count(n), MPI_BYTE, root, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
  return out;
}

std::vector<std::string> MpiWorld::gather(const std::string& mine, int root) const {
  // Point-to-point rather than MPI_Gatherv: the sizes may exceed int displacements in total.
  std::vector<std::string> all;
  if (rank_ != root) {
    unsigned long long n = mine.size();
    check(MPI_Send(&n, 1, MPI_UNSIGNED_LONG_LONG, root, 3, MPI_COMM_WORLD), "MPI_Send(size)");
    check(MPI_Send(mine.data(), to_int_count(n), MPI_BYTE, root, 4, MPI_COMM_WORLD), "MPI_Send");
    return all;
  }
  all.resize(size_);
  all[root] = mine;
  for (int r = 0; r < size_; ++r) {
    if (r == root) continue;
    unsigned long long n = 0;
    check(MPI_Recv(&n, 1, MPI_UNSIGNED_LONG_LONG, r, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv(size)");
    all[r].resize(n);
    check(MPI_Recv(all[r].data(), to_int_count(n), MPI_BYTE, r, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
  }
  return all;
}

void MpiWorld::collective_step(const std::function<void()>& step) const {
  std::exception_ptr error;
  int code = kExitOk;
  std::string message;
  try {
    step();
  } catch (const InputError& e) {
    error = std::current_exception();
    code = kExitBadInput;
    message = e.what();
  } catch (const PeerFailed&) {
    throw;  // nested collective_step already agreed on the failure
  } catch (const std::exception& e) {
    error = std::current_exception();
    code = kExitFailed;
    message = e.what();
  }
  if (size_ == 1) {
    if (error) std::rethrow_exception(error);
    return;
  }
  // Lowest failing rank (or size_ when none failed).
  int failing = error ? rank_ : size_;
  int first = size_;
  check(MPI_Allreduce(&failing, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce");
  if (first == size_) return;
  int codes[2] = {code, 0};
  check(MPI_Bcast(codes, 1, MPI_INT, first, MPI_COMM_WORLD), "MPI_Bcast(code)");
  broadcast(message, first);
  if (rank_ == first) std::rethrow_exception(error);
  throw PeerFailed{first, codes[0], message};
}

}  // namespace evalrun
