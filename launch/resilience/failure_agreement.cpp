#include "launch/resilience/failure_agreement.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "launch/resilience/exit_codes.h"
#include "parallel/watchdog.h"

namespace launch {

namespace {

using Clock = std::chrono::steady_clock;

// Between two polls of the barrier. MPI progresses it only inside MPI_Test,
// so short enough that agreeing takes milliseconds; long enough that a rank
// waiting for a peer that will never come costs no CPU.
constexpr auto kPollSleep = std::chrono::milliseconds(1);

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

}  // namespace

FailureAgreement::FailureAgreement(MPI_Comm world) {
  MPI_Comm_dup(world, &comm_);
  // An MPI error here must not abort with MPI's own banner: report() treats
  // it as "not every rank is here" and aborts with the error's message.
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
}

FailureAgreement::~FailureAgreement() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

bool FailureAgreement::every_rank_failed(double timeout_seconds) {
  MPI_Request request = MPI_REQUEST_NULL;
  if (MPI_Ibarrier(comm_, &request) != MPI_SUCCESS) return false;
  const Clock::time_point start = Clock::now();
  for (;;) {
    int done = 0;
    if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
    if (done) return true;
    // A roll call: a rank has waited for this one past --collective-timeout.
    if (parallel::watchdog_roll_call_pending()) return false;
    // The request stays pending; MPI_Abort ends it with everything else.
    if (std::chrono::duration<double>(Clock::now() - start).count() > timeout_seconds) return false;
    std::this_thread::sleep_for(kPollSleep);
  }
}

void FailureAgreement::report(const std::string& message, double timeout_seconds) {
  const std::string line = one_line(message);
  if (every_rank_failed(timeout_seconds)) {
    if (rank_ == 0) write_stderr_line("error: " + line);
    return;
  }
  write_stderr_line("[rank " + std::to_string(rank_) + "] error: " + line);
  std::fflush(nullptr);  // what rank 0 logged so far, before the job is killed
  MPI_Abort(MPI_COMM_WORLD, kExitFailed);
}

std::string one_line(const std::string& text) {
  std::string out;
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t end = text.find('\n', i);
    if (end == std::string::npos) end = text.size();
    std::size_t first = i, last = end;
    while (first < last && is_space(text[first])) ++first;
    while (last > first && is_space(text[last - 1])) --last;
    if (first < last) {
      if (!out.empty()) out += out.back() == ':' ? " " : "; ";
      out.append(text, first, last - first);
    }
    i = end + 1;
  }
  return out;
}

void write_stderr_line(const std::string& text) {
  const std::string line = text + "\n";
  [[maybe_unused]] const ssize_t n = write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace launch
