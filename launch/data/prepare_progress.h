// `prepare`'s progress bar on stderr, over the input's bytes (launch/prepare_main.cpp).
#pragma once

#include <chrono>
#include <cstdint>

namespace launch::prepare {

// "[#######.............]  35.2%  120.3/341.0 MB  85.1 MB/s", redrawn in
// place with \r at most every kProgressRedrawSeconds.
class ProgressBar {
 public:
  explicit ProgressBar(std::int64_t total_bytes);

  void update(std::int64_t done_bytes);

  void finish();

  // Ends a partly drawn bar so a note printed next starts on its own line.
  void end_line();

 private:
  using Clock = std::chrono::steady_clock;

  void draw(Clock::time_point now);

  std::int64_t total_;
  std::int64_t done_ = 0;
  bool enabled_;
  bool drawn_ = false;
  Clock::time_point start_;
  Clock::time_point last_draw_;
};

}  // namespace launch::prepare
