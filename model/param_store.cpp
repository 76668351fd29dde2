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

bool separate_working_copy(Precision precision, bool master_sharded, bool weights_sharded) {
  return activation_dtype(precision) != master_dtype(precision) || master_sharded != weights_sharded;
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

ParamStore::ParamStore(const ParamRegistry& registry, engine::DeviceType device, Precision precision,
                       StoreSharding sharding)
    : registry_(registry), device_(device), precision_(precision), sharding_(std::move(sharding)) {
  ENGINE_CHECK(!(precision == Precision::kFp64 && device != engine::DeviceType::kCpu),
               "fp64 precision is only available on the CPU backend");
  ENGINE_CHECK(!(precision == Precision::kBf16 && device == engine::DeviceType::kCpu),
               "bf16 precision needs --device cuda; the CPU backend computes in fp32");
  const std::int64_t shard = parallel::shard_elements(sharding_.owned);
  ENGINE_CHECK(!(sharding_.master || sharding_.weights || sharding_.grads) || !sharding_.owned.empty(),
               "a sharded parameter store needs the chunks this rank owns");
  ENGINE_CHECK(!sharding_.weights || sharding_.master, "sharded working weights need a sharded master (ZeRO-3)");
  const std::int64_t master_elements = sharding_.master ? shard : registry.total_numel();
  const std::int64_t working_elements = sharding_.weights ? shard : registry.total_numel();
  const std::int64_t grad_elements = sharding_.grads ? shard : registry.total_numel();
  const engine::DType mdt = master_dtype(precision);
  master_buffer_ = engine::Buffer(device, master_elements * engine::dtype_size(mdt));
  master_ = master_buffer_.as_tensor(engine::Shape{master_elements}, mdt);
  grad_buffer_ = engine::Buffer(device, grad_elements * engine::dtype_size(mdt));
  grads_ = grad_buffer_.as_tensor(engine::Shape{grad_elements}, mdt);
  const engine::DType adt = activation_dtype(precision);
  if (!separate_working_copy(precision, sharding_.master, sharding_.weights)) {
    working_ = master_;
  } else {
    working_buffer_ = engine::Buffer(device, working_elements * engine::dtype_size(adt));
    working_ = working_buffer_.as_tensor(engine::Shape{working_elements}, adt);
  }
  zero_grads();
}

engine::Tensor ParamStore::weight(const std::string& name) const {
  ENGINE_CHECK(!sharding_.weights, "ParamStore::weight('", name,
               "'): the weights are sharded (ZeRO-3); reach them through model::ParamAccess");
  return registry_.view(working_, name);
}

engine::Tensor ParamStore::grad(const std::string& name) const {
  ENGINE_CHECK(!sharding_.grads, "ParamStore::grad('", name,
               "'): the gradients are sharded (ZeRO-2/3); reach them through model::ParamAccess");
  return registry_.view(grads_, name);
}

void ParamStore::zero_grads() { engine::ops::fill(grads_, 0.0); }

void ParamStore::initialize(std::uint64_t seed) {
  if (device_ == engine::DeviceType::kCpu && !sharding_.master) {
    registry_.initialize(master_, seed);
    if (working_.data() != master_.data()) engine::ops::copy(working_, master_);
    return;
  }
  // Initialise the whole layout on the host, then keep (upload) what this
  // store holds: the same numbers on any device and any sharding.
  engine::Buffer host(engine::DeviceType::kCpu, registry_.total_numel() * engine::dtype_size(master_.dtype()));
  const engine::Tensor h = host.as_tensor(engine::Shape{registry_.total_numel()}, master_.dtype());
  registry_.initialize(h, seed);
  set_weights(h);
}

void ParamStore::copy_owned(const engine::Tensor& dst, const engine::Tensor& whole, bool sharded) const {
  if (!sharded) {
    engine::ops::copy(dst, whole);
    return;
  }
  for (const parallel::ShardChunk& c : sharding_.owned)
    engine::ops::copy(dst.flat_slice(c.shard_offset, c.count), whole.flat_slice(c.full_offset, c.count));
}

void ParamStore::set_weights(const engine::Tensor& whole) {
  copy_owned(master_, whole, sharding_.master);
  if (working_.data() != master_.data()) copy_owned(working_, whole, sharding_.weights);
}

void ParamStore::download_master(float* host) const {
  ENGINE_CHECK(!sharding_.master, "ParamStore::download_master: the master weights are sharded (ZeRO); gather "
               "them through the data-parallel strategy (download_master)");
  engine::ops::copy(engine::Tensor(host, master_.shape(), engine::DType::kF32, engine::DeviceType::kCpu),
                    master_);
}

void ParamStore::upload_master(const float* host) {
  set_weights(engine::Tensor(const_cast<float*>(host), engine::Shape{registry_.total_numel()}, engine::DType::kF32,
                             engine::DeviceType::kCpu));
}

}  // namespace model
