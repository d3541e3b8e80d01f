#pragma once

// The collectives between the workers over MPI, for the node
// (LOCKSTEP_COMMUNICATOR=mpi): an mpi_communicator (mpi_communicator.hpp)
// behind a header without mpi.h, so that only that file sees MPI's flags.
// Built without MPI (meson option 'mpi'), asking for it is a clear error.

#include "collectives/communicator.hpp"
#include "runtime/error_value.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

namespace lockstep::detail {

struct mpi_workers {
  std::shared_ptr<communicator> collectives; // one rank per worker, rank = worker
  /// Breaks it from any thread (a lost worker): no call into MPI again.
  std::function<void(const error_value& why)> break_group;
  /// The last collective this worker started (0 for none).
  std::function<std::uint64_t()> reached;
};

/// Worker `rank` of `world` over MPI_COMM_WORLD (MPI initialized here if
/// the program did not). Throws value_error unless MPI's rank and size are
/// the worker's and the cluster's (the workers must be one MPI job, as
/// mpirun starts them, in the same order), or where lockstep was built
/// without MPI; what mpi_communicator throws.
mpi_workers join_mpi_workers(std::size_t rank, std::size_t world);

/// Whether this lockstep was built with MPI.
bool built_with_mpi() noexcept;

} // namespace lockstep::detail
