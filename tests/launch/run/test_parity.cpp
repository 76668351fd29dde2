// Parity under mpirun (ARCHITECTURE.md, "Parity is the test"): every parallel layout
// trains the same model as one process on the same seed and data. Run with
// `mpirun --oversubscribe -np 8`: the world is cut into groups, each group
// trains one layout, and every rank also trains the single-process reference
// itself (on MPI_COMM_SELF) to compare its own slices against. Tolerances:
// parity_fixture.h.
#include "tests/launch/parity_fixture.h"

using namespace test_support;

namespace {

class Parity : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new SharedDir("parity");
    ref_ = new TrainedRun(train_run(parity_config(*dir_, 1, 1, 1), MPI_COMM_SELF));
  }
  static void TearDownTestSuite() {
    delete ref_;
    delete dir_;
  }

  // Trains the layout on groups of tp*pp*dp ranks (ranks beyond the last
  // whole group sit out) and compares with the reference.
  static void expect_parity(int tp, int pp, int dp, const std::string& schedule = "1f1b", bool overlap = true,
                            int zero = 0, bool sequence_parallel = false, const std::string& recompute = "none") {
    on_groups(tp * pp * dp, [&](MPI_Comm group) {
      launch::TrainConfig config = parity_config(*dir_, tp, pp, dp);
      config.pipeline_schedule = schedule;
      config.overlap_grad_reduce = overlap;
      config.zero = zero;
      config.sequence_parallel = sequence_parallel;
      config.recompute = recompute;
      const std::string layout = "tp" + std::to_string(tp) + " pp" + std::to_string(pp) + " dp" + std::to_string(dp) +
                                 " " + schedule + (overlap ? "" : " no-overlap") + " zero" + std::to_string(zero) +
                                 (sequence_parallel ? " sequence-parallel" : "") + " recompute " + recompute;
      expect_close_to_reference(train_run(config, group), *ref_, layout);
    });
  }

  static SharedDir* dir_;
  static TrainedRun* ref_;
};
SharedDir* Parity::dir_ = nullptr;
TrainedRun* Parity::ref_ = nullptr;

}  // namespace

TEST_F(Parity, TensorParallel) {
  expect_parity(2, 1, 1);
  expect_parity(4, 1, 1);
}

TEST_F(Parity, PipelineParallel) {
  expect_parity(1, 2, 1);
  expect_parity(1, 4, 1);
  expect_parity(1, 4, 1, "afab");
}

TEST_F(Parity, DataParallel) {
  expect_parity(1, 1, 2);
  expect_parity(1, 1, 4, "1f1b", false);
  expect_parity(1, 1, 8);
}

TEST_F(Parity, Pairs) {
  expect_parity(2, 2, 1);
  expect_parity(2, 1, 2);
  expect_parity(1, 2, 2);
}

TEST_F(Parity, AllThreeAxes) {
  expect_parity(2, 2, 2);
  expect_parity(2, 2, 2, "afab", false);
}

TEST_F(Parity, ZeroStage1) {
  expect_parity(1, 1, 2, "1f1b", true, 1);
  expect_parity(1, 1, 4, "1f1b", false, 1);
  expect_parity(2, 2, 2, "1f1b", true, 1);
  expect_parity(1, 2, 4, "afab", true, 1);
}

TEST_F(Parity, SequenceParallel) {
  expect_parity(2, 1, 1, "1f1b", true, 0, true);
  expect_parity(4, 1, 1, "1f1b", true, 0, true);
  expect_parity(2, 2, 2, "1f1b", true, 0, true);
  expect_parity(2, 2, 2, "afab", true, 1, true, "full");
  expect_parity(2, 2, 1, "1f1b", true, 0, true, "selective");
}

TEST_F(Parity, ZeroStage1ShardsTheOptimizerState) {
  // P_os (Rajbhandari et al. 2020): each of dp ranks holds 1/dp of the moments
  // and of the fp32 master weights.
  if (world_size() < 4) GTEST_SKIP() << "needs 4 ranks";
  MPI_Comm group = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() < 4 ? 0 : MPI_UNDEFINED, world_rank(), &group);
  if (group == MPI_COMM_NULL) return;
  launch::TrainConfig config = parity_config(*dir_, 1, 1, 4);
  config.zero = 1;
  config.steps = 1;
  config.resolve(test_cuda_devices(), 4);
  {
    std::ostringstream quiet;
    launch::Trainer trainer(config, quiet, group);
    // The registry pads every tensor to a multiple of 64 x dp, so the shard is
    // exactly a quarter of the (padded) flat buffer.
    EXPECT_EQ(trainer.optimizer().m().numel() * 4, trainer.registry().total_numel());
    EXPECT_EQ(trainer.optimizer().v().numel() * 4, trainer.registry().total_numel());
    // So does the fp32 master (the paper's K = 12); the working copy stays whole.
    EXPECT_EQ(trainer.params().master().numel() * 4, trainer.registry().total_numel());
    EXPECT_EQ(trainer.params().working().numel(), trainer.registry().total_numel());
    // The padding is exactly each tensor rounded up to 64 x dp elements (it
    // matters only for tiny tensors like these; gpt2-124m pads by < 0.1%).
    std::int64_t expected = 0;
    for (const model::ParamInfo& p : trainer.registry().entries()) expected += (p.numel() + 255) / 256 * 256;
    EXPECT_EQ(trainer.registry().total_numel(), expected);
  }
  MPI_Comm_free(&group);
}

TEST_F(Parity, ResumeUnderTp2Pp2Dp2ContinuesExactly) {
  if (world_size() < 8) GTEST_SKIP() << "needs 8 ranks";
  expect_exact_resume(parity_config(*dir_, 2, 2, 2), *dir_, "tp2pp2dp2");
}

TEST_F(Parity, ResumeUnderZeroStage1ContinuesExactly) {
  if (world_size() < 8) GTEST_SKIP() << "needs 8 ranks";
  launch::TrainConfig config = parity_config(*dir_, 2, 1, 4);
  config.zero = 1;
  expect_exact_resume(config, *dir_, "zero1");
}
