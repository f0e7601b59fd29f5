// A first read of an HDF5 file a user hands to inspect or compare, in a child process. The system
// HDF5 (Debian's 1.10) does not always fail cleanly on a malformed file: fuzzing found SIGSEGV while
// attributes are closed, a bad free and multi-gigabyte allocations inside the library. No check in
// evalrun can prevent a crash inside the library, but a child process can take it: the child opens
// the file and reads its whole structure (every group, attribute, dataset shape, and the data of
// every dataset up to kProbeMaxDatasetBytes) as H5Reader does; if the child dies, the file is
// refused with one clear line instead of the crash reaching the user.
//
// Not for files evalrun wrote itself in the same run, and not inside an MPI job (a fork of an MPI
// rank is not safe on every transport): `run` reads its golden file without it.
#pragma once

#include <cstddef>
#include <string>

namespace evalrun {

inline constexpr std::size_t kProbeMaxDatasetBytes = std::size_t{256} << 20;

// InputError naming `path` when the HDF5 library crashes (a signal) or runs out of memory reading
// it; returns normally otherwise, also when the file is not HDF5 at all or lacks what the caller
// needs (the caller's own read then gives the precise message).
void probe_hdf5_file(const std::string& path);

}  // namespace evalrun
