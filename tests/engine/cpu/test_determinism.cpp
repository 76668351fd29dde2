// Ops whose reductions are split by channel blocks or by (batch, head) give
// bitwise the same result on 1 and 2 OpenMP threads. For attention this also
// exercises BLAS called concurrently from inside an OpenMP region.
#include <omp.h>

#include <functional>

#include "engine/ops.h"
#include "tests/engine/cpu/cpu_test_util.h"

using namespace engine;
using namespace engine::test;

namespace {

// Runs `op` (which fills and returns its outputs) on 1 and on 2 threads.
void expect_same_on_1_and_2_threads(const std::function<std::vector<float>()>& op, const char* what) {
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::vector<float> one = op();
  omp_set_num_threads(2);
  const std::vector<float> two = op();
  omp_set_num_threads(threads);
  ASSERT_EQ(one.size(), two.size());
  for (std::size_t i = 0; i < one.size(); ++i) ASSERT_EQ(one[i], two[i]) << what << " element " << i;
}

TEST(CpuDeterminism, AttentionForwardAndBackward) {
  const std::int64_t B = 2, T = 130, H = 4, D = 8, C = H * D;
  std::vector<float> qkv = cast_to<float>(random_values(B * T * 3 * C, 141, -1.5, 1.5));
  std::vector<float> dout = cast_to<float>(random_values(B * T * C, 142));
  expect_same_on_1_and_2_threads(
      [&] {
        std::vector<float> out(B * T * C), saved(B * H * T * T), dqkv(B * T * 3 * C);
        ops::attention_forward(view(out, {B, T, C}), view(saved, {B, H, T, T}), view(qkv, {B, T, 3 * C}), H);
        ops::attention_backward(view(dqkv, {B, T, 3 * C}), view(dout, {B, T, C}), view(qkv, {B, T, 3 * C}),
                                view(out, {B, T, C}), view(saved, {B, H, T, T}), H);
        out.insert(out.end(), dqkv.begin(), dqkv.end());
        return out;
      },
      "attention out|dqkv");
}

TEST(CpuDeterminism, ParameterGradientReductions) {
  const std::int64_t N = 256, C = 200, V = 30;
  std::vector<float> x = cast_to<float>(random_values(N * C, 143)), dout = cast_to<float>(random_values(N * C, 144));
  std::vector<float> w = cast_to<float>(random_values(C, 145)), b = cast_to<float>(random_values(C, 146));
  std::vector<std::int32_t> tokens(N);
  for (std::int64_t n = 0; n < N; ++n) tokens[n] = static_cast<std::int32_t>((n * 7) % V);
  expect_same_on_1_and_2_threads(
      [&] {
        std::vector<float> out(N * C), mean(N), rstd(N), dinp(N * C, 0.0f), dw(C, 0.0f), db(C, 0.0f);
        ops::layernorm_forward(view(out, {N, C}), view(mean, {N}), view(rstd, {N}), view(x, {N, C}), view(w, {C}),
                               view(b, {C}));
        ops::layernorm_backward(view(dinp, {N, C}), view(dw, {C}), view(db, {C}), view(dout, {N, C}),
                                view(x, {N, C}), view(w, {C}), view(mean, {N}), view(rstd, {N}));
        std::vector<float> dbias(C, 0.0f), weight(C * C);  // matmul dbias only: no GEMM involved
        ops::matmul_backward(Tensor{}, Tensor{}, view(dbias, {C}), view(dout, {N, C}), view(x, {N, C}),
                             view(weight, {C, C}));
        std::vector<float> dwte(V * C, 0.0f), dwpe(N * C, 0.0f);
        ops::embedding_backward(view(dwte, {V, C}), view(dwpe, {N, C}), view(dout, {1, N, C}), view(tokens, {1, N}));
        for (auto* v : {&dinp, &dw, &db, &dbias, &dwte, &dwpe}) out.insert(out.end(), v->begin(), v->end());
        return out;
      },
      "layernorm|matmul dbias|embedding grads");
}

}  // namespace
