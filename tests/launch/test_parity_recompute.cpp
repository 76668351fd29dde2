// Parity of activation recomputation under every parallel axis at once
// (DESIGN.md, "Parity is the test"): tp2 x pp2 x dp2 with --recompute
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
// Tolerances are test_parity.cpp's (see there why): relative 1e-5 per step's
// loss and per tensor, in the L2 sense, on the final parameters. Within the
// one layout, the three modes rerun the same ops on the same data, so they
// are also compared with each other exactly.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

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
      dir_ = std::make_unique<TempDir>("parity_recompute");
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

// test_parity.cpp's configuration, with a recomputation mode.
launch::TrainConfig parity_config(const SharedDir& dir, int tp, int pp, int dp, int world,
                                  const std::string& recompute) {
  launch::TrainConfig c;
  c.preset = "gpt-micro";
  c.n_layer = 4;
  c.n_head = 4;
  c.micro_batch = 1;
  c.seq_len = 16;
  c.batch_tokens = 8 * 16;  // eight sequences: four micro-batches per data-parallel rank
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
  c.recompute = recompute;
  c.bucket_mb = 0.01;  // several buckets even for this tiny model
  c.resolve(0, world);
  return c;
}

struct TrainedRun {
  launch::RunSummary summary;
  model::ParamRegistry registry;
  std::vector<float> params;
};

TrainedRun train(const launch::TrainConfig& config, MPI_Comm comm) {
  std::ostringstream quiet;
  launch::Trainer trainer(config, quiet, comm);
  TrainedRun run{trainer.run(), trainer.registry(), {}};
  run.params.resize(static_cast<std::size_t>(run.registry.total_numel()));
  trainer.params().download_master(run.params.data());
  return run;
}

class ParityRecompute : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new SharedDir();
    ref_ = new TrainedRun(train(parity_config(*dir_, 1, 1, 1, 1, "none"), MPI_COMM_SELF));
  }
  static void TearDownTestSuite() {
    delete ref_;
    delete dir_;
  }
  static SharedDir* dir_;
  static TrainedRun* ref_;
};
SharedDir* ParityRecompute::dir_ = nullptr;
TrainedRun* ParityRecompute::ref_ = nullptr;

void expect_close_to_reference(const TrainedRun& run, const TrainedRun& ref, const std::string& what) {
  ASSERT_EQ(run.summary.losses.size(), ref.summary.losses.size()) << what;
  for (std::size_t i = 0; i < run.summary.losses.size(); ++i)
    EXPECT_NEAR(run.summary.losses[i], ref.summary.losses[i], 1e-5 * std::fabs(ref.summary.losses[i]))
        << what << " step " << i + 1;
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
    EXPECT_LE(std::sqrt(diff2), 1e-5 * std::sqrt(ref2)) << what << " rank " << world_rank() << " tensor " << p.name;
  }
}

}  // namespace

TEST_F(ParityRecompute, SelectiveAndFullUnderTp2Pp2Dp2) {
  if (world_size() < 8) GTEST_SKIP() << "needs 8 ranks";
  ASSERT_GT(ref_->summary.losses.size(), 0u);
  const TrainedRun none = train(parity_config(*dir_, 2, 2, 2, 8, "none"), MPI_COMM_WORLD);
  for (const std::string mode : {"selective", "full"}) {
    const TrainedRun run = train(parity_config(*dir_, 2, 2, 2, 8, mode), MPI_COMM_WORLD);
    expect_close_to_reference(run, *ref_, "tp2 pp2 dp2 --recompute " + mode);
    // The same layout without recomputation: the same ops on the same data.
    EXPECT_EQ(run.summary.losses, none.summary.losses) << mode << " vs none, same layout";
    EXPECT_TRUE(run.params == none.params) << mode << " vs none, same layout, rank " << world_rank();
  }
}
