// Ops reject inconsistent shapes and dtypes with engine::Error.
#include "engine/ops.h"
#include "tests/engine/cpu/cpu_test_util.h"

using namespace engine;
using namespace engine::test;

namespace {

// Runs `f`, expecting an engine::Error whose message contains every one of `parts`.
template <typename F>
void expect_error(F&& f, std::initializer_list<const char*> parts) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << *parts.begin() << "'";
  } catch (const Error& e) {
    for (const char* part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "'" << part << "' not in: " << e.what();
  }
}

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
                                      view(w, {C + 1}), view(b, {C}), 1e-5),
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

TEST(CpuShapeChecks, GroupedQueryAttentionRejectsBadHeadCounts) {
  const std::int64_t B = 1, T = 4, D = 2;
  // H 6, KV 4: 6 is not a multiple of 4 (the width 14 D would fit the heads).
  {
    std::vector<float> qkv(B * T * 14 * D), out(B * T * 6 * D), saved(B * 6 * T * T);
    expect_error([&] { ops::attention_forward(view(out, {B, T, 6 * D}), view(saved, {B, 6, T, T}),
                                              view(qkv, {B, T, 14 * D}), 6, 4); },
                 {"attention_forward", "6 query heads", "not a multiple of 4"});
  }
  // H 4, KV 2 need (4 + 2 x 2) heads: a width of 8 D + 3 does not split.
  {
    std::vector<float> qkv(B * T * (8 * D + 3)), out(B * T * 4 * D), saved(B * 4 * T * T);
    expect_error([&] { ops::attention_forward(view(out, {B, T, 4 * D}), view(saved, {B, 4, T, T}),
                                              view(qkv, {B, T, 8 * D + 3}), 4, 2); },
                 {"attention_forward", "qkv width 19", "(4 + 2 x 2)"});
    // A multi-head qkv (3 x 4 heads of D) passed with KV 2 reads as 8 heads
    // of 3 D / 2: out (4 heads of D) no longer fits, and is named.
    std::vector<float> qkv_mha(B * T * 12 * D), dqkv(B * T * 12 * D), dout(B * T * 4 * D);
    expect_error([&] { ops::attention_backward(view(dqkv, {B, T, 12 * D}), view(dout, {B, T, 4 * D}),
                                               view(qkv_mha, {B, T, 12 * D}), view(out, {B, T, 4 * D}),
                                               view(saved, {B, 4, T, T}), 4, 2); },
                 {"attention_backward: out", "expected (1, 4, 12)"});
  }
  // A negative count.
  {
    std::vector<float> qkv(B * T * 3 * D), out(B * T * D), saved(B * T * T);
    expect_error([&] { ops::attention_forward(view(out, {B, T, D}), view(saved, {B, 1, T, T}), view(qkv, {B, T, 3 * D}),
                                              1, -1); },
                 {"attention_forward", "key/value heads"});
  }
}

TEST(CpuShapeChecks, RopeRejectsBadShapesAndFrequencies) {
  const std::int64_t B = 1, T = 3;
  std::vector<float> inv_freq(4);
  {  // H 4, KV 2, D 8: the width 64 is right, a 5-entry table is not.
    std::vector<float> qkv(B * T * 64), long_freq(5);
    expect_error([&] { ops::rope_forward(view(qkv, {B, T, 64}), view(long_freq, {5}), 4, 2); },
                 {"rope_forward", "inv_freq", "expected 4 f32 frequencies"});
    std::vector<double> f64_freq(4);
    expect_error([&] { ops::rope_backward(view(qkv, {B, T, 64}), view(f64_freq, {4}), 4, 2); },
                 {"rope_backward", "inv_freq", "f32"});
    expect_error([&] { ops::rope_forward(view(qkv, {B, T, 64}), view(inv_freq, {4}), 4, 2, -1); },
                 {"rope_forward", "position_start -1"});
    expect_error([&] { ops::rope_forward(view(qkv, {B * T, 64}), view(inv_freq, {4}), 4, 2); },
                 {"rope_forward", "(B,T,(H+2KV)D)"});
  }
  {  // H 3, KV 2: not a multiple.
    std::vector<float> qkv(B * T * 7 * 8);
    expect_error([&] { ops::rope_forward(view(qkv, {B, T, 56}), view(inv_freq, {4}), 3, 2); },
                 {"rope_forward", "3 query heads", "not a multiple of 2"});
  }
  {  // H 2, KV 1, D 3: an odd head size has no halves to rotate.
    std::vector<float> qkv(B * T * 4 * 3), one(1);
    expect_error([&] { ops::rope_forward(view(qkv, {B, T, 12}), view(one, {1}), 2, 1); },
                 {"rope_forward", "head size of 3", "odd"});
  }
  {  // H 2, KV 1: a width of 4 D + 2 does not split into heads.
    std::vector<float> qkv(B * T * 34);
    expect_error([&] { ops::rope_forward(view(qkv, {B, T, 34}), view(inv_freq, {4}), 2, 1); },
                 {"rope_forward", "qkv width 34", "(2 + 2 x 1) heads"});
  }
}

TEST(CpuShapeChecks, RmsNormAndSwigluRejectWrongSizes) {
  const std::int64_t N = 4, C = 6;
  std::vector<float> x(N * C), out(N * C), rstd(N), w(C), w_bad(C + 1), rstd_bad(N + 1);
  expect_error([&] { ops::rmsnorm_forward(view(out, {N, C}), view(rstd, {N}), view(x, {N, C}), view(w_bad, {C + 1}),
                                          1e-6); },
               {"rmsnorm_forward: weight"});
  expect_error([&] { ops::rmsnorm_forward(view(out, {N, C}), view(rstd_bad, {N + 1}), view(x, {N, C}), view(w, {C}),
                                          1e-6); },
               {"rmsnorm_forward: rstd"});
  expect_error([&] { ops::rmsnorm_forward(view(out, {N, C}), view(rstd, {N}), view(x, {N, C}), view(w, {C}), 0.0); },
               {"rmsnorm_forward", "eps"});
  std::vector<float> dinp(N * C), dw_bad(C - 1);
  expect_error([&] { ops::rmsnorm_backward(view(dinp, {N, C}), view(dw_bad, {C - 1}), view(out, {N, C}),
                                           view(x, {N, C}), view(w, {C}), view(rstd, {N})); },
               {"rmsnorm_backward: dweight"});
  // SwiGLU: inp must be (N, 2F) for out (N, F).
  std::vector<float> act(N * 3), act_bad(N * 2), dinp_bad(N * 5);
  expect_error([&] { ops::swiglu_forward(view(act_bad, {N, 2}), view(x, {N, C})); }, {"swiglu_forward"});
  expect_error([&] { ops::swiglu_backward(view(dinp_bad, {N, 5}), view(act, {N, 3}), view(x, {N, C})); },
               {"swiglu_backward: dinp"});
}

}  // namespace
