// Failures on purpose, for the fault tests and the goodput benchmark. Each
// switch is an environment variable named ENGINE_TEST_*, read once at
// start-up; none is a flag, so no production command line turns one on by
// accident. launch/supervise sets ENGINE_RESTART_COUNT (0 on the first
// attempt), which lets a failure happen in one attempt only.
//
//   ENGINE_TEST_KILL=RANK@STEP     on the first attempt only, world rank RANK
//                                  kills itself with SIGKILL as step STEP
//                                  (1-based) begins: a crashed node.
//   ENGINE_TEST_MTBF=SECONDS[:SEED] on every attempt, one rank (drawn from SEED
//                                  and the attempt) kills itself with SIGKILL
//                                  after an exponentially distributed time of
//                                  mean SECONDS: failures at a given mean time
//                                  between failures (the goodput benchmark).
//   ENGINE_TEST_FAIL_SAVES=K[-M]   the checkpoints of steps K..M fail to write
//                                  on rank 0, as on a full disk.
//   ENGINE_TEST_THROW=RANK@STEP    on the first attempt only, world rank RANK
//                                  (or every rank, for RANK "all") throws an
//                                  engine::Error as step STEP begins: an error
//                                  that one rank sees alone, or that all reach
//                                  together without having agreed on it
//                                  (launch/resilience/failure_agreement.h).
// (ENGINE_TEST_POISON_STEPS, a NaN gradient, belongs to NonFiniteGuard.)
#pragma once

#include <cstdint>

namespace launch {

class FaultInjection {
 public:
  // Reads the switches; throws engine::Error naming a malformed one.
  static FaultInjection from_environment(int world_rank, int world_size);

  // ENGINE_TEST_KILL: may kill this process; ENGINE_TEST_THROW: may throw.
  void at_step_start(std::int64_t step) const;
  // ENGINE_TEST_MTBF: arms the failure clock on the rank it picks.
  void start_failure_clock() const;
  // ENGINE_TEST_FAIL_SAVES: true if the save of `step` must fail on this rank.
  bool save_fails(std::int64_t step) const;

 private:
  int rank_ = 0;
  int size_ = 1;
  int attempt_ = 0;
  std::int64_t kill_rank_ = -1, kill_step_ = -1;
  std::int64_t throw_rank_ = -1, throw_step_ = -1;  // throw_rank_ -2: every rank ("all@STEP")
  double mtbf_seconds_ = 0;
  std::uint64_t mtbf_seed_ = 0;
  std::int64_t failed_saves_first_ = 0, failed_saves_last_ = -1;
};

// ENGINE_RESTART_COUNT, set by launch/supervise; 0 when absent.
int restart_count();

}  // namespace launch
