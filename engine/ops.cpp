// Shape checks and device dispatch for the op set (contracts in ops.h).
//
// Checking here, once, means neither backend repeats it and a shape error
// names the op and the tensor whatever the device.
#include "engine/ops.h"

#include <cmath>
#include <string>

#include "engine/cpu/cpu_ops.h"
#include "engine/profiler.h"
#ifdef ENGINE_WITH_CUDA
#include "engine/cuda/cuda_ops.h"
#endif

namespace engine::ops {
namespace {

bool on_cpu(const Tensor& t) { return t.device() == DeviceType::kCpu; }

// Calls cpu::fn or cuda::fn by the device of `lead`.
#ifdef ENGINE_WITH_CUDA
#define ENGINE_DISPATCH(lead, fn, ...) \
  (on_cpu(lead) ? cpu::fn(__VA_ARGS__) : cuda::fn(__VA_ARGS__))
#else
[[noreturn]] void no_cuda(const char* op) {
  ENGINE_FAIL(op, ": tensor is on cuda but the engine was built without CUDA");
}
#define ENGINE_DISPATCH(lead, fn, ...) \
  (on_cpu(lead) ? cpu::fn(__VA_ARGS__) : (no_cuda(#fn), decltype(cpu::fn(__VA_ARGS__))()))
#endif

void expect_rows(const Tensor& t, std::int64_t n, std::int64_t c, const char* what) {
  ENGINE_CHECK(t.ndim() >= 1 && t.numel() == n * c && t.dim(-1) == c, what, " has shape ",
               t.shape().str(), ", expected ", n, " rows of ", c);
}

void expect_numel(const Tensor& t, std::int64_t n, const char* what) {
  ENGINE_CHECK(t.numel() == n, what, " has ", t.numel(), " elements ", t.shape().str(), ", expected ", n);
}

void expect_device(const Tensor& t, DeviceType device, const char* what) {
  if (t.empty()) return;
  ENGINE_CHECK(t.device() == device, what, " is on ", device_name(t.device()), ", expected ",
               device_name(device));
}

// An amax slot (Fp8Options, out_amax): empty, or one f32 on `device`.
void expect_amax_slot(const Tensor& t, DeviceType device, const char* what) {
  if (t.empty()) return;
  ENGINE_CHECK(t.numel() == 1 && t.dtype() == DType::kF32, what, " is ", t.describe(), ", expected one f32");
  expect_device(t, device, what);
}

void expect_fp8_slots(const Fp8Options* fp8, DeviceType device, const char* op) {
  if (fp8 == nullptr) return;
  const std::string name(op);
  expect_amax_slot(fp8->inp_amax, device, (name + ": Fp8Options::inp_amax").c_str());
  expect_amax_slot(fp8->dout_amax, device, (name + ": Fp8Options::dout_amax").c_str());
  expect_amax_slot(fp8->out_amax, device, (name + ": Fp8Options::out_amax").c_str());
  expect_amax_slot(fp8->dinp_amax, device, (name + ": Fp8Options::dinp_amax").c_str());
  ENGINE_CHECK(!fp8->inp_amax_ready || !fp8->inp_amax.empty(), op, ": Fp8Options::inp_amax_ready without an inp_amax");
}

}  // namespace

void fill(const Tensor& t, double value) {
  ScopedOpTimer timer("fill");
  if (t.numel() == 0) return;
  ENGINE_DISPATCH(t, fill, t, value);
}

void copy(const Tensor& dst, const Tensor& src) {
  ScopedOpTimer timer("copy");
  expect_numel(src, dst.numel(), "copy: src");
  if (dst.numel() == 0) return;
  // Cross-device copies go through the CUDA side (cudaMemcpy and conversion).
  if (on_cpu(dst) && on_cpu(src)) return cpu::copy(dst, src);
#ifdef ENGINE_WITH_CUDA
  return cuda::copy(dst, src);
#else
  no_cuda("copy");
#endif
}

void scale(const Tensor& t, double factor) {
  ScopedOpTimer timer("scale");
  if (t.numel() == 0) return;
  ENGINE_DISPATCH(t, scale, t, factor);
}

void add(const Tensor& out, const Tensor& a, const Tensor& b) {
  ScopedOpTimer timer("add");
  expect_numel(a, out.numel(), "add: a");
  expect_numel(b, out.numel(), "add: b");
  expect_device(a, out.device(), "add: a");
  expect_device(b, out.device(), "add: b");
  ENGINE_DISPATCH(out, add, out, a, b);
}

void accumulate(const Tensor& dst, const Tensor& src) {
  ScopedOpTimer timer("accumulate");
  expect_numel(src, dst.numel(), "accumulate: src");
  expect_device(src, dst.device(), "accumulate: src");
  ENGINE_DISPATCH(dst, accumulate, dst, src);
}

double sum_of_squares(const Tensor& t) {
  ScopedOpTimer timer("sum_of_squares");
  if (t.numel() == 0) return 0.0;
  return ENGINE_DISPATCH(t, sum_of_squares, t);
}

void embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                       std::int64_t vocab_start, std::int64_t position_start) {
  ScopedOpTimer timer("embedding_forward");
  ENGINE_CHECK(out.ndim() == 3, "embedding_forward: out must be (B,T,C), got ", out.shape().str());
  const std::int64_t B = out.dim(0), T = out.dim(1), C = out.dim(2);
  expect_shape(tokens, Shape{B, T}, "embedding_forward: tokens");
  expect_dtype(tokens, DType::kI32, "embedding_forward: tokens");
  ENGINE_CHECK(wte.ndim() == 2 && wte.dim(1) == C, "embedding_forward: wte has shape ",
               wte.shape().str(), ", expected (V, ", C, ")");
  if (!wpe.empty())
    ENGINE_CHECK(wpe.ndim() == 2 && wpe.dim(1) == C && wpe.dim(0) >= position_start + T,
                 "embedding_forward: wpe has shape ", wpe.shape().str(), ", expected at least (",
                 position_start + T, ", ", C, ")");
  for (const Tensor* t : {&tokens, &wte, &wpe}) expect_device(*t, out.device(), "embedding_forward: input");
  ENGINE_DISPATCH(out, embedding_forward, out, tokens, wte, wpe, vocab_start, position_start);
}

void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                        std::int64_t vocab_start, std::int64_t position_start) {
  ScopedOpTimer timer("embedding_backward");
  ENGINE_CHECK(dout.ndim() == 3, "embedding_backward: dout must be (B,T,C), got ", dout.shape().str());
  const std::int64_t B = dout.dim(0), T = dout.dim(1), C = dout.dim(2);
  expect_shape(tokens, Shape{B, T}, "embedding_backward: tokens");
  ENGINE_CHECK(dwte.ndim() == 2 && dwte.dim(1) == C, "embedding_backward: dwte has shape ",
               dwte.shape().str(), ", expected (V, ", C, ")");
  if (!dwpe.empty())
    ENGINE_CHECK(dwpe.ndim() == 2 && dwpe.dim(1) == C && dwpe.dim(0) >= position_start + T,
                 "embedding_backward: dwpe has shape ", dwpe.shape().str());
  ENGINE_DISPATCH(dout, embedding_backward, dwte, dwpe, dout, tokens, vocab_start, position_start);
}

void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias, double eps, const Tensor& out_amax) {
  ScopedOpTimer timer("layernorm_forward");
  const std::int64_t C = inp.dim(-1), N = inp.numel() / C;
  expect_rows(out, N, C, "layernorm_forward: out");
  expect_numel(mean, N, "layernorm_forward: mean");
  expect_numel(rstd, N, "layernorm_forward: rstd");
  expect_numel(weight, C, "layernorm_forward: weight");
  expect_numel(bias, C, "layernorm_forward: bias");
  ENGINE_CHECK(eps > 0 && std::isfinite(eps), "layernorm_forward: eps must be positive and finite, got ", eps);
  expect_amax_slot(out_amax, out.device(), "layernorm_forward: out_amax");
  ENGINE_DISPATCH(out, layernorm_forward, out, mean, rstd, inp, weight, bias, eps, out_amax);
}

void layernorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                        const Tensor& inp, const Tensor& weight, const Tensor& mean, const Tensor& rstd) {
  ScopedOpTimer timer("layernorm_backward");
  const std::int64_t C = inp.dim(-1), N = inp.numel() / C;
  expect_rows(dinp, N, C, "layernorm_backward: dinp");
  expect_rows(dout, N, C, "layernorm_backward: dout");
  expect_numel(dweight, C, "layernorm_backward: dweight");
  expect_numel(dbias, C, "layernorm_backward: dbias");
  expect_numel(mean, N, "layernorm_backward: mean");
  expect_numel(rstd, N, "layernorm_backward: rstd");
  ENGINE_DISPATCH(dout, layernorm_backward, dinp, dweight, dbias, dout, inp, weight, mean, rstd);
}

void rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& inp, const Tensor& weight, double eps,
                     const Tensor& out_amax) {
  ScopedOpTimer timer("rmsnorm_forward");
  ENGINE_CHECK(inp.ndim() >= 1 && inp.dim(-1) > 0, "rmsnorm_forward: inp must be (N, C) with C > 0, got ",
               inp.shape().str());
  const std::int64_t C = inp.dim(-1), N = inp.numel() / C;
  expect_rows(out, N, C, "rmsnorm_forward: out");
  expect_numel(rstd, N, "rmsnorm_forward: rstd");
  expect_numel(weight, C, "rmsnorm_forward: weight");
  ENGINE_CHECK(eps > 0, "rmsnorm_forward: eps ", eps, " must be positive");
  for (const Tensor* t : {&rstd, &inp, &weight}) expect_device(*t, out.device(), "rmsnorm_forward: operand");
  expect_amax_slot(out_amax, out.device(), "rmsnorm_forward: out_amax");
  ENGINE_DISPATCH(out, rmsnorm_forward, out, rstd, inp, weight, eps, out_amax);
}

void rmsnorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dout, const Tensor& inp,
                      const Tensor& weight, const Tensor& rstd) {
  ScopedOpTimer timer("rmsnorm_backward");
  ENGINE_CHECK(inp.ndim() >= 1 && inp.dim(-1) > 0, "rmsnorm_backward: inp must be (N, C) with C > 0, got ",
               inp.shape().str());
  const std::int64_t C = inp.dim(-1), N = inp.numel() / C;
  expect_rows(dinp, N, C, "rmsnorm_backward: dinp");
  expect_rows(dout, N, C, "rmsnorm_backward: dout");
  expect_numel(dweight, C, "rmsnorm_backward: dweight");
  expect_numel(weight, C, "rmsnorm_backward: weight");
  expect_numel(rstd, N, "rmsnorm_backward: rstd");
  for (const Tensor* t : {&dinp, &dweight, &inp, &weight, &rstd})
    expect_device(*t, dout.device(), "rmsnorm_backward: operand");
  ENGINE_DISPATCH(dout, rmsnorm_backward, dinp, dweight, dout, inp, weight, rstd);
}

const char* fp8_scaling_name(Fp8Scaling scaling) { return scaling == Fp8Scaling::kBlock ? "block" : "tensor"; }

Fp8Scaling parse_fp8_scaling(const std::string& name) {
  if (name == "tensor") return Fp8Scaling::kTensor;
  if (name == "block") return Fp8Scaling::kBlock;
  ENGINE_FAIL("--fp8-scaling ", name, ": expected tensor (one current scale per tensor) or block (DeepSeek-V3's "
              "1 x 128 activation tiles and 128 x 128 weight blocks)");
}

std::size_t fp8_weight_cache_bytes(DeviceType device, std::int64_t out_features, std::int64_t in_features) {
  const auto aligned = [](std::size_t bytes) { return (bytes + 255) / 256 * 256; };
  const std::size_t elements = static_cast<std::size_t>(out_features * in_features);
  // CUDA (fp8_linear.cu): the scaling state, the E4M3 copy and the transposed
  // copy, each 256-byte aligned, then the 128 x 128 block factors of each
  // (block scaling, cuda/fp8_block.h: rows/128 x pad4(cols/128) floats); the
  // CPU: the dequantised f32 image.
  const auto blocks = [](std::int64_t n) { return (n + kFp8BlockSize - 1) / kFp8BlockSize; };
  const auto pad4 = [](std::int64_t n) { return (n + 3) / 4 * 4; };
  const std::size_t factors = aligned(static_cast<std::size_t>(blocks(out_features) * pad4(blocks(in_features))) * 4) +
                              aligned(static_cast<std::size_t>(blocks(in_features) * pad4(blocks(out_features))) * 4);
  return device == DeviceType::kCpu ? aligned(elements * sizeof(float)) : 256 + 2 * aligned(elements) + factors;
}

void matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                    const Tensor& pre_gelu, MatmulFormat format, const Fp8Options* fp8) {
  ScopedOpTimer timer(format == MatmulFormat::kFp8E4M3 ? "matmul_forward (fp8)" : "matmul_forward");
  ENGINE_CHECK(weight.ndim() == 2, "matmul_forward: weight must be (OC, C), got ", weight.shape().str());
  const std::int64_t OC = weight.dim(0), C = weight.dim(1), N = inp.numel() / C;
  expect_rows(inp, N, C, "matmul_forward: inp");
  expect_rows(out, N, OC, "matmul_forward: out");
  if (!bias.empty()) expect_numel(bias, OC, "matmul_forward: bias");
  if (!pre_gelu.empty()) expect_rows(pre_gelu, N, OC, "matmul_forward: pre_gelu");
  if (format == MatmulFormat::kFp8E4M3) {
    expect_fp8_slots(fp8, out.device(), "matmul_forward");
    ENGINE_DISPATCH(out, fp8_matmul_forward, out, inp, weight, bias, pre_gelu, fp8);
  }
  else ENGINE_DISPATCH(out, matmul_forward, out, inp, weight, bias, pre_gelu);
}

void matmul_forward_add(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                        const Tensor& residual, MatmulFormat format, const Fp8Options* fp8) {
  ScopedOpTimer timer(format == MatmulFormat::kFp8E4M3 ? "matmul_forward_add (fp8)" : "matmul_forward_add");
  ENGINE_CHECK(weight.ndim() == 2, "matmul_forward_add: weight must be (OC, C), got ", weight.shape().str());
  const std::int64_t OC = weight.dim(0), C = weight.dim(1), N = inp.numel() / C;
  expect_rows(inp, N, C, "matmul_forward_add: inp");
  expect_rows(out, N, OC, "matmul_forward_add: out");
  expect_rows(residual, N, OC, "matmul_forward_add: residual");
  ENGINE_CHECK(residual.dtype() == out.dtype(), "matmul_forward_add: residual ", residual.describe(), " and out ",
               out.describe(), " must share a dtype");
  expect_device(residual, out.device(), "matmul_forward_add: residual");
  if (!bias.empty()) expect_numel(bias, OC, "matmul_forward_add: bias");
  const char* o = static_cast<const char*>(out.data());
  const char* r = static_cast<const char*>(residual.data());
  ENGINE_CHECK(o + out.bytes() <= r || r + residual.bytes() <= o, "matmul_forward_add: out ", out.describe(),
               " overlaps residual ", residual.describe());
  if (format == MatmulFormat::kFp8E4M3) {
    expect_fp8_slots(fp8, out.device(), "matmul_forward_add");
    ENGINE_DISPATCH(out, fp8_matmul_forward_add, out, inp, weight, bias, residual, fp8);
  }
  else ENGINE_DISPATCH(out, matmul_forward_add, out, inp, weight, bias, residual);
}

void matmul_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                     const Tensor& inp, const Tensor& weight, const Tensor& gelu_pre, MatmulFormat format,
                     const Fp8Options* fp8) {
  ScopedOpTimer timer(format == MatmulFormat::kFp8E4M3 ? "matmul_backward (fp8)" : "matmul_backward");
  ENGINE_CHECK(weight.ndim() == 2, "matmul_backward: weight must be (OC, C), got ", weight.shape().str());
  const std::int64_t OC = weight.dim(0), C = weight.dim(1), N = dout.numel() / OC;
  expect_rows(dout, N, OC, "matmul_backward: dout");
  expect_rows(inp, N, C, "matmul_backward: inp");
  if (!dinp.empty()) expect_rows(dinp, N, C, "matmul_backward: dinp");
  if (!dweight.empty()) expect_shape(dweight, weight.shape(), "matmul_backward: dweight");
  if (!dbias.empty()) expect_numel(dbias, OC, "matmul_backward: dbias");
  if (!gelu_pre.empty()) expect_rows(gelu_pre, N, C, "matmul_backward: gelu_pre");
  if (format == MatmulFormat::kFp8E4M3) {
    expect_fp8_slots(fp8, dout.device(), "matmul_backward");
    ENGINE_DISPATCH(dout, fp8_matmul_backward, dinp, dweight, dbias, dout, inp, weight, gelu_pre, fp8);
  }
  else ENGINE_DISPATCH(dout, matmul_backward, dinp, dweight, dbias, dout, inp, weight, gelu_pre);
}

void matmul_weight_grad(const Tensor& dweight, const Tensor& dbias, const Tensor& dout, const Tensor& inp,
                        MatmulFormat format, const Fp8Options* fp8) {
  ScopedOpTimer timer(format == MatmulFormat::kFp8E4M3 ? "matmul_weight_grad (fp8)" : "matmul_weight_grad");
  ENGINE_CHECK(dweight.ndim() == 2, "matmul_weight_grad: dweight must be (OC, C), got ", dweight.shape().str());
  const std::int64_t OC = dweight.dim(0), C = dweight.dim(1), N = dout.numel() / OC;
  expect_rows(dout, N, OC, "matmul_weight_grad: dout");
  expect_rows(inp, N, C, "matmul_weight_grad: inp");
  if (!dbias.empty()) expect_numel(dbias, OC, "matmul_weight_grad: dbias");
  // The backends read `weight` only for the input gradient, which is not
  // asked for here: dweight stands in for its shape.
  if (format == MatmulFormat::kFp8E4M3) {
    expect_fp8_slots(fp8, dout.device(), "matmul_weight_grad");
    ENGINE_DISPATCH(dout, fp8_matmul_backward, Tensor{}, dweight, dbias, dout, inp, dweight, Tensor{}, fp8);
  }
  else ENGINE_DISPATCH(dout, matmul_backward, Tensor{}, dweight, dbias, dout, inp, dweight, Tensor{});
}

void gelu_forward(const Tensor& out, const Tensor& inp) {
  ScopedOpTimer timer("gelu_forward");
  expect_numel(inp, out.numel(), "gelu_forward: inp");
  ENGINE_DISPATCH(out, gelu_forward, out, inp);
}

void gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  ScopedOpTimer timer("gelu_backward");
  expect_numel(inp, dinp.numel(), "gelu_backward: inp");
  expect_numel(dout, dinp.numel(), "gelu_backward: dout");
  ENGINE_DISPATCH(dinp, gelu_backward, dinp, inp, dout);
}

namespace {
void check_swiglu(const Tensor& out, const Tensor& inp, const char* op, const char* out_name) {
  ENGINE_CHECK(out.ndim() >= 1 && out.dim(-1) > 0, op, ": ", out_name, " must be (N, F), got ", out.shape().str());
  const std::int64_t F = out.dim(-1), N = out.numel() / F;
  expect_rows(inp, N, 2 * F, op);
  expect_device(inp, out.device(), op);
}

void check_rope(const Tensor& qkv, const Tensor& inv_freq, int n_head, int n_kv_head, std::int64_t position_start,
                const char* op) {
  ENGINE_CHECK(n_head > 0 && n_kv_head > 0 && n_head % n_kv_head == 0, op, ": ", n_head,
               " query heads are not a multiple of ", n_kv_head, " key/value heads");
  ENGINE_CHECK(qkv.ndim() == 3, op, ": qkv must be (B,T,(H+2KV)D), got ", qkv.shape().str());
  const std::int64_t heads = n_head + 2 * n_kv_head, D = qkv.dim(2) / heads;
  ENGINE_CHECK(qkv.dim(2) % heads == 0, op, ": qkv width ", qkv.dim(2), " is not (", n_head, " + 2 x ", n_kv_head,
               ") heads x head size");
  ENGINE_CHECK(D % 2 == 0, op, ": qkv width ", qkv.dim(2), " gives a head size of ", D,
               ", which is odd: RoPE rotates dimension i with i + D/2, so D must be even");
  ENGINE_CHECK(inv_freq.numel() == D / 2 && inv_freq.dtype() == DType::kF32, op, ": inv_freq is ",
               inv_freq.describe(), ", expected ", D / 2, " f32 frequencies");
  expect_device(inv_freq, qkv.device(), op);
  ENGINE_CHECK(position_start >= 0, op, ": position_start ", position_start, " must be >= 0");
}
}  // namespace

void swiglu_forward(const Tensor& out, const Tensor& inp) {
  ScopedOpTimer timer("swiglu_forward");
  check_swiglu(out, inp, "swiglu_forward", "out");
  ENGINE_DISPATCH(out, swiglu_forward, out, inp);
}

void swiglu_backward(const Tensor& dinp, const Tensor& dout, const Tensor& inp) {
  ScopedOpTimer timer("swiglu_backward");
  check_swiglu(dout, inp, "swiglu_backward", "dout");
  expect_shape(dinp, inp.shape(), "swiglu_backward: dinp");
  expect_device(dinp, dout.device(), "swiglu_backward: dinp");
  ENGINE_DISPATCH(dinp, swiglu_backward, dinp, dout, inp);
}

void rope_forward(const Tensor& qkv, const Tensor& inv_freq, int n_head, int n_kv_head,
                  std::int64_t position_start) {
  ScopedOpTimer timer("rope_forward");
  check_rope(qkv, inv_freq, n_head, n_kv_head, position_start, "rope_forward");
  ENGINE_DISPATCH(qkv, rope_forward, qkv, inv_freq, n_head, n_kv_head, position_start);
}

void rope_backward(const Tensor& dqkv, const Tensor& inv_freq, int n_head, int n_kv_head,
                   std::int64_t position_start) {
  ScopedOpTimer timer("rope_backward");
  check_rope(dqkv, inv_freq, n_head, n_kv_head, position_start, "rope_backward");
  ENGINE_DISPATCH(dqkv, rope_backward, dqkv, inv_freq, n_head, n_kv_head, position_start);
}

Shape attention_saved_shape(DeviceType device, std::int64_t B, std::int64_t H, std::int64_t T) {
  // CPU keeps the softmax probabilities (BLAS makes recomputing them the
  // expensive part); CUDA keeps only the row log-sum-exp (FlashAttention-2).
  if (device == DeviceType::kCpu) return Shape{B, H, T, T};
  return Shape{B, H, T};
}

DType attention_saved_dtype(DeviceType device, DType activation_dtype) {
  if (device == DeviceType::kCpu) return activation_dtype == DType::kF64 ? DType::kF64 : DType::kF32;
  return DType::kF32;
}

namespace {
// Returns KV (n_kv_head, 0 meaning n_head) after checking the qkv layout.
int check_attention(const Tensor& out, const Tensor& saved, const Tensor& qkv, int n_head, int n_kv_head,
                    const char* op) {
  const int kv = n_kv_head == 0 ? n_head : n_kv_head;
  ENGINE_CHECK(n_head > 0 && kv > 0 && n_head % kv == 0, op, ": ", n_head, " query heads are not a multiple of ",
               kv, " key/value heads");
  ENGINE_CHECK(qkv.ndim() == 3, op, ": qkv must be (B,T,(H+2KV)D), got ", qkv.shape().str());
  const std::int64_t B = qkv.dim(0), T = qkv.dim(1), width = qkv.dim(2), heads = n_head + 2 * kv;
  ENGINE_CHECK(width % heads == 0, op, ": qkv width ", width, " is not (", n_head, " + 2 x ", kv,
               ") heads x head size");
  expect_shape(out, Shape{B, T, width / heads * n_head}, (std::string(op) + ": out").c_str());
  expect_shape(saved, attention_saved_shape(qkv.device(), B, n_head, T), (std::string(op) + ": saved").c_str());
  return kv;
}
}  // namespace

void attention_forward(const Tensor& out, const Tensor& saved, const Tensor& qkv, int n_head, int n_kv_head) {
  ScopedOpTimer timer("attention_forward");
  const int kv = check_attention(out, saved, qkv, n_head, n_kv_head, "attention_forward");
  ENGINE_DISPATCH(out, attention_forward, out, saved, qkv, n_head, kv);
}

void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                        const Tensor& saved, int n_head, int n_kv_head) {
  ScopedOpTimer timer("attention_backward");
  const int kv = check_attention(out, saved, qkv, n_head, n_kv_head, "attention_backward");
  expect_shape(dqkv, qkv.shape(), "attention_backward: dqkv");
  expect_shape(dout, out.shape(), "attention_backward: dout");
  ENGINE_DISPATCH(dout, attention_backward, dqkv, dout, qkv, out, saved, n_head, kv);
}

void softmax_cross_entropy(const Tensor& losses, const Tensor& logits, const Tensor& targets,
                           std::int64_t vocab_size, double grad_scale) {
  ScopedOpTimer timer("softmax_cross_entropy");
  const std::int64_t Vp = logits.dim(-1), N = logits.numel() / Vp;
  ENGINE_CHECK(vocab_size > 0 && vocab_size <= Vp, "softmax_cross_entropy: vocab_size ", vocab_size,
               " must be in [1, ", Vp, "] (the logits' width)");
  expect_numel(losses, N, "softmax_cross_entropy: losses");
  expect_numel(targets, N, "softmax_cross_entropy: targets");
  expect_dtype(targets, DType::kI32, "softmax_cross_entropy: targets");
  ENGINE_DISPATCH(logits, softmax_cross_entropy, losses, logits, targets, vocab_size, grad_scale);
}

namespace {
// The checks the three vocabulary-parallel cross-entropy steps share; returns N.
// vocab_start may lie at or beyond vocab_size: a slice made only of padding.
// targets is null for partial_max, which takes none.
std::int64_t check_vocab_parallel_ce(const char* op, const Tensor& logits, const Tensor& row_max,
                                     const Tensor* targets, std::int64_t vocab_start, std::int64_t vocab_size) {
  ENGINE_CHECK(logits.ndim() >= 1 && logits.dim(-1) > 0, op, ": logits must be (N, V_local) with V_local > 0, got ",
               logits.shape().str());
  const std::int64_t V_local = logits.dim(-1), N = logits.numel() / V_local;
  ENGINE_CHECK(vocab_size > 0, op, ": vocab_size ", vocab_size, " must be positive");
  ENGINE_CHECK(vocab_start >= 0, op, ": vocab_start ", vocab_start, " must be >= 0");
  // Statistics follow the rule of the other ops: f32, f64 on the fp64 reference path.
  const DType stat = logits.dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
  ENGINE_CHECK(!row_max.empty() && row_max.numel() == N && row_max.dtype() == stat &&
                   row_max.device() == logits.device(),
               op, ": row_max is ", row_max.describe(), ", expected ", N, " elements of ", dtype_name(stat), " on ",
               device_name(logits.device()));
  if (targets)
    ENGINE_CHECK(!targets->empty() && targets->numel() == N && targets->dtype() == DType::kI32 &&
                     targets->device() == logits.device(),
                 op, ": targets is ", targets->describe(), ", expected ", N, " elements of i32 on ",
                 device_name(logits.device()));
  return N;
}

// A (2, N) or (N) statistics tensor like row_max.
void expect_stat(const char* op, const char* what, const Tensor& t, std::int64_t rows, std::int64_t N,
                 const Tensor& row_max) {
  ENGINE_CHECK(!t.empty() && t.numel() == rows * N && (rows == 1 || t.dim(0) == rows) &&
                   t.dtype() == row_max.dtype() && t.device() == row_max.device(),
               op, ": ", what, " is ", t.describe(), ", expected ", rows == 1 ? "(" : "(2, ", N, ") of ",
               dtype_name(row_max.dtype()), " on ", device_name(row_max.device()));
}
}  // namespace

void cross_entropy_partial_max(const Tensor& row_max, const Tensor& logits, std::int64_t vocab_start,
                               std::int64_t vocab_size) {
  ScopedOpTimer timer("cross_entropy_partial_max");
  check_vocab_parallel_ce("cross_entropy_partial_max", logits, row_max, nullptr, vocab_start, vocab_size);
  ENGINE_DISPATCH(logits, cross_entropy_partial_max, row_max, logits, vocab_start, vocab_size);
}

void cross_entropy_partial_sums(const Tensor& sums, const Tensor& logits, const Tensor& row_max,
                                const Tensor& targets, std::int64_t vocab_start, std::int64_t vocab_size) {
  ScopedOpTimer timer("cross_entropy_partial_sums");
  const char* op = "cross_entropy_partial_sums";
  const std::int64_t N = check_vocab_parallel_ce(op, logits, row_max, &targets, vocab_start, vocab_size);
  expect_stat(op, "sums", sums, 2, N, row_max);
  ENGINE_DISPATCH(logits, cross_entropy_partial_sums, sums, logits, row_max, targets, vocab_start, vocab_size);
}

void cross_entropy_finish(const Tensor& losses, const Tensor& logits, const Tensor& row_max, const Tensor& sums,
                          const Tensor& targets, std::int64_t vocab_start, std::int64_t vocab_size,
                          double grad_scale) {
  ScopedOpTimer timer("cross_entropy_finish");
  const char* op = "cross_entropy_finish";
  const std::int64_t N = check_vocab_parallel_ce(op, logits, row_max, &targets, vocab_start, vocab_size);
  expect_stat(op, "sums", sums, 2, N, row_max);
  expect_stat(op, "losses", losses, 1, N, row_max);
  ENGINE_DISPATCH(logits, cross_entropy_finish, losses, logits, row_max, sums, targets, vocab_start, vocab_size,
                  grad_scale);
}

void adamw_update(const Tensor& params, const Tensor& grads, const Tensor& m, const Tensor& v,
                  const AdamWHyper& hyper, const Tensor& working) {
  ScopedOpTimer timer("adamw_update");
  const std::int64_t n = params.numel();
  expect_numel(grads, n, "adamw_update: grads");
  expect_numel(m, n, "adamw_update: m");
  expect_numel(v, n, "adamw_update: v");
  if (!working.empty()) expect_numel(working, n, "adamw_update: working");
  ENGINE_CHECK(hyper.step >= 1, "adamw_update: step must be >= 1, got ", hyper.step);
  if (n == 0) return;
  ENGINE_DISPATCH(params, adamw_update, params, grads, m, v, hyper, working);
}

}  // namespace engine::ops
