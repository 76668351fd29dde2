#include "launch/onebit_checkpoint.h"

#include <algorithm>

#include "engine/check.h"

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
    extra.arrays.push_back({prefix + "worker_error", c.worker_error().data_as<float>(), c.n()});
    extra.arrays.push_back({prefix + "server_error", c.server_error().data_as<float>(), c.server_count()});
  }
  extra.meta = {{"layout", layout_},
                {"step", steps_done},
                {"world_rank", world_rank_},
                {"dp_rank", dp_rank_},
                {"groups", groups}};
  return extra;
}

std::string OneBitCheckpoint::resume(const std::string& dir, const TrainingState& state) {
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
  const std::optional<LoadedRankExtra> extra = load_rank_extra(dir, "onebit", world_rank_);
  const nlohmann::json theirs = extra ? extra->meta.at("layout") : written.value("layout", nlohmann::json());
  ENGINE_CHECK(extra && theirs == layout_, "checkpoint '", dir, "' is in 1-bit Adam's compression stage (step ",
               state.step, " > freeze step ", freeze, "); its error-feedback buffers differ on every rank and only "
               "fit the layout that wrote them, ", theirs.dump(), ", but this run is ", layout_.dump(),
               ". Resume under the same world size, tp, pp, dp and ZeRO stage (or, to change the layout, "
               "continue with --optimizer adamw from it)");
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
    std::copy(worker->begin(), worker->end(), c.worker_error().data_as<float>());
    std::copy(server->begin(), server->end(), c.server_error().data_as<float>());
  }
  return "resumed    1-bit Adam compression stage with every rank's error buffers";
}

}  // namespace launch
