// run_schedule over real messages: a toy pipeline whose stages are affine
// maps y = a_s x + b_s on a vector, with loss sum_j w_j y_j on the last
// stage. Every stage must end with the same parameter gradients, loss and
// input gradients as the same computation done sequentially in one process.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "parallel/pipeline_runner.h"
#include "parallel/pipeline_schedule.h"
#include "tests/parallel/communicator_suite.h"

using engine::DeviceType;
using engine::DType;
using engine::Shape;
using engine::Tensor;
using namespace parallel;

namespace {

constexpr int kWidth = 8192;  // values per micro-batch: 64 KiB messages, past MPI's eager limit, so sends are rendezvous

double scale_of(int stage) { return 1.0 + 0.1 * (stage + 1); }
double shift_of(int stage) { return 0.5 * stage - 0.25; }
double input_of(int micro, int j) { return std::sin(micro * kWidth + j); }
double loss_weight(int micro, int j) { return std::cos(j + micro); }

class AffineStage final : public Stage {
 public:
  // split: the backward runs as an input-gradient pass (backward) and a
  // weight-gradient pass (backward_weight), as zero-bubble schedules ask.
  AffineStage(int stage, int num_stages, int micro_batches, bool split = false)
      : stage_(stage), last_(stage == num_stages - 1), split_(split), a_(scale_of(stage)), b_(shift_of(stage)),
        x_(micro_batches, std::vector<double>(kWidth)), y_(x_), dy_(x_), dx_(x_), g_(x_) {}

  void forward(int micro) override {
    peak_ = std::max(peak_, ++in_flight_);
    std::vector<double>& x = x_[micro];
    if (stage_ == 0)
      for (int j = 0; j < kWidth; ++j) x[j] = input_of(micro, j);
    for (int j = 0; j < kWidth; ++j) y_[micro][j] = a_ * x[j] + b_;
    if (last_)
      for (int j = 0; j < kWidth; ++j) loss_ += loss_weight(micro, j) * y_[micro][j];
  }

  void backward(int micro) override {
    --in_flight_;  // a split backward's W reads x and the stashed g only
    for (int j = 0; j < kWidth; ++j) {
      const double g = last_ ? loss_weight(micro, j) : dy_[micro][j];
      if (split_) {
        g_[micro][j] = g;  // for the weight pass
      } else {
        da_ += g * x_[micro][j];
        db_ += g;
      }
      dx_[micro][j] = a_ * g;
    }
  }

  void backward_weight(int micro) override {
    ASSERT_TRUE(split_) << "a weight pass on a stage whose schedule does not split the backward";
    ++weight_passes_;
    for (int j = 0; j < kWidth; ++j) {
      da_ += g_[micro][j] * x_[micro][j];
      db_ += g_[micro][j];
    }
  }

  Tensor forward_input(int micro) override { return view(x_[micro]); }
  Tensor forward_output(int micro) override { return view(y_[micro]); }
  Tensor backward_input_grad(int micro) override { return view(dy_[micro]); }
  Tensor backward_output_grad(int micro) override { return view(dx_[micro]); }

  double da() const { return da_; }
  double db() const { return db_; }
  double loss() const { return loss_; }
  const std::vector<double>& input_grad(int micro) const { return dx_[micro]; }
  int peak() const { return peak_; }
  int weight_passes() const { return weight_passes_; }

 private:
  static Tensor view(std::vector<double>& v) { return Tensor(v.data(), Shape{kWidth}, DType::kF64, DeviceType::kCpu); }

  int stage_;
  bool last_, split_;
  double a_, b_;
  std::vector<std::vector<double>> x_, y_, dy_, dx_, g_;
  double da_ = 0, db_ = 0, loss_ = 0;
  int in_flight_ = 0, peak_ = 0, weight_passes_ = 0;
};

// The whole pipeline in one process, micro-batch after micro-batch.
struct Reference {
  std::vector<double> da, db;
  double loss = 0;
  std::vector<std::vector<double>> input_grad;  // per micro-batch, of stage 0's input
};

Reference sequential(int stages, int micro_batches) {
  Reference ref;
  ref.da.assign(stages, 0.0);
  ref.db.assign(stages, 0.0);
  for (int m = 0; m < micro_batches; ++m) {
    std::vector<std::vector<double>> x(stages + 1, std::vector<double>(kWidth));
    for (int j = 0; j < kWidth; ++j) x[0][j] = input_of(m, j);
    for (int s = 0; s < stages; ++s)
      for (int j = 0; j < kWidth; ++j) x[s + 1][j] = scale_of(s) * x[s][j] + shift_of(s);
    for (int j = 0; j < kWidth; ++j) ref.loss += loss_weight(m, j) * x[stages][j];
    std::vector<double> g(kWidth);
    for (int j = 0; j < kWidth; ++j) g[j] = loss_weight(m, j);
    for (int s = stages - 1; s >= 0; --s) {
      for (int j = 0; j < kWidth; ++j) {
        ref.da[s] += g[j] * x[s][j];
        ref.db[s] += g[j];
        g[j] *= scale_of(s);
      }
    }
    ref.input_grad.push_back(g);
  }
  return ref;
}

}  // namespace

TEST(PipelineRunner, MatchesSequentialComputation) {
  ASSERT_FALSE(parallel_test::pipeline_comms().empty());
  for (Communicator* pp : parallel_test::pipeline_comms()) {
    const int stages = pp->size(), stage = pp->rank();
    for (ScheduleKind kind :
         {ScheduleKind::kOneFOneB, ScheduleKind::kAllForwardAllBackward, ScheduleKind::kZeroBubbleH1}) {
      for (int m : {1, 3, 8}) {
        SCOPED_TRACE(pp->name() + " pipeline of " + std::to_string(stages) + " stages, " + schedule_name(kind) +
                     ", m " + std::to_string(m));
        const std::vector<Action> actions = make_schedule(kind, stages, stage, m);
        const bool split = kind == ScheduleKind::kZeroBubbleH1;
        AffineStage toy(stage, stages, m, split);
        pp->reset_bytes_sent();
        run_schedule(actions, toy, *pp);

        const Reference ref = sequential(stages, m);
        EXPECT_NEAR(toy.da(), ref.da[stage], 1e-12 * (1 + std::abs(ref.da[stage])));
        EXPECT_NEAR(toy.db(), ref.db[stage], 1e-12 * (1 + std::abs(ref.db[stage])));
        if (stage == stages - 1) EXPECT_NEAR(toy.loss(), ref.loss, 1e-12 * (1 + std::abs(ref.loss)));
        if (stage == 0)
          for (int i = 0; i < m; ++i)
            for (int j = 0; j < kWidth; ++j) EXPECT_NEAR(toy.input_grad(i)[j], ref.input_grad[i][j], 1e-12);
        // Activations held at once, as the schedule promises.
        EXPECT_EQ(toy.peak(), peak_in_flight(actions));
        if (kind == ScheduleKind::kOneFOneB) EXPECT_EQ(toy.peak(), std::min(stages - stage, m));
        // The weight passes run exactly for the schedule that splits the backward.
        EXPECT_EQ(toy.weight_passes(), split ? m : 0);
        // One activation forward and one gradient back per micro-batch and link.
        const std::uint64_t links = (stage > 0) + (stage < stages - 1);
        EXPECT_EQ(pp->bytes_sent(), links * m * kWidth * sizeof(double));
      }
    }
  }
}

// The interleaved schedule over real messages: rank r holds v toy chunks,
// chunk c being stage c p + r of a pipeline of v p affine stages, and every
// chunk must end with the gradients of that stage in the sequential
// computation; activations go round from the last rank to rank 0 between
// chunks (and gradients back). Pipelines of 3 ranks and more (Megatron's
// condition), m a multiple of p.
TEST(PipelineRunner, InterleavedMatchesSequentialComputation) {
  int ran = 0;
  for (Communicator* pp : parallel_test::pipeline_comms()) {
    const int p = pp->size(), rank = pp->rank();
    if (p < 3) continue;
    for (int v : {2, 3}) {
      for (int m : {p, 2 * p}) {
        SCOPED_TRACE(pp->name() + " pipeline of " + std::to_string(p) + " ranks x " + std::to_string(v) +
                     " chunks, m " + std::to_string(m));
        const std::vector<Action> actions = make_schedule(ScheduleKind::kInterleaved, p, rank, m, v);
        std::vector<std::unique_ptr<AffineStage>> chunks;
        std::vector<Stage*> chunk_ptrs;
        for (int c = 0; c < v; ++c) {
          chunks.push_back(std::make_unique<AffineStage>(c * p + rank, v * p, m));
          chunk_ptrs.push_back(chunks.back().get());
        }
        pp->reset_bytes_sent();
        run_schedule(actions, chunk_ptrs, *pp);

        const Reference ref = sequential(v * p, m);
        std::uint64_t links = 0;
        for (int c = 0; c < v; ++c) {
          const int k = c * p + rank;  // the virtual stage
          EXPECT_NEAR(chunks[c]->da(), ref.da[k], 1e-12 * (1 + std::abs(ref.da[k]))) << "chunk " << c;
          EXPECT_NEAR(chunks[c]->db(), ref.db[k], 1e-12 * (1 + std::abs(ref.db[k]))) << "chunk " << c;
          if (k == v * p - 1) EXPECT_NEAR(chunks[c]->loss(), ref.loss, 1e-12 * (1 + std::abs(ref.loss)));
          if (k == 0)
            for (int i = 0; i < m; ++i)
              for (int j = 0; j < kWidth; ++j) EXPECT_NEAR(chunks[c]->input_grad(i)[j], ref.input_grad[i][j], 1e-12);
          links += (k > 0) + (k < v * p - 1);
        }
        EXPECT_EQ(pp->bytes_sent(), links * m * kWidth * sizeof(double));
        ++ran;
      }
    }
  }
  if (ran == 0) GTEST_SKIP() << "no pipeline communicator of 3 ranks or more in this run";
}

// ZB-V over real messages: rank r holds two split toy chunks, virtual stages
// r and 2p - 1 - r of 2p; the activations go down the ranks and back up,
// rank p - 1 turning them round itself (a copy, no message); rank 0 holds
// both ends. Any pipeline size, including one rank (both chunks local).
TEST(PipelineRunner, ZeroBubbleVMatchesSequentialComputation) {
  for (Communicator* pp : parallel_test::pipeline_comms()) {
    const int p = pp->size(), rank = pp->rank();
    for (int m : {1, 3, 2 * p, 2 * p + 3}) {
      SCOPED_TRACE(pp->name() + " pipeline of " + std::to_string(p) + " ranks, zb-v, m " + std::to_string(m));
      const std::vector<Action> actions = make_schedule(ScheduleKind::kZeroBubbleV, p, rank, m, 2);
      const int k0 = virtual_stage(StagePlacement::kVShape, p, rank, 0);
      const int k1 = virtual_stage(StagePlacement::kVShape, p, rank, 1);
      AffineStage chunk0(k0, 2 * p, m, true), chunk1(k1, 2 * p, m, true);
      pp->reset_bytes_sent();
      run_schedule(actions, {&chunk0, &chunk1}, *pp, StagePlacement::kVShape);

      const Reference ref = sequential(2 * p, m);
      for (const auto& [chunk, k] : {std::pair{&chunk0, k0}, std::pair{&chunk1, k1}}) {
        EXPECT_NEAR(chunk->da(), ref.da[k], 1e-12 * (1 + std::abs(ref.da[k]))) << "stage " << k;
        EXPECT_NEAR(chunk->db(), ref.db[k], 1e-12 * (1 + std::abs(ref.db[k]))) << "stage " << k;
        EXPECT_EQ(chunk->weight_passes(), m);
      }
      if (rank == 0) {
        EXPECT_NEAR(chunk1.loss(), ref.loss, 1e-12 * (1 + std::abs(ref.loss)));
        for (int i = 0; i < m; ++i)
          for (int j = 0; j < kWidth; ++j) EXPECT_NEAR(chunk0.input_grad(i)[j], ref.input_grad[i][j], 1e-12);
      }
      // Per micro-batch: each chunk sends its activation on and its input
      // gradient back, except past the ends and across the turn (a copy).
      const std::uint64_t sends = 2 * (rank > 0) + 2 * (rank < p - 1);
      EXPECT_EQ(pp->bytes_sent(), sends * m * kWidth * sizeof(double));
    }
  }
}
