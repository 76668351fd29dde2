// The planner against published figures: Narayanan et al. 2021 (SC21,
// "Efficient Large-Scale Language Model Training on GPU Clusters Using
// Megatron-LM", Table 1), ten GPT models from 1.7B to 1T parameters on
// Selene's A100s with full recomputation, sequence 2048, vocabulary 51200.
// The cluster is examples/scaling/clusters/selene_a100.json, every value of
// which comes from data sheets or independent measurements (its "sources");
// the software is model::megatron_lm_2021(). Nothing here is fitted to the
// rows. The layouts are the paper's own (NVIDIA/Megatron-LM
// examples/sc21/run_table_1.sh, which reproduces Table 1): its tp, pp and
// micro-batch sizes, 1F1B, and for four rows (76.1B to 529.6B) the
// interleaved schedule with the chunks its
// --num-layers-per-virtual-pipeline-stage gives (the planner models that
// schedule for this software; the engine does not run it). The paper's
// TFLOP/s per GPU count the recomputed forward:
//   F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h))   (their section 5.1)
// so the prediction is F / (predicted step time x GPUs). The targets
// are asserted: every row within 10%, 5% on average. They are met (2.0% to
// 5.9% too fast and 0.5% to 0.7% too slow, 2.8% mean) since 2026-11-23,
// when the cluster file's two compute rates were re-chosen: 235 TFLOP/s, a
// large fp16 GEMM with 2020's CUTLASS (the paper's software generation), and
// 1716 GB/s, a BabelStream add. Before, with the best shape of a
// 2025 search (271 TFLOP/s) and the data-sheet bandwidth (2039 GB/s), every
// row was 12-20% too fast (16.9% mean). examples/benchmarks/RESULTS.md says
// why, that the change was made after that error was known (so this is met
// in number, not as a blind prediction), and that the targets hold for GEMM
// rates of 211-243 TFLOP/s. Runs the file was not chosen on are checked at
// the end: Megatron-LM's own GPT-3 175B example (5.4% fast) and MT-NLG under
// DeepSpeed's pipeline (19-22% fast, software not modelled).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <tuple>
#include <utility>

#include "launch/plan/cluster_file.h"
#include "launch/plan/planner.h"

namespace {

struct Row {
  const char* params;
  int heads, hidden, layers, tp, pp, gpus, batch;
  double tflops;     // per GPU, Table 1
  int micro_batch;   // NVIDIA/Megatron-LM examples/sc21/run_table_1.sh
  int virtual_stages;  // its --num-layers-per-virtual-pipeline-stage: layers / pp / that
};

constexpr Row kTable1[] = {
    {"1.7B", 24, 2304, 24, 1, 1, 32, 512, 137, 16, 1},          {"3.6B", 32, 3072, 30, 2, 1, 64, 512, 138, 16, 1},
    {"7.5B", 32, 4096, 36, 4, 1, 128, 512, 142, 16, 1},         {"18.4B", 48, 6144, 40, 8, 1, 256, 1024, 135, 8, 1},
    {"39.1B", 64, 8192, 48, 8, 2, 512, 1536, 138, 4, 1},        {"76.1B", 80, 10240, 60, 8, 4, 1024, 1792, 140, 2, 3},
    {"145.6B", 96, 12288, 80, 8, 8, 1536, 2304, 148, 2, 2},     {"310.1B", 128, 16384, 96, 8, 16, 1920, 2160, 155, 1, 2},
    {"529.6B", 128, 20480, 105, 8, 35, 2520, 2520, 163, 1, 3},  {"1008.0B", 160, 25600, 128, 8, 64, 3072, 3072, 163, 1, 1},
};

// One layout of a published Megatron-LM run on Selene: a GPT of sequence 2048
// and vocabulary 51200, no ZeRO, 1F1B (interleaved when virtual_stages > 1).
struct PublishedLayout {
  int heads, hidden, layers, tp, pp, gpus, batch, micro_batch, virtual_stages, sequence_parallel;
  model::Recompute recompute;
};

parallel::Cluster selene() {
  return launch::read_cluster_file(ENGINE_SOURCE_DIR "/examples/scaling/clusters/selene_a100.json");
}

launch::PlanRequest selene_request(const PublishedLayout& p, const parallel::Cluster& cluster) {
  launch::PlanRequest r;
  r.model.n_layer = p.layers;
  r.model.n_head = p.heads;
  r.model.n_embd = p.hidden;
  r.model.vocab_size = 51200;
  r.model.max_seq_len = 2048;
  r.seq_len = 2048;
  r.global_batch = p.batch;
  r.devices = p.gpus;
  r.cluster = cluster;
  r.software = "megatron-lm-2021";
  r.micro_batch = {p.micro_batch};
  r.tp = {p.tp};
  r.pp = {p.pp};
  r.zero = {0};
  r.sequence_parallel = {p.sequence_parallel};
  r.recompute = {p.recompute};
  r.schedule = {parallel::ScheduleKind::kOneFOneB};
  r.virtual_stages = p.virtual_stages;
  return r;
}

}  // namespace

namespace {

struct Table1Errors {
  double mean = 0, worst = 0;  // absolute, of the TFLOP/s per GPU
};

// Predicts Table 1 on `cluster` and returns the errors; with `print`, one line per row.
Table1Errors table1_errors(const parallel::Cluster& cluster, bool print) {
  Table1Errors e;
  for (const Row& row : kTable1) {
    launch::PlanRequest r = selene_request({row.heads, row.hidden, row.layers, row.tp, row.pp, row.gpus, row.batch,
                                            row.micro_batch, row.virtual_stages, 0, model::Recompute::kFull},
                                           cluster);
    r.attention = model::AttentionFlops::kFull;  // the paper counts the whole s x s square
    const std::vector<launch::Prediction> ranked = launch::plan(r);
    EXPECT_FALSE(ranked.empty()) << row.params;
    if (ranked.empty()) return {1, 1};
    const launch::Prediction& best = ranked.front();
    EXPECT_TRUE(best.fits) << row.params << " fits on an 80 GB A100 in the paper";
    const double B = row.batch, s = 2048, l = row.layers, h = row.hidden, V = 51200;
    const double paper_flops = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
    const double predicted = paper_flops / best.step_seconds / row.gpus / 1e12;
    // The planner's hardware FLOPs (HFU's numerator) are the paper's count: recomputation of the whole forward.
    EXPECT_NEAR(best.hardware_flops / paper_flops, 1.0, 1e-12) << row.params;
    const double error = predicted / row.tflops - 1;
    EXPECT_EQ(best.virtual_stages, row.virtual_stages) << row.params;
    if (print)
      std::printf("%8s tp %d pp %2d x%d mb %2lld: predicted %6.1f TFLOP/s per GPU, published %5.1f, error %+5.1f%%\n",
                  row.params, row.tp, row.pp, row.virtual_stages, static_cast<long long>(best.layout.micro_batch),
                  predicted, row.tflops, 100 * error);
    e.mean += std::fabs(error) / std::size(kTable1);
    e.worst = std::max(e.worst, std::fabs(error));
  }
  return e;
}

bool meets_targets(const Table1Errors& e) { return e.worst <= 0.10 && e.mean <= 0.05; }

}  // namespace

TEST(PlannerPublished, Narayanan2021Table1) {
  const Table1Errors e = table1_errors(selene(), true);
  std::printf("mean absolute error %.1f%%, worst %.1f%%\n", 100 * e.mean, 100 * e.worst);
  EXPECT_LE(e.worst, 0.10);  // the targets
  EXPECT_LE(e.mean, 0.05);
}

// The cluster file's two rates were chosen after an earlier choice's error
// on this table was known (RESULTS.md), so how much the result depends on
// them is part of the result. The targets must hold across the independent
// measurements found (GEMM 230 to 239 TFLOP/s, memory 1709 to 1725 GB/s),
// and the GEMM rates for which they hold at the file's bandwidth, the band
// RESULTS.md quotes (211 to 243 TFLOP/s), are checked to the TFLOP/s.
TEST(PlannerPublished, Narayanan2021Table1AcrossTheMeasuredRates) {
  const parallel::Cluster file = selene();
  for (const double gemm_tflops : {230.0, 235.1, 239.0}) {
    for (const double gb_per_s : {1709.0, 1716.0, 1725.0}) {
      parallel::Cluster c = file;
      c.gemm_efficiency = gemm_tflops * 1e12 / c.peak_flops;
      c.memory_bandwidth = gb_per_s * 1e9;
      const Table1Errors e = table1_errors(c, false);
      std::printf("GEMM %5.1f TFLOP/s, memory %4.0f GB/s: mean %.1f%%, worst %.1f%%\n", gemm_tflops, gb_per_s,
                  100 * e.mean, 100 * e.worst);
      EXPECT_TRUE(meets_targets(e)) << gemm_tflops << " TFLOP/s, " << gb_per_s << " GB/s";
    }
  }
  // For comparison (RESULTS.md's table), not asserted: the data-sheet bandwidth, and the best-of-search GEMM rate.
  for (const auto& [gemm_tflops, gb_per_s] : {std::pair{235.1, 2039.0}, std::pair{271.2, 1709.0},
                                              std::pair{271.2, 1725.0}, std::pair{271.2, 2039.0}}) {
    parallel::Cluster c = file;
    c.gemm_efficiency = gemm_tflops * 1e12 / c.peak_flops;
    c.memory_bandwidth = gb_per_s * 1e9;
    const Table1Errors e = table1_errors(c, false);
    std::printf("(for comparison) GEMM %5.1f TFLOP/s, memory %4.0f GB/s: mean %.1f%%, worst %.1f%%\n", gemm_tflops,
                gb_per_s, 100 * e.mean, 100 * e.worst);
  }
  int lowest = 0, highest = 0;
  for (int gemm_tflops = 180; gemm_tflops <= 300; ++gemm_tflops) {
    parallel::Cluster c = file;
    c.gemm_efficiency = gemm_tflops * 1e12 / c.peak_flops;
    if (!meets_targets(table1_errors(c, false))) continue;
    if (lowest == 0) lowest = gemm_tflops;
    highest = gemm_tflops;
  }
  std::printf("targets met for GEMM rates of %d to %d TFLOP/s at %.0f GB/s\n", lowest, highest,
              file.memory_bandwidth / 1e9);
  EXPECT_EQ(lowest, 211);
  EXPECT_EQ(highest, 243);
}

// A second published set on the same cluster, a year later: Korthikanti et
// al. 2023 ("Reducing Activation Recomputation in Large Transformer Models",
// MLSys 2023, arXiv:2205.05198), Table 5: the time of one iteration of four
// GPT models on Selene's A100s (sequence 2048, vocabulary 51200, fp16,
// micro-batch 1 except 22B's 4, global batch = GPUs except 22B's 4, no data
// parallelism), with full recomputation and with sequence parallelism plus
// selective recomputation. The times and layouts are as Calculon (Isaev et
// al., SC23) transcribed them for its own validation
// (github.com/calculon-ai/calculon: calculon/megatron/validation.py, its
// kProfile; validation/*.json); they agree with the paper's abstract (530B:
// 42.1% MFU with recomputation, 54.2% without, on 2240 GPUs; these times give
// 43.2% and 56.0% on 280 GPUs). 175B and 530B ran the interleaved schedule
// with 3 chunks per device. The software is still model::megatron_lm_2021():
// the 2022 code also overlaps some backward tensor-parallel communication
// with the weight-gradient matmuls and redoes the sequence-parallel
// all-gather in backward, neither modelled. The memory plan is the engine's,
// not Megatron-LM's, so whether each fits is not checked here.
namespace {

struct Table5Row {
  const char* params;
  int heads, hidden, layers, pp, gpus, batch, micro_batch, virtual_stages;
  double full_seconds, selective_seconds;  // Table 5: full recomputation; sequence parallel + selective
};

constexpr Table5Row kTable5[] = {
    {"22B", 64, 6144, 48, 1, 8, 4, 4, 1, 1.42, 1.10},
    {"175B", 96, 12288, 96, 8, 64, 64, 1, 3, 18.13, 13.75},
    {"530B", 128, 20480, 105, 35, 280, 280, 1, 3, 49.05, 37.83},
    {"1T", 160, 25600, 128, 64, 512, 512, 1, 1, 94.42, 71.49},
};

double predicted_seconds(const Table5Row& row, model::Recompute recompute, int sequence_parallel) {
  const launch::PlanRequest r = selene_request({row.heads, row.hidden, row.layers, 8, row.pp, row.gpus, row.batch,
                                                row.micro_batch, row.virtual_stages, sequence_parallel, recompute},
                                               selene());
  const std::vector<launch::Prediction> ranked = launch::plan(r);
  EXPECT_EQ(ranked.size(), 1u) << row.params;
  if (ranked.empty()) return 0;
  EXPECT_EQ(ranked.front().virtual_stages, row.virtual_stages) << row.params;
  return ranked.front().step_seconds;
}

}  // namespace

TEST(PlannerPublished, Korthikanti2023Table5) {
  double sum_abs = 0, worst = 0, worst_speedup = 0;
  int n = 0;
  for (const Table5Row& row : kTable5) {
    const double full = predicted_seconds(row, model::Recompute::kFull, 0);
    const double selective = predicted_seconds(row, model::Recompute::kSelective, 1);
    for (const auto& [name, predicted, published] :
         {std::tuple{"full", full, row.full_seconds}, std::tuple{"sp + selective", selective, row.selective_seconds}}) {
      const double error = predicted / published - 1;  // of the time: negative = predicted faster
      std::printf("%5s pp %2d x%d %-15s: predicted %6.2f s, published %6.2f s, error %+5.1f%%\n", row.params, row.pp,
                  row.virtual_stages, name, predicted, published, 100 * error);
      sum_abs += std::fabs(error);
      worst = std::max(worst, std::fabs(error));
      ++n;
    }
    // What sequence parallelism and selective recomputation save, against full recomputation.
    const double speedup_error = (full / selective) / (row.full_seconds / row.selective_seconds) - 1;
    std::printf("%5s speed-up of sp + selective: predicted %.3f, published %.3f (%+.1f%%)\n", row.params,
                full / selective, row.full_seconds / row.selective_seconds, 100 * speedup_error);
    worst_speedup = std::max(worst_speedup, std::fabs(speedup_error));
  }
  const double mean = sum_abs / n;
  std::printf("mean absolute error %.1f%%, worst %.1f%%; worst speed-up error %.1f%%\n", 100 * mean, 100 * worst,
              100 * worst_speedup);
  // Regression bounds on what RESULTS.md records (the issue sets none for this table).
  EXPECT_LE(worst, 0.10);
  EXPECT_LE(mean, 0.07);
  EXPECT_LE(worst_speedup, 0.07);
}

// A held-out check, run once after the cluster file's rates were fixed for
// Table 1 above (commit 292ace8) and not used to choose anything: Smith et al.
// 2022 ("Using DeepSpeed and Megatron to Train Megatron-Turing NLG 530B",
// arXiv:2201.11990, section 2.4), as llm-analysis quotes it
// (github.com/cli99/llm-analysis examples/megatron-turing-nlg/README.md): the
// 530B model (105 layers, hidden 20480, 128 heads, vocabulary 50272,
// sequence 2048), global batch 1920, tp 8 x pp 35, micro-batch 1, on 280,
// 350 and 420 DGX A100 servers: 60.1, 50.2 and 44.4 s an iteration, 126,
// 121 and 113 TFLOP/s per GPU in Table 1's convention. Its software is not
// the one modelled: Megatron-LM's layers under DeepSpeed's pipeline engine
// and data parallelism. The planner predicts every point 23-29% too fast
// (RESULTS.md); the bound below only keeps that from drifting unnoticed.
TEST(PlannerPublished, Smith2022MtNlgHeldOut) {
  constexpr struct {
    int gpus;
    double seconds;
  } kRuns[] = {{2240, 60.1}, {2800, 50.2}, {3360, 44.4}};
  for (const auto& run : kRuns) {
    launch::PlanRequest r =
        selene_request({128, 20480, 105, 8, 35, run.gpus, 1920, 1, 1, 0, model::Recompute::kFull}, selene());
    r.model.vocab_size = 50272;
    const std::vector<launch::Prediction> ranked = launch::plan(r);
    ASSERT_EQ(ranked.size(), 1u) << run.gpus;
    const double predicted = ranked.front().step_seconds;
    const double error = predicted / run.seconds - 1;  // negative = predicted faster
    std::printf("MT-NLG 530B on %d GPUs: predicted %.1f s, published %.1f s, error %+.1f%%\n", run.gpus, predicted,
                run.seconds, 100 * error);
    EXPECT_LT(error, -0.15) << run.gpus;  // RESULTS.md: 19-22% short (23-29% high in TFLOP/s)
    EXPECT_GT(error, -0.30) << run.gpus;
  }
}

// A second held-out check, this one with the software modelled: the GPT-3
// 175B example of NVIDIA/Megatron-LM's README ("GPT-3 Example": "With full
// global batch size of 1536 on 1024 A100 GPUs, each iteration takes around 32
// seconds resulting in 138 teraFLOPs per GPU"), run by the 2021 script
// examples/pretrain_gpt3_175B.sh: 96 layers, hidden 12288, 96 heads,
// sequence 2048, the GPT-2 vocabulary (50257, padded by Megatron-LM to a
// multiple of 128 x tp = 51200), tp 8, pp 16 (so dp 8), micro-batch 1,
// global batch 1536, --checkpoint-activations (full recomputation), --fp16,
// plain 1F1B (no virtual stages), and the container of the SC21 runs
// (nvcr.io/nvidia/pytorch:20.12-py3, as examples/sc21/SRUN.sh). Run first on
// 2026-11-23 with the cluster file as commit eeef64a left it, which no
// earlier session had compared with this run; nothing was changed after.
// The README's 138 TFLOP/s is Table 1's convention at 32.0 s, so the check
// is on the time.
TEST(PlannerPublished, MegatronLmReadmeGpt3_175BHeldOut) {
  const launch::PlanRequest r =
      selene_request({96, 12288, 96, 8, 16, 1024, 1536, 1, 1, 0, model::Recompute::kFull}, selene());
  const std::vector<launch::Prediction> ranked = launch::plan(r);
  ASSERT_EQ(ranked.size(), 1u);
  EXPECT_TRUE(ranked.front().fits);
  const double predicted = ranked.front().step_seconds, published = 32.0;
  const double B = 1536, s = 2048, l = 96, h = 12288, V = 51200;
  const double paper_flops = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  const double error = predicted / published - 1;  // negative = predicted faster
  std::printf("GPT-3 175B on 1024 GPUs: predicted %.1f s (%.1f TFLOP/s per GPU), published about %.0f s (138), "
              "error %+.1f%%\n",
              predicted, paper_flops / predicted / 1024 / 1e12, published, 100 * error);
  EXPECT_NEAR(paper_flops / published / 1024 / 1e12, 138, 0.5);  // the README's two figures agree
  EXPECT_LE(std::fabs(error), 0.10);  // Table 1's per-row target, for a run the file was not chosen on
}
