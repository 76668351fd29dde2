// The planner (launch/plan/planner.h) and the communication side of its cost
// model (parallel/comm_cost.h): the enumeration lists every valid layout
// once and nothing else, the alpha-beta formulas, and the predictions move
// the way the mechanisms they model say they must.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

#include "engine/buffer.h"
#include "launch/plan/planner.h"
#include "model/gpt_stage.h"
#include "model/step_cost.h"
#include "parallel/comm_cost.h"

namespace {

parallel::Cluster test_gpu_cluster() {
  parallel::Cluster c;
  c.name = "test";
  c.device = engine::DeviceType::kCuda;
  c.devices_per_node = 8;
  c.peak_flops = 1000e12;
  c.memory_bytes = 80e9;
  c.gemm_efficiency = 0.7;
  c.memory_bandwidth = 3e12;
  c.op_overhead_seconds = 5e-6;
  c.intra_node = {10e-6, 300e9};
  c.inter_node = {20e-6, 40e9};
  return c;
}

launch::PlanRequest gpt2_request(int devices) {
  launch::PlanRequest r;
  r.model = model::gpt_preset("gpt2-350m");
  r.seq_len = 1024;
  r.global_batch = 64;
  r.devices = devices;
  r.cluster = test_gpu_cluster();
  return r;
}

}  // namespace

TEST(CommCost, RingFormulas) {
  // A link's own all-gather and reduce-scatter bandwidths, where it has them.
  const parallel::Link measured{1e-5, 1e9, 4e9, 2e9};
  EXPECT_DOUBLE_EQ(parallel::all_gather_seconds(4e9, 4, measured), 3 * 1e-5 + 0.75);
  EXPECT_DOUBLE_EQ(parallel::reduce_scatter_seconds(4e9, 4, measured), 3 * 1e-5 + 1.5);
  EXPECT_DOUBLE_EQ(parallel::all_reduce_seconds(4e9, 4, measured), 2 * 3 * 1e-5 + 2 * 0.75 * 4.0);
  const parallel::Link link{1e-5, 1e9};
  EXPECT_DOUBLE_EQ(parallel::all_reduce_seconds(4e9, 4, link), 2 * 3 * 1e-5 + 2 * 0.75 * 4.0);
  EXPECT_DOUBLE_EQ(parallel::reduce_scatter_seconds(4e9, 4, link), 3 * 1e-5 + 0.75 * 4.0);
  EXPECT_DOUBLE_EQ(parallel::all_gather_seconds(4e9, 4, link), 3 * 1e-5 + 0.75 * 4.0);
  EXPECT_DOUBLE_EQ(parallel::send_seconds(1e9, link), 1e-5 + 1.0);
  EXPECT_EQ(parallel::all_reduce_seconds(4e9, 1, link), 0.0);  // a group of one communicates with nobody
}

// A link's curves by message size: exact at the measured sizes, log-log
// between them, the nearest end's outside, and they take the place of the
// single figures for their collective only.
TEST(CommCost, BandwidthByMessageSize) {
  parallel::Link link{1e-5, 1e9, 4e9, 2e9};
  link.all_gather_by_size = {{1 << 16, 1e9}, {1 << 20, 4e9}, {1 << 24, 2e9}};
  using parallel::Collective;
  EXPECT_DOUBLE_EQ(parallel::bus_bandwidth(link, Collective::kAllGather, 1 << 20), 4e9);
  EXPECT_DOUBLE_EQ(parallel::bus_bandwidth(link, Collective::kAllGather, 1 << 10), 1e9);  // below: the smallest's
  EXPECT_DOUBLE_EQ(parallel::bus_bandwidth(link, Collective::kAllGather, 1e12), 2e9);     // above: the largest's
  // 256 KiB is halfway between 64 KiB and 1 MiB in log size: the geometric mean, 2 GB/s.
  EXPECT_NEAR(parallel::bus_bandwidth(link, Collective::kAllGather, 1 << 18), 2e9, 1e-3);
  EXPECT_DOUBLE_EQ(parallel::all_gather_seconds(1 << 20, 4, link), 3 * 1e-5 + 0.75 * (1 << 20) / 4e9);
  // The other collectives keep their single figures.
  EXPECT_DOUBLE_EQ(parallel::bus_bandwidth(link, Collective::kReduceScatter, 1 << 20), 2e9);
  EXPECT_DOUBLE_EQ(parallel::bus_bandwidth(link, Collective::kAllReduce, 1 << 20), 1e9);
  link.all_reduce_by_size = {{1 << 20, 3e9}};
  EXPECT_DOUBLE_EQ(parallel::all_reduce_seconds(1 << 22, 2, link), 2 * 1e-5 + (1 << 22) / 3e9);
  EXPECT_THROW(parallel::bandwidth_at_size({}, 1.0), engine::Error);
  // Across nodes a curve is widened point by point as the single figures
  // are, bounded by the node's own link at that size.
  parallel::Cluster c = test_gpu_cluster();
  c.devices_per_node = 4;
  c.inter_node.all_gather_by_size = {{1 << 20, 1e9}};
  c.intra_node.all_gather_by_size = {{1 << 20, 3e9}};
  const parallel::Link across = parallel::axis_link(c, parallel::Axis::kDp, 1, 1, 8);  // 4 members on each node
  EXPECT_DOUBLE_EQ(across.all_gather_by_size.at(0).bytes_per_second, 3e9);             // min(3e9, 4 x 1e9)
}

TEST(CommCost, AxisLinkFollowsTheRankOrder) {
  const parallel::Cluster c = test_gpu_cluster();  // 8 devices per node
  using parallel::Axis;
  const auto bandwidth = [&](Axis axis, int tp, int pp, int dp) {
    return parallel::axis_link(c, axis, tp, pp, dp).bandwidth_bytes_per_second;
  };
  const auto latency = [&](Axis axis, int tp, int pp, int dp) {
    return parallel::axis_link(c, axis, tp, pp, dp).latency_seconds;
  };
  const double intra = c.intra_node.bandwidth_bytes_per_second, inter = c.inter_node.bandwidth_bytes_per_second;
  EXPECT_EQ(bandwidth(Axis::kTp, 8, 4, 4), intra);  // tp fastest: inside a node
  EXPECT_EQ(latency(Axis::kTp, 8, 4, 4), c.intra_node.latency_seconds);
  EXPECT_EQ(bandwidth(Axis::kDp, 2, 1, 4), intra);  // dp spans tp x dp = 8 ranks: one node
  EXPECT_EQ(bandwidth(Axis::kDp, 2, 1, 3), intra);  // 6 ranks, all on one node
  EXPECT_EQ(bandwidth(Axis::kPp, 2, 2, 2), intra);
  // Groups with one member per node cross between nodes through one NIC each.
  EXPECT_EQ(bandwidth(Axis::kDp, 8, 1, 4), inter);
  EXPECT_EQ(latency(Axis::kDp, 8, 1, 4), c.inter_node.latency_seconds);
  // Pipeline stages exchange point-to-point messages: one NIC each, however many share a node.
  EXPECT_EQ(bandwidth(Axis::kPp, 2, 4, 2), inter);  // stages 4 ranks apart: stage 2 starts the next node
  EXPECT_EQ(bandwidth(Axis::kPp, 8, 2, 1), inter);
  // Groups with m members on every node cross through m NICs, up to the node's bus bandwidth.
  EXPECT_EQ(bandwidth(Axis::kDp, 4, 1, 4), std::min(intra, 2 * inter));
  EXPECT_EQ(bandwidth(Axis::kDp, 1, 1, 32), std::min(intra, 8 * inter));
  EXPECT_EQ(bandwidth(Axis::kTp, 16, 1, 1), std::min(intra, 8 * inter));  // wider than a node
  // An uneven split is as fast as its sparsest node: dp groups of 6 ranks on 8-rank
  // nodes; the second pipeline stage's groups hold ranks 6-11 (2 on one node, 4 on the next).
  EXPECT_EQ(bandwidth(Axis::kDp, 1, 2, 6), std::min(intra, 2 * inter));
  EXPECT_EQ(bandwidth(Axis::kTp, 3, 3, 1), inter);  // {6, 7, 8}: one member on the second node
}

TEST(Planner, EnumeratesEveryValidLayoutOnce) {
  launch::PlanRequest r = gpt2_request(8);
  const auto layouts = launch::enumerate_layouts(r);
  std::set<std::tuple<int, int, int, std::int64_t, int, int, int, bool>> seen;
  for (const model::ParallelLayout& l : layouts) {
    EXPECT_EQ(l.tp * l.pp * l.dp, 8);
    EXPECT_EQ(r.model.n_head % l.tp, 0);
    EXPECT_LE(l.pp, r.model.n_layer);
    EXPECT_EQ(r.global_batch % (l.dp * l.micro_batch), 0);
    EXPECT_EQ(l.micro_batches * l.micro_batch * l.dp, r.global_batch);
    EXPECT_TRUE(l.dp > 1 || l.zero == 0);
    EXPECT_TRUE(l.tp > 1 || !l.sequence_parallel);
    EXPECT_TRUE(l.pp > 1 || l.schedule == parallel::ScheduleKind::kOneFOneB);
    EXPECT_EQ(l.precision, model::Precision::kBf16);  // CUDA runs bf16
    const bool fresh = seen
                           .insert({l.tp, l.pp, l.dp, l.micro_batch, l.zero, static_cast<int>(l.recompute),
                                    static_cast<int>(l.schedule), l.sequence_parallel})
                           .second;
    EXPECT_TRUE(fresh) << "listed twice";
  }
  // tp in {1,2,4,8} (16 heads), pp in {1,2,4,8}, tp*pp <= 8: count by hand.
  // For each (tp, pp): dp = 8/(tp pp), micro-batches: divisors of 64/dp,
  // zero: 4 if dp > 1, sp: 2 if tp > 1, recompute: 3, schedules if pp > 1:
  // 1f1b, afab, zb-h1 and zb-v (the 24 layers fill 2 pp chunks at pp 8).
  std::size_t expected = 0;
  for (int tp : {1, 2, 4, 8})
    for (int pp : {1, 2, 4, 8}) {
      if (tp * pp > 8) continue;
      const int dp = 8 / (tp * pp);
      int divisors = 0;
      for (int d = 1; d <= 64 / dp; ++d) divisors += (64 / dp) % d == 0;
      const int schedules = pp > 1 ? 4 : 1;
      expected += static_cast<std::size_t>(divisors) * (dp > 1 ? 4 : 1) * (tp > 1 ? 2 : 1) * 3 * schedules;
    }
  EXPECT_EQ(layouts.size(), expected);

  // Restrictions narrow it.
  r.tp = {2};
  r.zero = {1};
  r.recompute = {model::Recompute::kFull};
  for (const model::ParallelLayout& l : launch::enumerate_layouts(r)) {
    EXPECT_EQ(l.tp, 2);
    EXPECT_TRUE(l.zero == 1);
    EXPECT_EQ(l.recompute, model::Recompute::kFull);
  }
}

TEST(Planner, PredictionsMoveAsTheMechanismsSay) {
  launch::PlanRequest r = gpt2_request(8);
  auto layout = [&](int tp, int pp, int dp, int mb, int zero, model::Recompute rc) {
    model::ParallelLayout l;
    l.tp = tp;
    l.pp = pp;
    l.dp = dp;
    l.micro_batch = mb;
    l.micro_batches = r.global_batch / dp / mb;
    l.zero = zero;
    l.recompute = rc;
    l.seq_len = r.seq_len;
    l.precision = r.precision();
    l.device = r.cluster.device;
    return l;
  };
  using model::Recompute;
  const auto base = launch::predict(r, layout(1, 1, 8, 4, 0, Recompute::kNone));
  const auto selective = launch::predict(r, layout(1, 1, 8, 4, 0, Recompute::kSelective));
  const auto full = launch::predict(r, layout(1, 1, 8, 4, 0, Recompute::kFull));
  // Recomputation costs time and saves activations; MFU does not count it, HFU does.
  EXPECT_LT(base.step_seconds, selective.step_seconds);
  EXPECT_LT(selective.step_seconds, full.step_seconds);
  EXPECT_GT(base.memory.activations, full.memory.activations);
  EXPECT_NEAR(full.hfu / full.mfu, full.hardware_flops / full.model_flops, 1e-12);
  EXPECT_GT(full.hardware_flops, base.hardware_flops);
  EXPECT_DOUBLE_EQ(full.model_flops, base.model_flops);
  // ZeRO shards state: each stage holds less; ZeRO-3 moves weights every micro-batch.
  const auto z1 = launch::predict(r, layout(1, 1, 8, 4, 1, Recompute::kNone));
  const auto z3 = launch::predict(r, layout(1, 1, 8, 4, 3, Recompute::kNone));
  EXPECT_LT(z1.memory.optimizer, base.memory.optimizer);
  EXPECT_LT(z3.memory.weights, z1.memory.weights);
  EXPECT_LT(z3.memory_bytes_per_device, base.memory_bytes_per_device);
  // A pipeline idles in its bubble, less with more micro-batches.
  const auto pp_few = launch::predict(r, layout(1, 4, 2, 8, 0, Recompute::kNone));
  const auto pp_many = launch::predict(r, layout(1, 4, 2, 1, 0, Recompute::kNone));
  EXPECT_GT(pp_few.bubble_seconds, 0.0);
  EXPECT_GT(pp_few.bubble_seconds / pp_few.step_seconds, pp_many.bubble_seconds / pp_many.step_seconds);
  EXPECT_EQ(base.bubble_seconds, 0.0);
  // ZB-H1 moves the weight-gradient passes into the bubble (Qi et al. 2024):
  // less bubble (F + B - W against F + B + W per stage of fill and drain), a
  // little more compute (the split backward's extra memory traffic), faster
  // here, and the memory of its stashes on top of 1F1B's.
  model::ParallelLayout zb_layout = layout(1, 4, 2, 8, 0, Recompute::kNone);
  zb_layout.schedule = parallel::ScheduleKind::kZeroBubbleH1;
  const auto zb = launch::predict(r, zb_layout);
  EXPECT_LT(zb.bubble_seconds, pp_few.bubble_seconds);
  EXPECT_GT(zb.bubble_seconds, 0.0);
  EXPECT_LT(zb.step_seconds, pp_few.step_seconds);
  EXPECT_GT(zb.compute_seconds, pp_few.compute_seconds);
  EXPECT_LT(zb.compute_seconds, 1.1 * pp_few.compute_seconds);
  EXPECT_GT(zb.memory.activations, pp_few.memory.activations);
  // The planner counts NCCL's buffers on GPUs (parallel/nccl_memory.h), as the trainer does under --comm nccl.
  const auto with_nccl = [&](model::ParallelLayout l) {
    l.nccl = r.cluster.device == engine::DeviceType::kCuda;
    return l;
  };
  EXPECT_EQ(zb.memory_bytes_per_device, model::plan_memory(r.model, with_nccl(zb_layout)).largest_total());
  EXPECT_GT(zb.memory.communication, 0u);
  // Per stage: 1F1B's stage s holds p - s micro-batches; ZB-H1's every stage p (F..W), stage 0 the same.
  ASSERT_EQ(zb.stage_activations.size(), 4u);
  ASSERT_EQ(pp_few.stage_activations.size(), 4u);
  EXPECT_GT(zb.stage_activations[3], pp_few.stage_activations[3]);
  EXPECT_EQ(*std::max_element(zb.stage_activations.begin(), zb.stage_activations.end()), zb.memory.activations);
  // ZB-V (two chunks per rank in a V): its idle time is the list's, simulated
  // with the slowest rank's passes; the split backward's traffic too.
  model::ParallelLayout v_layout = layout(1, 4, 2, 4, 0, Recompute::kNone);
  model::ParallelLayout v_1f1b = v_layout;
  v_layout.schedule = parallel::ScheduleKind::kZeroBubbleV;
  const auto zbv = launch::predict(r, v_layout), plain = launch::predict(r, v_1f1b);
  EXPECT_EQ(zbv.virtual_stages, 2);
  EXPECT_GT(zbv.bubble_seconds, 0.0);
  EXPECT_GT(zbv.compute_seconds, plain.compute_seconds);
  // At equal passes the idle time is the first forward's trip down and up
  // the V, (p - 1) F / 2, for any m >= 2p; otherwise it grows with m, and
  // the extrapolation past 2p + 1 is the simulation's own figure.
  model::StageSeconds equal;
  equal.forward = 1.0;
  equal.backward = 2.0;
  equal.weight_grad = 1.0;
  for (std::int64_t m : {8, 9, 100}) EXPECT_NEAR(launch::zero_bubble_v_idle_seconds(4, m, equal, 0.0), 1.5, 1e-9);
  model::StageSeconds uneven = equal;
  uneven.weight_grad = 0.5;
  const double direct = parallel::simulated_step_seconds(parallel::ScheduleKind::kZeroBubbleV, 4, 40, 2, 0.5, 0.75, 0.25);
  EXPECT_NEAR(launch::zero_bubble_v_idle_seconds(4, 40, uneven, 0.0), direct - 40 * 3.0, 1e-9);
  EXPECT_GT(launch::zero_bubble_v_idle_seconds(4, 40, uneven, 0.0), launch::zero_bubble_v_idle_seconds(4, 8, uneven, 0.0));
  model::ParallelLayout v_run = v_layout;
  v_run.virtual_stages = 2;
  EXPECT_EQ(zbv.memory_bytes_per_device, model::plan_memory(r.model, with_nccl(v_run)).largest_total());
  // The split adds up.
  for (const auto& p : {base, full, z3, pp_few, zb, zbv})
    EXPECT_NEAR(p.compute_seconds + p.exposed_comm_seconds + p.bubble_seconds, p.step_seconds, 1e-9 * p.step_seconds);
  // Tensor parallelism across nodes is slower than inside one.
  launch::PlanRequest wide = gpt2_request(16);
  wide.cluster.devices_per_node = 8;
  const auto tp8 = launch::predict(wide, layout(8, 1, 2, 4, 0, Recompute::kNone));
  wide.cluster.devices_per_node = 4;
  const auto tp8_split = launch::predict(wide, layout(8, 1, 2, 4, 0, Recompute::kNone));
  EXPECT_LT(tp8.step_seconds, tp8_split.step_seconds);
}

TEST(Planner, RanksWhatFitsFirstAndRefusesWhatDoesNot) {
  launch::PlanRequest r = gpt2_request(8);
  r.cluster.memory_bytes = 4e9;  // too small for some layouts of gpt2-350m
  const auto ranked = launch::plan(r);
  ASSERT_FALSE(ranked.empty());
  bool seen_unfit = false, seen_fit = false;
  for (std::size_t i = 0; i < ranked.size(); ++i) {
    const auto& p = ranked[i];
    EXPECT_EQ(p.fits, static_cast<double>(p.memory_bytes_per_device) <= r.cluster.memory_bytes);
    if (!p.fits) seen_unfit = true;
    if (p.fits) {
      seen_fit = true;
      EXPECT_FALSE(seen_unfit) << "a layout that fits is ranked after one that does not";
    }
    if (i > 0 && ranked[i - 1].fits == p.fits) EXPECT_LE(ranked[i - 1].step_seconds, p.step_seconds);
  }
  EXPECT_TRUE(seen_fit);
  EXPECT_TRUE(seen_unfit);
  const nlohmann::json j = launch::prediction_json(ranked.front());
  for (const char* key : {"tp", "pp", "dp", "micro_batch", "zero", "recompute", "schedule", "step_seconds",
                          "tflops_per_device", "mfu", "memory_bytes_per_device", "fits", "stage_activations"})
    EXPECT_TRUE(j.contains(key)) << key;
}

TEST(Planner, BadRequestsAreNamed) {
  launch::PlanRequest r = gpt2_request(8);
  r.seq_len = 4096;  // beyond gpt2-350m's 1024 positions
  EXPECT_NE(r.check().find("sequence length 4096"), std::string::npos);
  r = gpt2_request(0);
  EXPECT_NE(r.check().find("--devices"), std::string::npos);
  EXPECT_THROW(launch::plan(r), std::exception);
  EXPECT_THROW(model::software_by_name("deepspeed-9", engine::DeviceType::kCuda), std::exception);
}

// The run's --precision: its storage dtypes in every layout, and under fp8
// the blocks' FP8 weight copies in the memory (where the trainer keeps them:
// below ZeRO-3), and the step time of FP8's linear layers (below).
TEST(Planner, PlansInTheRunsPrecision) {
  launch::PlanRequest bf16 = gpt2_request(8);
  bf16.tp = {2};
  bf16.pp = {1};
  bf16.micro_batch = {4};
  bf16.recompute = {model::Recompute::kNone};
  bf16.sequence_parallel = {0};
  launch::PlanRequest fp8 = bf16, fp32 = bf16, uncached = bf16;
  fp8.precision_flag = "fp8";
  fp32.precision_flag = "fp32";
  uncached.precision_flag = "fp8";
  uncached.fp8_weight_cache = false;
  const auto a = launch::plan(bf16), b = launch::plan(fp8), c = launch::plan(fp32), d = launch::plan(uncached);
  ASSERT_EQ(a.size(), 4u);  // dp 4 at ZeRO 0..3
  ASSERT_EQ(b.size(), a.size());
  for (const auto& p : a) EXPECT_EQ(p.layout.precision, model::Precision::kBf16);
  for (const auto& p : c) {
    EXPECT_EQ(p.layout.precision, model::Precision::kFp32);
    model::ParallelLayout l = p.layout;
    l.nccl = true;
    EXPECT_EQ(p.memory_bytes_per_device, model::plan_memory(bf16.model, l).largest_total());
  }
  const auto by_zero = [](const std::vector<launch::Prediction>& ps, int zero) {
    for (const auto& p : ps)
      if (p.layout.zero == zero) return p;
    ADD_FAILURE() << "no layout at ZeRO " << zero;
    return ps.front();
  };
  for (int zero = 0; zero <= 3; ++zero) {
    const launch::Prediction plain = by_zero(a, zero), with_fp8 = by_zero(b, zero), no_cache = by_zero(d, zero);
    EXPECT_EQ(with_fp8.layout.precision, model::Precision::kBf16);
    EXPECT_EQ(with_fp8.layout.fp8_weight_copies, zero < 3) << "ZeRO " << zero;
    EXPECT_FALSE(no_cache.layout.fp8_weight_copies);
    // FP8 without weight copies costs only the activations' amax slots: one
    // arena allocation per block and micro-batch kept, and one of scratch
    // (model::ActivationShape::fp8_amax).
    EXPECT_EQ(no_cache.memory.weights, plain.memory.weights);
    const std::size_t amax_slots = no_cache.memory.activations - plain.memory.activations;
    EXPECT_GT(no_cache.memory.activations, plain.memory.activations);
    EXPECT_LE(amax_slots, static_cast<std::size_t>(bf16.model.n_layer * no_cache.layout.micro_batches + 1) *
                              engine::Arena::kAlignment);
    EXPECT_EQ(no_cache.memory_bytes_per_device - amax_slots, plain.memory_bytes_per_device);
    EXPECT_GT(with_fp8.step_seconds, plain.step_seconds) << "no FP8 speedup measured: bf16's rate plus the casts";
    if (zero < 3) {
      // 2 bytes a block parameter of this tp rank: the E4M3 copy and its transpose (model/gpt_stage.h).
      EXPECT_GT(with_fp8.memory.weights, plain.memory.weights);
      EXPECT_EQ(with_fp8.memory.weights - plain.memory.weights,
                static_cast<std::size_t>(bf16.model.n_layer) *
                    model::fp8_weight_copy_bytes_per_block(bf16.model, model::TensorParallel{0, 2, false},
                                                           engine::DeviceType::kCuda));
    } else {
      EXPECT_EQ(with_fp8.memory_bytes_per_device, no_cache.memory_bytes_per_device);
    }
  }
  // The shapes FP8's GEMMs refuse are left out, as train refuses them:
  // 1 x 8 tokens a micro-batch is not a multiple of 16, 2 x 8 is.
  launch::PlanRequest short_seq = fp8;
  short_seq.seq_len = 8;
  short_seq.micro_batch = {1, 2};
  for (const auto& p : launch::plan(short_seq)) EXPECT_EQ(p.layout.micro_batch, 2) << "an FP8 shape was planned";
  EXPECT_FALSE(launch::plan(short_seq).empty());
  // NCCL's buffers at the request's sizes (train and plan take NCCL's variables).
  launch::PlanRequest fewer_channels = bf16;
  fewer_channels.nccl_buffers.channels = 4;
  const auto e = launch::plan(fewer_channels);
  ASSERT_EQ(e.size(), a.size());
  EXPECT_EQ(e.front().memory.communication * 4, by_zero(a, e.front().layout.zero).memory.communication)
      << "tp and dp groups: collective sets, linear in the channels";
  launch::PlanRequest over_mpi = bf16;  // train --comm mpi on GPUs: no NCCL, none of its buffers
  over_mpi.nccl_comm = false;
  for (const auto& p : launch::plan(over_mpi)) EXPECT_EQ(p.memory.communication, 0u);
  // Refused where the devices cannot run it, or misspelled.
  launch::PlanRequest r = gpt2_request(8);
  r.precision_flag = "fp8-emulated";
  EXPECT_NE(r.check().find("fp8-emulated is the CPU's reference"), std::string::npos) << r.check();
  r.precision_flag = "fp16";
  EXPECT_NE(r.check().find("--precision fp16: expected"), std::string::npos) << r.check();
  r.precision_flag = "fp8";
  r.cluster.device = engine::DeviceType::kCpu;
  EXPECT_NE(r.check().find("--precision fp8 runs on GPUs"), std::string::npos) << r.check();
}

// FP8's linear layers in the step time (model/step_cost.h): their casts as
// memory traffic (5 bytes per input value forward; 6 per output and 5 per
// input value backward, recomputation rerunning the forward's), and their
// products at the cluster's fp8_gemm_speedup, 1 until measured.
TEST(Planner, Fp8LinearLayersRunAtTheirMeasuredRateWithTheirCasts) {
  const model::GptConfig gpt = model::gpt_preset("gpt2-350m");
  parallel::Cluster c = test_gpu_cluster();
  model::ParallelLayout bf16;
  bf16.micro_batch = 4;
  bf16.micro_batches = 1;
  bf16.seq_len = 1024;
  bf16.precision = model::Precision::kBf16;
  bf16.device = engine::DeviceType::kCuda;
  model::ParallelLayout fp8 = bf16;
  fp8.fp8_matmuls = true;
  const model::Software sw = model::engine_software(engine::DeviceType::kCuda);
  const model::StageSeconds a = model::stage_micro_batch_seconds(gpt, bf16, c, 0, sw);
  const model::StageSeconds b = model::stage_micro_batch_seconds(gpt, fp8, c, 0, sw);
  const double tokens = 4 * 1024.0, C = 1024, blocks = 24;
  const double inputs = C + C + C + 4 * C, outputs = 3 * C + C + 4 * C + C;  // qkv, proj, fc, fc proj
  EXPECT_NEAR(b.forward - a.forward, blocks * 5 * tokens * inputs / c.memory_bandwidth, 1e-12);
  EXPECT_NEAR(b.backward - a.backward, blocks * (6 * tokens * outputs + 5 * tokens * inputs) / c.memory_bandwidth,
              1e-12);
  EXPECT_DOUBLE_EQ(b.weight_grad, a.weight_grad) << "no speedup measured: bf16's rate";
  c.fp8_gemm_speedup = 2;
  const model::StageSeconds d = model::stage_micro_batch_seconds(gpt, fp8, c, 0, sw);
  EXPECT_DOUBLE_EQ(d.weight_grad, a.weight_grad / 2);
  EXPECT_LT(d.forward, b.forward);
  // Full recomputation reruns the forward's first three products and their casts.
  model::ParallelLayout full = fp8;
  full.recompute = model::Recompute::kFull;
  model::ParallelLayout full_bf16 = bf16;
  full_bf16.recompute = model::Recompute::kFull;
  const double rerun_casts = blocks * 5 * tokens * (C + C + C) / c.memory_bandwidth;
  c.fp8_gemm_speedup = 0;
  EXPECT_NEAR(model::stage_micro_batch_seconds(gpt, full, c, 0, sw).backward -
                  model::stage_micro_batch_seconds(gpt, full_bf16, c, 0, sw).backward,
              blocks * (6 * tokens * outputs + 5 * tokens * inputs) / c.memory_bandwidth + rerun_casts, 1e-12);
}

// Megatron-LM's interleaved 1F1B (Narayanan et al. 2021, section 2.2.2):
// with v chunks per device the bubble is 1/v of plain 1F1B's and every chunk
// boundary sends: per micro-batch a middle device sends 2v messages instead
// of 2, an end device 2v - 1 instead of 1. Only software that has the
// schedule takes it, and only where Megatron-LM would run it.
TEST(Planner, InterleavedScheduleShrinksTheBubbleAndMultipliesTheSends) {
  launch::PlanRequest r = gpt2_request(8);  // gpt2-350m: 24 layers
  r.software = "megatron-lm-2021";
  r.tp = {1};
  r.pp = {4};
  r.micro_batch = {2};
  r.zero = {0};
  r.recompute = {model::Recompute::kNone};
  r.schedule = {parallel::ScheduleKind::kOneFOneB};
  const std::vector<launch::Prediction> plain = launch::plan(r);
  r.virtual_stages = 3;  // 24 layers = 4 stages x 3 chunks x 2 layers
  const std::vector<launch::Prediction> interleaved = launch::plan(r);
  ASSERT_EQ(plain.size(), 1u);
  ASSERT_EQ(interleaved.size(), 1u);
  const launch::Prediction& a = plain.front();
  const launch::Prediction& b = interleaved.front();
  EXPECT_EQ(a.virtual_stages, 1);
  EXPECT_EQ(b.virtual_stages, 3);
  EXPECT_EQ(launch::prediction_json(b).at("virtual_stages"), 3);
  // m = 64 / dp 2 / mb 2 = 16 micro-batches over 4 stages. The bubble is the
  // fill and drain, (sum_s t_s - max_s t_s) / v, of stage times that now hold
  // more sends; it shrinks by nearly 3.
  EXPECT_GT(a.bubble_seconds / b.bubble_seconds, 2.5);
  EXPECT_LT(a.bubble_seconds / b.bubble_seconds, 3.0);
  // More messages: the steady state, m max_s t_s, grows by 4 sends per
  // micro-batch on every device (6 instead of 2 in the middle, 5 instead of 1
  // at the ends) of a (2, 1024, 1024) bf16 activation.
  const parallel::Link pp_link = parallel::axis_link(r.cluster, parallel::Axis::kPp, 1, 4, 2);
  const double send = parallel::send_seconds(2.0 * 1024 * 1024 * 2, pp_link);
  EXPECT_NEAR((b.step_seconds - b.bubble_seconds) - (a.step_seconds - a.bubble_seconds), 16 * 4 * send, 1e-9);
  EXPECT_LT(b.step_seconds, a.step_seconds);
  for (const auto& p : {a, b})
    EXPECT_NEAR(p.compute_seconds + p.exposed_comm_seconds + p.bubble_seconds, p.step_seconds, 1e-9 * p.step_seconds);
  // A stage of one micro-batch in flight has nothing to interleave: Megatron-LM
  // needs the micro-batches to be a multiple of pp, and pp x v to divide the layers.
  r.global_batch = 12;  // 12 / dp 2 / mb 2 = 3 micro-batches, not a multiple of 4
  EXPECT_TRUE(launch::plan(r).empty());
  r.global_batch = 64;
  r.virtual_stages = 5;  // 24 layers do not split into 4 x 5 chunks
  EXPECT_TRUE(launch::plan(r).empty());
  r.virtual_stages = 3;
  r.pp = {2};  // Megatron-LM interleaves only more than two stages
  EXPECT_TRUE(launch::plan(r).empty());
  r.schedule = {parallel::ScheduleKind::kAllForwardAllBackward};
  r.pp = {4};
  EXPECT_TRUE(launch::plan(r).empty());
  // predict() refuses a layout the enumeration would have left out.
  model::ParallelLayout two_stages = a.layout;
  two_stages.pp = 2;
  two_stages.dp = 4;
  two_stages.micro_batches = 8;
  EXPECT_THROW(launch::predict(r, two_stages), std::exception);
  r.schedule = {parallel::ScheduleKind::kOneFOneB};
  // A one-stage layout is unchanged by the flag.
  r.pp = {1};
  r.virtual_stages = 3;
  const std::vector<launch::Prediction> one_stage = launch::plan(r);
  ASSERT_FALSE(one_stage.empty());
  EXPECT_EQ(one_stage.front().virtual_stages, 1);
  // The engine runs the schedule too (--pipeline-schedule interleaved), with
  // a stage per chunk and each its own activation slots: the memory planned
  // is the memory plan of that layout, which test_memory_plan holds equal to
  // what the trainer allocates, and more than 1F1B's.
  r.software = "engine";
  r.pp = {4};
  EXPECT_EQ(r.check(), "");
  const std::vector<launch::Prediction> engine_interleaved = launch::plan(r);
  r.virtual_stages = 1;
  const std::vector<launch::Prediction> engine_plain = launch::plan(r);
  ASSERT_EQ(engine_interleaved.size(), 1u);
  ASSERT_EQ(engine_plain.size(), 1u);
  EXPECT_EQ(engine_interleaved.front().virtual_stages, 3);
  model::ParallelLayout as_run = engine_interleaved.front().layout;
  as_run.schedule = parallel::ScheduleKind::kInterleaved;
  as_run.virtual_stages = 3;
  as_run.nccl = r.cluster.device == engine::DeviceType::kCuda;  // NCCL's buffers, as the planner counts them
  EXPECT_EQ(engine_interleaved.front().memory_bytes_per_device, model::plan_memory(r.model, as_run).largest_total());
  EXPECT_GT(engine_interleaved.front().memory.activations, engine_plain.front().memory.activations);
  EXPECT_LT(engine_interleaved.front().bubble_seconds, engine_plain.front().bubble_seconds);
  r.virtual_stages = 3;
  r.software = "deepspeed-9";  // an unknown software is a problem check() names, not an exception
  EXPECT_NE(r.check().find("deepspeed-9"), std::string::npos);
}

// virtual_stages = 0: the planner chooses the interleaved schedule's v with
// the rest of the layout (`train --layout auto`), listing beside each 1F1B
// layout that can be interleaved the same layout at every v it allows, each
// predicted exactly as a request for that v predicts it.
TEST(Planner, ChoosesTheVirtualStagesWithTheLayout) {
  launch::PlanRequest r = gpt2_request(8);  // gpt2-350m: 24 layers
  r.pp = {4};
  r.virtual_stages = 0;
  EXPECT_EQ(r.check(), "");
  const std::vector<model::ParallelLayout> layouts = launch::enumerate_layouts(r);
  std::set<int> chosen_v;
  std::size_t plain_1f1b = 0, interleaved = 0;
  for (const model::ParallelLayout& l : layouts) {
    if (l.schedule == parallel::ScheduleKind::kOneFOneB) ++plain_1f1b;
    if (l.schedule != parallel::ScheduleKind::kInterleaved) continue;
    ++interleaved;
    chosen_v.insert(l.virtual_stages);
    EXPECT_EQ(l.micro_batches % l.pp, 0);  // Megatron-LM's conditions
    EXPECT_EQ(r.model.n_layer % (l.pp * l.virtual_stages), 0);
  }
  EXPECT_EQ(chosen_v, (std::set<int>{2, 3, 6}));  // 24 layers over 4 ranks
  EXPECT_GT(interleaved, 0u);
  EXPECT_GT(plain_1f1b, 0u);
  // The same layout predicted through a request for its v.
  int compared = 0;
  for (const model::ParallelLayout& l : layouts) {
    if (l.schedule != parallel::ScheduleKind::kInterleaved || l.virtual_stages != 3 || l.zero != 1) continue;
    launch::PlanRequest at_v = r;
    at_v.virtual_stages = 3;
    model::ParallelLayout as_1f1b = l;
    as_1f1b.schedule = parallel::ScheduleKind::kOneFOneB;
    as_1f1b.virtual_stages = 1;
    const launch::Prediction chosen = launch::predict(r, l), requested = launch::predict(at_v, as_1f1b);
    EXPECT_EQ(chosen.virtual_stages, 3);
    EXPECT_DOUBLE_EQ(chosen.step_seconds, requested.step_seconds);
    EXPECT_EQ(chosen.memory_bytes_per_device, requested.memory_bytes_per_device);
    ++compared;
  }
  EXPECT_GT(compared, 0);
  // Restricted to the interleaved schedule, only interleaved pipelines remain.
  r.schedule = {parallel::ScheduleKind::kInterleaved};
  for (const model::ParallelLayout& l : launch::enumerate_layouts(r))
    EXPECT_EQ(l.schedule, parallel::ScheduleKind::kInterleaved);
  // Megatron-LM of 2021 ran the interleaved schedule but had no zero-bubble one.
  r.schedule = {};
  r.software = "megatron-lm-2021";
  bool interleaves = false, zero_bubble = false;
  for (const model::ParallelLayout& l : launch::enumerate_layouts(r)) {
    interleaves |= l.schedule == parallel::ScheduleKind::kInterleaved;
    zero_bubble |= l.schedule == parallel::ScheduleKind::kZeroBubbleH1;
  }
  EXPECT_TRUE(interleaves);
  EXPECT_FALSE(zero_bubble);
}

// GEMM rates by shape (model/step_cost.h gemm_efficiency_at): a product at
// a measured shape runs at its rate, one within a factor of 2 of it at the
// nearest one's, any other at gemm_efficiency; a table measured at a
// model's small products, slower than the large square gemm_efficiency came
// from, makes that model's layouts slower and leaves a model of large
// products alone.
TEST(Planner, GemmRatesByShape) {
  parallel::Cluster c = test_gpu_cluster();
  c.gemm_efficiency = 0.8;
  EXPECT_EQ(model::gemm_efficiency_at(c, 4096, 3072, 1024), 0.8);  // no table
  c.gemm_rates = {{4096, 3072, 1024, 0.55}, {4096, 1024, 1024, 0.5}, {1024, 1024, 4096, 0.6}};
  EXPECT_EQ(model::gemm_efficiency_at(c, 4096, 3072, 1024), 0.55);  // measured
  EXPECT_EQ(model::gemm_efficiency_at(c, 4096, 1024, 1024), 0.5);
  EXPECT_EQ(model::gemm_efficiency_at(c, 3000, 3072, 1024), 0.55);  // nearest, within 2x
  EXPECT_EQ(model::gemm_efficiency_at(c, 4096, 1200, 1024), 0.5);
  EXPECT_EQ(model::gemm_efficiency_at(c, 65536, 8192, 8192), 0.8);  // far from every entry

  launch::PlanRequest r = gpt2_request(8);  // gpt2-350m: C 1024 at 1024 tokens a sequence
  model::ParallelLayout l;
  l.dp = 8;
  l.micro_batch = 4;
  l.micro_batches = r.global_batch / 8 / 4;
  l.seq_len = r.seq_len;
  l.precision = r.precision();
  l.device = r.cluster.device;
  r.cluster.gemm_efficiency = 0.8;
  const launch::Prediction plain = launch::predict(r, l);
  // A table that gives every product the default rate changes nothing.
  const std::int64_t N = 4 * 1024, C = 1024;
  for (const auto& [in, out] : {std::pair{C, 3 * C}, std::pair{C, C}, std::pair{C, 4 * C}, std::pair{4 * C, C}})
    for (const auto& [m, n, k] : {std::tuple{N, out, in}, std::tuple{N, in, out}, std::tuple{out, in, N}})
      r.cluster.gemm_rates.push_back({m, n, k, 0.8});
  EXPECT_NEAR(launch::predict(r, l).step_seconds, plain.step_seconds, 1e-12 * plain.step_seconds);
  // The block's products measured a quarter slower: the step is slower by
  // (nearly) a quarter of the blocks' matmul time, not the head's.
  for (parallel::GemmRate& g : r.cluster.gemm_rates) g.efficiency = 0.6;
  const launch::Prediction slower = launch::predict(r, l);
  EXPECT_GT(slower.step_seconds, plain.step_seconds);
  EXPECT_GT(slower.compute_seconds - plain.compute_seconds, 0.05 * plain.compute_seconds);
  // A model whose products are 4x wider is far from every entry: unchanged.
  launch::PlanRequest wide = r;
  wide.model.n_embd = 4096;
  wide.model.n_head = 32;
  launch::PlanRequest wide_plain = wide;
  wide_plain.cluster.gemm_rates.clear();
  EXPECT_NEAR(launch::predict(wide, l).step_seconds, launch::predict(wide_plain, l).step_seconds,
              1e-12 * launch::predict(wide_plain, l).step_seconds);
}
