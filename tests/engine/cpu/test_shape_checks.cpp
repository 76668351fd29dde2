// Ops reject inconsistent shapes and dtypes with engine::Error.
#include "engine/ops.h"
#include "tests/engine/cpu/cpu_test_util.h"

using namespace engine;
using namespace engine::test;

namespace {

TEST(CpuShapeChecks, MatmulRejectsMismatchedInnerDim) {
  std::vector<float> inp(4 * 5), W(3 * 6), out(4 * 3), b(3);
  EXPECT_THROW(ops::matmul_forward(view(out, {4, 3}), view(inp, {4, 5}), view(W, {3, 6}), Tensor{}), Error);
  std::vector<float> W_ok(3 * 5), b_bad(4);
  EXPECT_THROW(ops::matmul_forward(view(out, {4, 3}), view(inp, {4, 5}), view(W_ok, {3, 5}), view(b_bad, {4})),
               Error);
  std::vector<float> dout(4 * 3), dinp_bad(4 * 6);
  EXPECT_THROW(ops::matmul_backward(view(dinp_bad, {4, 6}), Tensor{}, Tensor{}, view(dout, {4, 3}),
                                    view(inp, {4, 5}), view(W_ok, {3, 5})),
               Error);
}

TEST(CpuShapeChecks, RejectsMixedAndUnsupportedDtypes) {
  std::vector<float> inp(4 * 5), out(4 * 3);
  std::vector<double> W(3 * 5);
  EXPECT_THROW(ops::matmul_forward(view(out, {4, 3}), view(inp, {4, 5}), view(W, {3, 5}), Tensor{}), Error);
  std::vector<std::uint16_t> h_inp(4 * 5), h_W(3 * 5), h_out(4 * 3);
  EXPECT_THROW(ops::matmul_forward(view(h_out, {4, 3}), view(h_inp, {4, 5}), view(h_W, {3, 5}), Tensor{}), Error);
  std::vector<float> a(3);
  std::vector<double> d(3);
  EXPECT_THROW(ops::add(view(a, {3}), view(a, {3}), view(d, {3})), Error);
  std::vector<std::int32_t> i(3);
  EXPECT_THROW(ops::scale(view(i, {3}), 2.0), Error);
}

TEST(CpuShapeChecks, LayerNormRejectsWrongParameterSize) {
  const std::int64_t N = 4, C = 6;
  std::vector<float> x(N * C), out(N * C), mean(N), rstd(N), w(C + 1), b(C);
  EXPECT_THROW(ops::layernorm_forward(view(out, {N, C}), view(mean, {N}), view(rstd, {N}), view(x, {N, C}),
                                      view(w, {C + 1}), view(b, {C})),
               Error);
}

TEST(CpuShapeChecks, AttentionRejectsBadWidthAndSavedShape) {
  const std::int64_t B = 1, T = 4;
  std::vector<float> qkv(B * T * 12), out(B * T * 4), saved(B * 2 * T * T);
  // width 12 = 3 x 4: 3 heads do not divide it.
  EXPECT_THROW(ops::attention_forward(view(out, {B, T, 4}), view(saved, {B, 2, T, T}), view(qkv, {B, T, 12}), 3),
               Error);
  // saved for 1 head when 2 are asked for.
  std::vector<float> saved_small(B * 1 * T * T);
  EXPECT_THROW(
      ops::attention_forward(view(out, {B, T, 4}), view(saved_small, {B, 1, T, T}), view(qkv, {B, T, 12}), 2),
      Error);
}

TEST(CpuShapeChecks, CrossEntropyRejectsVocabWiderThanLogits) {
  std::vector<float> logits(2 * 5), losses(2);
  std::vector<std::int32_t> targets = {0, 1};
  EXPECT_THROW(ops::softmax_cross_entropy(view(losses, {2}), view(logits, {2, 5}), view(targets, {2}), 6, 1.0),
               Error);
}

TEST(CpuShapeChecks, EmbeddingAndCopyAndAdamW) {
  std::vector<float> out(2 * 3 * 4), wte(5 * 3);
  std::vector<std::int32_t> tokens(2 * 3);
  EXPECT_THROW(ops::embedding_forward(view(out, {2, 3, 4}), view(tokens, {2, 3}), view(wte, {5, 3}), Tensor{}),
               Error);
  std::vector<float> a(3), b(4);
  EXPECT_THROW(ops::copy(view(a, {3}), view(b, {4})), Error);
  ops::AdamWHyper hyper;
  hyper.step = 0;
  EXPECT_THROW(ops::adamw_update(view(a, {3}), view(a, {3}), view(a, {3}), view(a, {3}), hyper), Error);
}

}  // namespace
