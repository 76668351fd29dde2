// The FP8 linear layers on the CPU (ops::MatmulFormat::kFp8E4M3): the
// quantise-dequantise reference of engine/cuda/fp8_linear.cu.
//
// Each GEMM operand is replaced by its E4M3 image under per-tensor current
// scaling, dequantised back to f32 (q * scale_inv, fp8_e4m3.h), and the f32
// ops of matmul.cpp run on those images:
//
//   forward   out  = Q(inp) @ Q(weight)^T + bias     (GELU / residual as in f32)
//   backward  dinp = Q(dout) @ Q(weight)             (* gelu'(gelu_pre))
//             dweight += Q(dout)^T @ Q(inp)
//             dbias   += sum_n dout                  (dout itself, unquantised)
//
// which is what the tensor cores compute (E4M3 x E4M3 products are exact in
// f32, the scales applied to the f32 sum) up to the order of the f32 sums.
// Under block scaling (ops::Fp8Scaling::kBlock) each image is cut into its
// blocks along the reduction of the GEMM that reads it, each block under its
// own scale (fp8_e4m3.h, e4m3_block_image): the forward's input in 1 x 128
// tiles along C, dout along OC for dinp, dout and the input in 128 x 1 tiles
// along the tokens for dweight, the weight in 128 x 128 blocks.
// Each tensor's scale is its own amax, whichever GEMM reads it: dout's one
// scale serves both of its backward GEMMs, as on CUDA, where the cast and its
// transposed copy share one Fp8Scale. A weight with an Fp8WeightCache is
// quantised once per optimizer step, into the cache.
#include <array>
#include <cstdint>
#include <vector>

#include "engine/check.h"
#include "engine/cpu/cpu_ops.h"
#include "engine/cpu/fp8_e4m3.h"

namespace engine::cpu {
namespace {

void expect_f32(const Tensor& t, const char* what) {
  ENGINE_CHECK(t.dtype() == DType::kF32, what, " is ", t.describe(),
               ": the CPU's FP8 reference quantises f32 tensors (--precision fp8-emulated runs in fp32)");
}

// Where an operand's amax comes from (ops::Fp8Options' slots): `slot` ready
// (read it), or computed here from the tensor, max-reduced over the group for
// a shard (`sharded`), and left in `slot` when one is given.
struct AmaxSource {
  Tensor slot;
  bool ready = false;
  bool sharded = false;
};
AmaxSource inp_source(const ops::Fp8Options* fp8) {
  if (fp8 == nullptr) return {};
  return {fp8->inp_amax, fp8->inp_amax_ready, fp8->inp};
}
AmaxSource dout_source(const ops::Fp8Options* fp8) {
  if (fp8 == nullptr) return {};
  return {fp8->dout_amax, !fp8->dout_amax.empty(), fp8->dout};
}

float operand_amax(const Tensor& t, const ops::Fp8Options* fp8, const AmaxSource& source) {
  if (source.ready) return *source.slot.data_as<const float>();
  float amax = e4m3_amax(t.data_as<const float>(), t.numel());
  if (source.sharded && fp8 != nullptr && fp8->reduce_max)
    fp8->reduce_max(Tensor(&amax, Shape{1}, DType::kF32, DeviceType::kCpu));
  if (!source.slot.empty()) *source.slot.data_as<float>() = amax;
  return amax;
}

// The dequantised E4M3 image of the f32 tensor t in `out` (n floats), scaled
// by the amax `source` gives: a shard's is the whole tensor's, so it is
// quantised on the whole tensor's grid.
void write_image(const Tensor& t, float* out, const char* what, const ops::Fp8Options* fp8,
                 const AmaxSource& source) {
  expect_f32(t, what);
  const std::int64_t n = t.numel();
  const float* x = t.data_as<const float>();
  const float scale = e4m3_scale(operand_amax(t, fp8, source));
  const float scale_inv = e4m3_scale_inv(scale);
#pragma omp parallel for schedule(static) if (n > 32768)
  for (std::int64_t i = 0; i < n; ++i) out[i] = e4m3_to_float(e4m3_from_float(x[i] * scale)) * scale_inv;
}

// Where one call's images live, reused from call to call so that the step
// loop allocates nothing after its first step: one buffer per operand role
// (block scaling quantises the input and the output gradient a second time
// along the tokens, for the weight gradient).
enum Role { kInput, kWeight, kOutputGrad, kInputAlongTokens, kOutputGradAlongTokens, kRoles };
float* image_storage(Role role, std::int64_t n) {
  thread_local std::array<std::vector<float>, kRoles> storage;
  std::vector<float>& v = storage[role];
  if (static_cast<std::int64_t>(v.size()) < n) v.resize(static_cast<std::size_t>(n));
  return v.data();
}

// The image of an activation or gradient.
Tensor quantized_image(const Tensor& t, Role role, const char* what, const ops::Fp8Options* fp8,
                       const AmaxSource& source) {
  float* image = image_storage(role, t.numel());
  write_image(t, image, what, fp8, source);
  return Tensor(image, t.shape(), DType::kF32, DeviceType::kCpu);
}

bool block_scaled(const ops::Fp8Options* fp8) { return fp8 != nullptr && fp8->scaling == ops::Fp8Scaling::kBlock; }

// Block scaling's image of t, taken as (rows, last dim) row-major, in blocks
// of block_rows x block_cols (fp8_e4m3.h, e4m3_block_image).
void write_block_image(const Tensor& t, float* out, std::int64_t block_rows, std::int64_t block_cols,
                       const char* what) {
  expect_f32(t, what);
  const std::int64_t cols = t.dim(-1), rows = t.numel() / cols;
  e4m3_block_image(t.data_as<const float>(), rows, cols, block_rows, block_cols, out);
}
// An activation's or gradient's tiles: 1 x 128 along its last dimension
// (the reduction of dinp and of the forward), or 128 x 1 along the tokens
// (the reduction of dweight).
enum class Along { kLastDim, kTokens };
Tensor block_image(const Tensor& t, Role role, Along along, const char* what) {
  float* image = image_storage(role, t.numel());
  if (along == Along::kLastDim) write_block_image(t, image, 1, ops::kFp8BlockSize, what);
  else write_block_image(t, image, ops::kFp8BlockSize, 1, what);
  return Tensor(image, t.shape(), DType::kF32, DeviceType::kCpu);
}

// The image of a weight (per-tensor scale, or 128 x 128 blocks, which serve W
// and W^T alike): from its cache when one is kept (made there on first use,
// ops::Fp8WeightCache), else like any operand.
Tensor weight_image(const Tensor& w, const char* what, const ops::Fp8Options* fp8) {
  ops::Fp8WeightCache* cache = fp8 != nullptr ? fp8->weight_cache : nullptr;
  const AmaxSource own{Tensor{}, false, fp8 != nullptr && fp8->weight};
  const auto write = [&](float* image) {
    if (block_scaled(fp8)) write_block_image(w, image, ops::kFp8BlockSize, ops::kFp8BlockSize, what);
    else write_image(w, image, what, fp8, own);
  };
  float* image = nullptr;
  if (cache == nullptr) {
    image = image_storage(kWeight, w.numel());
    write(image);
  } else {
    ENGINE_CHECK(cache->storage.bytes() >= ops::fp8_weight_cache_bytes(DeviceType::kCpu, w.dim(0), w.dim(1)), what,
                 ": its FP8 cache holds ", cache->storage.bytes(), " bytes, too few for ", w.describe());
    image = cache->storage.data_as<float>();
    if (!cache->cast) {
      write(image);
      cache->scaled = cache->cast = cache->transposed = true;  // the CPU's matmuls read the one image either way
    }
  }
  return Tensor(image, w.shape(), DType::kF32, DeviceType::kCpu);
}

// The forward's input image: under its per-tensor scale, or in 1 x 128 tiles along C.
Tensor forward_input_image(const Tensor& inp, const char* what, const ops::Fp8Options* fp8) {
  if (block_scaled(fp8)) return block_image(inp, kInput, Along::kLastDim, what);
  return quantized_image(inp, kInput, what, fp8, inp_source(fp8));
}

}  // namespace

void write_amax(const Tensor& amax_slot, const Tensor& x, const char* what) {
  if (amax_slot.empty()) return;
  expect_f32(x, what);
  *amax_slot.data_as<float>() = e4m3_amax(x.data_as<const float>(), x.numel());
}

void fp8_matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                        const Tensor& pre_gelu, const ops::Fp8Options* fp8) {
  const Tensor q_inp = forward_input_image(inp, "fp8 matmul_forward: inp", fp8);
  const Tensor q_weight = weight_image(weight, "fp8 matmul_forward: weight", fp8);
  matmul_forward(out, q_inp, q_weight, bias, pre_gelu);
  if (fp8 != nullptr) write_amax(fp8->out_amax, out, "fp8 matmul_forward: out");
}

void fp8_matmul_forward_add(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                            const Tensor& residual, const ops::Fp8Options* fp8) {
  const Tensor q_inp = forward_input_image(inp, "fp8 matmul_forward_add: inp", fp8);
  const Tensor q_weight = weight_image(weight, "fp8 matmul_forward_add: weight", fp8);
  matmul_forward_add(out, q_inp, q_weight, bias, residual);
  if (fp8 != nullptr) write_amax(fp8->out_amax, out, "fp8 matmul_forward_add: out");
}

void fp8_matmul_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                         const Tensor& inp, const Tensor& weight, const Tensor& gelu_pre,
                         const ops::Fp8Options* fp8) {
  // The bias gradient sums the unquantised output gradient.
  if (!dbias.empty()) matmul_backward(Tensor{}, Tensor{}, dbias, dout, inp, weight, Tensor{});
  if (dinp.empty() && dweight.empty()) return;
  if (block_scaled(fp8)) {
    // dinp reduces over OC: dout in 1 x 128 tiles along OC, the weight's 128 x 128 blocks.
    if (!dinp.empty()) {
      const Tensor q_dout = block_image(dout, kOutputGrad, Along::kLastDim, "fp8 matmul_backward: dout");
      const Tensor q_weight = weight_image(weight, "fp8 matmul_backward: weight", fp8);
      matmul_backward(dinp, Tensor{}, Tensor{}, q_dout, inp, q_weight, gelu_pre);
      write_amax(fp8->dinp_amax, dinp, "fp8 matmul_backward: dinp");  // block_scaled: fp8 is set
    }
    // dweight reduces over the tokens: dout and the input both in 128 x 1 tiles along them.
    if (!dweight.empty()) {
      const Tensor q_dout = block_image(dout, kOutputGradAlongTokens, Along::kTokens, "fp8 matmul_backward: dout");
      const Tensor q_inp = block_image(inp, kInputAlongTokens, Along::kTokens, "fp8 matmul_backward: inp");
      matmul_backward(Tensor{}, dweight, Tensor{}, q_dout, q_inp, weight, Tensor{});
    }
    return;
  }
  // In CUDA's order (fp8_linear.cu): dout, then the weight for dinp, then the input for dweight.
  const Tensor q_dout = quantized_image(dout, kOutputGrad, "fp8 matmul_backward: dout", fp8, dout_source(fp8));
  // Only what each asked-for product reads: the weight-gradient pass passes
  // dweight as a stand-in for the weight, which must not be quantised.
  const Tensor q_weight = dinp.empty() ? weight : weight_image(weight, "fp8 matmul_backward: weight", fp8);
  const Tensor q_inp =
      dweight.empty() ? inp : quantized_image(inp, kInput, "fp8 matmul_backward: inp", fp8, inp_source(fp8));
  matmul_backward(dinp, dweight, Tensor{}, q_dout, q_inp, q_weight, gelu_pre);
  if (fp8 != nullptr && !dinp.empty()) write_amax(fp8->dinp_amax, dinp, "fp8 matmul_backward: dinp");
}

}  // namespace engine::cpu
