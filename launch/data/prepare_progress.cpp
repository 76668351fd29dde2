#include "launch/data/prepare_progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>

namespace launch::prepare {

namespace {

// Draw a progress bar when stderr is a terminal, or when the input is big
// enough that a log file benefits from seeing it move.
constexpr std::int64_t kProgressMinBytes = 64 << 20;
constexpr double kProgressRedrawSeconds = 0.1;

}  // namespace

ProgressBar::ProgressBar(std::int64_t total_bytes)
    : total_(total_bytes),
      enabled_(total_bytes > 0 && (::isatty(STDERR_FILENO) || total_bytes > kProgressMinBytes)),
      start_(Clock::now()),
      last_draw_(start_) {}

void ProgressBar::update(std::int64_t done_bytes) {
  done_ = done_bytes;
  if (!enabled_) return;
  const auto now = Clock::now();
  if (std::chrono::duration<double>(now - last_draw_).count() < kProgressRedrawSeconds) return;
  last_draw_ = now;
  draw(now);
}

void ProgressBar::finish() {
  if (!enabled_) return;
  draw(Clock::now());
  end_line();
}

void ProgressBar::end_line() {
  if (drawn_) std::cerr << "\n";
  drawn_ = false;
}

void ProgressBar::draw(Clock::time_point now) {
  drawn_ = true;
  constexpr int kWidth = 30;
  // Clamped: a file that grew since it was listed can push done_ past total_.
  const double fraction = std::clamp(static_cast<double>(done_) / static_cast<double>(total_), 0.0, 1.0);
  const int filled = static_cast<int>(fraction * kWidth);
  const double seconds = std::max(1e-9, std::chrono::duration<double>(now - start_).count());
  const double mb = 1e6;
  std::fprintf(stderr, "\r[%s%s] %5.1f%%  %.1f/%.1f MB  %.1f MB/s", std::string(filled, '#').c_str(),
               std::string(kWidth - filled, '.').c_str(), 100.0 * fraction, done_ / mb, total_ / mb,
               done_ / mb / seconds);
  std::fflush(stderr);
}

}  // namespace launch::prepare
