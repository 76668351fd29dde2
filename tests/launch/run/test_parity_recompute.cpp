// Parity of activation recomputation under every parallel axis at once
// (ARCHITECTURE.md, "Parity is the test"): tp2 x pp2 x dp2 with --recompute
// selective and full trains the same model as one process without
// recomputation. Run with `mpirun --oversubscribe -np 8`; every rank also
// trains the single-process reference itself (on MPI_COMM_SELF).
//
// What this adds to the fp64 unit test (tests/model/test_recompute.cpp):
// recomputation inside tensor-parallel blocks (the attention projection's
// all-reduce runs again in full mode, the MLP's does not, and every tp rank
// must agree on that), shared recompute buffers while 1F1B keeps two
// micro-batches in flight on the first stage, and the trainer's flag.
//
// Tolerances are parity_fixture.h's (see there why): relative 1e-5 per step's
// loss and per tensor, in the L2 sense, on the final parameters. Within the
// one layout, the three modes rerun the same ops on the same data, so they
// are also compared with each other exactly.
#include "tests/launch/parity_fixture.h"

using namespace test_support;

namespace {

class ParityRecompute : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new SharedDir("parity_recompute");
    ref_ = new TrainedRun(train_run(parity_config(*dir_, 1, 1, 1), MPI_COMM_SELF));
  }
  static void TearDownTestSuite() {
    delete ref_;
    delete dir_;
  }
  static launch::TrainConfig with_recompute(const std::string& mode) {
    launch::TrainConfig c = parity_config(*dir_, 2, 2, 2);
    c.recompute = mode;
    return c;
  }
  static SharedDir* dir_;
  static TrainedRun* ref_;
};
SharedDir* ParityRecompute::dir_ = nullptr;
TrainedRun* ParityRecompute::ref_ = nullptr;

}  // namespace

TEST_F(ParityRecompute, SelectiveAndFullUnderTp2Pp2Dp2) {
  if (world_size() < 8) GTEST_SKIP() << "needs 8 ranks";
  ASSERT_GT(ref_->summary.losses.size(), 0u);
  const TrainedRun none = train_run(with_recompute("none"), MPI_COMM_WORLD);
  for (const std::string mode : {"selective", "full"}) {
    const TrainedRun run = train_run(with_recompute(mode), MPI_COMM_WORLD);
    expect_close_to_reference(run, *ref_, "tp2 pp2 dp2 --recompute " + mode);
    // The same layout without recomputation: the same ops on the same data.
    EXPECT_EQ(run.summary.losses, none.summary.losses) << mode << " vs none, same layout";
    EXPECT_TRUE(run.params == none.params) << mode << " vs none, same layout, rank " << world_rank();
  }
}
