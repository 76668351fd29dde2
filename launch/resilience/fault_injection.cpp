#include "launch/resilience/fault_injection.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>

#include "engine/check.h"

namespace launch {

namespace {

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return value && *value ? value : nullptr;
}

// "K" or "K-M" (1-based, inclusive).
void parse_range(const char* name, const char* text, std::int64_t& first, std::int64_t& last) {
  long long a = 0, b = 0;
  char extra = 0;
  if (std::sscanf(text, "%lld-%lld%c", &a, &b, &extra) == 2) {
  } else if (std::sscanf(text, "%lld%c", &a, &extra) == 1) {
    b = a;
  } else {
    ENGINE_FAIL(name, "='", text, "': expected K or K-M");
  }
  ENGINE_CHECK(a >= 1 && b >= a, name, "='", text, "': expected 1 <= K <= M");
  first = a;
  last = b;
}

// ENGINE_TEST_THROW=all@STEP (throw_rank_ in the header).
constexpr std::int64_t kEveryRank = -2;

[[noreturn]] void die_now() {
  std::fflush(nullptr);
  kill(getpid(), SIGKILL);
  std::abort();
}

}  // namespace

int restart_count() {
  const char* text = env("ENGINE_RESTART_COUNT");
  return text ? std::atoi(text) : 0;
}

FaultInjection FaultInjection::from_environment(int world_rank, int world_size) {
  FaultInjection f;
  f.rank_ = world_rank;
  f.size_ = world_size;
  f.attempt_ = restart_count();
  if (const char* text = env("ENGINE_TEST_KILL")) {
    long long rank = 0, step = 0;
    char extra = 0;
    ENGINE_CHECK(std::sscanf(text, "%lld@%lld%c", &rank, &step, &extra) == 2 && rank >= 0 && step >= 1,
                 "ENGINE_TEST_KILL='", text, "': expected RANK@STEP");
    f.kill_rank_ = rank;
    f.kill_step_ = step;
  }
  if (const char* text = env("ENGINE_TEST_THROW")) {
    long long rank = 0, step = 0;
    char extra = 0;
    if (std::sscanf(text, "all@%lld%c", &step, &extra) == 1) {
      rank = kEveryRank;
    } else {
      ENGINE_CHECK(std::sscanf(text, "%lld@%lld%c", &rank, &step, &extra) == 2 && rank >= 0,
                   "ENGINE_TEST_THROW='", text, "': expected RANK@STEP or all@STEP");
    }
    ENGINE_CHECK(step >= 1, "ENGINE_TEST_THROW='", text, "': STEP must be >= 1");
    f.throw_rank_ = rank;
    f.throw_step_ = step;
  }
  if (const char* text = env("ENGINE_TEST_MTBF")) {
    double seconds = 0;
    unsigned long long seed = 0;
    char extra = 0;
    const int n = std::sscanf(text, "%lf:%llu%c", &seconds, &seed, &extra);
    ENGINE_CHECK((n == 1 || n == 2) && seconds > 0, "ENGINE_TEST_MTBF='", text, "': expected SECONDS[:SEED]");
    f.mtbf_seconds_ = seconds;
    f.mtbf_seed_ = seed;
  }
  if (const char* text = env("ENGINE_TEST_FAIL_SAVES"))
    parse_range("ENGINE_TEST_FAIL_SAVES", text, f.failed_saves_first_, f.failed_saves_last_);
  return f;
}

void FaultInjection::at_step_start(std::int64_t step) const {
  if (attempt_ == 0 && rank_ == kill_rank_ && step == kill_step_) die_now();
  if (attempt_ == 0 && (rank_ == throw_rank_ || throw_rank_ == kEveryRank) && step == throw_step_)
    ENGINE_FAIL("ENGINE_TEST_THROW: rank ", rank_, " fails as step ", step, " begins");
}

void FaultInjection::start_failure_clock() const {
  if (mtbf_seconds_ <= 0) return;
  // Every rank draws the same victim and delay; only the victim arms.
  std::mt19937_64 rng(mtbf_seed_ * 1000003ULL + static_cast<std::uint64_t>(attempt_));
  const int victim = static_cast<int>(rng() % static_cast<std::uint64_t>(size_));
  const double delay = std::exponential_distribution<double>(1.0 / mtbf_seconds_)(rng);
  if (victim != rank_) return;
  std::thread([delay] {
    std::this_thread::sleep_for(std::chrono::duration<double>(delay));
    die_now();
  }).detach();
}

bool FaultInjection::save_fails(std::int64_t step) const {
  return rank_ == 0 && step >= failed_saves_first_ && step <= failed_saves_last_;
}

}  // namespace launch
