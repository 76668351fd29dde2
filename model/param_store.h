// ParamStore: the flat buffers laid out by a ParamRegistry, on one device.
//
//   master   fp32 master weights (fp64 on the CPU's reference precision)
//   working  what layers compute with: bf16 under mixed precision on CUDA,
//            otherwise the master buffer itself (no copy)
//   grads    fp32 gradients (fp64 under the reference precision), accumulated
//            over micro-batches
//
// Under ZeRO a buffer may hold only this rank's chunks of the layout, packed
// (parallel/shard_layout.h): the master weights from stage 1, the gradients
// from stage 2, the working weights too at stage 3. Named views (weight(),
// grad()) exist only for whole buffers; layers then reach their units through
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
// Whether the working weights are a buffer of their own rather than the master
// itself: a lower dtype (bf16 beside the fp32 master), or a whole copy beside
// a master sharded by ZeRO-1/2 (as DeepSpeed keeps an fp32 partition beside
// the model's parameters). The store, the memory plan and the optimizer's
// cost (model/step_cost.h) all ask this.
bool separate_working_copy(Precision precision, bool master_sharded, bool weights_sharded);
const char* precision_name(Precision precision);

// Which buffers hold only this rank's chunks (ZeRO; the data-parallel
// strategy decides, parallel/data_parallel.h); default: none. The store
// reads `owned`, `master`, `weights` and `grads`.
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
  // Initialises the master weights from (seed, name), and the working copy from the same numbers.
  void initialize(std::uint64_t seed);
  // Host <-> store transfers of the master weights as f32, laid out whole
  // (checkpoints). Upload sets the master and the working copy, each whole
  // or this rank's chunks of `host`; download needs a whole master (under
  // ZeRO the data-parallel strategy's download_master gathers the shards).
  void download_master(float* host) const;
  void upload_master(const float* host);

 private:
  // dst := whole (the full layout), or this rank's chunks of it when `sharded`.
  void copy_owned(const engine::Tensor& dst, const engine::Tensor& whole, bool sharded) const;
  // The master and working weights from a whole host copy of the layout.
  void set_weights(const engine::Tensor& whole);

  const ParamRegistry& registry_;
  engine::DeviceType device_;
  Precision precision_;
  StoreSharding sharding_;
  engine::Buffer master_buffer_, working_buffer_, grad_buffer_;
  engine::Tensor master_, working_, grads_;
};

}  // namespace model
