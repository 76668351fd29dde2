// The exit codes of the `train` program, its contract with whatever runs it
// (launch/supervise, a Slurm script, a person). Values from BSD's sysexits.h
// where one fits, so they mean the same thing to other tools.
//
//   0    the run finished
//   1    it failed after start-up (a crash, an I/O error): a restart may help
//   64   EX_USAGE: bad flags or config; a restart cannot help
//   65   EX_DATAERR: bad input (a token shard, a model file, a folder that
//        takes no writes, a checkpoint of another run or model to resume);
//        a restart cannot help. A bad training shard found
//        mid-run stops with this code after a checkpoint.
//   75   EX_TEMPFAIL: stopped on request (SIGTERM, SIGINT, SIGUSR1) after a
//        checkpoint; not a failure: continue with --resume auto
//   124  the collective watchdog ended a stalled job (--collective-timeout;
//        the value timeout(1) uses for the same thing)
// Under mpirun a rank killed by a signal makes the job exit with 128 + the
// signal's number (137 for SIGKILL).
#pragma once

namespace launch {

inline constexpr int kExitDone = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 64;
inline constexpr int kExitBadInput = 65;
inline constexpr int kExitStopped = 75;
inline constexpr int kExitCollectiveTimeout = 124;

}  // namespace launch
