// 1-bit Adam (onebit_adam.h explains the algorithm and the decisions).
#include "optim/onebit_adam.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "engine/check.h"
#include "engine/ops.h"

namespace optim {

namespace {

using engine::DeviceType;
using engine::DType;
using engine::Shape;
using engine::Tensor;

// Below this many elements a loop runs on one thread.
constexpr std::int64_t kParallelMin = 1 << 14;

using engine::host_f32;

// A host f32 view of a device tensor: the tensor itself on the CPU, else a
// staged copy (CUDA) that put_back() writes back.
class HostView {
 public:
  HostView(const Tensor& t, bool load) : t_(t) {
    if (t.device() == DeviceType::kCpu && t.dtype() == DType::kF32) {
      data_ = t.data_as<float>();
      return;
    }
    staged_ = engine::Buffer(DeviceType::kCpu, static_cast<std::size_t>(t.numel()) * sizeof(float));
    data_ = static_cast<float*>(staged_.data());
    if (load) engine::ops::copy(host_f32(data_, t.numel()), t);
  }
  float* data() const { return data_; }
  void put_back() const {
    if (data_ != t_.data()) engine::ops::copy(t_, host_f32(data_, t_.numel()));
  }

 private:
  Tensor t_;
  engine::Buffer staged_;
  float* data_ = nullptr;
};

}  // namespace

void OneBitAdamConfig::validate() const {
  adam.validate();
  ENGINE_CHECK(freeze_step >= 1, "1-bit Adam needs --freeze-step >= 1 (AdamW steps that estimate the variance "
               "before it is frozen), got ", freeze_step);
}

// ---- local arithmetic -------------------------------------------------------------

void onebit_momentum_update(float* m, const float* g, std::int64_t n, double beta1, double grad_scale) {
  // m, g: (n)
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (std::int64_t i = 0; i < n; ++i)
    m[i] = static_cast<float>(beta1 * static_cast<double>(m[i]) + (1.0 - beta1) * grad_scale * static_cast<double>(g[i]));
}

double adam_ratio_bound(double beta1, double beta2) {
  const double r = beta1 * beta1 / beta2;
  if (r >= 1.0) return std::numeric_limits<double>::infinity();
  return std::max(1.0, (1.0 - beta1) / std::sqrt((1.0 - beta2) * (1.0 - r)));
}

void onebit_param_update(float* p, const float* m, const float* v, std::int64_t n, const OneBitUpdateHyper& h,
                         float* working) {
  // p, m, v, working: (n). Double arithmetic like the AdamW op.
  const double lr = h.lr, eps = h.eps, wd = h.weight_decay, bias1 = h.bias1, bias2 = h.bias2,
               max_ratio = h.max_ratio;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (std::int64_t i = 0; i < n; ++i) {
    const double pi = static_cast<double>(p[i]);
    const double vi = static_cast<double>(v[i]);
    const double ratio = vi > 0.0 ? (static_cast<double>(m[i]) / bias1) / (std::sqrt(vi / bias2) + eps) : 0.0;
    const double adam = std::clamp(ratio, -max_ratio, max_ratio);
    p[i] = static_cast<float>(pi - lr * (adam + wd * pi));
    if (working) working[i] = p[i];
  }
}

// ---- the optimizer ----------------------------------------------------------------

OneBitAdam::OneBitAdam(FlatParams params, std::vector<ParamSegment> segments, OneBitAdamConfig config,
                       parallel::Communicator& dp, std::vector<CompressionGroup> groups,
                       std::int64_t variance_elements, std::vector<std::pair<std::int64_t, std::int64_t>> padding)
    : params_(params), config_(config), segments_(std::move(segments)), padding_(std::move(padding)) {
  config_.validate();
  const Tensor& master = params_.master;
  ENGINE_CHECK(master.dtype() == DType::kF32 && params_.grads.dtype() == DType::kF32,
               "1-bit Adam needs f32 master weights and gradients, got ", master.describe(), " and ",
               params_.grads.describe());
  const std::int64_t n = params_.grads.numel();
  if (variance_elements < 0) variance_elements = master.numel();
  auto inside = [](std::int64_t offset, std::int64_t count, std::int64_t size) {
    return offset >= 0 && count >= 0 && offset + count <= size;
  };
  for (ParamSegment& s : segments_) {
    if (s.master_offset < 0) s.master_offset = s.offset;
    if (s.state_offset < 0) s.state_offset = s.offset;
    ENGINE_CHECK(s.grad_offset < 0 || s.grad_offset == s.offset,
                 "1-bit Adam: the gradients must be whole (ZeRO stage 0 or 1), got a sharded gradient segment");
    ENGINE_CHECK(inside(s.offset, s.count, n) && inside(s.master_offset, s.count, master.numel()) &&
                     inside(s.state_offset, s.count, variance_elements),
                 "1-bit Adam: segment of ", s.count, " elements at ", s.offset, " (master ", s.master_offset,
                 ", variance ", s.state_offset, ") is outside the buffers (", n, " gradients, ", master.numel(),
                 " master, ", variance_elements, " variance)");
  }
  if (params_.working.data() == master.data()) params_.working = Tensor{};
  for (const auto& [offset, count] : padding_)
    ENGINE_CHECK(inside(offset, count, n), "1-bit Adam: padding range [", offset, ", ", offset + count,
                 ") is outside the ", n, "-element layout");

  // The groups must tile [0, n): every element's momentum is exchanged once.
  std::vector<std::pair<std::int64_t, std::int64_t>> all;
  for (CompressionGroup& g : groups) {
    std::int64_t count = 0;
    for (const auto& r : g.ranges) {
      ENGINE_CHECK(inside(r.first, r.second, n), "1-bit Adam: compression group '", g.name, "' range [", r.first,
                   ", ", r.first + r.second, ") is outside the ", n, "-element layout");
      all.push_back(r);
      count += r.second;
    }
    if (count > 0) groups_.push_back(std::move(g));
  }
  std::sort(all.begin(), all.end());
  std::int64_t covered = 0;
  for (const auto& [offset, count] : all) {
    ENGINE_CHECK(offset == covered, "1-bit Adam: the compression groups must tile the flat layout exactly; "
                 "element ", covered, " is ", offset < covered ? "in two groups" : "in none");
    covered += count;
  }
  ENGINE_CHECK(covered == n, "1-bit Adam: the compression groups cover ", covered, " of ", n, " elements");
  single_contiguous_group_ = groups_.size() == 1 && groups_[0].ranges.size() == 1;

  // Compressors exchange host buffers over an MPI communicator, device
  // buffers over NCCL (which moves device memory only).
  const DeviceType exchange_device =
      std::string(dp.backend()) == "nccl" ? DeviceType::kCuda : DeviceType::kCpu;
  for (const CompressionGroup& g : groups_) {
    std::int64_t count = 0;
    for (const auto& r : g.ranges) count += r.second;
    compressors_.push_back(std::make_unique<parallel::CompressedAllReduce>(dp, count, exchange_device, config_.scale));
  }
  if (!single_contiguous_group_ || exchange_device == DeviceType::kCuda)
    pack_ = engine::Buffer(DeviceType::kCpu, static_cast<std::size_t>(n) * sizeof(float));

  m_buffer_ = engine::Buffer(master.device(), static_cast<std::size_t>(n) * sizeof(float));
  v_buffer_ = engine::Buffer(master.device(), static_cast<std::size_t>(variance_elements) * sizeof(float));
  m_ = m_buffer_.as_tensor(Shape{n}, DType::kF32);
  v_ = v_buffer_.as_tensor(Shape{variance_elements}, DType::kF32);
  engine::ops::fill(m_, 0.0);
  engine::ops::fill(v_, 0.0);
}

OneBitAdam::~OneBitAdam() = default;

std::uint64_t OneBitAdam::compressed_bytes_per_step() const {
  std::uint64_t bytes = 0;
  for (const auto& c : compressors_) bytes += c->bytes_per_call();
  return bytes;
}

std::uint64_t OneBitAdam::extra_state_bytes() const {
  std::uint64_t bytes = pack_.bytes();
  for (const auto& c : compressors_)
    bytes += static_cast<std::uint64_t>(c->n() + c->server_count()) * sizeof(float);
  return bytes;
}

void OneBitAdam::step(double lr, double grad_scale) {
  if (compressing()) compression_step(lr, grad_scale);
  else warmup_step(lr, grad_scale);
}

void OneBitAdam::warmup_step(double lr, double grad_scale) {
  // Exactly optim::AdamW::step (the same op, arguments and order), with the
  // momentum read at the full-layout offset: elementwise, so bit-identical.
  ++steps_;
  for (const ParamSegment& s : segments_) {
    engine::ops::AdamWHyper h;
    h.lr = lr;
    h.beta1 = config_.adam.beta1;
    h.beta2 = config_.adam.beta2;
    h.eps = config_.adam.eps;
    h.weight_decay = s.decay ? config_.adam.weight_decay : 0.0;
    h.grad_scale = grad_scale;
    h.step = steps_;
    const Tensor working = params_.working.empty() ? Tensor{} : params_.working.flat_slice(s.offset, s.count);
    engine::ops::adamw_update(params_.master.flat_slice(s.master_offset, s.count),
                              params_.grads.flat_slice(s.offset, s.count), m_.flat_slice(s.offset, s.count),
                              v_.flat_slice(s.state_offset, s.count), h, working);
  }
}

void OneBitAdam::compression_step(double lr, double grad_scale) {
  ++steps_;
  const std::int64_t n = m_.numel();
  const HostView m(m_, true), g(params_.grads, true);
  // 1. Local momentum from the local gradient (Algorithm 1, worker line 1),
  //    over the whole layout: the exchange needs every element.
  onebit_momentum_update(m.data(), g.data(), n, config_.adam.beta1, grad_scale);
  // 2. m := compressed mean over dp (Algorithm 1, the 1-bit all-reduce).
  exchange_momentum(m.data());
  for (const auto& [offset, count] : padding_) std::fill(m.data() + offset, m.data() + offset + count, 0.0f);
  m.put_back();
  // 3. The update, over the segments this rank owns (all, without ZeRO).
  const HostView p(params_.master, true), v(v_, true);
  const bool working_is_host_f32 = !params_.working.empty() && params_.working.device() == DeviceType::kCpu &&
                                   params_.working.dtype() == DType::kF32;
  OneBitUpdateHyper h;
  h.lr = lr;
  h.eps = config_.adam.eps;
  h.bias1 = 1.0 - std::pow(config_.adam.beta1, static_cast<double>(steps_));
  h.bias2 = 1.0 - std::pow(config_.adam.beta2, static_cast<double>(config_.freeze_step));
  h.max_ratio = adam_ratio_bound(config_.adam.beta1, config_.adam.beta2);
  for (const ParamSegment& s : segments_) {
    h.weight_decay = s.decay ? config_.adam.weight_decay : 0.0;
    float* working = working_is_host_f32 ? params_.working.data_as<float>() + s.offset : nullptr;
    onebit_param_update(p.data() + s.master_offset, m.data() + s.offset, v.data() + s.state_offset, s.count, h,
                        working);
  }
  p.put_back();
  if (!params_.working.empty() && !working_is_host_f32)  // e.g. the bf16 copy on CUDA
    for (const ParamSegment& s : segments_)
      engine::ops::copy(params_.working.flat_slice(s.offset, s.count), params_.master.flat_slice(s.master_offset, s.count));
}

void OneBitAdam::exchange_momentum(float* m) {
  const bool on_device = compressors_.front()->device() == DeviceType::kCuda;
  float* pack = static_cast<float*>(pack_.data());
  if (single_contiguous_group_ && !on_device) {
    compressors_[0]->all_reduce_mean(host_f32(m, m_.numel()));
    return;
  }
  // Pack each group's ranges contiguously, exchange, unpack.
  std::int64_t at = 0;
  std::vector<std::int64_t> starts;
  for (const CompressionGroup& g : groups_) {
    starts.push_back(at);
    for (const auto& [offset, count] : g.ranges) {
      std::memcpy(pack + at, m + offset, static_cast<std::size_t>(count) * sizeof(float));
      at += count;
    }
  }
  engine::Buffer device_pack;
  if (on_device) {
    device_pack = engine::Buffer(DeviceType::kCuda, pack_.bytes());
    engine::ops::copy(Tensor(device_pack.data(), Shape{at}, DType::kF32, DeviceType::kCuda), host_f32(pack, at));
  }
  for (std::size_t i = 0; i < groups_.size(); ++i) {
    parallel::CompressedAllReduce& c = *compressors_[i];
    if (on_device)
      c.all_reduce_mean(Tensor(static_cast<float*>(device_pack.data()) + starts[i], Shape{c.n()}, DType::kF32,
                               DeviceType::kCuda));
    else
      c.all_reduce_mean(host_f32(pack + starts[i], c.n()));
  }
  if (on_device)
    engine::ops::copy(host_f32(pack, at), Tensor(device_pack.data(), Shape{at}, DType::kF32, DeviceType::kCuda));
  at = 0;
  for (const CompressionGroup& g : groups_)
    for (const auto& [offset, count] : g.ranges) {
      std::memcpy(m + offset, pack + at, static_cast<std::size_t>(count) * sizeof(float));
      at += count;
    }
}

}  // namespace optim
