#include "launch/peak_flops.h"

#include <algorithm>
#include <chrono>

#include "engine/buffer.h"
#include "engine/check.h"
#include "engine/device.h"
#include "engine/ops.h"

namespace launch {

double measure_cpu_matmul_flops() {
  using Clock = std::chrono::steady_clock;
  const std::int64_t n = 1024;
  engine::Buffer a(engine::DeviceType::kCpu, n * n * 4), w(engine::DeviceType::kCpu, n * n * 4),
      o(engine::DeviceType::kCpu, n * n * 4);
  const engine::Tensor ta = a.as_tensor(engine::Shape{n, n}, engine::DType::kF32);
  const engine::Tensor tw = w.as_tensor(engine::Shape{n, n}, engine::DType::kF32);
  const engine::Tensor to = o.as_tensor(engine::Shape{n, n}, engine::DType::kF32);
  engine::ops::fill(ta, 0.5);
  engine::ops::fill(tw, 0.25);
  double best = 1e30;
  for (int rep = 0; rep < 4; ++rep) {  // the first warms up caches and threads
    const auto t0 = Clock::now();
    engine::ops::matmul_forward(to, ta, tw, engine::Tensor{});
    if (rep > 0) best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return 2.0 * n * n * n / best;
}

double peak_flops_per_device(const TrainConfig& config, int gpu, std::ostream* out) {
  if (config.peak_tflops > 0) {
    if (out) *out << "peak       " << config.peak_tflops << " TFLOP/s per device (--peak-tflops)\n";
    return config.peak_tflops * 1e12;
  }
  if (config.device_type == engine::DeviceType::kCuda) {
    const std::string name = engine::cuda_device_name(gpu);
    const double peak = engine::gpu_peak_flops_by_name(name);
    ENGINE_CHECK(peak > 0, "no peak FLOP/s known for GPU '", name, "'; give it with --peak-tflops");
    if (out) *out << "peak       " << peak / 1e12 << " TFLOP/s dense bf16 (" << name << ", from the device table)\n";
    return peak;
  }
  if (!out) return 1.0;  // only the logger reports MFU
  const double peak = measure_cpu_matmul_flops();
  *out << "peak       " << peak / 1e9 << " GFLOP/s fp32 (measured: best 1024^3 matmul on this CPU)\n";
  return peak;
}

}  // namespace launch
