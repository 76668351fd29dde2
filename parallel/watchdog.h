// The collective watchdog: every wait of the MPI transport goes through
// wait_for_requests(), which never spins for long and, once installed with a
// timeout, ends a job that stopped making progress with one message naming
// the step, the phase and the ranks that did not arrive.
//
// Why: a collective or a pipeline receive waits for every peer. A peer that is
// stopped (SIGSTOP, a swapping node, a hung driver) or dead without the
// launcher noticing leaves the others waiting forever; MPI_Waitall busy-polls,
// so they do it at full CPU and say nothing. At scale this is an expected
// failure (Llama 3 reports 419 interruptions in 54 days on 16k GPUs), and a
// job that hangs loses every GPU-hour until a person notices. PyTorch's NCCL
// watchdog (TORCH_NCCL_ASYNC_ERROR_HANDLING, its "flight recorder") solves the
// same problem for NCCL.
//
// How a wait behaves
//   - It polls MPI_Testall. For the first kSpinSeconds it yields the CPU
//     between polls (so short collectives keep their latency and an
//     oversubscribed CPU test still progresses); after that it sleeps
//     kSleepSeconds between polls, so a rank waiting for a stalled peer costs
//     almost no CPU.
//   - While it waits it answers "roll calls" from other ranks (below).
//   - After `timeout_seconds` without completing, it starts a roll call.
//
// The roll call (who did not arrive?)
//   A collective does not say which member is missing, so the rank that timed
//   out asks everyone: it sends a small report (its step, phase, operation,
//   how long it waited) to every other rank on a private duplicate of the
//   world communicator, and listens for `grace` seconds. Every rank that is
//   alive is, sooner or later, waiting in some operation too; the roll call
//   reaches it there and it joins, sending its own report to everyone. Ranks
//   never heard from are the ones that did not arrive: stopped, hung in
//   computation, or dead. Every live rank hears every report, so all agree on
//   the reporter, the lowest rank whose own wait timed out: it prints one line
//   for the whole job and calls MPI_Abort with the configured exit code (the
//   others abort a little later should the reporter die too). When every rank
//   is heard, nobody is missing: the ranks wait in different operations, a
//   deadlock, and the line lists where each waits.
//
// Scope: the MPI communicators (the CPU backend, the host collectives of
// every run, checkpoint coordination), and, through wait_until, the host's
// waits for a device whose streams hold NCCL collectives: NCCL's waits are
// stream orderings that end in a device synchronisation, which a dead peer
// would leave blocked forever in the driver (parallel/nccl_communicator.h
// turns those synchronisations into polls here, and aborts its
// communicators before the job ends, as PyTorch's NCCL watchdog does).
//
// Threading: call from the thread that calls MPI (MPI_THREAD_FUNNELED), or
// from a thread marked WatchdogBackgroundThread (below).
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

namespace parallel {

struct WatchdogOptions {
  double timeout_seconds = 0;  // 0: never time out (waits still do not spin)
  int exit_code = 1;           // what MPI_Abort ends the job with on a timeout
};

// Installs the process-wide watchdog over `world`. Collective over `world`
// (it duplicates it for the roll call). Install once, after MPI_Init.
void install_watchdog(MPI_Comm world, const WatchdogOptions& options);
// Frees the duplicate; collective. Call before MPI_Finalize.
void uninstall_watchdog();
bool watchdog_installed();

// True when a roll call from another rank has reached this one: some rank
// waited past its timeout and is asking who is missing. For code that waits
// outside wait_for_requests (launch/resilience/failure_agreement.h): the ranks it hoped
// to hear from are stuck waiting for it instead. False when not installed.
bool watchdog_roll_call_pending();

// Where this rank is, for the timeout message. `phase` must be a string
// literal ("forward", "backward", "gradient reduction", ...). Cheap.
void watchdog_set_step(std::int64_t step);  // 1-based step being run; 0 before the first
void watchdog_set_phase(const char* phase);

// Sets the phase for a scope and restores the previous one after it.
// `timeout_scale` stretches the timeout within the scope: in a checkpoint
// some ranks write files while the others wait for them, which on a slow
// shared file system may take far longer than any collective.
class WatchdogPhase {
 public:
  explicit WatchdogPhase(const char* phase, double timeout_scale = 1.0);
  ~WatchdogPhase();
  WatchdogPhase(const WatchdogPhase&) = delete;
  WatchdogPhase& operator=(const WatchdogPhase&) = delete;

 private:
  const char* previous_;
  double previous_scale_;
};

// How much longer waits may take in phases where ranks do file I/O
// (checkpoint, resume, the final model file).
inline constexpr double kWatchdogFileIoScale = 10.0;

// Waits until all `count` requests are complete, as MPI_Waitall does, and
// returns its error code. `describe` names the operation for the timeout
// message ("pp recv from world rank 2"); it is called only if needed.
int wait_for_requests(int count, MPI_Request* requests, const std::function<std::string()>& describe);

// The same wait for anything else that can be polled: returns once `done()`
// is true, which it calls from this thread between yields and sleeps, and
// which may throw to end the wait with an error. A device synchronisation
// behind NCCL collectives waits here.
void wait_until(const std::function<bool()>& done, const std::function<std::string()>& describe);

// Marks the calling thread, for its lifetime, as a background thread that
// waits for MPI requests besides the main thread (the NCCL test double's
// worker, parallel/host_collective_worker.h; MPI_THREAD_MULTIPLE): its waits
// never join roll calls or time out (the main thread's waits for what the
// worker serves do), and they throw engine::Error once `*cancel` is raised,
// so the thread can be stopped while a peer never arrives.
class WatchdogBackgroundThread {
 public:
  explicit WatchdogBackgroundThread(const std::atomic<bool>* cancel);
  ~WatchdogBackgroundThread();
  WatchdogBackgroundThread(const WatchdogBackgroundThread&) = delete;
  WatchdogBackgroundThread& operator=(const WatchdogBackgroundThread&) = delete;

 private:
  const std::atomic<bool>* previous_;
};

// Runs `cleanup` on this rank just before the watchdog aborts the job on a
// timeout (NCCL's communicators are aborted there, so no kernel is left
// spinning on a peer that is gone). Each runs once; exceptions are ignored.
void watchdog_on_abort(std::function<void()> cleanup);

}  // namespace parallel
