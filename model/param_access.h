// ParamAccess: how a pipeline stage reaches the working weights and the
// gradient buffers of its parameter units (model/param_registry.h: a
// transformer block, the token embedding, the position embedding, the final
// layer norm).
//
// Without ZeRO stage 2 or 3 every unit is a slice of the ParamStore's whole
// flat buffers, and acquiring or releasing it costs nothing. Under stage 2
// a unit's gradient is a staging buffer, taken zeroed before its backward and
// reduce-scattered into this rank's gradient shard when released; under
// stage 3 its weights are also all-gathered before use and dropped after
// (parallel/zero_units.h). Every acquire is paired with a release; prefetch
// is a hint that starts the next unit's gather early.
#pragma once

#include <string>
#include <vector>

#include "engine/tensor.h"
#include "model/param_registry.h"
#include "model/param_store.h"
#include "parallel/zero_units.h"

namespace model {

// One unit's flat buffer (weights or gradients): named views of its entries.
class UnitView {
 public:
  UnitView(const ParamRegistry& registry, int unit, engine::Tensor flat, std::int64_t base)
      : registry_(&registry), unit_(unit), flat_(std::move(flat)), base_(base) {}
  engine::Tensor operator[](const std::string& name) const;  // the entry must belong to this unit
  // The entry's view, or an empty Tensor where the model has no such entry
  // (a Llama block's biases).
  engine::Tensor optional(const std::string& name) const;
  const engine::Tensor& flat() const { return flat_; }

 private:
  const ParamRegistry* registry_;
  int unit_;
  engine::Tensor flat_;
  std::int64_t base_;  // the unit's offset in the full layout
};

class ParamAccess {
 public:
  // zero: the ZeRO-2/3 units of this stage over `store`'s shards, or nullptr.
  explicit ParamAccess(const ParamStore& store, parallel::ZeroUnits* zero = nullptr);

  int unit(const std::string& unit_name) const { return store_.registry().unit_index(unit_name); }

  UnitView weights(int unit);
  void release_weights(int unit);
  void prefetch_weights(int unit);
  UnitView grads(int unit);
  void release_grads(int unit);

  // True when gradients live in per-use staging buffers (ZeRO-2/3): anything
  // that must happen to a unit's gradient before it is reduced (the sequence
  // parallel sums over the tensor-parallel group) happens before release.
  bool grads_staged() const { return zero_ != nullptr; }

 private:
  const ParamStore& store_;
  parallel::ZeroUnits* zero_;
  std::vector<ParamUnit> units_;
};

}  // namespace model
