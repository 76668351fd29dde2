// ParamStore: the flat buffers laid out by a ParamRegistry, on one device.
//
//   master   fp32 master weights (fp64 on the CPU's reference precision)
//   working  what layers compute with: bf16 under mixed precision on CUDA,
//            otherwise the master buffer itself (no copy)
//   grads    fp32 gradients (fp64 under the reference precision), accumulated
//            over micro-batches
//
// Under ZeRO a buffer may hold only this rank's chunks of the layout, packed
// (parallel/shard_layout.h): the gradients under stages 2 and 3, the master
// and working weights too under stage 3. Named views (weight(), grad()) exist
// only for whole buffers; layers then reach their units through
// model::ParamAccess.
#pragma once

#include <string>
#include <vector>

#include "engine/buffer.h"
#include "model/param_registry.h"
#include "parallel/data_parallel.h"

namespace model {

// How a model computes: the activation/working dtype and the master dtype.
enum class Precision : std::uint8_t {
  kFp32,  // everything f32 (the CPU backend; CUDA's exact-comparison mode)
  kFp64,  // everything f64 (CPU only: gradient checks)
  kBf16,  // bf16 working weights and activations, f32 master/grads (CUDA)
};
engine::DType activation_dtype(Precision precision);
engine::DType master_dtype(Precision precision);
Precision parse_precision(const std::string& text);  // "fp32" | "fp64" | "bf16"
const char* precision_name(Precision precision);

// Which buffers hold only this rank's chunks (ZeRO; the data-parallel
// strategy decides, parallel/data_parallel.h); default: none. The store
// reads `owned`, `weights` and `grads`.
using StoreSharding = parallel::Sharding;

class ParamStore {
 public:
  ParamStore(const ParamRegistry& registry, engine::DeviceType device, Precision precision,
             StoreSharding sharding = {});

  const ParamRegistry& registry() const { return registry_; }
  engine::DeviceType device() const { return device_; }
  Precision precision() const { return precision_; }

  const engine::Tensor& master() const { return master_; }
  const engine::Tensor& working() const { return working_; }
  const engine::Tensor& grads() const { return grads_; }

  const StoreSharding& sharding() const { return sharding_; }
  bool weights_sharded() const { return sharding_.weights; }
  bool grads_sharded() const { return sharding_.grads; }

  // Named views; only of whole (unsharded) buffers.
  engine::Tensor weight(const std::string& name) const;
  engine::Tensor grad(const std::string& name) const;

  void zero_grads();
  // Initialises the master weights from (seed, name) and refreshes the working copy.
  void initialize(std::uint64_t seed);
  // Copies master into working after master changed outside the optimizer
  // (loading a checkpoint). A no-op when working aliases master.
  void refresh_working();
  // Host <-> store transfers of the master weights as f32, laid out whole
  // (checkpoints). A sharded store takes its chunks of `host` on upload;
  // download needs a whole master (ZeRO-3 gathers through
  // parallel::ZeroUnits instead; under ZeRO-1/2 in bf16 only this rank's
  // chunks of the whole master are current: launch::Trainer::download_master
  // gathers them first).
  void download_master(float* host) const;
  void upload_master(const float* host);

 private:
  // dst (this store's master layout) := whole (the full layout), or this rank's chunks of it.
  void copy_owned(const engine::Tensor& dst, const engine::Tensor& whole) const;

  const ParamRegistry& registry_;
  engine::DeviceType device_;
  Precision precision_;
  StoreSharding sharding_;
  engine::Buffer master_buffer_, working_buffer_, grad_buffer_;
  engine::Tensor master_, working_, grads_;
};

}  // namespace model
