#include "launch/run/auto_layout.h"

#include <algorithm>
#include <sstream>

#include "engine/check.h"
#include "engine/buffer.h"
#include "launch/plan/cluster_file.h"
#include "launch/plan/planner.h"

namespace launch {
namespace {

std::string layout_text(const Prediction& p) {
  const model::ParallelLayout& l = p.layout;
  std::ostringstream out;
  out << "tp " << l.tp << " pp " << l.pp << " dp " << l.dp << " micro-batch " << l.micro_batch << " zero "
      << l.zero << " recompute " << model::recompute_name(l.recompute) << " schedule "
      << (p.virtual_stages > 1 && l.schedule != parallel::ScheduleKind::kZeroBubbleV
              ? "interleaved x" + std::to_string(p.virtual_stages)
              : parallel::schedule_name(l.schedule))
      << (l.sequence_parallel ? " sequence-parallel" : "");
  return out.str();
}

}  // namespace

void choose_layout(TrainConfig& c, const std::set<std::string>& given) {
  if (c.cluster.empty() && !c.machine_cluster && c.may_calibrate) throw MachineCalibrationNeeded(c.model.n_embd);
  ENGINE_CHECK(!c.cluster.empty() || c.machine_cluster,
               "--layout auto needs --cluster FILE, the devices it plans for (measure this "
               "machine with `plan --calibrate --out FILE`, or see examples/scaling/clusters/)");
  ENGINE_CHECK(c.batch_tokens > 0 && c.batch_tokens % c.seq_len == 0, "--layout auto plans for a global batch: give "
               "--batch-tokens, a multiple of --seq-len ", c.seq_len, " (got ", c.batch_tokens, ")");
  PlanRequest r;
  r.model = c.model;
  r.seq_len = c.seq_len;
  r.global_batch = c.batch_tokens / c.seq_len;
  r.devices = c.world_size;
  if (c.cluster.empty()) {
    r.cluster = *c.machine_cluster;
    c.auto_layout.cluster_source = c.machine_cluster_note;
  } else {
    r.cluster = read_cluster_file(c.cluster);
    c.auto_layout.cluster_source = "cluster file " + c.cluster;
  }
  // A plan for other devices' speed and memory would mislead: the run's
  // device, when given, must be the cluster's (auto takes the cluster's).
  ENGINE_CHECK(c.device == "auto" || c.device == engine::device_name(r.cluster.device), "--layout auto: --device ",
               c.device, ", but the plan's ", c.auto_layout.cluster_source, " describes ",
               engine::device_name(r.cluster.device), " devices");
  r.attention = model::parse_attention_flops(c.attention_flops);
  r.precision_flag = c.precision;  // not resolved yet: auto is the cluster's default
  r.nccl_comm = c.comm == "auto" || c.comm == "nccl";
  r.fp8_weight_cache = c.fp8_weight_cache;
  r.nccl_buffers = parallel::NcclBufferSizes::from_environment();
  // What was given by hand is the only choice for that field.
  if (given.count("--tp")) r.tp = {c.tp};
  if (given.count("--pp")) r.pp = {c.pp};
  if (given.count("--micro-batch")) r.micro_batch = {static_cast<int>(c.micro_batch)};
  if (given.count("--zero")) r.zero = {c.zero};
  if (given.count("--recompute")) r.recompute = {model::parse_recompute(c.recompute)};
  if (given.count("--pipeline-schedule")) r.schedule = {parallel::parse_schedule(c.pipeline_schedule)};
  // The interleaved schedule's chunks per rank: as given, or chosen with the
  // rest (the planner lists every v each 1F1B layout allows).
  r.virtual_stages = given.count("--virtual-stages") ? static_cast<int>(c.virtual_stages) : 0;
  if (r.virtual_stages > 1 && given.count("--pipeline-schedule"))
    r.schedule = {parallel::ScheduleKind::kOneFOneB};  // the planner's form of "interleaved at this v"
  if (given.count("--sequence-parallel")) r.sequence_parallel = {c.sequence_parallel ? 1 : 0};
  const std::string problem = r.check();
  ENGINE_CHECK(problem.empty(), "--layout auto: ", problem);
  std::vector<Prediction> ranked = plan(r);
  if (given.count("--dp") && c.dp > 0)
    std::erase_if(ranked, [&](const Prediction& p) { return p.layout.dp != c.dp; });
  std::string kept;
  for (const std::string& flag : given) kept += (kept.empty() ? "" : ", ") + flag;
  ENGINE_CHECK(!ranked.empty(), "--layout auto: no layout of ", c.world_size, " devices runs ", r.global_batch,
               " sequences of ", c.seq_len, " tokens with the flags given by hand (",
               kept.empty() ? std::string("none") : kept, "); give fewer of them");
  if (!ranked.front().fits) {
    // The nearest: the three that need least memory.
    std::sort(ranked.begin(), ranked.end(), [](const Prediction& a, const Prediction& b) {
      return a.memory_bytes_per_device < b.memory_bytes_per_device;
    });
    std::string nearest;
    for (std::size_t i = 0; i < std::min<std::size_t>(3, ranked.size()); ++i)
      nearest += std::string(i ? "; " : "") + layout_text(ranked[i]) + " needs " +
                 engine::format_bytes(ranked[i].memory_bytes_per_device);
    ENGINE_FAIL("--layout auto: no layout fits the ", engine::format_bytes(static_cast<std::size_t>(r.cluster.memory_bytes)),
                " of a ", r.cluster.name, " device; nearest: ", nearest,
                " (more devices, a smaller --micro-batch or --seq-len, or --recompute full)");
  }
  const Prediction& best = ranked.front();
  const model::ParallelLayout& l = best.layout;
  c.tp = l.tp;
  c.pp = l.pp;
  c.dp = l.dp;
  c.micro_batch = l.micro_batch;
  c.zero = l.zero;
  c.recompute = model::recompute_name(l.recompute);
  const bool v_shape = l.schedule == parallel::ScheduleKind::kZeroBubbleV && l.pp > 1;
  c.pipeline_schedule = v_shape                    ? "zb-v"
                        : best.virtual_stages > 1 ? "interleaved"
                                                  : parallel::schedule_name(l.schedule);
  c.virtual_stages = v_shape ? 1 : best.virtual_stages;  // resolve() gives zb-v its two chunks
  c.sequence_parallel = l.sequence_parallel;
  c.auto_layout.chosen = layout_text(best);
  c.auto_layout.predicted_step_seconds = best.step_seconds;
  c.auto_layout.predicted_memory_bytes = best.memory_bytes_per_device;
  c.auto_layout.candidates = ranked.size();
}

}  // namespace launch
