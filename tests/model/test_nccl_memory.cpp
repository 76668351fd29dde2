// NCCL's buffers in the memory plan (parallel/nccl_memory.h,
// model::nccl_buffer_bytes): the per-communicator figures from NCCL's buffer
// sizes and its environment variables, and which communicators each pipeline
// stage belongs to (tp, dp, the pipeline's neighbours, the tied embedding's
// pair), counted in the plan's totals only under NCCL.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "engine/check.h"
#include "model/gpt_config.h"
#include "model/memory_plan.h"
#include "parallel/nccl_memory.h"

using parallel::NcclBufferSizes;

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// Sets an environment variable for a scope, restoring what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = getenv(name)) previous_ = old, had_ = true;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) setenv(name_.c_str(), previous_.c_str(), 1);
    else unsetenv(name_.c_str());
  }

 private:
  std::string name_, previous_;
  bool had_ = false;
};

model::ParallelLayout gpu_layout(int tp, int pp, int dp) {
  model::ParallelLayout l;
  l.tp = tp;
  l.pp = pp;
  l.dp = dp;
  l.micro_batch = 1;
  l.micro_batches = 2 * pp;
  l.seq_len = 64;
  l.device = engine::DeviceType::kCuda;
  l.precision = model::Precision::kBf16;
  l.nccl = true;
  return l;
}

}  // namespace

TEST(NcclMemory, ACommunicatorsBuffersFollowNcclsSizes) {
  const NcclBufferSizes d;
  // Simple 4 MiB, LL128 120 x 640 x 8 x 8 B, LL 8 x 512 x 8 x 16 B, per connection; 3 connections a channel.
  EXPECT_EQ(d.simple, 4 * kMiB);
  EXPECT_EQ(d.ll128, 4915200u);
  EXPECT_EQ(d.ll, 512u * 1024u);
  EXPECT_EQ(parallel::nccl_collective_bytes(d), 16u * 3u * (4 * kMiB + 4915200u + 512u * 1024u));
  EXPECT_EQ(parallel::nccl_point_to_point_bytes(2, d), 2u * 2u * 4 * kMiB);
  EXPECT_EQ(parallel::nccl_point_to_point_bytes(0, d), 0u);
}

TEST(NcclMemory, NcclsOwnVariablesResizeTheEstimate) {
  ScopedEnv buff("NCCL_BUFFSIZE", "1048576"), channels("NCCL_MAX_NCHANNELS", "4"), ll128("NCCL_LL128_BUFFSIZE", "0x1000"),
      ll("NCCL_LL_BUFFSIZE", "4096"), peer("NCCL_NCHANNELS_PER_NET_PEER", "1");
  const NcclBufferSizes s = NcclBufferSizes::from_environment();
  EXPECT_EQ(s.simple, kMiB);
  EXPECT_EQ(s.ll128, 4096u);
  EXPECT_EQ(s.channels, 4);
  EXPECT_EQ(parallel::nccl_collective_bytes(s), 4u * 3u * (kMiB + 4096u + 4096u));
  EXPECT_EQ(parallel::nccl_point_to_point_bytes(1, s), kMiB);
}

TEST(NcclMemory, AMalformedVariableIsRefusedByName) {
  for (const char* bad : {"lots", "-4", "0", "12MB"}) {
    ScopedEnv buff("NCCL_BUFFSIZE", bad);
    try {
      (void)NcclBufferSizes::from_environment();
      FAIL() << "NCCL_BUFFSIZE=" << bad << " was accepted";
    } catch (const engine::Error& e) {
      EXPECT_NE(std::string(e.what()).find("NCCL_BUFFSIZE must be a positive whole number"), std::string::npos)
          << e.what();
    }
  }
}

TEST(NcclMemory, EachStageCountsTheCommunicatorsItBelongsTo) {
  const model::GptConfig gpt = model::gpt_preset("gpt-micro");  // tied embeddings
  ASSERT_TRUE(gpt.tied_embeddings);
  const NcclBufferSizes d;
  const std::size_t coll = parallel::nccl_collective_bytes(d);
  const std::size_t p2p_one = parallel::nccl_point_to_point_bytes(1, d), p2p_two = parallel::nccl_point_to_point_bytes(2, d);

  EXPECT_EQ(model::nccl_buffer_bytes(gpt, gpu_layout(1, 1, 1), 0), 0u) << "one GPU: no communicator with peers";
  EXPECT_EQ(model::nccl_buffer_bytes(gpt, gpu_layout(2, 1, 1), 0), coll);
  EXPECT_EQ(model::nccl_buffer_bytes(gpt, gpu_layout(2, 1, 4), 0), 2 * coll);
  // pp 2: each stage has one neighbour and holds an end of the tied embedding.
  EXPECT_EQ(model::nccl_buffer_bytes(gpt, gpu_layout(1, 2, 1), 0), p2p_one + coll);
  // pp 4: the ends have the embedding pair; the middle ranks only neighbours.
  const model::ParallelLayout pp4 = gpu_layout(2, 4, 2);
  EXPECT_EQ(model::nccl_buffer_bytes(gpt, pp4, 0), 2 * coll + p2p_two + coll);
  EXPECT_EQ(model::nccl_buffer_bytes(gpt, pp4, 1), 2 * coll + p2p_two);
  EXPECT_EQ(model::nccl_buffer_bytes(gpt, pp4, 3), 2 * coll + p2p_two + coll);
  // ZB-V's V: rank 0 holds both ends, no pair.
  model::ParallelLayout v = gpu_layout(1, 4, 1);
  v.schedule = parallel::ScheduleKind::kZeroBubbleV;
  v.virtual_stages = 2;
  EXPECT_EQ(model::nccl_buffer_bytes(gpt, v, 0), p2p_two);
  // An untied head: no pair either.
  model::GptConfig untied = gpt;
  untied.tied_embeddings = false;
  EXPECT_EQ(model::nccl_buffer_bytes(untied, pp4, 0), 2 * coll + p2p_two);
  // Not under MPI (or the CPU).
  model::ParallelLayout mpi = pp4;
  mpi.nccl = false;
  EXPECT_EQ(model::nccl_buffer_bytes(gpt, mpi, 0), 0u);
}

TEST(NcclMemory, ThePlansTotalsCarryIt) {
  const model::GptConfig gpt = model::gpt_preset("gpt-micro");
  model::ParallelLayout with = gpu_layout(2, 2, 2), without = with;
  without.nccl = false;
  const model::MemoryPlan a = model::plan_memory(gpt, with), b = model::plan_memory(gpt, without);
  ASSERT_EQ(a.stages.size(), 2u);
  for (int s = 0; s < 2; ++s) {
    EXPECT_EQ(a.stages[s].communication, model::nccl_buffer_bytes(gpt, with, s));
    EXPECT_EQ(b.stages[s].communication, 0u);
    EXPECT_EQ(a.stages[s].total(), b.stages[s].total() + a.stages[s].communication);
    const model::RankMemory one = model::plan_stage_memory(gpt, with, s);
    EXPECT_EQ(one.communication, a.stages[s].communication) << "plan_stage_memory agrees with plan_memory";
  }
  EXPECT_EQ(a.largest_of_each().communication, model::nccl_buffer_bytes(gpt, with, 0));
  EXPECT_EQ(a.largest_total(), b.largest_total() + model::nccl_buffer_bytes(gpt, with, 0));
}
