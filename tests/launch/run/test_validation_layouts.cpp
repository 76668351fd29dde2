// Validation scores the same sequences under every layout (ARCHITECTURE.md,
// "Parity is the test"): one model file, scored by --eval-only on one
// process and on four ranks split every way, with micro-batches that do not
// divide the validation sequences, must agree within fp32 rounding.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>

#include "tests/launch/parity_fixture.h"

using namespace test_support;

namespace {

launch::TrainConfig eval_config(const SharedDir& dir, int tp, int pp, int dp) {
  launch::TrainConfig c = parity_config(dir, tp, pp, dp);
  c.eval_only = true;
  c.init_from = dir / "model.bin";
  c.val_data = dir / "val_*.bin";
  c.val_tokens = 37 * 16;  // 37 sequences of 16: a prime, so every split leaves padding
  c.batch_tokens = 0;
  return c;
}

double score(launch::TrainConfig config, MPI_Comm comm) {
  return train_run(std::move(config), comm).summary.final_val_loss;
}

}  // namespace

TEST(ValidationLayouts, EveryLayoutScoresTheSameTokens) {
  ASSERT_EQ(world_size(), 4);
  SharedDir dir("val_layouts");
  // A trained (not freshly initialised) model, written by rank 0.
  if (world_rank() == 0) {
    launch::TrainConfig config = parity_config(dir, 1, 1, 1);
    config.steps = 3;
    config.save_model = dir / "model.bin";
    train_run(config, MPI_COMM_SELF);
  }
  MPI_Barrier(MPI_COMM_WORLD);

  double reference = 0;
  if (world_rank() == 0) reference = score(eval_config(dir, 1, 1, 1), MPI_COMM_SELF);
  MPI_Bcast(&reference, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  ASSERT_GT(reference, 0);

  struct Layout {
    int tp, pp, dp, zero;
    std::int64_t micro_batch;
    bool sequence_parallel;
  };
  for (const Layout& l : {Layout{1, 1, 4, 0, 3, false}, Layout{1, 2, 2, 0, 2, false}, Layout{2, 1, 2, 3, 5, false},
                          Layout{2, 2, 1, 0, 4, true}, Layout{1, 4, 1, 0, 8, false}}) {
    launch::TrainConfig config = eval_config(dir, l.tp, l.pp, l.dp);
    config.zero = l.zero;
    config.micro_batch = l.micro_batch;
    config.sequence_parallel = l.sequence_parallel;
    const double loss = score(config, MPI_COMM_WORLD);
    EXPECT_NEAR(loss, reference, 2e-6 * reference)
        << "tp " << l.tp << " pp " << l.pp << " dp " << l.dp << " zero " << l.zero << " micro-batch " << l.micro_batch;
  }
}
