#include "launch/run/peak_flops.h"

#include <cstdio>
#include <string>

#include "engine/check.h"
#include "engine/device.h"
#include "model/flops.h"

namespace launch {

StepFlops step_flops(const TrainConfig& config) {
  const std::int64_t sequences = config.batch_tokens / config.seq_len;
  StepFlops f;
  f.model = model::training_flops_per_step(config.model, sequences, config.seq_len, config.attention_flops_mode);
  f.hardware = f.model + model::recompute_flops_per_step(config.model, sequences, config.seq_len,
                                                         config.recompute_mode, config.attention_flops_mode);
  return f;
}

PeakFlops PeakFlops::for_run(const TrainConfig& config, int gpu, MPI_Comm world, std::ostream* out) {
  if (config.peak_tflops > 0) {
    if (out) *out << "peak       " << config.peak_tflops << " TFLOP/s per device (--peak-tflops)\n";
    return PeakFlops(config.peak_tflops * 1e12);
  }
  if (config.device_type == engine::DeviceType::kCuda) {
    const std::string name = engine::cuda_device_name(gpu);
    const double peak = engine::gpu_peak_flops_by_name(name);
    ENGINE_CHECK(peak > 0, "no peak FLOP/s known for GPU '", name, "'; give it with --peak-tflops");
    if (out) *out << "peak       " << peak / 1e12 << " TFLOP/s dense bf16 (" << name << ", from the device table)\n";
    return PeakFlops(peak);
  }
  CpuPeak cpu = resolve_cpu_peak(world);
  if (out) *out << cpu.describe() << "\n";
  return PeakFlops(std::move(cpu));
}

PeakFlops::Utilization PeakFlops::utilization(std::int64_t step, const StepFlops& flops, double seconds, int devices,
                                              std::ostream* out) {
  // Rates per device, divided in the same order, so a raised peak gives HFU exactly 1 and MFU <= HFU.
  const double model_rate = flops.model / seconds / devices, hardware_rate = flops.hardware / seconds / devices;
  if (cpu_ && hardware_rate > per_device_) raise(step, hardware_rate, out);
  return {model_rate / per_device_, hardware_rate / per_device_};
}

void PeakFlops::raise(std::int64_t step, double achieved, std::ostream* out) {
  // Every node is assumed as much faster as this one's measurement was low.
  cpu_->node *= achieved / per_device_;
  cpu_->per_rank = per_device_ = achieved;
  cpu_->raised = true;
  // Said (and cached) when it moves by more than 1% since last said, not at
  // every step that edges past it.
  if (achieved <= reported_ * 1.01) return;
  const double before = reported_;
  reported_ = achieved;
  std::string cache = "; the cache is kept (several nodes)";
  if (cpu_->nodes == 1 && cpu_->writes_cache) {
    try {
      CpuPeakCache(cpu_->cache_path)
          .store(CpuPeakCache::key(cpu_->cpu, cpu_->share.threads), cpu_->cpu, cpu_->share.threads,
                 CachedPeak{cpu_->node, cpu_->date, true, cpu_->busy});
      cache = "; updated in " + cpu_->cache_path;
    } catch (const std::exception& e) {
      cache = std::string("; not cached: ") + e.what();
    }
  } else if (cpu_->nodes == 1) {
    cache = "";
  }
  if (!out) return;
  char line[256];
  std::snprintf(line, sizeof line,
                "peak       raised to %.1f GFLOP/s per rank (node %.1f): step %lld ran faster than the peak of "
                "%.1f, so MFU and HFU stay <= 100%%",
                achieved / 1e9, cpu_->node / 1e9, static_cast<long long>(step), before / 1e9);
  *out << line << cache << "\n";
}

}  // namespace launch
