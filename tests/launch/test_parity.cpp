// Parity under mpirun (DESIGN.md, "Parity is the test"): every parallel layout
// trains the same model as one process on the same seed and data. Run with
// `mpirun --oversubscribe -np 8`: the world is cut into groups, each group
// trains one layout, and every rank also trains the single-process reference
// itself (on MPI_COMM_SELF) to compare its own slices against.
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
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include "launch/trainer.h"
#include "model/gpt_params.h"
#include "training_fixture.h"

using namespace test_support;

namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

// One directory for all ranks: rank 0 makes it, everyone learns its name.
class SharedDir {
 public:
  SharedDir() {
    std::string path;
    if (world_rank() == 0) {
      dir_ = std::make_unique<TempDir>("parity");
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

launch::TrainConfig parity_config(const SharedDir& dir, int tp, int pp, int dp, int world) {
  launch::TrainConfig c;
  c.preset = "gpt-micro";
  c.n_layer = 4;  // enough layers for four pipeline stages
  c.n_head = 4;   // and heads for four tensor-parallel ranks
  c.micro_batch = 1;
  c.seq_len = 16;
  c.batch_tokens = 8 * 16;  // eight sequences: several micro-batches on every layout
  c.steps = 5;
  c.lr = 3e-3;
  c.warmup_steps = 2;
  c.adam_eps = 1e-6;
  c.train_data = dir / "train_*.bin";
  c.device = "cpu";
  c.peak_tflops = 1.0;
  c.tp = tp;
  c.pp = pp;
  c.dp = dp;
  c.resolve(0, world);
  return c;
}

struct Reference {
  launch::TrainConfig config;
  launch::RunSummary summary;
  model::ParamRegistry registry;
  std::vector<float> params;
};

Reference train_reference(const SharedDir& dir) {
  Reference ref{parity_config(dir, 1, 1, 1, 1), {}, {}, {}};
  std::ostringstream quiet;
  launch::Trainer trainer(ref.config, quiet, MPI_COMM_SELF);
  ref.summary = trainer.run();
  ref.registry = trainer.registry();
  ref.params.resize(static_cast<std::size_t>(ref.registry.total_numel()));
  trainer.params().download_master(ref.params.data());
  return ref;
}

// Trains `layout` on groups of tp*pp*dp ranks and compares with `ref`.
// Ranks beyond the last whole group sit out.
void expect_parity(const Reference& ref, const SharedDir& dir, int tp, int pp, int dp,
                   const std::string& schedule = "1f1b", bool overlap = true, int zero = 0) {
  const int size = tp * pp * dp;
  const int color = world_rank() / size < world_size() / size ? world_rank() / size : MPI_UNDEFINED;
  MPI_Comm group = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, color, world_rank(), &group);
  if (group == MPI_COMM_NULL) return;
  launch::TrainConfig config = parity_config(dir, tp, pp, dp, size);
  config.pipeline_schedule = schedule;
  config.overlap_grad_reduce = overlap;
  config.bucket_mb = 0.01;  // several buckets even for this tiny model
  config.zero = zero;
  std::ostringstream quiet;
  {
    launch::Trainer trainer(config, quiet, group);
    const launch::RunSummary run = trainer.run();
    const std::string layout = "tp" + std::to_string(tp) + " pp" + std::to_string(pp) + " dp" + std::to_string(dp) +
                               " " + schedule + (overlap ? "" : " no-overlap") + " zero" + std::to_string(zero);
    ASSERT_EQ(run.losses.size(), ref.summary.losses.size()) << layout;
    for (std::size_t i = 0; i < run.losses.size(); ++i)
      EXPECT_NEAR(run.losses[i], ref.summary.losses[i], 1e-5 * std::fabs(ref.summary.losses[i]))
          << layout << " step " << i + 1;

    std::vector<float> mine(static_cast<std::size_t>(trainer.registry().total_numel()));
    trainer.params().download_master(mine.data());
    for (const model::ParamInfo& p : trainer.registry().entries()) {
      const model::ParamInfo& whole = ref.registry.find(p.name);
      double diff2 = 0, ref2 = 0;
      model::for_each_run(p, [&](std::int64_t local, std::int64_t global, std::int64_t count) {
        for (std::int64_t i = 0; i < count; ++i) {
          const double a = mine[p.offset + local + i], b = ref.params[whole.offset + global + i];
          diff2 += (a - b) * (a - b);
          ref2 += b * b;
        }
      });
      EXPECT_LE(std::sqrt(diff2), 1e-5 * std::sqrt(ref2)) << layout << " rank " << world_rank() << " tensor " << p.name;
    }
  }
  MPI_Comm_free(&group);
}

class Parity : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new SharedDir();
    ref_ = new Reference(train_reference(*dir_));
  }
  static void TearDownTestSuite() {
    delete ref_;
    delete dir_;
  }
  static SharedDir* dir_;
  static Reference* ref_;
};
SharedDir* Parity::dir_ = nullptr;
Reference* Parity::ref_ = nullptr;

}  // namespace

TEST_F(Parity, TensorParallel) {
  expect_parity(*ref_, *dir_, 2, 1, 1);
  expect_parity(*ref_, *dir_, 4, 1, 1);
}

TEST_F(Parity, PipelineParallel) {
  expect_parity(*ref_, *dir_, 1, 2, 1);
  expect_parity(*ref_, *dir_, 1, 4, 1);
  expect_parity(*ref_, *dir_, 1, 4, 1, "afab");
}

TEST_F(Parity, DataParallel) {
  expect_parity(*ref_, *dir_, 1, 1, 2);
  expect_parity(*ref_, *dir_, 1, 1, 4, "1f1b", false);
  expect_parity(*ref_, *dir_, 1, 1, 8);
}

TEST_F(Parity, Pairs) {
  expect_parity(*ref_, *dir_, 2, 2, 1);
  expect_parity(*ref_, *dir_, 2, 1, 2);
  expect_parity(*ref_, *dir_, 1, 2, 2);
}

TEST_F(Parity, AllThreeAxes) {
  expect_parity(*ref_, *dir_, 2, 2, 2);
  expect_parity(*ref_, *dir_, 2, 2, 2, "afab", false);
}

TEST_F(Parity, ZeroStage1) {
  expect_parity(*ref_, *dir_, 1, 1, 2, "1f1b", true, 1);
  expect_parity(*ref_, *dir_, 1, 1, 4, "1f1b", false, 1);
  expect_parity(*ref_, *dir_, 2, 2, 2, "1f1b", true, 1);
  expect_parity(*ref_, *dir_, 1, 2, 4, "afab", true, 1);
}

TEST_F(Parity, ZeroStage1ShardsTheOptimizerState) {
  // P_os (Rajbhandari et al. 2020): each of dp ranks holds 1/dp of the moments.
  if (world_size() < 4) GTEST_SKIP() << "needs 4 ranks";
  MPI_Comm group = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() < 4 ? 0 : MPI_UNDEFINED, world_rank(), &group);
  if (group == MPI_COMM_NULL) return;
  std::ostringstream quiet;
  launch::TrainConfig config = parity_config(*dir_, 1, 1, 4, 4);
  config.zero = 1;
  config.steps = 1;
  {
    launch::Trainer trainer(config, quiet, group);
    // The registry pads every tensor to a multiple of 64 x dp, so the shard is
    // exactly a quarter of the (padded) flat buffer.
    EXPECT_EQ(trainer.optimizer().m().numel() * 4, trainer.registry().total_numel());
    EXPECT_EQ(trainer.optimizer().v().numel() * 4, trainer.registry().total_numel());
    // The padding is exactly each tensor rounded up to 64 x dp elements (it
    // matters only for tiny tensors like these; gpt2-124m pads by < 0.1%).
    std::int64_t expected = 0;
    for (const model::ParamInfo& p : trainer.registry().entries()) expected += (p.numel() + 255) / 256 * 256;
    EXPECT_EQ(trainer.registry().total_numel(), expected);
  }
  MPI_Comm_free(&group);
}

TEST_F(Parity, ResumeUnderZeroStage1ContinuesExactly) {
  if (world_size() < 8) GTEST_SKIP() << "needs 8 ranks";
  launch::TrainConfig config = parity_config(*dir_, 2, 1, 4, 8);
  config.zero = 1;
  config.steps = 6;
  config.checkpoint_dir = *dir_ / "ckpt_zero";
  config.checkpoint_interval = 3;
  std::ostringstream quiet;
  launch::RunSummary uninterrupted;
  {
    launch::Trainer trainer(config, quiet, MPI_COMM_WORLD);
    uninterrupted = trainer.run();
  }
  launch::TrainConfig resumed_config = config;
  resumed_config.checkpoint_dir = *dir_ / "ckpt_zero_resumed";
  resumed_config.resume = *dir_ / "ckpt_zero/step_00000003";
  launch::Trainer trainer(resumed_config, quiet, MPI_COMM_WORLD);
  const launch::RunSummary resumed = trainer.run();
  ASSERT_EQ(resumed.losses.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(resumed.losses[i], uninterrupted.losses[3 + i]) << "step " << 4 + i;
}

TEST_F(Parity, ResumeUnderTp2Pp2Dp2ContinuesExactly) {
  if (world_size() < 8) GTEST_SKIP() << "needs 8 ranks";
  launch::TrainConfig config = parity_config(*dir_, 2, 2, 2, 8);
  config.steps = 6;
  config.checkpoint_dir = *dir_ / "ckpt";
  config.checkpoint_interval = 3;
  std::ostringstream quiet;
  launch::RunSummary uninterrupted;
  {
    launch::Trainer trainer(config, quiet, MPI_COMM_WORLD);
    uninterrupted = trainer.run();
  }
  launch::TrainConfig resumed_config = config;
  resumed_config.checkpoint_dir = *dir_ / "ckpt_resumed";
  resumed_config.resume = *dir_ / "ckpt/step_00000003";
  launch::Trainer trainer(resumed_config, quiet, MPI_COMM_WORLD);
  const launch::RunSummary resumed = trainer.run();
  ASSERT_EQ(resumed.losses.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(resumed.losses[i], uninterrupted.losses[3 + i]) << "step " << 4 + i;
}
