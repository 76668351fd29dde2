// Vocabulary-parallel cross-entropy (cross_entropy_partial_max,
// cross_entropy_partial_sums, cross_entropy_finish): a (N, Vp) logits matrix
// is split into tp column slices, the tensor-parallel all-reduces are
// emulated here (MAX, then SUM, over the slices in rank order), and the
// losses and the concatenated per-slice gradients must equal what the fused
// softmax_cross_entropy (itself checked against a double reference and finite
// differences in test_cross_entropy.cpp) gives on the full matrix.
//
// Tolerance: reference_tolerance<T>() (f64 1e-12, f32 1e-5). The split path
// does the fused op's arithmetic row for row (the same max, the same
// exponentials); it differs only in the summation order of sum_exp (per slice,
// then across slices) and in rounding that sum to T between the steps, a
// relative 1e-16 (f64) or 6e-8 (f32) change in the sum, which moves the loss
// by the same amount absolutely and the gradient by the same amount relatively.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "engine/ops.h"
#include "tests/engine/cpu/cpu_test_util.h"

using namespace engine;
using namespace engine::test;

namespace {

struct Case {
  std::int64_t N, Vp, V;  // V = vocab_size < Vp: the last Vp - V columns are padding
  double offset;          // added to every real logit: stability check
};
// {5, 8, 5}: at tp = 4 the slices are columns {0,1} {2,3} {4,5} {6,7}; the
// third is half padding and the last is padding only. {96, 512, 500}: large
// enough for the OpenMP path at tp = 1 and 2.
const Case kCases[] = {{5, 8, 5, 0}, {6, 16, 13, 0}, {7, 24, 19, 1000}, {96, 512, 500, 0}};
const int kTp[] = {1, 2, 4};

// The result of the three steps on every slice, after emulated all-reduces.
template <typename T>
struct Split {
  std::vector<std::vector<T>> row_max_local;  // per rank, before the MAX all-reduce
  std::vector<std::vector<T>> losses;         // per rank (must all agree)
  std::vector<T> logits;                      // (N, Vp): the slices concatenated back
};

template <typename T>
Split<T> run_split(const Case& c, int tp, const std::vector<T>& logits, std::vector<std::int32_t> targets,
                   double grad_scale) {
  const std::int64_t N = c.N, Vp = c.Vp, V_local = Vp / tp;
  Split<T> out;
  std::vector<std::vector<T>> slices(tp, std::vector<T>(N * V_local));
  for (int r = 0; r < tp; ++r)
    for (std::int64_t n = 0; n < N; ++n)
      std::copy_n(&logits[n * Vp + r * V_local], V_local, &slices[r][n * V_local]);

  // Step 1: local max, all-reduce MAX.
  std::vector<T> row_max(N, -std::numeric_limits<T>::infinity());
  for (int r = 0; r < tp; ++r) {
    std::vector<T> local(N, T(7));  // garbage: every element must be written
    ops::cross_entropy_partial_max(view(local, {N}), view(slices[r], {N, V_local}), r * V_local, c.V);
    for (std::int64_t n = 0; n < N; ++n) row_max[n] = std::max(row_max[n], local[n]);
    out.row_max_local.push_back(local);
  }
  // Step 2: local sums against the global max, all-reduce SUM in rank order.
  std::vector<T> sums(2 * N, T(0));
  for (int r = 0; r < tp; ++r) {
    std::vector<T> local(2 * N, T(7));
    ops::cross_entropy_partial_sums(view(local, {2, N}), view(slices[r], {N, V_local}), view(row_max, {N}),
                                    view(targets, {N}), r * V_local, c.V);
    for (std::int64_t i = 0; i < 2 * N; ++i) sums[i] += local[i];
  }
  // Step 3: every rank finishes with the same reduced statistics.
  for (int r = 0; r < tp; ++r) {
    std::vector<T> losses(N, T(7));
    ops::cross_entropy_finish(view(losses, {N}), view(slices[r], {N, V_local}), view(row_max, {N}),
                              view(sums, {2, N}), view(targets, {N}), r * V_local, c.V, grad_scale);
    out.losses.push_back(losses);
  }
  out.logits.resize(N * Vp);
  for (int r = 0; r < tp; ++r)
    for (std::int64_t n = 0; n < N; ++n)
      std::copy_n(&slices[r][n * V_local], V_local, &out.logits[n * Vp + r * V_local]);
  return out;
}

// Random targets in [0, V), then for every slice that holds a class, one row
// whose target is that slice's last class (and row 0's the last class overall).
std::vector<std::int32_t> targets_in_every_slice(const Case& c, int tp) {
  const auto u = random_values(c.N, 202, 0, 1);
  std::vector<std::int32_t> t(c.N);
  for (std::int64_t n = 0; n < c.N; ++n) t[n] = static_cast<std::int32_t>(u[n] * c.V);
  const std::int64_t V_local = c.Vp / tp;
  for (int r = 0; r < tp; ++r) {
    const std::int64_t last = std::min((r + 1) * V_local, c.V) - 1;
    if (last >= r * V_local) t[(r + 1) % c.N] = static_cast<std::int32_t>(last);
  }
  t[0] = static_cast<std::int32_t>(c.V - 1);
  return t;
}

template <typename T>
class CpuVocabParallelCrossEntropy : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(CpuVocabParallelCrossEntropy, FloatTypes);

TYPED_TEST(CpuVocabParallelCrossEntropy, MatchesFusedOpOnTheFullMatrix) {
  using T = TypeParam;
  const Tolerance tol = reference_tolerance<T>();
  for (const Case& c : kCases) {
    auto logits_d = random_values(c.N * c.Vp, 201, -4, 4);
    for (std::int64_t n = 0; n < c.N; ++n) {
      for (std::int64_t i = 0; i < c.V; ++i) logits_d[n * c.Vp + i] += c.offset;
      for (std::int64_t i = c.V; i < c.Vp; ++i) logits_d[n * c.Vp + i] = 1e4;  // padding must be ignored
    }
    const std::vector<T> logits0 = cast_to<T>(logits_d);
    for (const int tp : kTp) {
      SCOPED_TRACE(testing::Message() << "N=" << c.N << " Vp=" << c.Vp << " V=" << c.V << " offset=" << c.offset
                                      << " tp=" << tp);
      const std::int64_t N = c.N, Vp = c.Vp, V_local = Vp / tp;
      std::vector<std::int32_t> targets = targets_in_every_slice(c, tp);
      for (int r = 0; r < tp; ++r) {
        const bool holds_class = r * V_local < c.V;
        const bool holds_target = std::any_of(targets.begin(), targets.end(), [&](std::int32_t t) {
          return t >= r * V_local && t < (r + 1) * V_local;
        });
        ASSERT_EQ(holds_target, holds_class) << "slice " << r << ": the test must put a target in every slice";
      }

      // The fused op on the full matrix: the reference.
      const double grad_scale = 0.37;
      std::vector<T> want_logits = logits0, want_losses(N);
      ops::softmax_cross_entropy(view(want_losses, {N}), view(want_logits, {N, Vp}), view(targets, {N}), c.V,
                                 grad_scale);

      // grad_scale = 0: losses only, every slice untouched.
      const Split<T> no_grad = run_split(c, tp, logits0, targets, 0.0);
      for (int r = 0; r < tp; ++r)
        expect_all_close(no_grad.losses[r], to_double(want_losses), tol.rtol, tol.atol,
                         "losses (no grad), rank " + std::to_string(r));
      EXPECT_EQ(no_grad.logits, logits0) << "logits changed with grad_scale = 0";

      // A slice of padding only reports -inf, the identity of the MAX all-reduce.
      for (int r = 0; r < tp; ++r)
        if (r * V_local >= c.V)
          for (std::int64_t n = 0; n < N; ++n)
            ASSERT_EQ(no_grad.row_max_local[r][n], -std::numeric_limits<T>::infinity()) << "rank " << r;

      // grad_scale != 0: the slices become the gradient.
      const Split<T> split = run_split(c, tp, logits0, targets, grad_scale);
      for (int r = 0; r < tp; ++r) {
        expect_all_close(split.losses[r], to_double(want_losses), tol.rtol, tol.atol,
                         "losses, rank " + std::to_string(r));
        EXPECT_EQ(split.losses[r], split.losses[0]) << "ranks disagree on the loss: rank " << r;
      }
      expect_all_close(split.logits, to_double(want_logits), tol.rtol, tol.atol, "dlogits");
      for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t i = c.V; i < Vp; ++i)
          ASSERT_EQ(split.logits[n * Vp + i], T(0)) << "padding " << n << "," << i;
    }
  }
}

TEST(CpuVocabParallelCrossEntropy, RejectsTargetsOutsideTheVocabulary) {
  // vocab_size 5 of Vp 8, the slice [4, 8) of tp = 2: 5..7 are padding.
  const std::int64_t N = 3, V_local = 4, vocab_start = 4, V = 5;
  std::vector<float> logits(N * V_local, 0.0f), row_max(N, 0.0f), sums(2 * N, 1.0f), losses(N);
  for (std::int32_t bad : {5, 7, 8, -1}) {
    std::vector<std::int32_t> targets = {0, bad, 4};
    const std::string want = "target " + std::to_string(bad);
    try {
      ops::cross_entropy_partial_sums(view(sums, {2, N}), view(logits, {N, V_local}), view(row_max, {N}),
                                      view(targets, {N}), vocab_start, V);
      ADD_FAILURE() << "partial_sums accepted target " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
    try {
      ops::cross_entropy_finish(view(losses, {N}), view(logits, {N, V_local}), view(row_max, {N}),
                                view(sums, {2, N}), view(targets, {N}), vocab_start, V, 1.0);
      ADD_FAILURE() << "finish accepted target " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
  // Nothing was written before the check.
  EXPECT_EQ(logits, std::vector<float>(N * V_local, 0.0f));
  EXPECT_EQ(sums, std::vector<float>(2 * N, 1.0f));
}

TEST(CpuVocabParallelCrossEntropy, RejectsInconsistentShapesAndDtypes) {
  const std::int64_t N = 3, V_local = 4;
  std::vector<float> logits(N * V_local), row_max(N), sums(2 * N), losses(N), short_stat(N - 1);
  std::vector<double> row_max_f64(N);
  std::vector<std::int32_t> targets = {0, 1, 2};
  const Tensor lg = view(logits, {N, V_local});
  EXPECT_THROW(ops::cross_entropy_partial_max(view(short_stat, {N - 1}), lg, 0, 4), Error);
  EXPECT_THROW(ops::cross_entropy_partial_max(view(row_max_f64, {N}), lg, 0, 4), Error);  // stats follow logits
  EXPECT_THROW(ops::cross_entropy_partial_max(view(row_max, {N}), lg, -1, 4), Error);
  EXPECT_THROW(ops::cross_entropy_partial_max(view(row_max, {N}), lg, 0, 0), Error);
  EXPECT_THROW(ops::cross_entropy_partial_sums(view(sums, {N, 2}), lg, view(row_max, {N}), view(targets, {N}), 0, 4),
               Error);  // (N, 2) is not (2, N)
  EXPECT_THROW(ops::cross_entropy_partial_sums(view(sums, {2, N}), lg, view(row_max, {N}),
                                               view(short_stat, {N - 1}), 0, 4),
               Error);
  EXPECT_THROW(ops::cross_entropy_finish(view(short_stat, {N - 1}), lg, view(row_max, {N}), view(sums, {2, N}),
                                         view(targets, {N}), 0, 4, 1.0),
               Error);
  EXPECT_THROW(ops::cross_entropy_finish(view(losses, {N}), lg, view(row_max, {N}), Tensor{}, view(targets, {N}), 0,
                                         4, 1.0),
               Error);
}

}  // namespace
