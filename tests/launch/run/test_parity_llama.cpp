// A Llama-family model (llama-micro: grouped-query attention with 4 query and
// 2 key/value heads, RoPE, RMSNorm, SwiGLU, Qwen2's q/k/v bias and an untied
// head; model/gpt_config.h) under every layout, against one process
// (ARCHITECTURE.md, "Parity is the test"): the same suites GPT-2 has
// (test_parity, test_zero, test_parity_recompute, test_resume_layouts), on
// the layouts where the family differs: tensor parallelism cuts q and the
// smaller k/v blocks of the fused qkv weight and the fused gate|up weight,
// pipeline stages hold the untied head without a tied-embedding group, and
// a checkpoint's unequal-block splits (Split::first_block) are re-cut on
// resume. Tolerances: parity_fixture.h. Needs 8 ranks.
#include "tests/launch/parity_fixture.h"

using namespace test_support;

namespace {

launch::TrainConfig llama_config(const SharedDir& dir, int tp, int pp, int dp) {
  launch::TrainConfig c = parity_config(dir, tp, pp, dp);
  c.preset = "llama-micro";
  c.n_head = 4;
  c.n_kv_head = 2;
  return c;
}

class LlamaParity : public ::testing::Test {
 protected:
  static constexpr int kSteps = 6, kSavedAt = 3;

  static void SetUpTestSuite() {
    dir_ = new SharedDir("parity_llama");
    launch::TrainConfig one = llama_config(*dir_, 1, 1, 1);
    one.steps = kSteps;
    ref_ = new Reference(train_reference(one, kSavedAt));
  }
  static void TearDownTestSuite() {
    delete ref_;
    delete dir_;
  }

  static launch::TrainConfig layout(int tp, int pp, int dp, int zero = 0, bool sequence_parallel = false,
                                    const std::string& schedule = "1f1b", const std::string& recompute = "none") {
    launch::TrainConfig c = llama_config(*dir_, tp, pp, dp);
    c.steps = kSteps;
    c.zero = zero;
    c.sequence_parallel = sequence_parallel;
    c.pipeline_schedule = schedule;
    c.recompute = recompute;
    return c;
  }

  static std::string name(const launch::TrainConfig& c) {
    return "llama tp" + std::to_string(c.tp) + " pp" + std::to_string(c.pp) + " dp" + std::to_string(c.dp) +
           " zero" + std::to_string(c.zero) + (c.sequence_parallel ? " sp" : "") + " " + c.pipeline_schedule +
           " recompute " + c.recompute;
  }

  static void expect_parity(const launch::TrainConfig& c) {
    on_groups(c.tp * c.pp * c.dp, [&](MPI_Comm group) { expect_close_to_reference(train_run(c, group), ref_->whole, name(c)); });
  }

  // Trains `source` with a checkpoint at kSavedAt, resumes it under `target`,
  // and compares the continuation with the uninterrupted process.
  static void expect_resumes(const launch::TrainConfig& source, const launch::TrainConfig& target,
                             const std::string& tag) {
    test_support::expect_resumes(write_layout_checkpoint(source, *dir_, tag, kSavedAt), target, ref_->tail, kSavedAt,
                                 name(source) + " resumed as " + name(target));
  }

  static SharedDir* dir_;
  static Reference* ref_;  // one process: the whole run and its tail after kSavedAt
};
SharedDir* LlamaParity::dir_ = nullptr;
Reference* LlamaParity::ref_ = nullptr;

}  // namespace

TEST_F(LlamaParity, TensorParallelSplitsQueryAndKeyValueHeads) {
  expect_parity(layout(2, 1, 1));  // one key/value head and two query heads per rank
}

TEST_F(LlamaParity, PipelineStagesHoldTheUntiedHead) {
  expect_parity(layout(1, 2, 1));
  expect_parity(layout(1, 4, 1, 0, false, "afab"));
}

TEST_F(LlamaParity, AllThreeAxesWithSequenceParallelism) {
  expect_parity(layout(2, 2, 2));
  expect_parity(layout(2, 2, 2, 0, true));
}

TEST_F(LlamaParity, ZeroStages) {
  expect_parity(layout(1, 1, 2, 1));
  expect_parity(layout(2, 2, 2, 2));
  expect_parity(layout(2, 1, 4, 3));
}

TEST_F(LlamaParity, Recomputation) {
  expect_parity(layout(2, 2, 2, 0, false, "1f1b", "selective"));
  expect_parity(layout(2, 2, 2, 1, true, "afab", "full"));
}

TEST_F(LlamaParity, OneBitAdamWarmUpIsAdamW) {
  // Before its freeze step 1-bit Adam is AdamW with a plain all-reduce
  // (Tang et al. 2021), on the same compression groups as GPT-2's.
  launch::TrainConfig c = layout(2, 1, 4);
  c.optimizer = "onebit-adam";
  c.freeze_step = 100;
  expect_parity(c);
}

TEST_F(LlamaParity, ResumesUnderAnotherLayout) {
  if (world_size() < 8) GTEST_SKIP() << "needs 8 ranks";
  expect_resumes(layout(2, 2, 2), layout(1, 1, 1), "tp2pp2dp2_to_one");
  expect_resumes(layout(1, 1, 1), layout(2, 1, 2, 3, true), "one_to_tp2_zero3_sp");
}
