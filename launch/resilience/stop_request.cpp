#include "launch/resilience/stop_request.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <initializer_list>

namespace launch {

namespace {

// Lock-free, so safe in a handler, and well-defined when the signal lands on
// another thread (MPI's, CUDA's) than the one that polls it.
std::atomic<int> requested{0};
static_assert(std::atomic<int>::is_always_lock_free);

void on_signal(int signal) {
  // One atomic read-modify-write: with a load then a store, two signals
  // landing together (on two threads) could both see "no request yet", and
  // the second would be taken as a first. The first signal's number stays.
  int none = 0;
  if (!requested.compare_exchange_strong(none, signal)) {
    // The second request: the person (or the scheduler) will not wait for
    // the step to end. Only async-signal-safe calls here.
    static const char message[] = "error: second stop signal: aborting at once\n";
    [[maybe_unused]] const ssize_t n = write(STDERR_FILENO, message, sizeof message - 1);
    _exit(128 + signal);
  }
}

}  // namespace

void install_stop_handlers() {
  struct sigaction action;
  std::memset(&action, 0, sizeof action);
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a system call the signal interrupts goes on
  for (int signal : {SIGTERM, SIGINT, SIGUSR1}) sigaction(signal, &action, nullptr);
}

int stop_requested() { return requested.load(); }

const char* signal_name(int signal) {
  switch (signal) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    default: {
      static thread_local char text[24];
      std::snprintf(text, sizeof text, "signal %d", signal);
      return text;
    }
  }
}

}  // namespace launch
