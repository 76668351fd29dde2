#include "model/param_access.h"

#include "engine/check.h"

namespace model {

engine::Tensor UnitView::operator[](const std::string& name) const {
  const ParamInfo& p = registry_->find(name);
  ENGINE_CHECK(p.unit == unit_, "parameter '", name, "' is not in the unit this view holds");
  return flat_.flat_slice(p.offset - base_, p.numel()).view(p.shape);
}

engine::Tensor UnitView::optional(const std::string& name) const {
  return registry_->contains(name) ? (*this)[name] : engine::Tensor{};
}

ParamAccess::ParamAccess(const ParamStore& store, parallel::ZeroUnits* zero)
    : store_(store), zero_(zero), units_(store.registry().units()) {
  // A stage over a gradient-sharded store without its units can still run
  // forward only (the sampler under ZeRO-2); grads() refuses.
  ENGINE_CHECK(zero_ != nullptr || !store.weights_sharded(), "a weight-sharded parameter store (ZeRO-3) needs its "
               "ZeRO units");
  ENGINE_CHECK(zero_ == nullptr || zero_->units().size() == units_.size(), "ZeRO units (", zero_ ? zero_->units().size() : 0,
               ") do not match the registry's ", units_.size(), " units");
}

UnitView ParamAccess::weights(int unit) {
  const ParamUnit& u = units_.at(static_cast<std::size_t>(unit));
  const engine::Tensor flat = store_.weights_sharded() ? zero_->acquire_weights(unit)
                                                       : store_.working().flat_slice(u.offset, u.count);
  return UnitView(store_.registry(), unit, flat, u.offset);
}

void ParamAccess::release_weights(int unit) {
  if (store_.weights_sharded()) zero_->release_weights(unit);
}

void ParamAccess::prefetch_weights(int unit) {
  if (store_.weights_sharded()) zero_->prefetch_weights(unit);
}

UnitView ParamAccess::grads(int unit) {
  const ParamUnit& u = units_.at(static_cast<std::size_t>(unit));
  ENGINE_CHECK(zero_ != nullptr || !store_.grads_sharded(), "gradients of unit '", u.name, "' were asked of a "
               "gradient-sharded store (ZeRO-2/3) without its ZeRO units");
  const engine::Tensor flat = zero_ ? zero_->acquire_grads(unit) : store_.grads().flat_slice(u.offset, u.count);
  return UnitView(store_.registry(), unit, flat, u.offset);
}

void ParamAccess::release_grads(int unit) {
  if (zero_) zero_->release_grads(unit);
}

}  // namespace model
