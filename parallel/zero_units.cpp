#include "parallel/zero_units.h"

#include "engine/check.h"
#include "engine/ops.h"

namespace parallel {

using engine::Tensor;

struct ZeroUnits::Slot {
  engine::Buffer buffer;
  bool busy = false;
};

struct ZeroUnits::UnitState {
  int weight_refs = 0;
  Slot* weights = nullptr;  // gathered (or being gathered) working weights
  CommHandle gathering;     // the prefetch in flight, if any
  int grad_refs = 0;
  Slot* grads = nullptr;    // the gradient being accumulated
};

struct ZeroUnits::Reduction {
  int unit;
  Slot* slot;
  CommHandle handle;
};

namespace {
Tensor slot_tensor(const engine::Buffer& b, std::int64_t count, engine::DType dtype) {
  return b.as_tensor(engine::Shape{count}, dtype);
}
}  // namespace

ZeroUnits::ZeroUnits(Communicator& dp, std::vector<FlatRange> units, Tensor working_shard, Tensor grad_shard,
                     int max_reductions_in_flight)
    : comm_(dp),
      units_(std::move(units)),
      owned_(owned_chunks(units_, dp.rank(), dp.size())),
      shard_elements_(parallel::shard_elements(owned_)),
      working_shard_(std::move(working_shard)),
      grad_shard_(std::move(grad_shard)),
      max_reductions_in_flight_(max_reductions_in_flight),
      state_(units_.size()) {
  ENGINE_CHECK(max_reductions_in_flight >= 1, "ZeroUnits: at least one reduction must be allowed in flight");
  ENGINE_CHECK(grad_shard_.numel() == shard_elements_, "ZeroUnits: the gradient shard has ", grad_shard_.numel(),
               " elements, this rank owns ", shard_elements_);
  ENGINE_CHECK(working_shard_.empty() || working_shard_.numel() == shard_elements_,
               "ZeroUnits: the working-weight shard has ", working_shard_.numel(), " elements, this rank owns ",
               shard_elements_);
  for (const FlatRange& u : units_) ENGINE_CHECK(u.count > 0, "ZeroUnits: empty unit at offset ", u.offset);
}

ZeroUnits::~ZeroUnits() {
  // Pending operations write into pool buffers: they must finish before the
  // buffers go (an exception may be unwinding; MPI handles skip their wait
  // then, parallel/mpi_communicator.h).
  for (Reduction& r : in_flight_) r.handle.reset();
  for (UnitState& s : state_) s.gathering.reset();
}

const FlatRange& ZeroUnits::unit_range(int unit) const {
  ENGINE_CHECK(unit >= 0 && unit < static_cast<int>(units_.size()), "ZeroUnits: no unit ", unit, " (", units_.size(),
               " units)");
  return units_[static_cast<std::size_t>(unit)];
}

ZeroUnits::Slot* ZeroUnits::take_slot(std::size_t bytes) {
  // The smallest free buffer that fits. If none fits, a free one that is too
  // small is grown rather than a new one added, so the pool never holds more
  // buffers than were ever in use at once (and the sizes settle after the
  // first step).
  Slot* best = nullptr;
  Slot* too_small = nullptr;
  for (const auto& s : pool_) {
    if (s->busy) continue;
    if (s->buffer.bytes() >= bytes) {
      if (!best || s->buffer.bytes() < best->buffer.bytes()) best = s.get();
    } else if (!too_small || s->buffer.bytes() > too_small->buffer.bytes()) {
      too_small = s.get();
    }
  }
  if (!best && too_small) {
    too_small->buffer = engine::Buffer(grad_shard_.device(), bytes);
    best = too_small;
  }
  if (!best) {
    pool_.push_back(std::make_unique<Slot>());
    pool_.back()->buffer = engine::Buffer(grad_shard_.device(), bytes);
    best = pool_.back().get();
  }
  best->busy = true;
  return best;
}

std::size_t ZeroUnits::staging_bytes() const {
  std::size_t total = 0;
  for (const auto& s : pool_) total += s->buffer.bytes();
  return total;
}

void ZeroUnits::progress_pending() {
  for (Reduction& r : in_flight_) r.handle->progress();
  for (UnitState& s : state_)
    if (s.gathering) s.gathering->progress();
}

// ---- stage 3: weights ------------------------------------------------------------

void ZeroUnits::prefetch_weights(int unit) {
  ENGINE_CHECK(weights_sharded(), "ZeroUnits: weights are gathered only under ZeRO stage 3");
  const FlatRange& u = unit_range(unit);
  UnitState& s = state_[static_cast<std::size_t>(unit)];
  if (s.weights) return;  // gathered or on its way
  const engine::DType dt = working_shard_.dtype();
  s.weights = take_slot(static_cast<std::size_t>(u.count) * engine::dtype_size(dt));
  const ShardChunk& c = owned_[static_cast<std::size_t>(unit)];
  s.gathering = comm_.all_gather_async(working_shard_.flat_slice(c.shard_offset, c.count),
                                       slot_tensor(s.weights->buffer, u.count, dt));
}

Tensor ZeroUnits::acquire_weights(int unit) {
  prefetch_weights(unit);  // a no-op when a prefetch already started it
  UnitState& s = state_[static_cast<std::size_t>(unit)];
  if (s.gathering) {
    s.gathering->wait();
    s.gathering.reset();
  }
  ++s.weight_refs;
  progress_pending();
  return slot_tensor(s.weights->buffer, unit_range(unit).count, working_shard_.dtype());
}

void ZeroUnits::release_weights(int unit) {
  UnitState& s = state_[static_cast<std::size_t>(unit)];
  ENGINE_CHECK(s.weight_refs > 0, "ZeroUnits: unit ", unit, "'s weights released more often than acquired");
  if (--s.weight_refs > 0) return;
  s.weights->busy = false;
  s.weights = nullptr;
}

void ZeroUnits::drop_weights() {
  for (std::size_t i = 0; i < state_.size(); ++i) {
    UnitState& s = state_[i];
    ENGINE_CHECK(s.weight_refs == 0, "ZeroUnits: unit ", i, "'s weights are still acquired");
    if (s.gathering) {
      s.gathering->wait();
      s.gathering.reset();
    }
    if (s.weights) {
      s.weights->busy = false;
      s.weights = nullptr;
    }
  }
}

// ---- stages 2 and 3: gradients ---------------------------------------------------------

Tensor ZeroUnits::acquire_grads(int unit) {
  const FlatRange& u = unit_range(unit);
  UnitState& s = state_[static_cast<std::size_t>(unit)];
  const engine::DType dt = grad_shard_.dtype();
  if (s.grad_refs == 0) {
    // Bound the memory held by reductions in flight: finish the oldest first.
    while (static_cast<int>(in_flight_.size()) >= max_reductions_in_flight_) complete_oldest_reduction();
    s.grads = take_slot(static_cast<std::size_t>(u.count) * engine::dtype_size(dt));
    engine::ops::fill(slot_tensor(s.grads->buffer, u.count, dt), 0.0);
  }
  ++s.grad_refs;
  progress_pending();
  return slot_tensor(s.grads->buffer, u.count, dt);
}

void ZeroUnits::release_grads(int unit) {
  const FlatRange& u = unit_range(unit);
  UnitState& s = state_[static_cast<std::size_t>(unit)];
  ENGINE_CHECK(s.grad_refs > 0, "ZeroUnits: unit ", unit, "'s gradients released more often than acquired");
  if (--s.grad_refs > 0) return;
  while (static_cast<int>(in_flight_.size()) >= max_reductions_in_flight_) complete_oldest_reduction();
  // In place: the reduced chunk lands in this rank's own chunk of the buffer.
  const Tensor whole = slot_tensor(s.grads->buffer, u.count, grad_shard_.dtype());
  const std::int64_t chunk = u.count / comm_.size();
  in_flight_.push_back({unit, s.grads, comm_.reduce_scatter_async(whole, whole.flat_slice(comm_.rank() * chunk, chunk))});
  s.grads = nullptr;
}

void ZeroUnits::complete_oldest_reduction() {
  Reduction r = std::move(in_flight_.front());
  in_flight_.pop_front();
  r.handle->wait();
  const FlatRange& u = unit_range(r.unit);
  const ShardChunk& c = owned_[static_cast<std::size_t>(r.unit)];
  const Tensor whole = slot_tensor(r.slot->buffer, u.count, grad_shard_.dtype());
  engine::ops::accumulate(grad_shard_.flat_slice(c.shard_offset, c.count), whole.flat_slice(comm_.rank() * c.count, c.count));
  r.slot->busy = false;
}

void ZeroUnits::finish_grads() {
  for (std::size_t i = 0; i < state_.size(); ++i)
    ENGINE_CHECK(state_[i].grad_refs == 0, "ZeroUnits: unit ", i, "'s gradients are still acquired at the step's end");
  while (!in_flight_.empty()) complete_oldest_reduction();
}

void ZeroUnits::gather_unit(const Tensor& shard, int unit, const Tensor& out) const {
  const FlatRange& u = unit_range(unit);
  ENGINE_CHECK(shard.numel() == shard_elements_ && out.numel() == u.count, "ZeroUnits::gather_unit: shard of ",
               shard.numel(), " (expected ", shard_elements_, ") into ", out.numel(), " (expected ", u.count, ")");
  const ShardChunk& c = owned_[static_cast<std::size_t>(unit)];
  comm_.all_gather(shard.flat_slice(c.shard_offset, c.count), out);
}

}  // namespace parallel
