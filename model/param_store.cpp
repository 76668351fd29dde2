#include "model/param_store.h"

#include <vector>

#include "engine/ops.h"

namespace model {

engine::DType activation_dtype(Precision precision) {
  switch (precision) {
    case Precision::kFp32: return engine::DType::kF32;
    case Precision::kFp64: return engine::DType::kF64;
    case Precision::kBf16: return engine::DType::kBF16;
  }
  return engine::DType::kF32;
}

engine::DType master_dtype(Precision precision) {
  return precision == Precision::kFp64 ? engine::DType::kF64 : engine::DType::kF32;
}

Precision parse_precision(const std::string& text) {
  if (text == "fp32") return Precision::kFp32;
  if (text == "fp64") return Precision::kFp64;
  if (text == "bf16") return Precision::kBf16;
  ENGINE_FAIL("unknown precision '", text, "'; expected fp32, fp64 or bf16");
}

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::kFp32: return "fp32";
    case Precision::kFp64: return "fp64";
    case Precision::kBf16: return "bf16";
  }
  return "?";
}

ParamStore::ParamStore(const ParamRegistry& registry, engine::DeviceType device, Precision precision)
    : registry_(registry), device_(device), precision_(precision) {
  ENGINE_CHECK(!(precision == Precision::kFp64 && device != engine::DeviceType::kCpu),
               "fp64 precision is only available on the CPU backend");
  ENGINE_CHECK(!(precision == Precision::kBf16 && device == engine::DeviceType::kCpu),
               "bf16 precision needs --device cuda; the CPU backend computes in fp32");
  const engine::Shape flat{registry.total_numel()};
  const engine::DType mdt = master_dtype(precision);
  master_buffer_ = engine::Buffer(device, registry.total_numel() * engine::dtype_size(mdt));
  master_ = master_buffer_.as_tensor(flat, mdt);
  grad_buffer_ = engine::Buffer(device, registry.total_numel() * engine::dtype_size(mdt));
  grads_ = grad_buffer_.as_tensor(flat, mdt);
  const engine::DType adt = activation_dtype(precision);
  if (adt == mdt) {
    working_ = master_;
  } else {
    working_buffer_ = engine::Buffer(device, registry.total_numel() * engine::dtype_size(adt));
    working_ = working_buffer_.as_tensor(flat, adt);
  }
  zero_grads();
}

void ParamStore::zero_grads() { engine::ops::fill(grads_, 0.0); }

void ParamStore::initialize(std::uint64_t seed) {
  if (device_ == engine::DeviceType::kCpu) {
    registry_.initialize(master_, seed);
  } else {
    // Initialise on the host in f32, then upload: the same numbers on any device.
    engine::Buffer host(engine::DeviceType::kCpu, master_.bytes());
    const engine::Tensor h = host.as_tensor(master_.shape(), master_.dtype());
    registry_.initialize(h, seed);
    engine::ops::copy(master_, h);
  }
  refresh_working();
}

void ParamStore::refresh_working() {
  if (working_.data() != master_.data()) engine::ops::copy(working_, master_);
}

void ParamStore::download_master(float* host) const {
  engine::ops::copy(engine::Tensor(host, master_.shape(), engine::DType::kF32, engine::DeviceType::kCpu),
                    master_);
}

void ParamStore::upload_master(const float* host) {
  engine::ops::copy(master_, engine::Tensor(const_cast<float*>(host), master_.shape(), engine::DType::kF32,
                                            engine::DeviceType::kCpu));
  refresh_working();
}

}  // namespace model
