// Shared by the MPI parity tests (ARCHITECTURE.md, "Parity is the test"): a corpus
// directory all ranks see, the tiny-GPT configuration every layout trains,
// training a run in-process, and the comparison with a single-process run.
//
// Tolerance: relative 1e-5 on every step's loss and, per tensor, on the final
// parameters in the L2 sense (||a - b|| <= 1e-5 ||reference||). Layouts change
// the order of fp32 sums (split matmuls, all-reduces), which moves results by
// ~1e-7 relative per step; 1e-5 over five steps leaves room for that while any
// wrong gradient, missing reduction or double-counted tensor is off by 1e-3 or
// more. Two choices keep rounding noise from being amplified into real
// differences: the norm is per tensor rather than per element, and AdamW's
// epsilon is 1e-6. Adam divides each gradient by its own running RMS, so an
// element whose true gradient is zero (the key bias: softmax ignores a shift
// of all scores) but whose computed gradient is rounding noise would take a
// full learning-rate step in a direction set by that noise; an epsilon well
// above the noise keeps such elements still on every layout.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "launch/run/trainer.h"
#include "model/gpt_params.h"
#include "tests/launch/training_fixture.h"
#include "tests/support/mpi_world.h"

namespace test_support {

// One directory for all ranks: rank 0 makes it and writes the corpus,
// everyone learns its name.
class SharedDir {
 public:
  explicit SharedDir(const std::string& tag) {
    std::string path;
    if (world_rank() == 0) {
      dir_ = std::make_unique<TempDir>(tag);
      write_corpus(*dir_);
      path = dir_->path().string();
    }
    int n = static_cast<int>(path.size());
    MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
    path.resize(n);
    MPI_Bcast(path.data(), n, MPI_CHAR, 0, MPI_COMM_WORLD);
    path_ = path;
  }
  ~SharedDir() { MPI_Barrier(MPI_COMM_WORLD); }  // nobody deletes files others still read
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::unique_ptr<TempDir> dir_;
  std::string path_;
};

// Cuts the world into groups of `size` ranks (ranks beyond the last whole
// group sit out) and calls fn(group communicator) on every group member.
template <typename Fn>
void on_groups(int size, Fn fn) {
  const int color = world_rank() / size < world_size() / size ? world_rank() / size : MPI_UNDEFINED;
  MPI_Comm group = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, color, world_rank(), &group);
  if (group == MPI_COMM_NULL) return;
  fn(group);
  MPI_Comm_free(&group);
}

// Four layers and four heads (enough for four stages or four tensor-parallel
// ranks), eight sequences per step: several micro-batches on every layout.
// Callers change fields, then call resolve(test_cuda_devices(), world).
inline launch::TrainConfig parity_config(const SharedDir& dir, int tp, int pp, int dp) {
  launch::TrainConfig c;
  c.preset = "gpt-micro";
  c.n_layer = 4;
  c.n_head = 4;
  c.micro_batch = 1;
  c.seq_len = 16;
  c.batch_tokens = 8 * 16;
  c.steps = 5;
  c.lr = 3e-3;
  c.warmup_steps = 2;
  c.adam_eps = 1e-6;
  c.train_data = dir / "train_*.bin";
  use_test_device(c);
  c.peak_tflops = 1.0;
  c.tp = tp;
  c.pp = pp;
  c.dp = dp;
  c.bucket_mb = 0.01;  // several buckets even for this tiny model
  return c;
}

struct TrainedRun {
  launch::RunSummary summary;
  model::ParamRegistry registry;
  std::vector<float> params;  // this rank's slices, laid out by `registry`
};

// Trains `config` (resolved here for the size of `comm`) on the ranks of `comm`.
inline TrainedRun train_run(launch::TrainConfig config, MPI_Comm comm) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  config.resolve(test_cuda_devices(), size);
  std::ostringstream quiet;
  launch::Trainer trainer(config, quiet, comm);
  TrainedRun run{trainer.run(), trainer.registry(), {}};
  // Every buffer is sized before or in the first step (issue 34: a device
  // allocation mid-step may synchronise a device that NCCL collectives hold).
  EXPECT_EQ(run.summary.allocations_in_steps, 0u) << "buffers allocated inside steps after the first";
  run.params.resize(static_cast<std::size_t>(run.registry.total_numel()));
  trainer.download_master(run.params.data());
  return run;
}

// The single-process run a layout suite compares with, and its losses after
// `saved_at`: what a run resumed at that step must continue with
// (expect_resumes' `tail`).
struct Reference {
  TrainedRun whole;
  TrainedRun tail;
};

inline Reference train_reference(const launch::TrainConfig& config, int saved_at) {
  TrainedRun whole = train_run(config, MPI_COMM_SELF);
  TrainedRun tail = whole;
  tail.summary.losses.erase(tail.summary.losses.begin(), tail.summary.losses.begin() + saved_at);
  return {std::move(whole), std::move(tail)};
}

// For each tensor this rank holds of `run`, fn(name, diff2, ref2): the squared
// L2 distance of its slice from the same elements of the single-process
// `ref`, and their squared norm there.
template <typename Fn>
void for_each_tensor_distance(const TrainedRun& run, const TrainedRun& ref, Fn fn) {
  for (const model::ParamInfo& p : run.registry.entries()) {
    const model::ParamInfo& whole = ref.registry.find(p.name);
    double diff2 = 0, ref2 = 0;
    model::for_each_run(p, [&](std::int64_t local, std::int64_t global, std::int64_t count) {
      for (std::int64_t i = 0; i < count; ++i) {
        const double a = run.params[p.offset + local + i], b = ref.params[whole.offset + global + i];
        diff2 += (a - b) * (a - b);
        ref2 += b * b;
      }
    });
    fn(p.name, diff2, ref2);
  }
}

// This rank's losses and parameter slices against a single-process run,
// within `rtol` (the 1e-5 above unless a suite says why it needs more).
inline void expect_close_to_reference(const TrainedRun& run, const TrainedRun& ref, const std::string& what,
                                      double rtol = 1e-5) {
  ASSERT_EQ(run.summary.losses.size(), ref.summary.losses.size()) << what;
  for (std::size_t i = 0; i < run.summary.losses.size(); ++i)
    EXPECT_NEAR(run.summary.losses[i], ref.summary.losses[i], rtol * std::fabs(ref.summary.losses[i]))
        << what << " step " << i + 1;
  for_each_tensor_distance(run, ref, [&](const std::string& name, double diff2, double ref2) {
    EXPECT_LE(std::sqrt(diff2), rtol * std::sqrt(ref2)) << what << " rank " << world_rank() << " tensor " << name;
  });
}

// Trains `config` for its steps with a checkpoint half way, then resumes a
// second run from that checkpoint: the second half's losses must be equal
// bit for bit.
// Trains `source` on the first ranks of the world with one checkpoint at
// step `saved_at` (in dir/ckpt_TAG) and returns that checkpoint's folder.
inline std::string write_layout_checkpoint(launch::TrainConfig source, const SharedDir& dir, const std::string& tag,
                                           int saved_at) {
  source.checkpoint_dir = dir / ("ckpt_" + tag);
  source.checkpoint_interval = saved_at;
  const int ranks = source.tp * source.pp * source.dp;
  on_groups(ranks, [&](MPI_Comm group) {
    if (world_rank() < ranks) train_run(source, group);
  });
  MPI_Barrier(MPI_COMM_WORLD);
  const std::string step = std::to_string(saved_at);
  return dir / ("ckpt_" + tag + "/step_" + std::string(8 - step.size(), '0') + step);
}

// Resumes `checkpoint` (saved at `saved_at`) under `target` and compares the
// continuation with `tail`, the uninterrupted run's steps after it.
inline void expect_resumes(const std::string& checkpoint, launch::TrainConfig target, const TrainedRun& tail,
                           int saved_at, const std::string& what) {
  target.resume = checkpoint;
  on_groups(target.tp * target.pp * target.dp, [&](MPI_Comm group) {
    const TrainedRun resumed = train_run(target, group);
    ASSERT_EQ(resumed.summary.first_step, saved_at) << what;
    expect_close_to_reference(resumed, tail, what);
  });
}

inline void expect_exact_resume(launch::TrainConfig config, const SharedDir& dir, const std::string& tag) {
  config.steps = 6;
  config.checkpoint_dir = dir / ("ckpt_" + tag);
  config.checkpoint_interval = 3;
  const TrainedRun uninterrupted = train_run(config, MPI_COMM_WORLD);
  config.checkpoint_dir = dir / ("ckpt_" + tag + "_resumed");
  config.resume = dir / ("ckpt_" + tag + "/step_00000003");
  const TrainedRun resumed = train_run(config, MPI_COMM_WORLD);
  ASSERT_EQ(resumed.summary.first_step, 3) << tag;
  ASSERT_EQ(resumed.summary.losses.size(), 3u) << tag;
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(resumed.summary.losses[i], uninterrupted.summary.losses[3 + i]) << tag << " step " << 4 + i;
}

}  // namespace test_support
