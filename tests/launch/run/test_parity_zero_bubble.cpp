// The ZB-H1 zero-bubble schedule (--pipeline-schedule zb-h1, Qi et al. 2024;
// parallel/pipeline_schedule.h) against one process, as test_parity does for
// the other schedules: every layout trains the same model on the same seed
// and data and must match one process's losses and parameters within the
// parity tolerance (parity_fixture.h). Each stage runs every backward as an
// input-gradient pass and, later, a weight-gradient pass
// (model::GptStage::backward_input / backward_weight), so this checks the
// split end to end: the stashes, the gradient units held from one pass to
// the other under ZeRO-2/3, the sequence-parallel sums of the norms'
// gradients, the data-parallel reductions released by the last weight pass,
// the tied embedding across the first and last stage, and 1-bit Adam.
// Checkpoints written under zb-h1 resume under 1F1B and in one process.
//
// Needs 8 ranks (mpirun --oversubscribe -np 8); fewer run what fits.
#include "tests/launch/run/zero_bubble_parity.h"

using namespace test_support;

namespace {

struct Schedule {
  static constexpr const char* kName = "zb-h1";
  static constexpr const char* kFolder = "parity_zero_bubble";
  static constexpr int kLayers = 4;
};
class ParityZeroBubble : public ZeroBubbleParity<Schedule> {};

}  // namespace

TEST_F(ParityZeroBubble, OneProcessAndPipelinesOfTwoAndFourStages) {
  expect_parity(config(1, 1, 1), "one process, zb-h1");
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  expect_parity(config(1, 2, 1), "pp2 zb-h1");
  if (world_size() < 4) GTEST_SKIP() << "needs 4 ranks";
  expect_parity(config(1, 4, 1), "pp4 zb-h1");
  launch::TrainConfig c = config(1, 4, 1);
  make_llama(c);
  expect_parity(c, "llama-micro pp4 zb-h1", llama_ref_);
}

TEST_F(ParityZeroBubble, WithTensorParallelSequenceParallelAndRecomputation) {
  if (world_size() < 4) GTEST_SKIP() << "needs 4 ranks";
  for (const std::string recompute : {"none", "selective", "full"}) {
    launch::TrainConfig c = config(2, 2, 1);
    c.sequence_parallel = true;
    c.recompute = recompute;
    expect_parity(c, "tp2 pp2 zb-h1, sequence parallel, recompute " + recompute);
  }
}

TEST_F(ParityZeroBubble, WithDataParallelAndEveryZeroStage) {
  if (world_size() < 8) GTEST_SKIP() << "needs 8 ranks";
  expect_parity(config(1, 4, 2), "pp4 dp2 zb-h1");
  for (const int zero : {1, 2, 3}) {
    launch::TrainConfig c = config(1, 4, 2);
    c.zero = zero;
    expect_parity(c, "pp4 dp2 zb-h1, ZeRO-" + std::to_string(zero));
  }
  launch::TrainConfig c = config(2, 2, 2);
  c.sequence_parallel = true;
  c.zero = 3;
  c.recompute = "full";
  expect_parity(c, "tp2 pp2 dp2 zb-h1, sequence parallel, ZeRO-3, full recomputation");
  make_llama(c);
  expect_parity(c, "llama-micro tp2 pp2 dp2 zb-h1, sequence parallel, ZeRO-3, full recomputation", llama_ref_);
}

TEST_F(ParityZeroBubble, OneBitAdamBeforeItsFreezeIsAdamW) {
  if (world_size() < 8) GTEST_SKIP() << "needs 8 ranks";
  launch::TrainConfig c = config(1, 4, 2);
  c.optimizer = "onebit-adam";
  c.freeze_step = kSteps + 1;
  expect_parity(c, "pp4 dp2 zb-h1, 1-bit Adam before its freeze");
}

TEST_F(ParityZeroBubble, CheckpointsResumeAcrossSchedules) {
  if (world_size() < 4) GTEST_SKIP() << "needs 4 ranks";
  const std::string zb = write_layout_checkpoint(config(1, 4, 1), *dir_, "zb", kSavedAt);
  expect_resumes(zb, config(1, 2, 1, "1f1b"), ref_->tail, kSavedAt, "pp4 zb-h1 -> pp2 1f1b");
  expect_resumes(zb, config(1, 1, 1, "1f1b"), ref_->tail, kSavedAt, "pp4 zb-h1 -> one process");
  const std::string one = write_layout_checkpoint(config(1, 1, 1, "1f1b"), *dir_, "one", kSavedAt);
  expect_resumes(one, config(2, 2, 1), ref_->tail, kSavedAt, "one process -> tp2 pp2 zb-h1");
}

TEST_F(ParityZeroBubble, RefusesVirtualStages) {
  launch::TrainConfig c = config(1, 4, 1);
  c.virtual_stages = 2;
  try {
    c.resolve(test_cuda_devices(), 4);
    ADD_FAILURE() << "zb-h1 with 2 virtual stages was accepted";
  } catch (const engine::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--virtual-stages 2 needs --pipeline-schedule interleaved"),
              std::string::npos)
        << e.what();
  }
}
