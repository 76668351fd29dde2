// The planner against published figures: Narayanan et al. 2021 (SC21,
// "Efficient Large-Scale Language Model Training on GPU Clusters Using
// Megatron-LM", Table 1), ten GPT models from 1.7B to 1T parameters on
// Selene's A100s with full recomputation, sequence 2048, vocabulary 51200.
// The cluster is examples/scaling/clusters/selene_a100.json, every value of
// which comes from data sheets or independent measurements (its "sources");
// the software is model::megatron_lm_2021(). Nothing here is fitted to the
// rows. The layouts are the paper's own (NVIDIA/Megatron-LM
// examples/sc21/run_table_1.sh, which reproduces Table 1): its tp, pp and
// micro-batch sizes, 1F1B. Four rows (76.1B to 529.6B) ran the interleaved
// 1F1B schedule, which the engine does not have, so the model charges them
// the larger bubble of plain 1F1B. The paper's TFLOP/s per GPU count the
// recomputed forward:
//   F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h))   (their section 5.1)
// so the prediction is F / (predicted step time x GPUs). Results and the discussion of the error are in
// examples/benchmarks/RESULTS.md; the targets (every row within 10%,
// 5% on average) are NOT met: the model predicts every row 10-20% too high
// (mean 14.5%), a bias of one sign that points at optimistic inputs (the
// best-shape matmul rate of 2025 software, the data-sheet memory bandwidth)
// rather than at one mechanism. These bounds keep it from getting worse
// unnoticed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "launch/cluster_file.h"
#include "launch/planner.h"

namespace {

struct Row {
  const char* params;
  int heads, hidden, layers, tp, pp, gpus, batch;
  double tflops;     // per GPU, Table 1
  int micro_batch;   // NVIDIA/Megatron-LM examples/sc21/run_table_1.sh
};

constexpr Row kTable1[] = {
    {"1.7B", 24, 2304, 24, 1, 1, 32, 512, 137, 16},          {"3.6B", 32, 3072, 30, 2, 1, 64, 512, 138, 16},
    {"7.5B", 32, 4096, 36, 4, 1, 128, 512, 142, 16},         {"18.4B", 48, 6144, 40, 8, 1, 256, 1024, 135, 8},
    {"39.1B", 64, 8192, 48, 8, 2, 512, 1536, 138, 4},       {"76.1B", 80, 10240, 60, 8, 4, 1024, 1792, 140, 2},
    {"145.6B", 96, 12288, 80, 8, 8, 1536, 2304, 148, 2},    {"310.1B", 128, 16384, 96, 8, 16, 1920, 2160, 155, 1},
    {"529.6B", 128, 20480, 105, 8, 35, 2520, 2520, 163, 1}, {"1008.0B", 160, 25600, 128, 8, 64, 3072, 3072, 163, 1},
};

}  // namespace

TEST(PlannerPublished, Narayanan2021Table1) {
  const parallel::Cluster selene = launch::read_cluster_file(ENGINE_SOURCE_DIR "/examples/scaling/clusters/selene_a100.json");
  double sum_abs = 0, worst = 0;
  for (const Row& row : kTable1) {
    launch::PlanRequest r;
    r.model.n_layer = row.layers;
    r.model.n_head = row.heads;
    r.model.n_embd = row.hidden;
    r.model.vocab_size = 51200;
    r.model.max_seq_len = 2048;
    r.seq_len = 2048;
    r.global_batch = row.batch;
    r.devices = row.gpus;
    r.cluster = selene;
    r.software = "megatron-lm-2021";
    r.micro_batch = {row.micro_batch};
    r.tp = {row.tp};
    r.pp = {row.pp};
    r.zero = {0};
    r.sequence_parallel = {0};
    r.recompute = {model::Recompute::kFull};
    r.schedule = {parallel::ScheduleKind::kOneFOneB};
    r.attention = model::AttentionFlops::kFull;  // the paper counts the whole s x s square
    const std::vector<launch::Prediction> ranked = launch::plan(r);
    ASSERT_FALSE(ranked.empty()) << row.params;
    const launch::Prediction& best = ranked.front();
    ASSERT_TRUE(best.fits) << row.params << " fits on an 80 GB A100 in the paper";
    const double B = row.batch, s = 2048, l = row.layers, h = row.hidden, V = 51200;
    const double paper_flops = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
    const double predicted = paper_flops / best.step_seconds / row.gpus / 1e12;
    // The planner's hardware FLOPs (HFU's numerator) are the paper's count: recomputation of the whole forward.
    EXPECT_NEAR(best.hardware_flops / paper_flops, 1.0, 1e-12) << row.params;
    const double error = predicted / row.tflops - 1;
    std::printf("%8s tp %d pp %2d mb %2lld: predicted %6.1f TFLOP/s per GPU, published %5.1f, error %+5.1f%%\n",
                row.params, row.tp, row.pp, static_cast<long long>(best.layout.micro_batch), predicted, row.tflops,
                100 * error);
    sum_abs += std::fabs(error);
    worst = std::max(worst, std::fabs(error));
  }
  const double mean = sum_abs / std::size(kTable1);
  std::printf("mean absolute error %.1f%%, worst %.1f%%\n", 100 * mean, 100 * worst);
  EXPECT_LE(worst, 0.20);
  EXPECT_LE(mean, 0.15);
}
