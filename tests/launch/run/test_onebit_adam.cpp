// 1-bit Adam in the trainer (optim/onebit_adam.h), under mpirun on the CPU.
// Registered twice: np 4 (data parallel, ZeRO-1, tp2 x dp2, pp2 x dp2,
// resume) and np 8 (tp2 x pp2 x dp2, with and without ZeRO-1, and resume
// there). Each test cuts the world into groups of the layout's size; ranks
// beyond the last whole group sit out.
//
// 1-bit Adam is not layout-parity-exact after its freeze step (the
// compression depends on dp and on the chunking; compressed_allreduce.h), so
// its runs are compared with AdamW by margins (stated where used), while the
// warm-up and resume are compared bit for bit.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "model/param_registry.h"
#include "tests/launch/parity_fixture.h"  // world_rank/size, SharedDir

using namespace test_support;

namespace {

// Made in SetUpTestSuite and deleted in TearDownTestSuite (its destructor
// needs MPI, which is finalised before static destructors run).
SharedDir* g_dir = nullptr;
SharedDir& shared_dir() { return *g_dir; }

// The first `size` ranks of the world (null on the others).
class Group {
 public:
  explicit Group(int size) {
    MPI_Comm_split(MPI_COMM_WORLD, world_rank() < size ? 0 : MPI_UNDEFINED, world_rank(), &comm_);
  }
  ~Group() {
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }
  bool member() const { return comm_ != MPI_COMM_NULL; }
  MPI_Comm comm() const { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

// gpt-micro (2 layers, 2 heads, width 32) on the fixture corpus: 8 sequences
// of 32 tokens per step, two micro-batches of 2 on each of dp = 2 ranks, one
// on each of dp = 4.
launch::TrainConfig config(int tp, int pp, int dp, std::int64_t steps, const std::string& optimizer,
                           std::int64_t freeze = 0, int zero = 0) {
  launch::TrainConfig c;
  c.preset = "gpt-micro";
  c.micro_batch = 2;
  c.seq_len = 32;
  c.batch_tokens = 8 * 32;
  c.steps = steps;
  c.lr = 3e-3;
  c.warmup_steps = 5;
  c.train_data = shared_dir() / "train_*.bin";
  use_test_device(c);
  c.peak_tflops = 1.0;
  c.bucket_mb = 0.01;  // several buckets even for this tiny model
  c.tp = tp;
  c.pp = pp;
  c.dp = dp;
  c.zero = zero;
  c.optimizer = optimizer;
  c.freeze_step = freeze;
  c.resolve(test_cuda_devices(), tp * pp * dp);
  return c;
}

struct Result {
  launch::RunSummary summary;
  std::vector<float> params;  // this rank's flat master weights
  std::uint64_t compressed_bytes_per_step = 0;
  std::vector<std::pair<std::string, double>> tensor_norms;  // this rank's tensors, by name
};

Result train(const launch::TrainConfig& c, MPI_Comm comm) {
  std::ostringstream quiet;
  launch::Trainer trainer(c, quiet, comm);
  Result r;
  r.summary = trainer.run();
  r.params.resize(static_cast<std::size_t>(trainer.registry().total_numel()));
  trainer.download_master(r.params.data());
  if (trainer.onebit_optimizer()) r.compressed_bytes_per_step = trainer.onebit_optimizer()->compressed_bytes_per_step();
  for (const model::ParamInfo& p : trainer.registry().entries()) {
    double sum = 0;
    for (std::int64_t i = 0; i < p.numel(); ++i) sum += std::pow(static_cast<double>(r.params[p.offset + i]), 2);
    r.tensor_norms.emplace_back(p.name, std::sqrt(sum));
  }
  return r;
}

double mean_of_last(const std::vector<double>& losses, std::size_t k) {
  return std::accumulate(losses.end() - static_cast<std::ptrdiff_t>(k), losses.end(), 0.0) / static_cast<double>(k);
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The convergence comparison: 600 steps of gpt-micro, 1-bit Adam freezing
// after 120 (20%, the paper's order: section 5 freezes BERT after ~15%).
// Clipping is off in these comparisons (AdamW's too): in the compression
// stage the clip factor comes from the local gradients' norms (trainer.cpp,
// global_grad_norm), which exceed the averaged gradient's norm by the
// gradient noise, and with the variance frozen the factor scales the step
// directly, so with --grad-clip 1 on dp 4 x 2 sequences it throttles 1-bit
// Adam (measured: mean of the last 20 losses 0.93 against AdamW's 0.74 after
// 600 steps, 0.31 against 0.24 after 1000) -- a property of the clipping
// rule, not of the optimizer, which the clip-off comparison isolates (and
// ClipsWithLocalNorms covers clipping on).
// Margin: the mean of 1-bit Adam's last 20 training losses may exceed
// AdamW's by at most 0.1 nats (about 10% of AdamW's 1.0 here; measured it is
// in fact lower: 0.90 at dp 4 since each element's step is bounded by
// AdamW's own ceiling (optim/onebit_adam.h), ~0.4 before that bound, when
// elements whose frozen variance was small took steps larger than AdamW
// ever takes). The paper (section 5, Figures 2-3) reports the same
// sample-wise convergence as Adam; a broken update (momentum scaled by 1/dp
// instead of dp, a rank missing from the average, unmasked never-trained
// elements, a lost bias correction) is off by far more than 0.1 or diverges,
// and the absolute bound kLearned catches a run that does not learn.
constexpr std::int64_t kSteps = 600, kFreeze = 120;
constexpr double kMarginNats = 0.1;
// nats; untrained: ln 256 = 5.5, unigram entropy of the corpus ~3; half of
// that is the bar of test_training and ClipsWithLocalNorms.
constexpr double kLearned = 1.5;

launch::TrainConfig long_run(int tp, int pp, int dp, const std::string& optimizer, int zero = 0,
                             std::int64_t freeze = kFreeze) {
  launch::TrainConfig c = config(tp, pp, dp, kSteps, optimizer, optimizer == "adamw" ? 0 : freeze, zero);
  c.grad_clip = 0;
  return c;
}

class OneBitAdam : public ::testing::Test {
 protected:
  // AdamW at dp = 4 for kSteps: the reference every layout compares with
  // (AdamW is layout-independent to ~1e-5, test_parity.cpp).
  static void SetUpTestSuite() {
    g_dir = new SharedDir("onebit");
    Group g(4);
    if (g.member()) reference_ = new Result(train(long_run(1, 1, 4, "adamw"), g.comm()));
  }
  static void TearDownTestSuite() {
    delete reference_;
    reference_ = nullptr;
    delete g_dir;
    g_dir = nullptr;
  }
  static Result* reference_;
};
Result* OneBitAdam::reference_ = nullptr;

}  // namespace

TEST_F(OneBitAdam, WarmupIsExactlyAdamW) {
  // (1) Before the freeze step the run IS AdamW: the same reductions and the
  // same elementwise update, so losses and parameters are bit-identical, with
  // and without ZeRO-1.
  Group g(4);
  if (!g.member()) return;
  for (int zero : {0, 1}) {
    const Result adamw = train(config(1, 1, 4, 6, "adamw", 0, zero), g.comm());
    const Result warm = train(config(1, 1, 4, 6, "onebit-adam", 6, zero), g.comm());
    EXPECT_EQ(warm.summary.losses, adamw.summary.losses) << "zero " << zero;
    EXPECT_TRUE(bitwise_equal(warm.params, adamw.params)) << "zero " << zero;
    // Freezing after 3 steps: the first 4 losses (taken before the 4th
    // update, the first compressed one) are still AdamW's; then they differ.
    const Result frozen = train(config(1, 1, 4, 6, "onebit-adam", 3, zero), g.comm());
    for (int i = 0; i < 4; ++i) EXPECT_EQ(frozen.summary.losses[i], adamw.summary.losses[i]) << "step " << i + 1;
    EXPECT_NE(frozen.summary.losses[4], adamw.summary.losses[4]);
    EXPECT_FALSE(bitwise_equal(frozen.params, adamw.params));
  }
}

TEST_F(OneBitAdam, ConvergesLikeAdamWAndSendsFewerBytes) {
  Group g(4);
  if (!g.member()) return;
  const std::string log = shared_dir() / "onebit_dp4.jsonl";
  launch::TrainConfig c = long_run(1, 1, 4, "onebit-adam");
  c.log_file = log;
  const Result onebit = train(c, g.comm());

  // (2) The loss follows AdamW's (margin: see kMarginNats).
  const double ours = mean_of_last(onebit.summary.losses, 20), theirs = mean_of_last(reference_->summary.losses, 20);
  if (world_rank() == 0)
    std::printf("[ onebit   ] dp4: AdamW mean of last 20 losses %.4f, 1-bit Adam %.4f (freeze %lld of %lld)\n",
                theirs, ours, static_cast<long long>(kFreeze), static_cast<long long>(kSteps));
  EXPECT_LT(ours, theirs + kMarginNats);
  EXPECT_LT(ours, kLearned) << "it learned";

  // (3) Bytes over dp per step, all ranks together (the step log's
  // comm_bytes_dp). Warm-up: the fp32 all-reduce of the whole gradient
  // buffer, which has the momentum's layout and size. Compression: only the
  // 1-bit exchange of the momentum (its formula: compressed_allreduce.h).
  if (world_rank() != 0) return;
  std::ifstream in(log);
  double warm = 0, compressed = 0;
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (!j.contains("comm_bytes")) continue;
    const std::int64_t step = j.at("step").get<std::int64_t>();
    if (step == 1) warm = j.at("comm_bytes").at("dp").get<double>();
    if (step == kSteps) compressed = j.at("comm_bytes").at("dp").get<double>();
  }
  std::printf("[ onebit   ] dp bytes per step, 4 ranks together: fp32 gradient all-reduce %.0f, 1-bit momentum %.0f "
              "(%.1fx fewer)\n",
              warm, compressed, warm / compressed);
  ASSERT_GT(warm, 0);
  EXPECT_EQ(compressed, 4.0 * static_cast<double>(onebit.compressed_bytes_per_step));
  EXPECT_GE(warm / compressed, 16.0);
}

TEST_F(OneBitAdam, EarlyFreezeStaysBounded) {
  // Frozen after 10 of 600 steps, the attention key bias's gradient is zero
  // in theory (~1e-11 in f32: softmax ignores a shift shared by all keys), so
  // its frozen variance is ~1e-22, and the compressed momentum (its chunk's
  // scale) over sqrt(v) was ~1e5: without the bound on |m_hat / sqrt(v_hat)|
  // (optim/onebit_adam.h) the run diverged (measured: mean of the last 20
  // losses 1,205, the qkv bias's norm 4.7 million times AdamW's). Bounded, it
  // does not diverge and no tensor runs away. It does not track AdamW either
  // after so early a freeze (RESULTS.md: 3.05 nats against AdamW's 1.01 at a
  // freeze at 10, 1.63 at 40, 0.90 at 120): the bars are divergence bars.
  Group g(4);
  if (!g.member()) return;
  const Result r = train(long_run(1, 1, 4, "onebit-adam", 0, 10), g.comm());
  const double ours = mean_of_last(r.summary.losses, 20), theirs = mean_of_last(reference_->summary.losses, 20);
  if (world_rank() == 0)
    std::printf("[ onebit   ] dp4, freeze at 10: AdamW mean of last 20 losses %.4f, 1-bit Adam %.4f\n", theirs, ours);
  EXPECT_LT(ours, 5.5) << "worse than an untrained model (ln 256): diverged";
  ASSERT_EQ(r.tensor_norms.size(), reference_->tensor_norms.size());
  double worst = 0;
  std::string worst_name;
  for (std::size_t i = 0; i < r.tensor_norms.size(); ++i) {
    const auto& [name, norm] = r.tensor_norms[i];
    const double adamw = reference_->tensor_norms[i].second;
    EXPECT_LE(norm, 30.0 * adamw + 1.0) << name << ": 1-bit Adam " << norm << ", AdamW " << adamw;
    if (norm / (adamw + 1e-12) > worst) worst = norm / (adamw + 1e-12), worst_name = name;
  }
  if (world_rank() == 0)
    std::printf("[ onebit   ] largest tensor norm against AdamW's: %.2fx (%s)\n", worst, worst_name.c_str());
}

TEST_F(OneBitAdam, ClipsWithLocalNorms) {
  // With --grad-clip 1 (the default) the compression stage clips by the
  // local-norm estimate (see kMarginNats); training still converges. Bound:
  // half the corpus's unigram entropy (~1.5 nats), the bar of test_training.
  Group g(4);
  if (!g.member()) return;
  launch::TrainConfig c = long_run(1, 1, 4, "onebit-adam");
  c.grad_clip = 1.0;
  const Result r = train(c, g.comm());
  const double ours = mean_of_last(r.summary.losses, 20);
  if (world_rank() == 0) std::printf("[ onebit   ] dp4 with --grad-clip 1: mean of last 20 losses %.4f\n", ours);
  EXPECT_LT(ours, 1.5);
}

TEST_F(OneBitAdam, ComposesWithZeroTensorAndPipelineParallel) {
  // (4) On 4 ranks: ZeRO-1 over dp 4, tp2 x dp2, pp2 x dp2 (tp2 x pp2 x dp2
  // is the np 8 registration's). Same margin as above: these layouts
  // compress over 2 or 4 ranks, in 1 or 3 groups.
  Group g(4);
  if (!g.member()) return;
  struct Layout {
    int tp, pp, dp, zero;
  };
  for (const Layout& l : {Layout{1, 1, 4, 1}, Layout{2, 1, 2, 0}, Layout{1, 2, 2, 0}}) {
    const Result r = train(long_run(l.tp, l.pp, l.dp, "onebit-adam", l.zero), g.comm());
    const double ours = mean_of_last(r.summary.losses, 20), theirs = mean_of_last(reference_->summary.losses, 20);
    if (world_rank() == 0)
      std::printf("[ onebit   ] tp%d pp%d dp%d zero%d: mean of last 20 losses %.4f (AdamW %.4f)\n", l.tp, l.pp, l.dp,
                  l.zero, ours, theirs);
    EXPECT_LT(ours, theirs + kMarginNats) << "tp" << l.tp << " pp" << l.pp << " dp" << l.dp << " zero" << l.zero;
    EXPECT_LT(ours, kLearned) << "tp" << l.tp << " pp" << l.pp << " dp" << l.dp << " zero" << l.zero;
  }
}

namespace {

// (4) with all three axes, and the composition invariant: copies of a tensor
// outside the dp group stay bit-identical (tp-replicated tensors on every tp
// rank; the tied wte on the first and last stage).
void expect_copies_identical(launch::Trainer& trainer, MPI_Comm comm) {
  const parallel::ProcessGrid& grid = trainer.grid();
  std::vector<float> mine(static_cast<std::size_t>(trainer.registry().total_numel()));
  trainer.download_master(mine.data());
  // tp peers (same pp and dp position): compare every unsplit tensor with tp rank 0's.
  MPI_Comm tp_peers = MPI_COMM_NULL;
  MPI_Comm_split(comm, grid.pp_rank() * grid.dp_size() + grid.dp_rank(), grid.tp_rank(), &tp_peers);
  for (const model::ParamInfo& p : trainer.registry().entries()) {
    if (p.split.is_split()) continue;
    std::vector<float> root(mine.begin() + p.offset, mine.begin() + p.offset + p.numel());
    MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_FLOAT, 0, tp_peers);
    EXPECT_EQ(std::memcmp(root.data(), mine.data() + p.offset, root.size() * sizeof(float)), 0)
        << p.name << " differs between tp ranks";
  }
  MPI_Comm_free(&tp_peers);
  // wte on the first and last stage of the same (tp, dp) position.
  const bool holds_wte = grid.is_first_stage() || grid.is_last_stage();
  MPI_Comm ends = MPI_COMM_NULL;
  MPI_Comm_split(comm, holds_wte ? grid.tp_rank() + grid.tp_size() * grid.dp_rank() : MPI_UNDEFINED, grid.pp_rank(),
                 &ends);
  if (ends != MPI_COMM_NULL) {
    const model::ParamInfo& wte = trainer.registry().find("wte");
    std::vector<float> first(mine.begin() + wte.offset, mine.begin() + wte.offset + wte.numel());
    MPI_Bcast(first.data(), static_cast<int>(first.size()), MPI_FLOAT, 0, ends);
    EXPECT_EQ(std::memcmp(first.data(), mine.data() + wte.offset, first.size() * sizeof(float)), 0)
        << "wte differs between the first and last stage";
    MPI_Comm_free(&ends);
  }
}

}  // namespace

TEST_F(OneBitAdam, AllThreeAxesWithAndWithoutZero) {
  if (world_size() < 8) GTEST_SKIP() << "needs 8 ranks (the np 8 registration)";
  Group g(8);
  for (int zero : {0, 1}) {
    const launch::TrainConfig c = long_run(2, 2, 2, "onebit-adam", zero);
    std::ostringstream quiet;
    launch::Trainer trainer(c, quiet, g.comm());
    const launch::RunSummary run = trainer.run();
    const double ours = mean_of_last(run.losses, 20);
    // The reference ran on the first 4 ranks only; share its figure.
    double theirs = reference_ ? mean_of_last(reference_->summary.losses, 20) : 0.0;
    MPI_Bcast(&theirs, 1, MPI_DOUBLE, 0, g.comm());
    if (world_rank() == 0)
      std::printf("[ onebit   ] tp2 pp2 dp2 zero%d: mean of last 20 losses %.4f (AdamW %.4f)\n", zero, ours, theirs);
    EXPECT_LT(ours, theirs + kMarginNats) << "zero " << zero;
    EXPECT_LT(ours, kLearned) << "zero " << zero;
    expect_copies_identical(trainer, g.comm());
  }
}

namespace {

// (5) Uninterrupted vs saved at step 8 (4 compression steps in) and resumed:
// steps 9-12 and the final parameters must match bit for bit, which needs the
// momentum, frozen variance, step count and every rank's error buffers.
void expect_exact_resume(int tp, int pp, int dp, int zero, const std::string& tag) {
  Group g(tp * pp * dp);
  if (!g.member()) return;
  launch::TrainConfig c = config(tp, pp, dp, 12, "onebit-adam", 4, zero);
  c.checkpoint_dir = shared_dir() / ("ckpt_" + tag);
  c.checkpoint_interval = 8;
  const Result uninterrupted = train(c, g.comm());
  launch::TrainConfig r = c;
  r.checkpoint_dir = shared_dir() / ("ckpt_" + tag + "_resumed");
  r.resume = shared_dir() / ("ckpt_" + tag + "/step_00000008");
  const Result resumed = train(r, g.comm());
  ASSERT_EQ(resumed.summary.losses.size(), 4u);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(resumed.summary.losses[i], uninterrupted.summary.losses[8 + i]) << tag << " step " << 9 + i;
  EXPECT_TRUE(bitwise_equal(resumed.params, uninterrupted.params)) << tag;
}

}  // namespace

TEST_F(OneBitAdam, ResumeInCompressionStageContinuesBitForBit) {
  expect_exact_resume(1, 1, 4, 0, "dp4");
  expect_exact_resume(1, 1, 4, 1, "dp4_zero");
  if (world_size() >= 8) expect_exact_resume(2, 2, 2, 0, "tp2pp2dp2");
}

TEST_F(OneBitAdam, ResumeUnderAnotherLayoutRestartsErrorFeedback) {
  // A dp 4 checkpoint past its freeze step: its error buffers only fit dp 4.
  // A dp 2 resume keeps the momentum and the frozen variance (whole tensors)
  // and restarts the error buffers from zero, saying so, and trains on (error
  // feedback converges from any residual). One taken at the freeze step
  // (nothing compressed yet) resumes anywhere too.
  Group g4(4), g2(2);  // collective over the world: every rank makes both first
  if (!g4.member()) return;
  launch::TrainConfig late = config(1, 1, 4, 8, "onebit-adam", 2);
  late.checkpoint_dir = shared_dir() / "ckpt_late";
  late.checkpoint_interval = 6;
  const Result uninterrupted = train(late, g4.comm());
  launch::TrainConfig early = config(1, 1, 4, 2, "onebit-adam", 2);
  early.checkpoint_dir = shared_dir() / "ckpt_early";
  train(early, g4.comm());
  if (!g2.member()) return;
  launch::TrainConfig r = config(1, 1, 2, 8, "onebit-adam", 2);
  r.resume = shared_dir() / "ckpt_late/step_00000006";
  std::ostringstream log;
  launch::Trainer trainer(r, log, g2.comm());
  const launch::RunSummary moved = trainer.run();
  if (world_rank() == 0)
    EXPECT_NE(log.str().find("error-feedback buffers restart from zero"), std::string::npos) << log.str();
  // The first step's loss is the checkpoint's model on the same batch; the
  // next follows a compressed update on 2 workers instead of 4, which is not
  // the dp 4 run's update (the compression differs with the worker count,
  // error buffers or not), so it is only required to train on.
  ASSERT_EQ(moved.losses.size(), 2u);
  EXPECT_NEAR(moved.losses[0], uninterrupted.summary.losses[6], 1e-4 * uninterrupted.summary.losses[6]);
  EXPECT_TRUE(std::isfinite(moved.losses[1]));
  EXPECT_LT(moved.losses[1], uninterrupted.summary.losses[0]) << "below the loss of step 1";
  r.resume = shared_dir() / "ckpt_early/step_00000002";
  r.reset_schedule = true;  // a 2-step run's checkpoint continued as an 8-step one
  const Result resumed = train(r, g2.comm());
  EXPECT_EQ(resumed.summary.losses.size(), 6u);
}
