// embedding_forward / embedding_backward: reference loops and finite differences.
#include "engine/ops.h"
#include "tests/engine/cpu/cpu_test_util.h"

using namespace engine;
using namespace engine::test;

namespace {

struct EmbeddingCase {
  std::int64_t B, T, C, V, max_T, vocab_start, position_start;
  bool with_wpe;
};

// Tokens drawn from a range wider than this shard's [vocab_start, vocab_start + V),
// so some select no row.
std::vector<std::int32_t> shard_tokens(const EmbeddingCase& c, std::uint64_t seed) {
  const auto u = random_values(c.B * c.T, seed, 0, 1);
  std::vector<std::int32_t> tokens(u.size());
  const std::int64_t lo = std::max<std::int64_t>(0, c.vocab_start - 3), hi = c.vocab_start + c.V + 3;
  for (std::size_t i = 0; i < u.size(); ++i) tokens[i] = static_cast<std::int32_t>(lo + u[i] * (hi - lo));
  return tokens;
}

// out[b,t] = wte[tok - vocab_start] (if held) + wpe[position_start + t]
std::vector<double> reference_forward(const EmbeddingCase& c, const std::vector<std::int32_t>& tokens,
                                      const std::vector<double>& wte, const std::vector<double>& wpe) {
  std::vector<double> out(c.B * c.T * c.C, 0.0);
  for (std::int64_t b = 0; b < c.B; ++b)
    for (std::int64_t t = 0; t < c.T; ++t) {
      const std::int64_t row = tokens[b * c.T + t] - c.vocab_start;
      for (std::int64_t k = 0; k < c.C; ++k) {
        double v = (row >= 0 && row < c.V) ? wte[row * c.C + k] : 0.0;
        if (c.with_wpe) v += wpe[(c.position_start + t) * c.C + k];
        out[(b * c.T + t) * c.C + k] = v;
      }
    }
  return out;
}

const EmbeddingCase kCases[] = {
    {2, 5, 7, 6, 10, 3, 2, true},      // offset shard, out-of-range tokens, position offset
    {1, 4, 3, 9, 4, 0, 0, true},       // plain
    {2, 3, 5, 4, 3, 2, 0, false},      // no position table
    {4, 64, 96, 50, 80, 20, 16, true}, // large enough for the parallel paths
};

template <typename T>
class CpuEmbedding : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(CpuEmbedding, FloatTypes);

TYPED_TEST(CpuEmbedding, ForwardAndBackwardMatchReference) {
  using T = TypeParam;
  const Tolerance tol = reference_tolerance<T>();
  for (const EmbeddingCase& c : kCases) {
    SCOPED_TRACE(testing::Message() << "B=" << c.B << " T=" << c.T << " C=" << c.C << " V=" << c.V);
    auto tokens = shard_tokens(c, 11);
    const auto wte_ref = random_values(c.V * c.C, 12), wpe_ref = random_values(c.max_T * c.C, 13);
    std::vector<T> wte = cast_to<T>(wte_ref), wpe = cast_to<T>(wpe_ref), out(c.B * c.T * c.C);
    const Tensor wpe_t = c.with_wpe ? view(wpe, {c.max_T, c.C}) : Tensor{};

    ops::embedding_forward(view(out, {c.B, c.T, c.C}), view(tokens, {c.B, c.T}), view(wte, {c.V, c.C}), wpe_t,
                           c.vocab_start, c.position_start);
    expect_all_close(out, reference_forward(c, tokens, to_double(wte), to_double(wpe)), tol.rtol, tol.atol, "out");

    // Backward accumulates into the existing gradients.
    const auto dout_ref = random_values(c.B * c.T * c.C, 14);
    const auto dwte0 = random_values(c.V * c.C, 15), dwpe0 = random_values(c.max_T * c.C, 16);
    std::vector<T> dout = cast_to<T>(dout_ref), dwte = cast_to<T>(dwte0), dwpe = cast_to<T>(dwpe0);
    ops::embedding_backward(view(dwte, {c.V, c.C}), c.with_wpe ? view(dwpe, {c.max_T, c.C}) : Tensor{},
                            view(dout, {c.B, c.T, c.C}), view(tokens, {c.B, c.T}), c.vocab_start,
                            c.position_start);
    std::vector<double> dwte_exp = to_double(cast_to<T>(dwte0)), dwpe_exp = to_double(cast_to<T>(dwpe0));
    for (std::int64_t b = 0; b < c.B; ++b)
      for (std::int64_t t = 0; t < c.T; ++t) {
        const std::int64_t row = tokens[b * c.T + t] - c.vocab_start;
        for (std::int64_t k = 0; k < c.C; ++k) {
          const double g = double(dout[(b * c.T + t) * c.C + k]);
          if (row >= 0 && row < c.V) dwte_exp[row * c.C + k] += g;
          if (c.with_wpe) dwpe_exp[(c.position_start + t) * c.C + k] += g;
        }
      }
    // The sums here have up to B*T terms of size 1: scale atol by that count for f32.
    const double atol = tol.atol * static_cast<double>(c.B * c.T) / 8;
    expect_all_close(dwte, dwte_exp, tol.rtol, atol, "dwte");
    expect_all_close(dwpe, dwpe_exp, tol.rtol, atol, "dwpe");  // untouched without wpe
  }
}

TEST(CpuEmbedding, BackwardMatchesFiniteDifferences) {
  for (const EmbeddingCase& c : {kCases[0], kCases[2]}) {
    auto tokens = shard_tokens(c, 21);
    auto wte = random_values(c.V * c.C, 22), wpe = random_values(c.max_T * c.C, 23);
    auto R = random_values(c.B * c.T * c.C, 24);
    std::vector<double> out(R.size());
    auto loss = [&] {  // L = sum(out * R)
      ops::embedding_forward(view(out, {c.B, c.T, c.C}), view(tokens, {c.B, c.T}), view(wte, {c.V, c.C}),
                             c.with_wpe ? view(wpe, {c.max_T, c.C}) : Tensor{}, c.vocab_start, c.position_start);
      return dot(out, R);
    };
    std::vector<double> dwte(wte.size(), 0.0), dwpe(wpe.size(), 0.0);
    ops::embedding_backward(view(dwte, {c.V, c.C}), c.with_wpe ? view(dwpe, {c.max_T, c.C}) : Tensor{},
                            view(R, {c.B, c.T, c.C}), view(tokens, {c.B, c.T}), c.vocab_start, c.position_start);
    expect_gradient_matches(dwte, numeric_gradient(wte, loss), "dwte");
    if (c.with_wpe) expect_gradient_matches(dwpe, numeric_gradient(wpe, loss), "dwpe");
  }
}

}  // namespace
