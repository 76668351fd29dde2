// rope_forward / rope_backward against a direct double implementation of
// Hugging Face's LlamaRotaryEmbedding + apply_rotary_pos_emb (rotate_half),
// on plain and Llama 3-scaled frequency tables, at position_start 0 and
// beyond; the backward as the exact transpose of the forward; v untouched.
#include <cmath>
#include <cstring>
#include <numbers>

#include "engine/ops.h"
#include "tests/engine/cpu/cpu_test_util.h"

using namespace engine;
using namespace engine::test;

namespace {

// inv_freq[i] = base^(-2i/D), as LlamaRotaryEmbedding's default rope_init_fn
// (computed there in f32 from an integer arange; here in double, then
// rounded: the op takes whatever table it is given).
std::vector<float> default_inv_freq(std::int64_t D, double base) {
  std::vector<float> f(D / 2);
  for (std::int64_t i = 0; i < D / 2; ++i) f[i] = static_cast<float>(std::pow(base, -double(2 * i) / double(D)));
  return f;
}

// transformers' _compute_llama3_parameters (rope_type "llama3"): wavelengths
// longer than original_max / low_freq_factor are divided by `factor`, shorter
// than original_max / high_freq_factor kept, and those between interpolated.
// Llama 3.1's values: factor 8, low 1, high 4, original_max 8192, base 500000.
std::vector<float> llama3_inv_freq(std::int64_t D, double base, double factor = 8, double low_freq_factor = 1,
                                   double high_freq_factor = 4, double original_max = 8192) {
  std::vector<float> f = default_inv_freq(D, base);
  const double low_freq_wavelen = original_max / low_freq_factor, high_freq_wavelen = original_max / high_freq_factor;
  for (float& x : f) {
    const double inv = x, wavelen = 2 * std::numbers::pi / inv;
    if (wavelen > low_freq_wavelen) {
      x = static_cast<float>(inv / factor);
    } else if (wavelen >= high_freq_wavelen) {
      const double smooth = (original_max / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      x = static_cast<float>((1 - smooth) * inv / factor + smooth * inv);
    }
  }
  return f;
}

// The forward in transformers' own terms, in double except where transformers
// rounds to f32: freqs = inv_freq (f32) x position (f32), emb = cat(freqs,
// freqs), q' = q cos(emb) + rotate_half(q) sin(emb) with rotate_half(x) =
// cat(-x[D/2:], x[:D/2]); the same for k; v as it was.
// (transformers takes cos/sin of the f32 angle in f32; here in double, which
// the f32 kernels' 1e-5 tolerance does not tell apart.)
std::vector<double> reference_rope(const std::vector<double>& qkv, std::int64_t B, std::int64_t T, std::int64_t H,
                                   std::int64_t KV, std::int64_t D, const std::vector<float>& inv_freq,
                                   std::int64_t position_start) {
  const std::int64_t width = (H + 2 * KV) * D;
  std::vector<double> out = qkv;
  std::vector<double> cos_emb(D), sin_emb(D), rotated(D);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < T; ++t) {
      for (std::int64_t i = 0; i < D; ++i) {
        const float angle = static_cast<float>(position_start + t) * inv_freq[i % (D / 2)];  // f32 product
        cos_emb[i] = std::cos(double(angle));
        sin_emb[i] = std::sin(double(angle));
      }
      for (std::int64_t head = 0; head < H + KV; ++head) {  // q heads, then k heads
        const double* x = &qkv[(b * T + t) * width + head * D];
        for (std::int64_t i = 0; i < D / 2; ++i) {
          rotated[i] = -x[i + D / 2];
          rotated[i + D / 2] = x[i];
        }
        for (std::int64_t i = 0; i < D; ++i)
          out[(b * T + t) * width + head * D + i] = x[i] * cos_emb[i] + rotated[i] * sin_emb[i];
      }
    }
  return out;
}

struct RopeCase {
  std::int64_t B, T, H, KV, D;
  std::int64_t position_start;
  bool llama3;
};
const RopeCase kCases[] = {
    {1, 1, 1, 1, 2, 0, false},       // one pair
    {2, 5, 2, 2, 8, 0, false},       // multi-head
    {2, 7, 4, 2, 16, 3, true},       // grouped-query, scaled, positions from 3
    {1, 6, 6, 2, 8, 100000, true},   // far positions: the f32 rounding of the angle matters
    {3, 40, 4, 1, 64, 17, false},    // one kv head; above the parallel threshold
};

template <typename T>
class CpuRope : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(CpuRope, FloatTypes);

TYPED_TEST(CpuRope, ForwardMatchesTransformersAndLeavesVUntouched) {
  using T = TypeParam;
  const Tolerance tol = reference_tolerance<T>();
  for (const RopeCase& c : kCases) {
    SCOPED_TRACE(testing::Message() << "B=" << c.B << " T=" << c.T << " H=" << c.H << " KV=" << c.KV << " D=" << c.D
                                    << " start=" << c.position_start << " llama3=" << c.llama3);
    const std::int64_t width = (c.H + 2 * c.KV) * c.D;
    std::vector<float> inv_freq = c.llama3 ? llama3_inv_freq(c.D, 500000) : default_inv_freq(c.D, 10000);
    std::vector<T> qkv = cast_to<T>(random_values(c.B * c.T * width, 81));
    const std::vector<T> before = qkv;
    ops::rope_forward(view(qkv, {c.B, c.T, width}), view(inv_freq, {c.D / 2}), int(c.H), int(c.KV), c.position_start);
    const std::vector<double> want =
        reference_rope(to_double(before), c.B, c.T, c.H, c.KV, c.D, inv_freq, c.position_start);
    expect_all_close(qkv, want, tol.rtol, tol.atol, "rope_forward");
    // v is untouched, bit for bit.
    for (std::int64_t bt = 0; bt < c.B * c.T; ++bt)
      for (std::int64_t i = (c.H + c.KV) * c.D; i < width; ++i)
        ASSERT_EQ(std::memcmp(&qkv[bt * width + i], &before[bt * width + i], sizeof(T)), 0) << "v changed at " << i;

    // The backward undoes the forward (a rotation's transpose is its inverse).
    ops::rope_backward(view(qkv, {c.B, c.T, width}), view(inv_freq, {c.D / 2}), int(c.H), int(c.KV),
                       c.position_start);
    expect_all_close(qkv, to_double(before), tol.rtol, tol.atol, "rope_backward(rope_forward(x))");
  }
}

TEST(CpuRope, Llama3TableHasAllThreeBands) {
  // D 16 at base 500000: wavelengths from 6 to ~4e5 positions, so the table
  // holds unscaled, interpolated and divided frequencies (what the cases above
  // rely on to cover "llama3-style scaled values").
  const std::vector<float> plain = default_inv_freq(16, 500000), scaled = llama3_inv_freq(16, 500000);
  int kept = 0, divided = 0, between = 0;
  for (std::size_t i = 0; i < plain.size(); ++i) {
    if (scaled[i] == plain[i]) ++kept;
    else if (std::fabs(double(scaled[i]) - double(plain[i]) / 8) <= 1e-7 * plain[i]) ++divided;
    else ++between;
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(between, 0);
}

TEST(CpuRope, AngleIsTheF32ProductAsInTransformers) {
  // position 100003 x 0.1f: the double product is 10000.30015, the f32 one
  // 10000.2998 (its ulp at 1e4 is 2^-10): cos differs in the 4th digit, so
  // this tells the two apart.
  const std::int64_t D = 2, start = 100003;
  std::vector<float> inv_freq = {0.1f};
  std::vector<double> qkv = {1.0, 0.0, 1.0, 0.0, 5.0, 6.0};  // q = (1, 0), k = (1, 0), v
  ops::rope_forward(view(qkv, {1, 1, 3 * D}), view(inv_freq, {1}), 1, 1, start);
  const float angle_f32 = static_cast<float>(start) * 0.1f;
  EXPECT_DOUBLE_EQ(qkv[0], std::cos(double(angle_f32)));
  EXPECT_DOUBLE_EQ(qkv[1], std::sin(double(angle_f32)));
  EXPECT_GT(std::fabs(qkv[0] - std::cos(double(start) * double(0.1f))), 1e-5);
}

TEST(CpuRope, BackwardIsTheExactTranspose) {
  for (const RopeCase& c : kCases) {
    SCOPED_TRACE(testing::Message() << "H=" << c.H << " KV=" << c.KV << " D=" << c.D << " start=" << c.position_start);
    const std::int64_t width = (c.H + 2 * c.KV) * c.D;
    const Shape shape{c.B, c.T, width};
    std::vector<float> inv_freq = c.llama3 ? llama3_inv_freq(c.D, 500000) : default_inv_freq(c.D, 10000);
    const Tensor freq = view(inv_freq, {c.D / 2});
    const std::vector<double> x = random_values(c.B * c.T * width, 82), g = random_values(x.size(), 83);
    // <rope_backward(g), x> == <g, rope_forward(x)>
    std::vector<double> fx = x, bg = g;
    ops::rope_forward(view(fx, shape), freq, int(c.H), int(c.KV), c.position_start);
    ops::rope_backward(view(bg, shape), freq, int(c.H), int(c.KV), c.position_start);
    const double lhs = dot(bg, x), rhs = dot(g, fx);
    EXPECT_NEAR(lhs, rhs, 1e-12 * (std::fabs(rhs) + double(x.size())));

    // And by finite differences of L(x) = <g, rope_forward(x)> (small cases only).
    if (x.size() > 2000) continue;
    std::vector<double> xv = x, out;
    auto loss = [&] {
      out = xv;
      ops::rope_forward(view(out, shape), freq, int(c.H), int(c.KV), c.position_start);
      return dot(out, g);
    };
    expect_gradient_matches(bg, numeric_gradient(xv, loss), "rope_backward");
  }
}

}  // namespace
