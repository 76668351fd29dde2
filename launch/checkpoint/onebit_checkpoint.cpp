#include "launch/checkpoint/onebit_checkpoint.h"

#include <algorithm>

#include "engine/check.h"
#include "engine/ops.h"

namespace launch {

OneBitCheckpoint::OneBitCheckpoint(optim::OneBitAdam& optimizer, const parallel::ProcessGrid& grid, bool sharded)
    : optimizer_(optimizer),
      freeze_step_(optimizer.config().freeze_step),
      world_rank_(grid.world_rank()),
      dp_rank_(grid.dp_rank()),
      // The world and its cutting into tp x pp x dp (each rank's flat slice
      // and dp group), and whether the optimizer state is sharded.
      layout_({{"world", grid.world_size()},
               {"tp", grid.tp_size()},
               {"pp", grid.pp_size()},
               {"dp", grid.dp_size()},
               {"zero", sharded ? 1 : 0}}) {}

nlohmann::json OneBitCheckpoint::describe(std::int64_t steps_done) const {
  return {{"name", "onebit-adam"},
          {"freeze_step", freeze_step_},
          {"compressing", steps_done >= freeze_step_},
          {"layout", layout_}};
}

std::optional<RankExtra> OneBitCheckpoint::rank_extra(std::int64_t steps_done) const {
  if (steps_done <= freeze_step_) return std::nullopt;  // the error buffers are still zero
  RankExtra extra;
  extra.tag = "onebit";
  nlohmann::json groups = nlohmann::json::array();
  for (std::size_t i = 0; i < optimizer_.groups().size(); ++i) {
    const parallel::CompressedAllReduce& c = optimizer_.compressor(i);
    groups.push_back({{"name", optimizer_.groups()[i].name},
                      {"n", c.n()},
                      {"server_offset", c.server_offset()},
                      {"server_count", c.server_count()}});
    const std::string prefix = "group_" + std::to_string(i) + ".";
    // Host copies (the buffers may live on the GPU): an asynchronous save
    // writes them while the next steps update the buffers.
    RankArray worker{prefix + "worker_error", std::vector<float>(static_cast<std::size_t>(c.n()))};
    RankArray server{prefix + "server_error", std::vector<float>(static_cast<std::size_t>(c.server_count()))};
    engine::ops::copy(engine::host_f32(worker.values.data(), c.n()), c.worker_error());
    engine::ops::copy(engine::host_f32(server.values.data(), c.server_count()), c.server_error());
    extra.arrays.push_back(std::move(worker));
    extra.arrays.push_back(std::move(server));
  }
  extra.meta = {{"layout", layout_},
                {"step", steps_done},
                {"world_rank", world_rank_},
                {"dp_rank", dp_rank_},
                {"groups", groups}};
  return extra;
}

void OneBitCheckpoint::reset_error_buffers() {
  for (std::size_t i = 0; i < optimizer_.groups().size(); ++i) {
    parallel::CompressedAllReduce& c = optimizer_.compressor(i);
    engine::ops::fill(c.worker_error(), 0.0);
    engine::ops::fill(c.server_error(), 0.0);
  }
}

std::string OneBitCheckpoint::resume(const std::string& dir, const TrainingState& state) {
  reset_error_buffers();  // whatever an earlier, damaged candidate left
  const std::int64_t freeze = freeze_step_;
  if (state.step <= freeze) return "";  // the error buffers are still zero: any layout will do
  const nlohmann::json& written = state.optimizer;
  const bool by_onebit = written.is_object() && written.value("name", "") == "onebit-adam";
  ENGINE_CHECK(by_onebit, "checkpoint '", dir, "' is at step ", state.step, ", past --freeze-step ", freeze,
               ", but was not written by 1-bit Adam (it has no frozen variance and no error buffers); resume with "
               "--freeze-step >= ", state.step, " to keep warming up, or with --optimizer adamw");
  const std::int64_t written_freeze = written.value("freeze_step", std::int64_t{-1});
  ENGINE_CHECK(written_freeze == freeze, "checkpoint '", dir, "' froze 1-bit Adam's variance at step ",
               written_freeze, ", this run says --freeze-step ", freeze, "; resume with --freeze-step ",
               written_freeze);
  // The frozen variance and the momentum are whole tensors in the shards and
  // follow any layout. The error-feedback buffers do not: each is one rank's
  // residual of compressing its own slice of its own dp group's chunking
  // (Tang et al. 2021, Algorithm 1), with no meaning under another cutting.
  // Under another layout they restart from zero, as DeepSpeed's 1-bit Adam
  // does on every load: error feedback converges from any starting residual,
  // and what is dropped is at most one step's compression error.
  const nlohmann::json theirs = written.value("layout", nlohmann::json());
  if (theirs != layout_)
    return "resumed    1-bit Adam compression stage under another layout (checkpoint " + theirs.dump() + ", this run " +
           layout_.dump() + "): error-feedback buffers restart from zero";
  const std::optional<RankExtra> extra = load_rank_extra(dir, "onebit", world_rank_);
  ENGINE_CHECK(extra && extra->meta.at("layout") == layout_, "checkpoint '", dir, "' was written under ",
               theirs.dump(), " but has no 1-bit Adam error buffers for rank ", world_rank_);
  const nlohmann::json& groups = extra->meta.at("groups");
  ENGINE_CHECK(groups.size() == optimizer_.groups().size(), "checkpoint '", dir, "': rank ", world_rank_, " saved ",
               groups.size(), " compression groups, this run has ", optimizer_.groups().size());
  for (std::size_t i = 0; i < groups.size(); ++i) {
    parallel::CompressedAllReduce& c = optimizer_.compressor(i);
    const std::string prefix = "group_" + std::to_string(i) + ".";
    const std::vector<float>* worker = extra->find(prefix + "worker_error");
    const std::vector<float>* server = extra->find(prefix + "server_error");
    ENGINE_CHECK(worker && server && static_cast<std::int64_t>(worker->size()) == c.n() &&
                     static_cast<std::int64_t>(server->size()) == c.server_count(),
                 "checkpoint '", dir, "': rank ", world_rank_, "'s 1-bit Adam group '", optimizer_.groups()[i].name,
                 "' has error buffers of another size than this run's (", c.n(), ", ", c.server_count(), ")");
    engine::ops::copy(c.worker_error(), engine::host_f32(const_cast<float*>(worker->data()), c.n()));
    engine::ops::copy(c.server_error(), engine::host_f32(const_cast<float*>(server->data()), c.server_count()));
  }
  return "resumed    1-bit Adam compression stage with every rank's error buffers";
}

}  // namespace launch
