// join_mpi_workers where lockstep was built without MPI (meson option 'mpi').

#include "communicators/mpi_workers.hpp"

#include "lockstep/error.hpp"

namespace lockstep::detail {

mpi_workers join_mpi_workers(std::size_t, std::size_t) {
  throw value_error("the collectives over MPI (LOCKSTEP_COMMUNICATOR=mpi) need a lockstep built "
                    "with MPI: this one was built without it (meson option 'mpi'; Debian's "
                    "libopenmpi-dev)");
}

bool built_with_mpi() noexcept {
  return false;
}

} // namespace lockstep::detail
