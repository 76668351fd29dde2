// How `train` reports an error that the ranks did not agree on before they
// raised it: anything but a launch::JobError after start-up (reading an
// --init-from model or a checkpoint in the Trainer's constructor, an
// allocation, a file that fails mid-run).
//
// Why: the rank that caught it cannot tell whether the others caught it too.
// Usually they did (every rank reads the same files and runs the same code),
// and then nobody is left waiting: the job can end as a start-up error does,
// with one line, MPI_Finalize and a non-zero exit, instead of MPI_Abort's
// seven-line banner once per rank. Only a rank that failed alone has peers
// waiting for it in some collective, and only MPI_Abort can end those.
//
// How: each rank that caught such an error joins a non-blocking barrier
// (MPI_Ibarrier) on a duplicate of the world communicator made right after
// MPI_Init and used for nothing else, so it can never match the pending
// operations of the training communicators. Ranks that did not fail never
// join, so the barrier completes exactly when every rank failed. The rank
// polls it (MPI_Test, then a short sleep) for at most
// kFailureAgreementSeconds:
//   - completed: every rank failed; rank 0 prints "error: <message>" once for
//     the job, and every rank returns to clean up and exit kExitFailed;
//   - timed out: this rank failed alone; it prints "[rank r] error:
//     <message>" and calls MPI_Abort.
// It gives up early when a roll call of the collective watchdog reaches it
// (parallel/watchdog.h): another rank has waited past --collective-timeout,
// which proves that rank is not here. Without that, a --collective-timeout
// shorter than kFailureAgreementSeconds would end the job as "rank r did not
// arrive" and this rank's own message would never be printed.
// With one process the barrier completes at once: no banner, ever.
#pragma once

#include <mpi.h>

#include <string>

namespace launch {

// Ranks that reach the same error are seldom more than a moment apart, but
// one may get there seconds later after uneven work (a slower read of the
// same --init-from file on a shared file system). A rank that failed alone
// pays this much before it aborts the job; next to a run's length it is
// nothing.
inline constexpr double kFailureAgreementSeconds = 15;

class FailureAgreement {
 public:
  // Collective over `world` (duplicates it): construct right after
  // MPI_Init, before any rank can fail alone.
  explicit FailureAgreement(MPI_Comm world);
  // Frees the duplicate unless MPI is finalised already (collective too).
  ~FailureAgreement();
  FailureAgreement(const FailureAgreement&) = delete;
  FailureAgreement& operator=(const FailureAgreement&) = delete;

  // Reports an error this rank caught, as described above. Returns only
  // when every rank failed (the message printed once, by rank 0); the caller
  // then cleans up, calls MPI_Finalize and exits kExitFailed. Otherwise
  // aborts the job with kExitFailed. Call at most once.
  void report(const std::string& message, double timeout_seconds = kFailureAgreementSeconds);

  // True when every rank joins within `timeout_seconds` (false at once if a
  // watchdog roll call reaches this rank). The part of report() that talks.
  bool every_rank_failed(double timeout_seconds);

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
};

// `text` as one line: each line break (with the indentation around it)
// becomes "; ", or a space after a ':' that introduces a list; blank lines
// are dropped. Error messages that list several problems one per line would
// otherwise spread over lines that interleave with other ranks' output.
std::string one_line(const std::string& text);

// Writes `text` and a newline to stderr with one write(), so lines from
// several ranks never interleave mid-line.
void write_stderr_line(const std::string& text);

}  // namespace launch
