// Stop on request: SIGTERM or SIGINT (what Slurm and a person send) and
// SIGUSR1 (what mpirun forwards to every rank: Open MPI's mpirun does not
// forward SIGTERM, it turns it into SIGTERM + SIGKILL of the ranks after
// odls_base_sigkill_timeout seconds, 1 by default) ask the run to stop at the
// end of the current step: the ranks agree on it, write a checkpoint and exit
// with kExitStopped (launch/resilience/exit_codes.h). A second signal aborts the process
// at once.
//
// The handler only records the signal (an async-signal-safe store); the
// trainer polls stop_requested() between steps.
#pragma once

namespace launch {

// Installs the handlers for SIGTERM, SIGINT and SIGUSR1 (after MPI_Init, so
// they replace anything the MPI library installed).
void install_stop_handlers();
// The first signal received, or 0.
int stop_requested();
// "SIGTERM", "SIGINT", "SIGUSR1", or "signal N".
const char* signal_name(int signal);

}  // namespace launch
