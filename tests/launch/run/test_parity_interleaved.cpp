// The interleaved 1F1B schedule (--pipeline-schedule interleaved, Megatron-LM's;
// parallel/pipeline_schedule.h) against one process, as test_parity does for
// the other schedules: every layout trains the same 8-layer model on the same
// seed and data and must match one process's losses and parameters within
// the parity tolerance (parity_fixture.h). Each rank holds 2 chunks of
// layers (rank r: layers r and r + 4 of 8 at pp 4), the last rank handing
// each chunk's output round to rank 0. Also: a checkpoint written under the
// interleaved schedule resumes under 1F1B and in one process, and one written
// by one process resumes interleaved. ZeRO 1-3 and 1-bit Adam compose with it.
//
// Needs 8 ranks (mpirun --oversubscribe -np 8); fewer run what fits.
#include "tests/launch/parity_fixture.h"

using namespace test_support;

namespace {

class ParityInterleaved : public ::testing::Test {
 protected:
  static constexpr int kSteps = 6, kSavedAt = 3;

  static void SetUpTestSuite() {
    dir_ = new SharedDir("parity_interleaved");
    ref_ = new Reference(train_reference(config(1, 1, 1), kSavedAt));
  }
  static void TearDownTestSuite() {
    delete ref_;
    delete dir_;
  }

  // Eight layers (4 ranks x 2 chunks), eight micro-batches of one sequence
  // per step at dp 1 (four at dp 2): a multiple of pp, as the schedule needs.
  static launch::TrainConfig config(int tp, int pp, int dp, int virtual_stages = 1) {
    launch::TrainConfig c = parity_config(*dir_, tp, pp, dp);
    c.n_layer = 8;
    c.steps = kSteps;
    if (virtual_stages > 1) {
      c.pipeline_schedule = "interleaved";
      c.virtual_stages = virtual_stages;
    }
    return c;
  }

  static void expect_parity(launch::TrainConfig c, const std::string& what) {
    on_groups(c.tp * c.pp * c.dp, [&](MPI_Comm group) { expect_close_to_reference(train_run(c, group), ref_->whole, what); });
  }

  static SharedDir* dir_;
  static Reference* ref_;  // one process: the whole run and its tail after kSavedAt
};
SharedDir* ParityInterleaved::dir_ = nullptr;
Reference* ParityInterleaved::ref_ = nullptr;

}  // namespace

TEST_F(ParityInterleaved, PipelineOfFourRanksTwoChunksEach) {
  if (world_size() < 4) GTEST_SKIP() << "needs 4 ranks";
  expect_parity(config(1, 4, 1, 2), "pp4 interleaved v2");
}

TEST_F(ParityInterleaved, WithTensorParallelSequenceParallelAndRecomputation) {
  if (world_size() < 8) GTEST_SKIP() << "needs 8 ranks";
  expect_parity(config(2, 4, 1, 2), "tp2 pp4 interleaved v2");
  launch::TrainConfig c = config(2, 4, 1, 2);
  c.sequence_parallel = true;
  c.recompute = "selective";
  expect_parity(c, "tp2 pp4 interleaved v2, sequence parallel, selective recomputation");
}

TEST_F(ParityInterleaved, WithDataParallelAndZeroStage1) {
  if (world_size() < 8) GTEST_SKIP() << "needs 8 ranks";
  expect_parity(config(1, 4, 2, 2), "pp4 dp2 interleaved v2");
  launch::TrainConfig c = config(1, 4, 2, 2);
  c.zero = 1;
  c.overlap_grad_reduce = false;
  expect_parity(c, "pp4 dp2 interleaved v2, ZeRO-1, reduction after backward");
}

TEST_F(ParityInterleaved, WithZeroStages2And3) {
  // Each chunk's stage gathers (stage 3) and reduces (stages 2, 3) its own
  // units as it uses them, chunk after chunk, micro-batch after micro-batch.
  if (world_size() < 8) GTEST_SKIP() << "needs 8 ranks";
  for (const int zero : {2, 3}) {
    launch::TrainConfig c = config(1, 4, 2, 2);
    c.zero = zero;
    expect_parity(c, "pp4 dp2 interleaved v2, ZeRO-" + std::to_string(zero));
  }
}

TEST_F(ParityInterleaved, OneBitAdamWarmsUpAsAdamWAndThenTrains) {
  // Before its freeze step 1-bit Adam is AdamW to the last bit, so a run that
  // never freezes must match the reference; one that freezes at step 3
  // compresses each chunk's momentum (its layout differs from 1F1B's, so its
  // losses do too, as 1-bit Adam's do between layouts) and must stay near it.
  if (world_size() < 8) GTEST_SKIP() << "needs 8 ranks";
  launch::TrainConfig c = config(1, 4, 2, 2);
  c.optimizer = "onebit-adam";
  c.freeze_step = kSteps + 1;
  expect_parity(c, "pp4 dp2 interleaved v2, 1-bit Adam before its freeze");
  c.freeze_step = 3;
  on_groups(8, [&](MPI_Comm group) {
    const TrainedRun run = train_run(c, group);
    ASSERT_EQ(run.summary.losses.size(), ref_->whole.summary.losses.size());
    for (std::size_t i = 0; i < run.summary.losses.size(); ++i)
      EXPECT_NEAR(run.summary.losses[i], ref_->whole.summary.losses[i], 0.02 * ref_->whole.summary.losses[i]) << "step " << i + 1;
  });
}

TEST_F(ParityInterleaved, CheckpointsResumeAcrossSchedules) {
  if (world_size() < 4) GTEST_SKIP() << "needs 4 ranks";
  const std::string interleaved = write_layout_checkpoint(config(1, 4, 1, 2), *dir_, "interleaved", kSavedAt);
  expect_resumes(interleaved, config(1, 2, 1), ref_->tail, kSavedAt, "pp4 interleaved -> pp2 1f1b");
  expect_resumes(interleaved, config(1, 1, 1), ref_->tail, kSavedAt, "pp4 interleaved -> one process");
  const std::string one = write_layout_checkpoint(config(1, 1, 1), *dir_, "one", kSavedAt);
  expect_resumes(one, config(1, 4, 1, 2), ref_->tail, kSavedAt, "one process -> pp4 interleaved");
}

// What the schedule cannot run, or does not compose with yet, is refused when
// the configuration is resolved, in one line naming the numbers.
TEST_F(ParityInterleaved, RefusalsNameTheProblem) {
  const auto refusal = [](launch::TrainConfig c, int world) -> std::string {
    try {
      c.resolve(test_cuda_devices(), world);
    } catch (const engine::Error& e) {
      return e.what();
    }
    return "";
  };
  launch::TrainConfig c = config(1, 4, 1, 2);
  EXPECT_EQ(refusal(c, 4), "");
  c.batch_tokens = 6 * c.seq_len;  // 6 micro-batches over 4 ranks
  EXPECT_NE(refusal(c, 4).find("must be a multiple of pp (pp 4, 6 micro-batches, 2 virtual stages)"),
            std::string::npos);
  c = config(1, 2, 1, 2);
  EXPECT_NE(refusal(c, 2).find("needs pp > 2"), std::string::npos);
  c = config(1, 4, 1, 3);  // 8 layers in 12 chunks
  EXPECT_NE(refusal(c, 4).find("splits the 8 layers into pp x virtual stages = 12 equal chunks"), std::string::npos);
  // --eval-only has one micro-batch and no schedule: it runs the plain cut.
  c = config(1, 4, 1, 2);
  c.eval_only = true;
  c.val_data = c.train_data;
  c.resume = "latest";
  c.checkpoint_dir = *dir_ / "ckpt_interleaved";
  EXPECT_EQ(refusal(c, 4), "");
  EXPECT_EQ(c.virtual_stages, 2) << "resolve() works on a copy";
  c = config(1, 4, 1);
  c.virtual_stages = 2;  // without the interleaved schedule
  EXPECT_NE(refusal(c, 4).find("--virtual-stages 2 needs --pipeline-schedule interleaved"), std::string::npos);
}
