// Ops whose reductions are split by channel blocks or by (batch, head) give
// bitwise the same result on 1 and 2 OpenMP threads (grouped-query attention
// and RMSNorm also on 3, which splits their loops unevenly). For attention
// this also exercises BLAS called concurrently from inside an OpenMP region.
#include <omp.h>

#include <functional>

#include "engine/ops.h"
#include "tests/engine/cpu/cpu_test_util.h"

using namespace engine;
using namespace engine::test;

namespace {

// Runs `op` (which fills and returns its outputs) on each thread count and
// compares every result with the first, bit for bit.
void expect_same_on_threads(const std::function<std::vector<float>()>& op, const char* what,
                            std::initializer_list<int> counts) {
  const int threads = omp_get_max_threads();
  std::vector<float> first;
  for (const int n : counts) {
    omp_set_num_threads(n);
    const std::vector<float> result = op();
    if (first.empty()) {
      first = result;
      continue;
    }
    ASSERT_EQ(first.size(), result.size());
    for (std::size_t i = 0; i < first.size(); ++i)
      ASSERT_EQ(first[i], result[i]) << what << " element " << i << " on " << n << " threads";
  }
  omp_set_num_threads(threads);
}

void expect_same_on_1_and_2_threads(const std::function<std::vector<float>()>& op, const char* what) {
  expect_same_on_threads(op, what, {1, 2});
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

// Grouped-query attention's backward sums each key/value head's gradient over
// its query heads inside one task, so dk and dv do not depend on how the
// (batch, key/value head) tasks fall on threads.
TEST(CpuDeterminism, GroupedQueryAttentionForwardAndBackward) {
  const std::int64_t B = 2, T = 130, H = 6, KV = 2, D = 8, C = H * D, W = (H + 2 * KV) * D;
  std::vector<float> qkv = cast_to<float>(random_values(B * T * W, 147, -1.5, 1.5));
  std::vector<float> dout = cast_to<float>(random_values(B * T * C, 148));
  expect_same_on_threads(
      [&] {
        std::vector<float> out(B * T * C), saved(B * H * T * T), dqkv(B * T * W);
        ops::attention_forward(view(out, {B, T, C}), view(saved, {B, H, T, T}), view(qkv, {B, T, W}), H, KV);
        ops::attention_backward(view(dqkv, {B, T, W}), view(dout, {B, T, C}), view(qkv, {B, T, W}),
                                view(out, {B, T, C}), view(saved, {B, H, T, T}), H, KV);
        out.insert(out.end(), dqkv.begin(), dqkv.end());
        return out;
      },
      "grouped-query attention out|dqkv", {1, 2, 3, 4});
}

TEST(CpuDeterminism, RmsNormAndSwigluAndRope) {
  const std::int64_t N = 256, C = 200, H = 4, KV = 2, D = 8, W = (H + 2 * KV) * D;
  std::vector<float> x = cast_to<float>(random_values(N * C, 149)), dout = cast_to<float>(random_values(N * C, 150));
  std::vector<float> w = cast_to<float>(random_values(C, 151));
  std::vector<float> inv_freq = {1.0f, 0.1f, 0.01f, 0.001f};
  expect_same_on_threads(
      [&] {
        std::vector<float> out(N * C), rstd(N), dinp(N * C, 0.0f), dw(C, 0.0f);
        ops::rmsnorm_forward(view(out, {N, C}), view(rstd, {N}), view(x, {N, C}), view(w, {C}), 1e-6);
        ops::rmsnorm_backward(view(dinp, {N, C}), view(dw, {C}), view(dout, {N, C}), view(x, {N, C}), view(w, {C}),
                              view(rstd, {N}));
        std::vector<float> act(N * C / 2), dact(N * C), dact_out(dout.begin(), dout.begin() + N * C / 2);
        ops::swiglu_forward(view(act, {N, C / 2}), view(x, {N, C}));
        ops::swiglu_backward(view(dact, {N, C}), view(dact_out, {N, C / 2}), view(x, {N, C}));
        std::vector<float> qkv(x.begin(), x.begin() + (N * C / W) * W);
        const std::int64_t rows = static_cast<std::int64_t>(qkv.size()) / W;
        ops::rope_forward(view(qkv, {1, rows, W}), view(inv_freq, {D / 2}), H, KV, 5);
        for (auto* v : {&rstd, &dinp, &dw, &act, &dact, &qkv}) out.insert(out.end(), v->begin(), v->end());
        return out;
      },
      "rmsnorm|swiglu|rope", {1, 2, 3});
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
                               view(b, {C}), 1e-5);
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
