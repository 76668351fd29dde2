// Trainer: saving and resuming the training state (launch/checkpoint.h has the format).
#include "launch/trainer.h"

#include <algorithm>
#include <sstream>
#include <string>

#include "engine/ops.h"
#include "launch/checkpoint.h"

namespace launch {

using engine::Tensor;

namespace {
Tensor host_f32(float* data, std::int64_t n) { return engine::host_tensor(data, engine::Shape{n}, engine::DType::kF32); }
}  // namespace

nlohmann::json Trainer::run_identity() const {
  // What must not change across a resume for the continuation to be exact.
  return {{"model", config_.model.describe()},
          {"seq_len", config_.seq_len},
          {"batch_tokens", config_.batch_tokens},
          {"seed", config_.seed},
          {"shuffle", config_.shuffle},
          {"train_data", train_data_->fingerprint()}};
}

// ---- checkpoints --------------------------------------------------------------------

void Trainer::resume() {
  // Rank 0 decides which checkpoint (ranks may see `latest` at different
  // moments on a network file system); every rank loads its part; all agree
  // on the outcome before anyone goes on, so a failure on one rank stops all.
  std::string dir, error;
  if (grid_.world_rank() == 0) {
    try {
      dir = resolve_checkpoint(config_.resume, config_.checkpoint_dir);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  ENGINE_CHECK(all_ranks_ok(*host_world_, error.empty()), error.empty() ? "rank 0 found no checkpoint to resume" : error);
  dir = broadcast_string(*host_world_, dir);
  const std::size_t n = static_cast<std::size_t>(registry_.total_numel());
  std::vector<float> master(n, 0.0f), m(n, 0.0f), v(n, 0.0f);
  TrainingState state;
  try {
    state = load_checkpoint(dir, run_identity(), registry_, {master.data(), m.data(), v.data()});
  } catch (const std::exception& e) {
    error = e.what();
  }
  ENGINE_CHECK(all_ranks_ok(*host_world_, error.empty()),
               error.empty() ? "another rank could not load checkpoint '" + dir + "'" : error);
  ENGINE_CHECK(state.step < config_.steps, "checkpoint '", dir, "' is at step ", state.step,
               ", nothing left to do for --steps ", config_.steps);
  store_->upload_master(master.data());
  // Under ZeRO keep this rank's chunks of the sharded moments (1-bit Adam's
  // momentum is whole).
  for (auto [moment, host, sharded] : {std::tuple{optimizer_m(), m.data(), momentum_sharded()},
                                       std::tuple{optimizer_v(), v.data(), zero_sharded()}}) {
    if (sharded) {
      for (const parallel::ShardChunk& c : owned_)
        engine::ops::copy(moment.flat_slice(c.shard_offset, c.count), host_f32(host + c.full_offset, c.count));
    } else {
      engine::ops::copy(moment, host_f32(host, static_cast<std::int64_t>(n)));
    }
  }
  if (adamw_) adamw_->set_steps_taken(state.step);
  if (onebit_) {
    onebit_->set_steps_taken(state.step);
    onebit_m_partial_ = false;
    resume_onebit(dir, state);
  }
  if (!state.sampler_rng.empty()) {
    std::istringstream in(state.sampler_rng);
    in >> sampler_rng_;
  }
  start_step_ = state.step;
  if (is_logger()) out_ << "resumed    from " << dir << " at step " << state.step << "\n";
}

void Trainer::gather_to_host(const Tensor& t, bool sharded, float* host) {
  const std::int64_t n = registry_.total_numel();
  if (!sharded) {
    engine::ops::copy(host_f32(host, n), t);
    return;
  }
  if (zero_units_) {
    // ZeRO-2/3: unit by unit through one unit-sized buffer, so the whole
    // tensor never exists on the device.
    std::int64_t largest = 0;
    for (const parallel::FlatRange& u : unit_ranges_) largest = std::max(largest, u.count);
    engine::Buffer unit_buffer(config_.device_type, static_cast<std::size_t>(largest) * engine::dtype_size(t.dtype()));
    engine::ops::fill(host_f32(host, n), 0.0);  // padding past the last unit, if any
    for (std::size_t i = 0; i < unit_ranges_.size(); ++i) {
      const parallel::FlatRange& u = unit_ranges_[i];
      const Tensor whole = unit_buffer.as_tensor(engine::Shape{largest}, t.dtype()).flat_slice(0, u.count);
      zero_units_->gather_unit(t, static_cast<int>(i), whole);
      engine::ops::copy(host_f32(host + u.offset, u.count), whole);
    }
    return;
  }
  // ZeRO-1: through a full-size buffer, bucket by bucket.
  engine::Buffer full(config_.device_type, static_cast<std::size_t>(n) * engine::dtype_size(t.dtype()));
  const Tensor whole = full.as_tensor(engine::Shape{n}, t.dtype());
  grad_buckets_->gather(whole, t);
  engine::ops::copy(host_f32(host, n), whole);
}

void Trainer::download_master(float* host) {
  if (zero_sharded() && !store_->weights_sharded() && store_->master().data() != store_->working().data()) {
    // ZeRO-1/2 in mixed precision: the master is whole-sized but each rank
    // updated only its chunks of it; gather them in place.
    if (zero_units_)
      parallel::all_gather_chunks(*comms_.dp, unit_ranges_, owned_, store_->master());
    else
      grad_buckets_->gather(store_->master());
  }
  gather_to_host(store_->master(), store_->weights_sharded(), host);
}

void Trainer::save(std::int64_t steps_done) {
  // Checkpoints hold whole tensors: under ZeRO gather the owned chunks.
  const std::size_t n = static_cast<std::size_t>(registry_.total_numel());
  std::vector<float> master(n), m(n), v(n);
  download_master(master.data());
  if (onebit_m_partial_) {  // 1-bit Adam warm-up under ZeRO-1: its whole momentum's owned chunks are current
    grad_buckets_->gather(onebit_->m());
    onebit_m_partial_ = false;
  }
  gather_to_host(optimizer_m(), momentum_sharded(), m.data());
  gather_to_host(optimizer_v(), zero_sharded(), v.data());
  TrainingState state;
  state.step = steps_done;
  state.run = run_identity();
  state.layout = {{"tp", grid_.tp_size()}, {"pp", grid_.pp_size()}, {"dp", grid_.dp_size()}};
  std::ostringstream rng;
  rng << sampler_rng_;
  state.sampler_rng = rng.str();
  const ShardRole role{grid_.world_rank(), grid_.dp_rank() == 0,
                       grid_.world_rank() == 0 && grid_.tp_size() == 1 && grid_.pp_size() == 1};
  // 1-bit Adam: the momentum and frozen variance are identical on every dp
  // rank and go into the shards as adam_m/adam_v; once compression has run,
  // each rank's error-feedback buffers are its own and every rank saves them.
  RankExtra extra;
  const bool with_extra = onebit_ && steps_done > config_.freeze_step;
  if (onebit_) {
    state.optimizer = {{"name", "onebit-adam"},
                       {"freeze_step", config_.freeze_step},
                       {"compressing", steps_done >= config_.freeze_step},
                       {"layout", onebit_layout()}};
  }
  if (with_extra) {
    extra.tag = "onebit";
    nlohmann::json groups = nlohmann::json::array();
    for (std::size_t i = 0; i < onebit_->groups().size(); ++i) {
      const parallel::CompressedAllReduce& c = onebit_->compressor(i);
      groups.push_back({{"name", onebit_->groups()[i].name},
                        {"n", c.n()},
                        {"server_offset", c.server_offset()},
                        {"server_count", c.server_count()}});
      const std::string prefix = "group_" + std::to_string(i) + ".";
      extra.arrays.push_back({prefix + "worker_error", c.worker_error().data_as<float>(), c.n()});
      extra.arrays.push_back({prefix + "server_error", c.server_error().data_as<float>(), c.server_count()});
    }
    extra.meta = {{"layout", onebit_layout()},
                  {"step", steps_done},
                  {"world_rank", grid_.world_rank()},
                  {"dp_rank", grid_.dp_rank()},
                  {"groups", groups}};
  }
  const std::string dir = save_checkpoint(config_.checkpoint_dir, state, config_.model, registry_,
                                          {master.data(), m.data(), v.data()}, role, *host_world_,
                                          with_extra ? &extra : nullptr);
  if (is_logger()) out_ << "checkpoint " << dir << "\n";
}

}  // namespace launch
