// This process's rank and the world's size, for tests under mpirun (or one
// process: MPI's singleton).
#pragma once

#include <mpi.h>

namespace test_support {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int world_size() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

}  // namespace test_support
