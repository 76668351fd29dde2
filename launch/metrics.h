// The per-step log: one human-readable line on stdout and one JSON object per
// line (JSONL) in the metrics file, with the same figures.
#pragma once

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace launch {

struct StepMetrics {
  std::int64_t step = 0;      // 1-based number of the optimizer step just taken
  std::int64_t steps = 0;     // total steps of the run
  double loss = 0;            // mean training loss over the global batch
  double grad_norm = 0;       // global gradient norm before clipping
  double lr = 0;
  double step_seconds = 0;
  double tokens_per_second = 0;  // global
  double tflops_per_device = 0;  // achieved model TFLOP/s per device
  double mfu = 0;                // model FLOPs' fraction of peak (launch/peak_flops.h)
  double hfu = 0;                // hardware FLOPs' (model + recomputed) fraction of peak; = mfu without recomputation
  bool recompute = false;        // recomputation is on: print HFU beside MFU (it equals MFU otherwise)
  std::uint64_t peak_memory_bytes = 0;  // engine-held bytes on the compute device, high-water mark
  std::uint64_t peak_rss_bytes = 0;     // process resident set, high-water mark
  std::optional<double> val_loss;
  // Parallel runs.
  double bubble_fraction = 0;           // pipeline bubble of the schedule, (pp-1)/(m+pp-1)
  double comm_bytes_tp = 0, comm_bytes_dp = 0, comm_bytes_pp = 0;  // sent this step, all ranks together
  double exposed_comm_seconds = 0;  // rank 0's wait for gradient reductions after backward (not hidden)
  bool parallel = false;                // print the parallel fields
  bool skipped = false;                 // non-finite loss or norm: not applied (--on-nonfinite skip)
};

class MetricsLog {
 public:
  // Appends to `path` when it is not empty.
  explicit MetricsLog(const std::string& path);
  void record(const StepMetrics& m);
  // A validation-only record (step, val_loss).
  void record_validation(std::int64_t step, double val_loss);
  // A run that resumes from `step` (0: starts over under --resume auto) drops
  // every record past `step` (what a failed attempt did after its last
  // checkpoint and is about to do again, and any line it left half-written),
  // so the file never holds a step twice; then records `event`, which should
  // say {"event": "resume", "step": step, ...}.
  void restart_at(std::int64_t step, const nlohmann::json& event);
  // Any other record without step figures ({"event": "stopped", ...}).
  void record_event(const nlohmann::json& event);
  static std::string format_line(const StepMetrics& m);

 private:
  void check_written();  // a failed write (disk full) is an error, never silently lost
  std::string path_;
  std::ofstream file_;
};

std::uint64_t peak_rss_bytes();

}  // namespace launch
