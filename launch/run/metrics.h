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
  double mfu = 0;                // model FLOPs' fraction of peak (launch/run/peak_flops.h)
  double hfu = 0;                // hardware FLOPs' (model + recomputed) fraction of peak; = mfu without recomputation
  bool recompute = false;        // recomputation is on: print HFU beside MFU (it equals MFU otherwise)
  std::uint64_t peak_memory_bytes = 0;  // engine-held bytes on the compute device, high-water mark
  std::uint64_t peak_rss_bytes = 0;     // process resident set, high-water mark
  std::optional<double> val_loss;
  double elapsed_seconds = 0;  // since the trainer started (this process: start-up included)
  double eta_seconds = 0;      // the steps left x the mean step time so far (the first left out once there is another)
  // Parallel runs.
  double bubble_fraction = 0;           // pipeline bubble of the schedule, (pp-1)/(m+pp-1)
  double comm_bytes_tp = 0, comm_bytes_dp = 0, comm_bytes_pp = 0;  // sent this step, all ranks together
  double exposed_comm_seconds = 0;  // rank 0's wait for gradient reductions after backward (not hidden)
  // Measured seconds blocked in each axis's communication this step
  // (parallel::Communicator::wait_seconds: blocking calls, wait() on
  // asynchronous handles; the part that overlapped computation is not in it),
  // each the mean over all ranks, so that step_seconds = compute + the sum of
  // these, approximately, on every rank on average:
  //   tp:    tensor-parallel all-reduces / all-gathers / reduce-scatters
  //          (transfer time plus waits for the slowest rank of the group);
  //   pp:    pipeline point-to-point and the tied-embedding gradient sum of
  //          the first and last stage: the pipeline bubble plus transfers;
  //   dp:    data-parallel gradient reductions not hidden behind backward,
  //          ZeRO's parameter gathers and the optimizer's all-gathers;
  //   world: the step's scalar reductions over all ranks (loss, gradient
  //          norm), which absorb load imbalance; with pp > 1 this is where a
  //          later stage idles while the first finishes its last backward
  //          (the tail of the bubble).
  // On the NCCL backend wait() does not block the host and these stay near 0.
  double wait_seconds_tp = 0, wait_seconds_pp = 0, wait_seconds_dp = 0, wait_seconds_world = 0;
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
  // "42s", "1m02s", "3h07m": compact enough for the step line.
  static std::string format_compact_duration(double seconds);

 private:
  void check_written();  // a failed write (disk full) is an error, never silently lost
  std::string path_;
  std::ofstream file_;
};

std::uint64_t peak_rss_bytes();

}  // namespace launch
