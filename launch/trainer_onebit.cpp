// Trainer: the parts specific to 1-bit Adam (optim/onebit_adam.h).
#include "launch/trainer.h"

#include <string>

#include "launch/checkpoint.h"

namespace launch {

// ---- 1-bit Adam -----------------------------------------------------------------------

std::vector<optim::CompressionGroup> Trainer::compression_groups() const {
  // One group when this rank holds the whole model. Otherwise tensors whose
  // copies live outside this dp group must compress alone so that those
  // copies stay bit-identical (optim/onebit_adam.h, "Composition"): the
  // tensors replicated over tp, and the tied wte of the first/last stage.
  const std::int64_t n = registry_.total_numel();
  if (grid_.tp_size() == 1 && grid_.pp_size() == 1) return {{"all", {{0, n}}}};
  optim::CompressionGroup split{"split", {}}, replicated{"replicated", {}}, wte{"wte", {}};
  const auto& entries = registry_.entries();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const model::ParamInfo& p = entries[i];
    const std::int64_t begin = i == 0 ? 0 : p.offset;  // padding goes with the entry it follows
    const std::int64_t end = i + 1 < entries.size() ? entries[i + 1].offset : n;
    optim::CompressionGroup& g =
        p.name == "wte" && grid_.pp_size() > 1 ? wte : p.split.is_split() ? split : replicated;
    if (!g.ranges.empty() && g.ranges.back().first + g.ranges.back().second == begin)
      g.ranges.back().second += end - begin;
    else
      g.ranges.push_back({begin, end - begin});
  }
  return {split, replicated, wte};
}

nlohmann::json Trainer::onebit_layout() const {
  // What 1-bit Adam's per-rank error buffers depend on: the world and its
  // cutting into tp x pp x dp (each rank's flat slice and dp group), and
  // whether the optimizer state is sharded.
  return {{"world", grid_.world_size()},
          {"tp", grid_.tp_size()},
          {"pp", grid_.pp_size()},
          {"dp", grid_.dp_size()},
          {"zero", zero_sharded() ? 1 : 0}};
}

void Trainer::resume_onebit(const std::string& dir, const TrainingState& state) {
  const std::int64_t freeze = config_.freeze_step;
  // Up to the freeze step the error buffers are still zero: any layout will do.
  if (state.step <= freeze) return;
  const nlohmann::json& written = state.optimizer;
  const bool by_onebit = written.is_object() && written.value("name", "") == "onebit-adam";
  ENGINE_CHECK(by_onebit, "checkpoint '", dir, "' is at step ", state.step, ", past --freeze-step ", freeze,
               ", but was not written by 1-bit Adam (it has no frozen variance and no error buffers); resume with "
               "--freeze-step >= ", state.step, " to keep warming up, or with --optimizer adamw");
  const std::int64_t written_freeze = written.value("freeze_step", std::int64_t{-1});
  ENGINE_CHECK(written_freeze == freeze, "checkpoint '", dir, "' froze 1-bit Adam's variance at step ",
               written_freeze, ", this run says --freeze-step ", freeze, "; resume with --freeze-step ",
               written_freeze);
  const std::optional<LoadedRankExtra> extra = load_rank_extra(dir, "onebit", grid_.world_rank());
  const nlohmann::json mine = onebit_layout();
  const nlohmann::json theirs = extra ? extra->meta.at("layout") : written.value("layout", nlohmann::json());
  ENGINE_CHECK(extra && theirs == mine, "checkpoint '", dir, "' is in 1-bit Adam's compression stage (step ",
               state.step, " > freeze step ", freeze, "); its error-feedback buffers differ on every rank and only "
               "fit the layout that wrote them, ", theirs.dump(), ", but this run is ", mine.dump(),
               ". Resume under the same world size, tp, pp, dp and ZeRO stage (or, to change the layout, "
               "continue with --optimizer adamw from it)");
  const nlohmann::json& groups = extra->meta.at("groups");
  ENGINE_CHECK(groups.size() == onebit_->groups().size(), "checkpoint '", dir, "': rank ", grid_.world_rank(),
               " saved ", groups.size(), " compression groups, this run has ", onebit_->groups().size());
  for (std::size_t i = 0; i < groups.size(); ++i) {
    parallel::CompressedAllReduce& c = onebit_->compressor(i);
    const std::string prefix = "group_" + std::to_string(i) + ".";
    const std::vector<float>* worker = extra->find(prefix + "worker_error");
    const std::vector<float>* server = extra->find(prefix + "server_error");
    ENGINE_CHECK(worker && server && static_cast<std::int64_t>(worker->size()) == c.n() &&
                     static_cast<std::int64_t>(server->size()) == c.server_count(),
                 "checkpoint '", dir, "': rank ", grid_.world_rank(), "'s 1-bit Adam group '",
                 onebit_->groups()[i].name, "' has error buffers of another size than this run's (", c.n(), ", ",
                 c.server_count(), ")");
    std::copy(worker->begin(), worker->end(), c.worker_error().data_as<float>());
    std::copy(server->begin(), server->end(), c.server_error().data_as<float>());
  }
  if (is_logger()) out_ << "resumed    1-bit Adam compression stage with every rank's error buffers\n";
}

}  // namespace launch
