// Validation (--val-interval, --val-tokens) and --eval-only: the mean loss
// over the first sequences of the validation set, the same for any layout.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "launch/run/trainer.h"
#include "engine/ops.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/watchdog.h"

namespace launch {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

std::int64_t Trainer::validation_sequences() const {
  return std::min(config_.val_tokens / config_.seq_len, val_data_->sequences_per_epoch());
}

double Trainer::validate() {
  parallel::WatchdogPhase phase("validation");
  // The first N sequences of the validation set, in order, whatever the
  // layout: data-parallel replica d scores the d-th of dp equal shares of
  // them, micro-batch by micro-batch through the pipeline. Every replica
  // runs the same number of forwards (ZeRO-3 gathers weights over the
  // replicas); rows past a replica's share are padding, run but not counted.
  const std::int64_t B = config_.micro_batch, T = config_.seq_len, N = validation_sequences();
  const std::int64_t share = (N + grid_.dp_size() - 1) / grid_.dp_size();
  const std::int64_t first = std::min(N, grid_.dp_rank() * share), end = std::min(N, first + share);
  const std::int64_t batches = (share + B - 1) / B;
  std::vector<std::int32_t> inputs(static_cast<std::size_t>(B * T)), targets(inputs.size());
  std::vector<std::int32_t> pad_inputs(static_cast<std::size_t>(T)), pad_targets(pad_inputs.size());
  val_data_->read_sequences(0, 1, pad_inputs.data(), pad_targets.data());
  parallel::Communicator& pp = *comms_.pp;
  double loss_sum = 0.0;
  for (std::int64_t i = 0; i < batches; ++i) {
    const std::int64_t begin = first + i * B;
    const std::int64_t rows = std::clamp<std::int64_t>(end - begin, 0, B);
    if (rows > 0) val_data_->read_sequences(begin, rows, inputs.data(), targets.data());
    for (std::int64_t r = rows; r < B; ++r) {
      std::copy(pad_inputs.begin(), pad_inputs.end(), inputs.begin() + r * T);
      std::copy(pad_targets.begin(), pad_targets.end(), targets.begin() + r * T);
    }
    // Through this rank's chunks in order; with several, each chunk's
    // output goes to the next virtual stage (interleaved: the last rank
    // hands it round to rank 0's next chunk; ZB-V: back up the V, rank
    // pp - 1 handing chunk 0's output to its own chunk 1).
    for (std::size_t c = 0; c < stages_.size(); ++c) {
      model::GptStage& stage = *stages_[c];
      const model::StageRange& chunk = stage.range();
      const int ci = static_cast<int>(c);
      const parallel::Action receive{parallel::ActionKind::kRecvForward, 0, ci};
      const parallel::Action send{parallel::ActionKind::kSendForward, 0, ci};
      if (!chunk.has_embedding) {
        const int from = parallel::pipeline_peer(receive, pp.size(), pp.rank(), placement_);
        if (from == pp.rank())  // the turn of the V: the previous chunk's output, here
          engine::ops::copy(stage.input(0), stages_[parallel::pipeline_peer_chunk(receive, pp.size(), pp.rank(),
                                                                                  placement_)]->output(0));
        else
          pp.recv(stage.input(0), from);
      }
      stage.forward(0, inputs.data(), targets.data(), 0.0);
      if (!chunk.has_head) {
        const int to = parallel::pipeline_peer(send, pp.size(), pp.rank(), placement_);
        if (to != pp.rank()) pp.send(stage.output(0), to);
      }
      if (chunk.has_head) loss_sum += stage.loss_sum(0, rows);
    }
  }
  // Each tensor-parallel group's loss counted once, every replica's share.
  const bool contributes = range_.has_head && tp_.rank == 0;
  return sum_over_world(contributes ? loss_sum : 0.0) / static_cast<double>(N * T);
}

RunSummary Trainer::evaluate_only() {
  RunSummary summary;
  summary.first_step = start_step_;
  const auto t0 = Clock::now();
  const double loss = validate();
  summary.final_val_loss = summary.best_val_loss = loss;
  summary.best_val_step = start_step_;
  summary.wall_seconds = seconds_since(started_);
  if (is_logger()) {
    const std::string model =
        config_.resume.empty() ? "--init-from " + config_.init_from : "the checkpoint of step " + std::to_string(start_step_);
    char line[160];
    std::snprintf(line, sizeof line, "eval       val loss %.4f over %lld tokens (%lld sequences of %lld) in %.1f s",
                  loss, static_cast<long long>(validation_sequences() * config_.seq_len),
                  static_cast<long long>(validation_sequences()), static_cast<long long>(config_.seq_len),
                  seconds_since(t0));
    out_ << line << ", " << model << std::endl;
    metrics_.record_event({{"event", "eval"},
                           {"step", start_step_},
                           {"val_loss", loss},
                           {"val_tokens", validation_sequences() * config_.seq_len},
                           {"model", config_.resume.empty() ? config_.init_from : config_.resume}});
  }
  return summary;
}

}  // namespace launch
