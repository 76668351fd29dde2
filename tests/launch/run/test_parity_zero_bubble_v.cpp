// The ZB-V schedule (--pipeline-schedule zb-v, Qi et al. 2024 section 6;
// parallel/pipeline_schedule.h) against one process, as test_parity does for
// the other schedules: every layout trains the same model on the same seed
// and data and must match one process's losses and parameters within the
// parity tolerance (parity_fixture.h). Each rank holds two chunks of layers
// in a V (rank r: virtual stages r and 2 pp - 1 - r), so this checks what
// the V adds to ZB-H1's split backward: rank pp - 1 handing activations and
// gradients between its own chunks, rank 0 holding the embedding and the
// head (one copy of the tied wte, both uses' gradients in it: no sum across
// ranks), the validation pass down and back up the V, and the chunks' layers
// in checkpoints (written under zb-v, resumed under 1F1B and the reverse).
//
// Needs 8 ranks (mpirun --oversubscribe -np 8); fewer run what fits.
#include "tests/launch/run/zero_bubble_parity.h"

using namespace test_support;

namespace {

struct Schedule {
  static constexpr const char* kName = "zb-v";
  static constexpr const char* kFolder = "parity_zero_bubble_v";
  static constexpr int kLayers = 8;
};
class ParityZeroBubbleV : public ZeroBubbleParity<Schedule> {};

}  // namespace

TEST_F(ParityZeroBubbleV, OneProcessAndPipelinesOfTwoAndFourStages) {
  expect_parity(config(1, 1, 1), "one process, zb-v (both chunks on one rank)");
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  expect_parity(config(1, 2, 1), "pp2 zb-v");
  launch::TrainConfig untied = config(1, 2, 1);
  make_llama(untied);
  expect_parity(untied, "llama-micro pp2 zb-v", llama_ref_);
  if (world_size() < 4) GTEST_SKIP() << "needs 4 ranks";
  expect_parity(config(1, 4, 1), "pp4 zb-v");
}

TEST_F(ParityZeroBubbleV, WithTensorParallelSequenceParallelAndRecomputation) {
  if (world_size() < 4) GTEST_SKIP() << "needs 4 ranks";
  // (Full recomputation: below, with ZeRO-3; the split backward under each
  // mode is checked bit for bit in test_gpt_stage's SplitBackward.)
  launch::TrainConfig c = config(2, 2, 1);
  c.sequence_parallel = true;
  c.recompute = "selective";
  expect_parity(c, "tp2 pp2 zb-v, sequence parallel, selective recomputation");
}

TEST_F(ParityZeroBubbleV, WithDataParallelAndEveryZeroStage) {
  if (world_size() < 8) GTEST_SKIP() << "needs 8 ranks";
  for (int zero = 0; zero <= 3; ++zero) {
    launch::TrainConfig c = config(1, 4, 2);
    c.zero = zero;
    expect_parity(c, "pp4 dp2 zb-v, ZeRO-" + std::to_string(zero));
  }
  launch::TrainConfig c = config(2, 2, 2);
  c.sequence_parallel = true;
  c.zero = 3;
  c.recompute = "full";
  expect_parity(c, "tp2 pp2 dp2 zb-v, sequence parallel, ZeRO-3, full recomputation");
  make_llama(c);
  expect_parity(c, "llama-micro tp2 pp2 dp2 zb-v, sequence parallel, ZeRO-3, full recomputation", llama_ref_);
  launch::TrainConfig onebit = config(1, 4, 2);
  onebit.optimizer = "onebit-adam";
  onebit.freeze_step = kSteps + 1;
  expect_parity(onebit, "pp4 dp2 zb-v, 1-bit Adam before its freeze");
}

TEST_F(ParityZeroBubbleV, CheckpointsResumeAcrossSchedules) {
  if (world_size() < 4) GTEST_SKIP() << "needs 4 ranks";
  const std::string v = write_layout_checkpoint(config(1, 4, 1), *dir_, "v", kSavedAt);
  expect_resumes(v, config(1, 2, 1, "1f1b"), ref_->tail, kSavedAt, "pp4 zb-v -> pp2 1f1b");
  expect_resumes(v, config(1, 1, 1, "1f1b"), ref_->tail, kSavedAt, "pp4 zb-v -> one process");
  const std::string one = write_layout_checkpoint(config(1, 1, 1, "1f1b"), *dir_, "one", kSavedAt);
  expect_resumes(one, config(2, 2, 1), ref_->tail, kSavedAt, "one process -> tp2 pp2 zb-v");
}

// Validation runs one forward per micro-batch down the ranks through chunk 0
// and back up through chunk 1, rank pp - 1 handing its chunk 0's output to
// its chunk 1 itself, and scores on rank 0 (the head): the same tokens, the
// same loss as one process.
TEST_F(ParityZeroBubbleV, ValidatesDownAndBackUpTheV) {
  const auto with_validation = [](launch::TrainConfig c) {
    c.val_data = *dir_ / "val_*.bin";
    c.val_tokens = 13 * 16;  // 13 sequences of 16: micro-batches of 1, padding-free; checked twice
    c.val_interval = 3;
    return c;
  };
  double reference = 0;
  if (world_rank() == 0)
    reference = train_run(with_validation(config(1, 1, 1, "1f1b")), MPI_COMM_SELF).summary.final_val_loss;
  MPI_Bcast(&reference, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  ASSERT_GT(reference, 0);
  for (const int pp : {1, 2, 4}) {
    if (world_size() < pp) continue;
    on_groups(pp, [&](MPI_Comm group) {
      const double loss = train_run(with_validation(config(1, pp, 1)), group).summary.final_val_loss;
      EXPECT_NEAR(loss, reference, 1e-5 * reference) << "pp " << pp << " zb-v";
    });
  }
}

TEST_F(ParityZeroBubbleV, RefusesTooFewLayersAndOtherChunkCounts) {
  const auto refusal = [](launch::TrainConfig c, int world) {
    try {
      c.resolve(test_cuda_devices(), world);
    } catch (const engine::Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  launch::TrainConfig few = config(1, 4, 1);
  few.n_layer = 6;
  EXPECT_NE(refusal(few, 4).find("6 layers cannot fill 2 x pp = 8 chunks"), std::string::npos) << refusal(few, 4);
  launch::TrainConfig three = config(1, 2, 1);
  three.virtual_stages = 3;
  EXPECT_NE(refusal(three, 2).find("zb-v runs 2 chunks of layers per rank"), std::string::npos) << refusal(three, 2);
}
