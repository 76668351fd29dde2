// Memory and elementwise ops: fill, copy (with dtype conversion, across
// devices), scale, add, accumulate, sum_of_squares.
//
// Elementwise kernels are grid-stride loops computing in f32 (f64 for f64
// tensors), one rounding to the output dtype. They are memory-bound and
// small next to the matmuls, so they stay scalar and simple.
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "engine/cpu/cpu_ops.h"
#include "engine/cuda/common.cuh"
#include "engine/cuda/cuda_ops.h"
#include "engine/device.h"

namespace engine::cuda {
namespace {

// ---- conversions between the float dtypes, one correct rounding each --------
template <typename Dst>
__device__ __forceinline__ Dst convert(float x);
template <typename Dst>
__device__ __forceinline__ Dst convert(double x);
template <typename Dst>
__device__ __forceinline__ Dst convert(bf16 x) {
  return convert<Dst>(__bfloat162float(x));
}
template <>
__device__ __forceinline__ float convert<float>(float x) { return x; }
template <>
__device__ __forceinline__ double convert<double>(float x) { return x; }
template <>
__device__ __forceinline__ bf16 convert<bf16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ float convert<float>(double x) { return static_cast<float>(x); }
template <>
__device__ __forceinline__ double convert<double>(double x) { return x; }
template <>
__device__ __forceinline__ bf16 convert<bf16>(double x) { return __double2bfloat16(x); }  // correctly rounded

// Like dispatch_float, plus f64 (copies and sum_of_squares accept it).
template <typename F>
void dispatch_any_float(DType dtype, const char* what, F&& f) {
  switch (dtype) {
    case DType::kF32: f(float{}); return;
    case DType::kF64: f(double{}); return;
    case DType::kBF16: f(bf16{}); return;
    default: ENGINE_FAIL(what, ": dtype ", dtype_name(dtype), " is not supported here (f32, f64 or bf16)");
  }
}

// ---- kernels -------------------------------------------------------------------
template <typename T>
__global__ void fill_kernel(T* __restrict__ t, std::int64_t n, T value) {  // t (n)
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x)
    t[i] = value;
}

template <typename Dst, typename Src>
__global__ void convert_kernel(Dst* __restrict__ dst, const Src* __restrict__ src, std::int64_t n) {  // (n)
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x)
    dst[i] = convert<Dst>(src[i]);
}

template <typename T>
__global__ void scale_kernel(T* __restrict__ t, std::int64_t n, float factor) {  // t (n)
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x)
    t[i] = from_float<T>(to_float(t[i]) * factor);
}
__global__ void scale_kernel_f64(double* __restrict__ t, std::int64_t n, double factor) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x)
    t[i] *= factor;
}

// out = a + b. No __restrict__: out may alias a or b (safe elementwise).
template <typename O, typename A, typename B>
__global__ void add_kernel(O* out, const A* a, const B* b, std::int64_t n) {  // (n) each
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x)
    out[i] = from_float<O>(to_float(a[i]) + to_float(b[i]));
}

// The same for one dtype with 16-byte loads and stores (the residual adds of
// a GPT block: on the H100 the scalar kernel moved 1.5 TB/s there). Each
// thread loads a pack of a and b before storing that pack of out, so out may
// still alias a or b.
template <typename T>
__global__ void add_vec_kernel(T* out, const T* a, const T* b, std::int64_t packs) {  // (packs * V) each
  constexpr int V = Pack16<T>::kSize;
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < packs;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const Pack16<T> x = load16(a + i * V), y = load16(b + i * V);
    Pack16<T> r;
#pragma unroll
    for (int k = 0; k < V; ++k) r.v[k] = from_float<T>(to_float(x.v[k]) + to_float(y.v[k]));
    store16(out + i * V, r);
  }
}

// dst += src (e.g. an f32 gradient accumulating a bf16 one).
template <typename D, typename S>
__global__ void accumulate_kernel(D* dst, const S* src, std::int64_t n) {  // (n) each
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x)
    dst[i] = from_float<D>(to_float(dst[i]) + to_float(src[i]));
}

// Sum of squares in fp64, deterministically: every block reduces a fixed
// grid-stride subset in a fixed order (grid size depends only on n), the
// partials are summed by one block in a fixed order.
constexpr int kSumBlocks = 1024;

__device__ __forceinline__ double as_double(float x) { return x; }
__device__ __forceinline__ double as_double(double x) { return x; }
__device__ __forceinline__ double as_double(bf16 x) { return __bfloat162float(x); }

__device__ double block_sum(double v) {  // blockDim.x == kThreads; result valid in thread 0
  __shared__ double warp_sums[kThreads / 32];
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
  __syncthreads();
  double total = 0.0;
  if (threadIdx.x == 0)
    for (int w = 0; w < kThreads / 32; ++w) total += warp_sums[w];
  return total;
}

template <typename T>
__global__ void sum_of_squares_partial_kernel(double* __restrict__ partial, const T* __restrict__ x,
                                              std::int64_t n) {  // partial (gridDim.x), x (n)
  double sum = 0.0;
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const double v = as_double(x[i]);
    sum += v * v;
  }
  sum = block_sum(sum);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

__global__ void sum_partials_kernel(double* __restrict__ result, const double* __restrict__ partial, int count) {
  double sum = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) sum += partial[i];
  sum = block_sum(sum);
  if (threadIdx.x == 0) *result = sum;
}

// Host-side staging for a cross-device copy that also converts: the CPU
// backend's conversion (same rounding as the device's) on a host buffer.
void copy_across_devices(const Tensor& dst, const Tensor& src) {
  if (dst.dtype() == src.dtype()) {
    copy_bytes(dst.data(), dst.device(), src.data(), src.device(), dst.bytes());
    return;
  }
  if (src.device() == DeviceType::kCpu) {  // host src -> convert on host -> device dst
    std::vector<char> staging(dst.bytes());
    const Tensor host_dst(staging.data(), dst.shape(), dst.dtype(), DeviceType::kCpu);
    cpu::copy(host_dst, src.view(dst.shape()));
    copy_bytes(dst.data(), DeviceType::kCuda, staging.data(), DeviceType::kCpu, dst.bytes());
  } else {  // device src -> host staging in src dtype -> convert into host dst
    std::vector<char> staging(src.bytes());
    copy_bytes(staging.data(), DeviceType::kCpu, src.data(), DeviceType::kCuda, src.bytes());
    const Tensor host_src(staging.data(), dst.shape(), src.dtype(), DeviceType::kCpu);
    cpu::copy(dst, host_src);
  }
}

}  // namespace

void fill(const Tensor& t, double value) {
  expect_cuda(t, "fill: t");
  const std::int64_t n = t.numel();
  cudaStream_t stream = current_stream();
  if (t.dtype() == DType::kI32) {
    ENGINE_CHECK(value == std::trunc(value) && std::fabs(value) <= 2147483647.0, "fill: value ", value,
                 " is not representable in i32 tensor ", t.describe());
    fill_kernel<<<grid_for(n), kThreads, 0, stream>>>(t.data_as<std::int32_t>(), n,
                                                       static_cast<std::int32_t>(value));
    CUDA_CHECK_LAUNCH();
    return;
  }
  dispatch_any_float(t.dtype(), "fill", [&](auto tag) {
    using T = decltype(tag);
    T v;
    if constexpr (std::is_same_v<T, bf16>) v = __double2bfloat16(value);  // host-callable, correctly rounded
    else v = static_cast<T>(value);
    fill_kernel<<<grid_for(n), kThreads, 0, stream>>>(t.data_as<T>(), n, v);
    CUDA_CHECK_LAUNCH();
  });
}

void copy(const Tensor& dst, const Tensor& src) {
  // ops.cpp sends every copy with a cuda side here, including cpu <-> cuda.
  if (dst.device() != DeviceType::kCuda || src.device() != DeviceType::kCuda)
    return copy_across_devices(dst, src);
  const std::int64_t n = dst.numel();
  if (dst.dtype() == src.dtype()) {
    CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), dst.bytes(), cudaMemcpyDeviceToDevice, current_stream()));
    return;
  }
  ENGINE_CHECK(dst.dtype() != DType::kI32 && src.dtype() != DType::kI32, "copy: cannot convert ",
               src.describe(), " to ", dst.describe(), " (i32 copies only to i32)");
  dispatch_any_float(dst.dtype(), "copy: dst", [&](auto dst_tag) {
    dispatch_any_float(src.dtype(), "copy: src", [&](auto src_tag) {
      using D = decltype(dst_tag);
      using S = decltype(src_tag);
      convert_kernel<<<grid_for(n), kThreads, 0, current_stream()>>>(dst.data_as<D>(), src.data_as<const S>(), n);
      CUDA_CHECK_LAUNCH();
    });
  });
}

void scale(const Tensor& t, double factor) {
  expect_cuda(t, "scale: t");
  const std::int64_t n = t.numel();
  if (t.dtype() == DType::kF64) {
    scale_kernel_f64<<<grid_for(n), kThreads, 0, current_stream()>>>(t.data_as<double>(), n, factor);
    CUDA_CHECK_LAUNCH();
    return;
  }
  dispatch_float(t.dtype(), "scale", [&](auto tag) {
    using T = decltype(tag);
    scale_kernel<<<grid_for(n), kThreads, 0, current_stream()>>>(t.data_as<T>(), n, static_cast<float>(factor));
    CUDA_CHECK_LAUNCH();
  });
}

void add(const Tensor& out, const Tensor& a, const Tensor& b) {
  expect_cuda(out, "add: out");
  const std::int64_t n = out.numel();
  if (n == 0) return;
  const DType dt = out.dtype();
  const std::int64_t v = pack16_elements(dt);
  if ((dt == DType::kBF16 || dt == DType::kF32) && a.dtype() == dt && b.dtype() == dt && n % v == 0 &&
      aligned(out.data(), 16) && aligned(a.data(), 16) && aligned(b.data(), 16)) {
    dispatch_float(dt, "add: out", [&](auto tag) {
      using T = decltype(tag);
      add_vec_kernel<<<grid_for(n / v), kThreads, 0, current_stream()>>>(out.data_as<T>(), a.data_as<const T>(),
                                                                         b.data_as<const T>(), n / v);
      CUDA_CHECK_LAUNCH();
    });
    return;
  }
  // Mixed dtypes are allowed (e.g. a bf16 residual plus an f32 branch): the
  // sum is formed in f32 and rounded once.
  dispatch_float(out.dtype(), "add: out", [&](auto o_tag) {
    dispatch_float(a.dtype(), "add: a", [&](auto a_tag) {
      dispatch_float(b.dtype(), "add: b", [&](auto b_tag) {
        using O = decltype(o_tag);
        using A = decltype(a_tag);
        using B = decltype(b_tag);
        add_kernel<<<grid_for(n), kThreads, 0, current_stream()>>>(out.data_as<O>(), a.data_as<const A>(),
                                                                    b.data_as<const B>(), n);
        CUDA_CHECK_LAUNCH();
      });
    });
  });
}

void accumulate(const Tensor& dst, const Tensor& src) {
  expect_cuda(dst, "accumulate: dst");
  const std::int64_t n = dst.numel();
  if (n == 0) return;
  dispatch_float(dst.dtype(), "accumulate: dst", [&](auto d_tag) {
    dispatch_float(src.dtype(), "accumulate: src", [&](auto s_tag) {
      using D = decltype(d_tag);
      using S = decltype(s_tag);
      accumulate_kernel<<<grid_for(n), kThreads, 0, current_stream()>>>(dst.data_as<D>(), src.data_as<const S>(), n);
      CUDA_CHECK_LAUNCH();
    });
  });
}

double sum_of_squares(const Tensor& t) {
  expect_cuda(t, "sum_of_squares: t");
  const std::int64_t n = t.numel();
  const unsigned blocks = grid_for(n, kThreads, kSumBlocks);
  ScratchPlan plan;
  const std::size_t partial_at = plan.add(sizeof(double) * blocks);
  const std::size_t result_at = plan.add(sizeof(double));
  char* base = plan.allocate();
  double* partial = reinterpret_cast<double*>(base + partial_at);  // (blocks)
  double* result = reinterpret_cast<double*>(base + result_at);    // (1)
  cudaStream_t stream = current_stream();
  dispatch_any_float(t.dtype(), "sum_of_squares", [&](auto tag) {
    using T = decltype(tag);
    sum_of_squares_partial_kernel<<<blocks, kThreads, 0, stream>>>(partial, t.data_as<const T>(), n);
    CUDA_CHECK_LAUNCH();
  });
  sum_partials_kernel<<<1, kThreads, 0, stream>>>(result, partial, static_cast<int>(blocks));
  CUDA_CHECK_LAUNCH();
  double host = 0.0;
  CUDA_CHECK(cudaMemcpyAsync(&host, result, sizeof(double), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return host;
}

}  // namespace engine::cuda
