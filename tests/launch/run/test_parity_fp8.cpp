// FP8 training (issue 35) under the engine's layouts, against one process
// (ARCHITECTURE.md, "Parity is the test"). On the CPU the runs take
// --precision fp8-emulated: the blocks' matmul operands rounded to E4M3 with
// per-tensor current scaling, the products in f32 (engine/cpu/fp8_matmul.cpp),
// which is what `--precision fp8` computes on the tensor cores up to bf16.
// Run with `mpirun --oversubscribe -np 4`.
//
// What is exact and what is not. Pipeline and data parallelism, ZeRO,
// recomputation and the split backward of zero-bubble schedules quantise the
// very tensors one process quantises (a micro-batch's activations, a layer's
// whole weight), and keep parity_fixture.h's 1e-5. Tensor parallelism holds
// shards of some operands; their amaxes are max-reduced over the group
// (engine::ops::Fp8Options), so every shard is scaled as its whole tensor and
// the first steps agree to 1e-9. But the group sums partial products in
// another order, and E4M3 turns a last-bit difference at a rounding midpoint
// into a jump of a whole code (2^-4 relative), which Adam carries on: the
// runs drift apart slowly. Measured on this fixture (2026-11-29): with the
// reduction, the parameters drift 4e-5 to 1.8e-3 from one process's (L2 over
// the whole model) and the losses 1e-5 to 3.5e-5 over six steps; without it,
// each shard on its own grid, 5.5e-3 to 6e-3 and 1e-4 to 6e-4, nearly the
// 7.6e-3 by which FP8 itself moves the run from the native one. The test
// holds tp runs to less than 0.4 of that FP8 effect, and 1e-4 on the losses.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>
#include <utility>

#include "tests/launch/parity_fixture.h"

using namespace test_support;

namespace {

// On a GPU (ENGINE_TEST_DEVICE=cuda) --precision fp8 keeps bf16 activations
// and working weights, whose 2^-8 rounding turns the layouts' different f32
// summation orders into differences far above 1e-5; there the layouts are
// held to 2e-2 (a guess, not yet run on a GPU), still far below what a wrong
// operand, transpose or missing reduction costs (the loss off by > 10%).
double parity_rtol(const launch::TrainConfig& c) { return c.device == "cpu" ? 1e-5 : 2e-2; }

class ParityFp8 : public ::testing::Test {
 protected:
  static constexpr int kSteps = 6;

  static void SetUpTestSuite() {
    dir_ = new SharedDir("parity_fp8");
    ref_ = new TrainedRun(train_run(config(1, 1, 1), MPI_COMM_SELF));
    launch::TrainConfig native = config(1, 1, 1);
    native.precision = "auto";
    use_test_device(native);
    native_ref_ = new TrainedRun(train_run(native, MPI_COMM_SELF));
    launch::TrainConfig llama = config(1, 1, 1);
    make_llama(llama);
    llama_ref_ = new TrainedRun(train_run(llama, MPI_COMM_SELF));
    block_ref_ = new TrainedRun(train_run(block_config(1, 1, 1), MPI_COMM_SELF));
    launch::TrainConfig wide_native = block_config(1, 1, 1);
    wide_native.precision = "auto";
    wide_native.fp8_scaling = "tensor";
    use_test_device(wide_native);
    wide_native_ref_ = new TrainedRun(train_run(wide_native, MPI_COMM_SELF));
  }
  static void TearDownTestSuite() {
    delete wide_native_ref_;
    delete block_ref_;
    delete llama_ref_;
    delete native_ref_;
    delete ref_;
    delete dir_;
  }

  // gpt-micro in FP8: fp8 on a GPU the tests were pointed at, else the CPU's
  // emulation. On a GPU 128 wide (head size 32): fp8 keeps bf16 activations,
  // and the bf16 attention kernels take no head size 8.
  static launch::TrainConfig config(int tp, int pp, int dp) {
    launch::TrainConfig c = parity_config(*dir_, tp, pp, dp);
    c.steps = kSteps;
    c.precision = c.device == "cpu" ? "fp8-emulated" : "fp8";
    if (c.device != "cpu") c.n_embd = 128;
    return c;
  }
  // Block scaling (--fp8-scaling block): 1 x 128 tiles and 128 x 128 blocks.
  // 256 wide with 4 heads, so that under tp2 every shard (qkv's 128 rows of
  // each of q, k, v; half of C or of 4C along a row-parallel cut) holds whole
  // blocks: the ranks then cut the blocks one process cuts. Two layers and
  // four micro-batches a step keep the wider model's runs short.
  static launch::TrainConfig block_config(int tp, int pp, int dp) {
    launch::TrainConfig c = config(tp, pp, dp);
    c.n_embd = 256;
    c.n_layer = 2;
    c.batch_tokens = 4 * 16;
    c.fp8_scaling = "block";
    return c;
  }
  static void make_llama(launch::TrainConfig& c) {
    c.preset = "llama-micro";  // grouped-query attention, SwiGLU, RoPE, untied head, qkv bias
    c.n_head = 4;
    c.n_kv_head = 2;
  }
  static void expect_parity(const launch::TrainConfig& c, const TrainedRun& ref, const std::string& what) {
    on_groups(c.tp * c.pp * c.dp,
              [&](MPI_Comm group) { expect_close_to_reference(train_run(c, group), ref, what, parity_rtol(c)); });
  }

  static inline SharedDir* dir_ = nullptr;
  static inline TrainedRun* ref_ = nullptr;         // gpt-micro, fp8, one process
  static inline TrainedRun* native_ref_ = nullptr;  // gpt-micro, the device's native precision, one process
  static inline TrainedRun* llama_ref_ = nullptr;   // llama-micro, fp8, one process
  static inline TrainedRun* block_ref_ = nullptr;   // block_config, one process
  static inline TrainedRun* wide_native_ref_ = nullptr;  // the same model without FP8
};

// The largest relative difference of a run from a single-process one: over
// the steps' losses, and over the tensors of the final parameters (L2 per
// tensor, as parity_fixture.h measures).
struct Drift {
  double loss = 0, params = 0;  // params: the largest of any tensor
  double whole = 0;             // L2 over all of this rank's parameters
};
Drift drift(const TrainedRun& run, const TrainedRun& ref) {
  Drift d;
  double all_diff2 = 0, all_ref2 = 0;
  for (std::size_t i = 0; i < run.summary.losses.size() && i < ref.summary.losses.size(); ++i)
    d.loss = std::max(d.loss, std::fabs(run.summary.losses[i] - ref.summary.losses[i]) / std::fabs(ref.summary.losses[i]));
  for_each_tensor_distance(run, ref, [&](const std::string&, double diff2, double ref2) {
    if (ref2 > 0) d.params = std::max(d.params, std::sqrt(diff2 / ref2));
    all_diff2 += diff2;
    all_ref2 += ref2;
  });
  d.whole = std::sqrt(all_diff2 / all_ref2);
  return d;
}

}  // namespace

// The format is applied (the losses move off the native run's by more than
// layouts ever move them) and training still works (within a few percent).
TEST_F(ParityFp8, RoundsTheMatmulsAndStillTrains) {
  const std::vector<double>& fp8 = ref_->summary.losses;
  const std::vector<double>& native = native_ref_->summary.losses;
  ASSERT_EQ(fp8.size(), native.size());
  double largest = 0;
  for (std::size_t i = 0; i < fp8.size(); ++i) {
    const double relative = std::fabs(fp8[i] - native[i]) / native[i];
    largest = std::max(largest, relative);
    EXPECT_LT(relative, 0.05) << "step " << i + 1 << ": fp8 " << fp8[i] << ", native " << native[i];
  }
  EXPECT_GT(largest, 1e-4) << "the fp8 run's losses equal the native run's: the format was not applied";
  EXPECT_LT(fp8.back(), fp8.front()) << "the fp8 run did not learn";
}

TEST_F(ParityFp8, PipelineAndDataParallelWithZeroQuantiseTheSameTensors) {
  if (world_size() < 4) GTEST_SKIP() << "needs 4 ranks";
  for (int zero : {1, 3}) {
    launch::TrainConfig c = config(1, 2, 2);
    c.zero = zero;
    expect_parity(c, *ref_, "fp8 pp2 x dp2, ZeRO-" + std::to_string(zero));
  }
}

// ZB-H1 splits each matmul's backward in two passes, the weight pass long
// after the input pass; with full recomputation the stash keeps its own
// copies of the matmul inputs. The same quantisation either way.
TEST_F(ParityFp8, ZeroBubbleSplitBackwardAndRecomputation) {
  if (world_size() < 4) GTEST_SKIP() << "needs 4 ranks";
  launch::TrainConfig c = config(1, 2, 2);
  c.pipeline_schedule = "zb-h1";
  c.recompute = "full";
  c.zero = 2;
  expect_parity(c, *ref_, "fp8 zb-h1 pp2 x dp2, ZeRO-2, full recomputation");
}

TEST_F(ParityFp8, LlamaUnderPipelineAndDataParallel) {
  if (world_size() < 4) GTEST_SKIP() << "needs 4 ranks";
  launch::TrainConfig c = config(1, 2, 2);
  make_llama(c);
  c.zero = 3;
  expect_parity(c, *llama_ref_, "fp8 llama-micro pp2 x dp2, ZeRO-3");
}

// Shards scaled as their whole tensors (the amax reduction): close to one
// process, well inside FP8's own effect (see the top of the file).
TEST_F(ParityFp8, TensorParallelShardsShareTheWholeTensorsScale) {
  if (world_size() < 4) GTEST_SKIP() << "needs 4 ranks";
  launch::TrainConfig c = config(2, 2, 1);
  c.sequence_parallel = true;
  launch::TrainConfig split = config(2, 2, 1);
  split.pipeline_schedule = "zb-h1";  // the weight passes reduce their shards' amaxes too
  launch::TrainConfig llama = config(2, 1, 2);
  make_llama(llama);
  const Drift fp8_effect = drift(*ref_, *native_ref_);
  ASSERT_GT(fp8_effect.whole, 1e-3) << "FP8 should move the run from the native one";
  for (const auto& [run, ref, what] : {std::tuple{c, ref_, "fp8 tp2 x pp2, sequence parallel"},
                                       std::tuple{split, ref_, "fp8 tp2 x pp2, zb-h1"},
                                       std::tuple{llama, llama_ref_, "fp8 llama-micro tp2 x dp2"}}) {
    on_groups(4, [&](MPI_Comm group) {
      const Drift d = drift(train_run(run, group), *ref);
      EXPECT_LE(d.loss, 1e-4) << what << " rank " << world_rank();
      EXPECT_LE(d.whole, 0.4 * fp8_effect.whole) << what << " rank " << world_rank() << " (FP8's own effect "
                                                 << fp8_effect.whole << ")";
      // Any tensor: a wrong scale or operand on one layer moves it by its own size.
      EXPECT_LE(d.params, 0.1) << what << " rank " << world_rank();
    });
  }
}

// The trainer keeps each weight's FP8 form from its first use after an
// optimizer step to the next step (engine::ops::Fp8WeightCache). Kept or
// made at every use, every number must be the same: a cache not cleared
// after an update, or filled from another layer's weight, would change them.
TEST_F(ParityFp8, KeepingTheFp8WeightsChangesNothing) {
  launch::TrainConfig uncached = config(1, 1, 1);
  uncached.fp8_weight_cache = false;
  const TrainedRun fresh = train_run(uncached, MPI_COMM_SELF);
  EXPECT_EQ(fresh.summary.losses, ref_->summary.losses) << "one process";
  EXPECT_TRUE(fresh.params == ref_->params) << "one process";
  if (world_size() < 4) GTEST_SKIP() << "the layouts need 4 ranks";
  launch::TrainConfig tp = config(2, 2, 1);  // tp shards reduce their amaxes once per step when kept
  tp.pipeline_schedule = "zb-h1";
  tp.recompute = "full";
  launch::TrainConfig zero2 = config(1, 2, 2);  // ZeRO-2 gathers the updated weights after each step
  zero2.zero = 2;
  for (launch::TrainConfig c : {tp, zero2}) {
    const std::string what = "tp " + std::to_string(c.tp) + " pp " + std::to_string(c.pp) + " dp " + std::to_string(c.dp);
    const TrainedRun kept = train_run(c, MPI_COMM_WORLD);
    c.fp8_weight_cache = false;
    const TrainedRun remade = train_run(c, MPI_COMM_WORLD);
    EXPECT_EQ(kept.summary.losses, remade.summary.losses) << what;
    EXPECT_TRUE(kept.params == remade.params) << what << ", rank " << world_rank();
  }
}

// Current scaling keeps no state between steps (no amax history): a resumed
// run continues bit for bit.
TEST_F(ParityFp8, ResumesExactly) {
  if (world_size() < 4) GTEST_SKIP() << "needs 4 ranks";
  expect_exact_resume(config(1, 2, 2), *dir_, "fp8_pp2_dp2");
}

// Block scaling is applied (the losses move off the native run's) and still
// trains; that its grids are not per-tensor scaling's is test_fp8_matmul's.
TEST_F(ParityFp8, BlockScalingRoundsTheMatmulsAndStillTrains) {
  const std::vector<double>& block = block_ref_->summary.losses;
  const std::vector<double>& native = wide_native_ref_->summary.losses;
  ASSERT_EQ(block.size(), native.size());
  double from_native = 0;
  for (std::size_t i = 0; i < block.size(); ++i)
    from_native = std::max(from_native, std::fabs(block[i] - native[i]) / native[i]);
  EXPECT_GT(from_native, 1e-5) << "block scaling gave the native losses: nothing was rounded";
  EXPECT_LT(from_native, 0.05);
  EXPECT_LT(block.back(), block.front()) << "the block-scaled run did not learn";
}

// Every layout against one process, block-scaled. Pipeline and data
// parallelism quantise the very tensors one process quantises, so the first
// step's loss is one process's bit for bit. Tensor parallelism sums partial
// products in another order, and E4M3 turns some last-bit differences into
// whole codes: its first loss is 1.6e-5 off (per-tensor scaling at this
// width: 1.2e-8), although its shards hold whole blocks and quantise as one
// process's tensors do (test_fp8_matmul, BlocksOfAlignedShardsAreTheWholeTensors).
// After the first step the layouts' gradients differ in their last bits too
// (the data-parallel ranks sum micro-batches in another order), and block
// scaling carries those bits further than one scale per tensor does.
// Measured on this fixture (2026-11-29): dp2's losses 8e-10, 5e-8 and 5e-5
// off one process's at steps 2-4, where per-tensor scaling stays within 3e-6;
// tp2 x pp2 5.2e-4 and the model 0.3 of FP8's own effect, and with shards of
// 96 (192 wide, blocks not aligned) 0.78 of it. So the layouts are held to
// every loss within 1e-3 and the model within 0.4 of FP8's effect.
TEST_F(ParityFp8, BlockScalingUnderEveryLayout) {
  if (world_size() < 4) GTEST_SKIP() << "needs 4 ranks";
  launch::TrainConfig zero3 = block_config(1, 2, 2);
  zero3.zero = 3;
  launch::TrainConfig split = block_config(1, 2, 2);
  split.pipeline_schedule = "zb-h1";
  split.recompute = "full";
  launch::TrainConfig tp = block_config(2, 2, 1);
  tp.sequence_parallel = true;
  const Drift fp8_effect = drift(*block_ref_, *wide_native_ref_);
  ASSERT_GT(fp8_effect.whole, 1e-4) << "block FP8 should move the run from the native one";
  for (const auto& [run, what] : {std::pair{zero3, "block fp8 pp2 x dp2, ZeRO-3"},
                                  std::pair{split, "block fp8 zb-h1 pp2 x dp2, full recomputation"},
                                  std::pair{tp, "block fp8 tp2 x pp2, sequence parallel"}}) {
    on_groups(4, [&](MPI_Comm group) {
      const TrainedRun trained = train_run(run, group);
      const Drift d = drift(trained, *block_ref_);
      std::printf("%s rank %d: losses %.2e, model %.2e (FP8's effect %.2e), worst tensor %.2e\n", what,
                  world_rank(), d.loss, d.whole, fp8_effect.whole, d.params);
      const double first = block_ref_->summary.losses.front();
      EXPECT_NEAR(trained.summary.losses.front(), first, (run.tp > 1 ? 1e-4 : 1e-12) * first) << what;
      EXPECT_LE(d.loss, 1e-3) << what << " rank " << world_rank();
      EXPECT_LE(d.whole, 0.4 * fp8_effect.whole) << what << " rank " << world_rank();
      EXPECT_LE(d.params, 0.1) << what << " rank " << world_rank();
    });
  }
}

// Refusals, one line each, before anything is built (the configuration alone:
// no GPU is touched, so these run on the CPU too).
TEST(Fp8Config, RefusesWhatCannotRun) {
  auto refusal = [](launch::TrainConfig& c, int cuda_devices) -> std::string {
    try {
      c.resolve(cuda_devices, 1);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  };
  launch::TrainConfig c;
  c.preset = "gpt-micro";
  c.micro_batch = 1;
  c.seq_len = 16;
  c.train_data = "unused_*.bin";
  c.peak_tflops = 1.0;

  launch::TrainConfig cpu = c;
  cpu.device = "cpu";
  cpu.precision = "fp8";
  const std::string on_cpu = refusal(cpu, 0);
  EXPECT_NE(on_cpu.find("--precision fp8 needs --device cuda"), std::string::npos) << on_cpu;

  launch::TrainConfig emulated_on_gpu = c;
  emulated_on_gpu.device = "cuda";
  emulated_on_gpu.precision = "fp8-emulated";
  const std::string emulated = refusal(emulated_on_gpu, 1);
  EXPECT_NE(emulated.find("on --device cuda use --precision fp8"), std::string::npos) << emulated;

  launch::TrainConfig odd_tokens = c;  // 1 x 15 tokens: not a multiple of 16
  odd_tokens.device = "cuda";
  odd_tokens.precision = "fp8";
  odd_tokens.seq_len = 15;
  const std::string why = refusal(odd_tokens, 1);
  EXPECT_NE(why.find("micro-batch x seq-len tokens is 15, not a multiple of 16"), std::string::npos) << why;

  launch::TrainConfig scaled_natively = c;
  scaled_natively.device = "cpu";
  scaled_natively.fp8_scaling = "block";
  const std::string not_fp8 = refusal(scaled_natively, 0);
  EXPECT_NE(not_fp8.find("--fp8-scaling block applies to --precision fp8 or fp8-emulated, not fp32"),
            std::string::npos)
      << not_fp8;

  launch::TrainConfig fine = c;  // the emulation has no shape rule, and fp8 on a GPU accepts gpt-micro
  fine.device = "cpu";
  fine.precision = "fp8-emulated";
  EXPECT_EQ(refusal(fine, 0), "");
  EXPECT_EQ(fine.matmul_format, engine::ops::MatmulFormat::kFp8E4M3);
  EXPECT_EQ(fine.precision_mode, model::Precision::kFp32);
  launch::TrainConfig on_gpu = c;
  on_gpu.device = "cuda";
  on_gpu.precision = "fp8";
  EXPECT_EQ(refusal(on_gpu, 1), "");
  EXPECT_EQ(on_gpu.precision_mode, model::Precision::kBf16);
}
