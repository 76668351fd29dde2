#include "parallel/watchdog.h"

#include "engine/check.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

namespace parallel {

namespace {

using Clock = std::chrono::steady_clock;

// Short waits (a layer's all-reduce, a pipeline hand-off) finish well within
// this, at full speed; a long MPI transfer that needs the poll to progress
// also keeps its speed this long. Beyond it a wait is a stall in the making.
constexpr double kSpinSeconds = 0.5;
// Then it sleeps between polls, 10 us at first, doubling up to 1 ms: a long
// transfer that moves only inside MPI calls slows down gradually, a stalled
// one costs almost no CPU.
constexpr auto kFirstSleep = std::chrono::microseconds(10);
constexpr auto kSleep = std::chrono::milliseconds(1);
// How often (in polls) the spinning phase looks for roll calls.
constexpr int kProbeEvery = 64;

constexpr int kRollCallTag = 1;  // "no progress here; this is where I wait"

// What a rank says of itself in a roll call. Plain bytes: every
// rank runs the same binary, so the layout is the same on both ends.
struct Report {
  std::int32_t rank = -1;
  std::int32_t timed_out = 0;  // 1: its own wait timed out; 0: it joined another's roll call
  std::int64_t step = 0;
  double waited_seconds = 0;
  char phase[32] = {};
  char operation[96] = {};
};

void copy_text(char* dst, std::size_t size, const std::string& text) {
  std::snprintf(dst, size, "%s", text.c_str());
}

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Set on a background thread (WatchdogBackgroundThread): its waits neither
// join roll calls nor time out, and end when this flag is raised.
thread_local const std::atomic<bool>* t_background_cancel = nullptr;

class Watchdog {
 public:
  void install(MPI_Comm world, const WatchdogOptions& options) {
    options_ = options;
    MPI_Comm_dup(world, &comm_);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }

  void uninstall() {
    if (comm_ == MPI_COMM_NULL) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
    comm_ = MPI_COMM_NULL;
  }

  bool installed() const { return comm_ != MPI_COMM_NULL; }

  bool roll_call_pending() const {
    int flag = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, kRollCallTag, comm_, &flag, MPI_STATUS_IGNORE);
    return flag != 0;
  }

  // Polls `test` (true: finished; it may throw) until it finishes, yielding,
  // then sleeping, answering roll calls and timing out as described in the header.
  void wait(const std::function<bool()>& test, const std::function<std::string()>& describe) {
    const Clock::time_point start = Clock::now();
    std::chrono::microseconds sleep = kFirstSleep;
    const std::atomic<bool>* cancel = t_background_cancel;
    // Roll calls and timeouts are the calling (MPI main) thread's business.
    const bool watched = cancel == nullptr && installed();  // a background thread never reads comm_
    for (long poll = 0;; ++poll) {
      if (test()) return;
      if (cancel != nullptr && cancel->load(std::memory_order_acquire))
        throw engine::Error("the wait for " + describe() + " was cancelled (its owner is shutting down)");
      const double waited = seconds_between(start, Clock::now());
      const bool spinning = waited < kSpinSeconds;
      if (watched && (!spinning || poll % kProbeEvery == 0) && roll_call_pending())
        roll_call(describe, waited, /*timed_out=*/false);
      if (watched && options_.timeout_seconds > 0 && waited > timeout())
        roll_call(describe, waited, /*timed_out=*/true);
      if (spinning) {
        sched_yield();
      } else {
        std::this_thread::sleep_for(sleep);
        sleep = std::min<std::chrono::microseconds>(sleep * 2, kSleep);
      }
    }
  }

  // The timeout in force: the configured one, stretched in file I/O phases.
  double timeout() const { return options_.timeout_seconds * timeout_scale.load(); }

  std::atomic<std::int64_t> step{0};
  std::atomic<const char*> phase{"start-up"};
  std::atomic<double> timeout_scale{1.0};

 private:
  Report my_report(const std::function<std::string()>& describe, double waited, bool timed_out) const {
    Report r;
    r.rank = rank_;
    r.timed_out = timed_out ? 1 : 0;
    r.step = step.load();
    r.waited_seconds = waited;
    copy_text(r.phase, sizeof r.phase, phase.load());
    copy_text(r.operation, sizeof r.operation, describe());
    return r;
  }

  // Records every roll call that has arrived.
  void receive_roll_calls() {
    for (;;) {
      int flag = 0;
      MPI_Status status;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kRollCallTag, comm_, &flag, &status) != MPI_SUCCESS || !flag) return;
      Report report;
      MPI_Recv(&report, sizeof report, MPI_BYTE, status.MPI_SOURCE, kRollCallTag, comm_, MPI_STATUS_IGNORE);
      heard_[status.MPI_SOURCE] = report;
    }
  }

  // Entered when this rank's wait timed out, or when another rank's roll
  // call reached it while it waited (it joins: the job is ending anyway, and
  // joining is how it answers). Never returns.
  [[noreturn]] void roll_call(const std::function<std::string()>& describe, double waited, bool timed_out) {
    const Report me = my_report(describe, waited, timed_out);
    heard_[rank_] = me;
    // Small and eager: each send completes locally even if its peer is
    // stopped or gone. The requests are never waited for.
    std::vector<MPI_Request> sends(static_cast<std::size_t>(size_), MPI_REQUEST_NULL);
    for (int r = 0; r < size_; ++r)
      if (r != rank_) MPI_Isend(&me, sizeof me, MPI_BYTE, r, kRollCallTag, comm_, &sends[r]);

    // Long enough for every live rank to reach a poll (they probe every few
    // milliseconds while waiting), short next to the timeout.
    const double grace = std::clamp(timeout() / 2, 2.0, 30.0);
    const Clock::time_point start = Clock::now();
    while (seconds_between(start, Clock::now()) < grace && static_cast<int>(heard_.size()) < size_) {
      receive_roll_calls();
      std::this_thread::sleep_for(kSleep);
    }
    // The reporter is the lowest rank that timed out on its own. Every live
    // rank receives every roll call, so all agree on it; a rank that only
    // joined (perhaps the stalled one, woken by the launcher's SIGCONT as it
    // kills the job) never reports.
    int reporter = -1;
    for (const auto& [r, report] : heard_)
      if (report.timed_out) {
        reporter = r;
        break;
      }
    if (reporter == rank_) {
      const std::string line = "error: " + message(me) + "\n";
      std::fwrite(line.data(), 1, line.size(), stderr);
      std::fflush(stderr);
      run_abort_cleanups();
      MPI_Abort(MPI_COMM_WORLD, options_.exit_code);
    }
    // The reporter aborts the job; should it die before it can, do it here.
    const Clock::time_point idle = Clock::now();
    while (seconds_between(idle, Clock::now()) < 2 * grace) {
      receive_roll_calls();
      std::this_thread::sleep_for(kSleep);
    }
    run_abort_cleanups();
    MPI_Abort(MPI_COMM_WORLD, options_.exit_code);
    std::abort();  // MPI_Abort does not return
  }

 public:
  void on_abort(std::function<void()> cleanup) {
    std::lock_guard<std::mutex> lock(cleanups_mutex_);
    cleanups_.push_back(std::move(cleanup));
  }

 private:
  // Each once; one that throws does not keep the job from ending.
  void run_abort_cleanups() {
    std::vector<std::function<void()>> cleanups;
    {
      std::lock_guard<std::mutex> lock(cleanups_mutex_);
      cleanups.swap(cleanups_);
    }
    for (const auto& cleanup : cleanups) {
      try {
        cleanup();
      } catch (...) {
      }
    }
  }

  static std::string where(const Report& r) {
    std::ostringstream out;
    char waited[32];
    std::snprintf(waited, sizeof waited, "%.1f", r.waited_seconds);
    out << "rank " << r.rank << " in " << r.operation << " (" << r.phase << ", step " << r.step << ") for " << waited
        << " s";
    return out.str();
  }

  std::string message(const Report& me) const {
    std::vector<int> missing;
    for (int r = 0; r < size_; ++r)
      if (!heard_.count(r)) missing.push_back(r);
    std::ostringstream out;
    char timeout[32];
    std::snprintf(timeout, sizeof timeout, "%g", this->timeout());
    out << "collective timeout (no progress for " << timeout << " s, --collective-timeout) at step " << me.step << ", phase "
        << me.phase << ": ";
    if (!missing.empty()) {
      out << (missing.size() == 1 ? "rank " : "ranks ");
      for (std::size_t i = 0; i < missing.size() && i < 16; ++i) out << (i ? "," : "") << missing[i];
      if (missing.size() > 16) out << ",... (" << missing.size() << " in all)";
      out << " did not arrive (stopped, hung or dead); ";
    } else {
      out << "every rank answered but they wait in different operations (a deadlock); ";
    }
    // Where the waiting ranks are, this one first, a few at most.
    out << where(me);
    int listed = 1;
    for (const auto& [r, report] : heard_) {
      if (r == rank_) continue;
      if (listed == 4) {
        out << "; " << heard_.size() - 4 << " more waiting";
        break;
      }
      out << "; " << where(report);
      ++listed;
    }
    return out.str();
  }

  WatchdogOptions options_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::map<int, Report> heard_;  // who took part in the roll call, by rank
  std::mutex cleanups_mutex_;
  std::vector<std::function<void()>> cleanups_;  // watchdog_on_abort
};

Watchdog& watchdog() {
  static Watchdog instance;
  return instance;
}

}  // namespace

void install_watchdog(MPI_Comm world, const WatchdogOptions& options) { watchdog().install(world, options); }
void uninstall_watchdog() { watchdog().uninstall(); }
bool watchdog_installed() { return watchdog().installed(); }

WatchdogBackgroundThread::WatchdogBackgroundThread(const std::atomic<bool>* cancel)
    : previous_(t_background_cancel) {
  t_background_cancel = cancel;
}
WatchdogBackgroundThread::~WatchdogBackgroundThread() { t_background_cancel = previous_; }
bool watchdog_roll_call_pending() { return watchdog().installed() && watchdog().roll_call_pending(); }

void watchdog_set_step(std::int64_t step) { watchdog().step.store(step); }
void watchdog_set_phase(const char* phase) { watchdog().phase.store(phase); }

WatchdogPhase::WatchdogPhase(const char* phase, double timeout_scale)
    : previous_(watchdog().phase.exchange(phase)), previous_scale_(watchdog().timeout_scale.exchange(timeout_scale)) {}
WatchdogPhase::~WatchdogPhase() {
  watchdog().phase.store(previous_);
  watchdog().timeout_scale.store(previous_scale_);
}

int wait_for_requests(int count, MPI_Request* requests, const std::function<std::string()>& describe) {
  int rc = MPI_SUCCESS;
  watchdog().wait(
      [&] {
        int done = 0;
        rc = MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE);
        return rc != MPI_SUCCESS || done != 0;
      },
      describe);
  return rc;
}

void wait_until(const std::function<bool()>& done, const std::function<std::string()>& describe) {
  watchdog().wait(done, describe);
}

void watchdog_on_abort(std::function<void()> cleanup) { watchdog().on_abort(std::move(cleanup)); }

}  // namespace parallel
