#include "launch/plan/planner.h"

#include <algorithm>
#include <cmath>

#include "engine/check.h"
#include "model/flat_layout.h"
#include "model/gpt_params.h"
#include "model/partition.h"
#include "model/step_cost.h"
#include "parallel/comm_cost.h"

namespace launch {

namespace {

using model::ParallelLayout;

std::vector<int> divisors(std::int64_t n) {
  std::vector<int> d;
  for (std::int64_t i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(static_cast<int>(i));
  return d;
}

template <typename T>
bool allowed(const std::vector<T>& only, T value) {
  return only.empty() || std::find(only.begin(), only.end(), value) != only.end();
}

double bytes_of(double elements, engine::DType dt) { return elements * static_cast<double>(engine::dtype_size(dt)); }

// Latency of a reduction of a few scalars over `ranks` (a tree: 2 log2 n hops).
double scalar_reduction_seconds(int ranks, const parallel::Link& link) {
  return ranks > 1 ? 2.0 * std::ceil(std::log2(static_cast<double>(ranks))) * link.latency_seconds : 0.0;
}

// Megatron-LM's conditions for its interleaved schedule (arguments.py and
// schedules.py): more than two stages, the layers split into pp x v equal
// chunks, micro-batches a multiple of pp, and 1F1B.
bool can_interleave(const PlanRequest& r, const ParallelLayout& l, int virtual_stages) {
  return l.pp > 2 && l.schedule == parallel::ScheduleKind::kOneFOneB &&
         r.model.n_layer % (static_cast<std::int64_t>(l.pp) * virtual_stages) == 0 && l.micro_batches % l.pp == 0;
}
bool can_interleave(const PlanRequest& r, const ParallelLayout& l) { return can_interleave(r, l, r.virtual_stages); }

// Chunks of layers per device of a layout: those of an interleaved layout
// the enumeration chose (virtual_stages = 0), else the request's.
int layout_chunks(const PlanRequest& r, const ParallelLayout& l) {
  if (l.pp == 1) return 1;
  if (l.schedule == parallel::ScheduleKind::kZeroBubbleV) return 2;
  if (l.schedule == parallel::ScheduleKind::kInterleaved) return l.virtual_stages;
  return std::max(1, r.virtual_stages);
}

// The parameter units (elements per rank, padding included) of pp stage s in
// the order a forward takes them: the token and position embeddings, the
// blocks, the final norm, an untied head (model/param_registry.h), as the
// trainer registers them for the layout.
std::vector<double> stage_units(const model::GptConfig& m, const ParallelLayout& l, int s, int chunks) {
  const std::vector<model::StageRange> ranges =
      model::pipeline_chunk_ranges(m, s, l.pp, chunks, parallel::stage_placement(l.schedule));
  const model::TensorParallel tp{0, l.tp, l.sequence_parallel};
  const model::ParamRegistry registry = model::build_gpt_registry(m, ranges, tp, l.zero_stage() >= 1 ? l.dp : 1);
  const parallel::FlatLayout flat = model::flat_layout(registry, model::rank_range(ranges), tp, m.n_layer);
  std::vector<double> units;
  for (const parallel::FlatRange& u : flat.units) units.push_back(static_cast<double>(u.count));
  return units;
}

// ZeRO-2/3 traffic of one micro-batch on a rank of a stage, as the engine
// runs it (model/gpt_stage.h over parallel/zero_units.h): unit by unit, not
// the stage at once. Under ZeRO-3 each unit's weights are all-gathered
// before its forward and again before its backward, the next unit's gather
// prefetched while this one computes; under ZeRO-2 and 3 each unit's
// gradient is reduce-scattered when its backward is done, while the next
// unit's backward runs. So a unit's transfer hides only behind its
// neighbour's compute, not the whole stage's, and every collective pays its
// own latency, (dp - 1) hops of a ring per unit: at large dp many small
// units cost more than their bytes. The first gather of each pass and the
// last reduction are exposed. Compute is shared among units by their
// parameters (their matmuls' share). Without overlap (the CPU backend,
// whose cores do the copies) everything adds up.
double zero_units_seconds(const std::vector<double>& units, const model::StageSeconds& st, int zero, int dp,
                          const parallel::Link& link, bool overlap, engine::DType working, double grad_bytes) {
  double total = 0;
  for (const double u : units) total += u;
  const std::size_t n = units.size();
  if (n == 0 || total <= 0) return 0.0;
  const auto gather = [&](std::size_t i) {
    return zero == 3 ? parallel::all_gather_seconds(bytes_of(units[i], working), dp, link) : 0.0;
  };
  const auto reduce = [&](std::size_t i) { return parallel::reduce_scatter_seconds(units[i] * grad_bytes, dp, link); };
  const auto share = [&](double pass, std::size_t i) { return overlap ? pass * units[i] / total : 0.0; };
  double exposed = 0;
  // Forward: unit i's gather runs behind unit i - 1's compute.
  for (std::size_t i = 0; i < n; ++i) exposed += std::max(0.0, gather(i) - (i > 0 ? share(st.forward, i - 1) : 0.0));
  // Backward, last unit first: while unit i computes, unit i + 1's reduction
  // and unit i - 1's gather run.
  exposed += gather(n - 1);
  for (std::size_t k = n; k-- > 0;) {
    const double during = (k + 1 < n ? reduce(k + 1) : 0.0) + (k > 0 ? gather(k - 1) : 0.0);
    exposed += std::max(0.0, during - share(st.backward, k));
  }
  return exposed + reduce(0);
}

}  // namespace

model::Precision PlanRequest::precision() const {
  const bool cuda = cluster.device == engine::DeviceType::kCuda;
  if (precision_flag == "auto") return cuda ? model::Precision::kBf16 : model::Precision::kFp32;
  if (precision_flag == "fp8") return model::Precision::kBf16;
  if (precision_flag == "fp8-emulated") return model::Precision::kFp32;
  return model::parse_precision(precision_flag);
}

std::string PlanRequest::check() const {
  std::string problems;
  auto add = [&](const std::string& p) { problems += (problems.empty() ? "" : "; ") + p; };
  try {
    model.validate();
  } catch (const std::exception& e) {
    add(e.what());
  }
  if (global_batch < 1) add("the global batch must be at least one sequence, got " + std::to_string(global_batch));
  if (seq_len < 1 || seq_len > model.max_seq_len)
    add("sequence length " + std::to_string(seq_len) + " must be in [1, " + std::to_string(model.max_seq_len) + "]");
  if (devices < 1) add("--devices must be >= 1, got " + std::to_string(devices));
  if (cluster.devices_per_node < 1) add("the cluster needs devices_per_node >= 1");
  if (virtual_stages < 0) add("--virtual-stages must be >= 0 (0 = choose), got " + std::to_string(virtual_stages));
  {
    const bool cuda = cluster.device == engine::DeviceType::kCuda;
    const std::string& p = precision_flag;
    if (p != "auto" && p != "fp32" && p != "bf16" && p != "fp8" && p != "fp8-emulated")
      add("--precision " + p + ": expected auto, fp32, bf16, fp8 or fp8-emulated");
    else if (!cuda && (p == "bf16" || p == "fp8"))
      add("--precision " + p + " runs on GPUs, and the cluster's devices are CPUs");
    else if (cuda && p == "fp8-emulated")
      add("--precision fp8-emulated is the CPU's reference, and the cluster's devices are GPUs (use fp8)");
  }
  try {
    if (virtual_stages > 1 && !model::software_by_name(software, cluster.device).interleaved_schedule)
      add("--virtual-stages " + std::to_string(virtual_stages) + ": software '" + software +
          "' has no interleaved pipeline schedule");
  } catch (const std::exception& e) {
    add(e.what());
  }
  return problems;
}

// ZB-V's idle time in a step beyond m times the slowest rank's micro-batch
// time: its list (parallel::zero_bubble_v) simulated with that rank's
// forward, input-gradient and weight passes, each chunk half of each, and
// `other` (messages, ZeRO traffic) added to the forward. Past m = 2 pp the
// idle time grows by the same amount per micro-batch (the steady state
// repeats), so two simulations there extrapolate to any m.
double zero_bubble_v_idle_seconds(int pp, std::int64_t micro_batches, const model::StageSeconds& st, double other) {
  const double f = (st.forward + other) / 2, b = (st.backward - st.weight_grad) / 2, w = st.weight_grad / 2;
  const auto idle = [&](int m) {
    return parallel::simulated_step_seconds(parallel::ScheduleKind::kZeroBubbleV, pp, m, 2, f, b, w) - 2 * m * (f + b + w);
  };
  const std::int64_t full = 2 * static_cast<std::int64_t>(pp);
  if (micro_batches <= full + 1) return idle(static_cast<int>(micro_batches));
  const double at_full = idle(static_cast<int>(full)), per_micro_batch = idle(static_cast<int>(full) + 1) - at_full;
  return at_full + per_micro_batch * static_cast<double>(micro_batches - full);
}

std::vector<ParallelLayout> enumerate_layouts(const PlanRequest& r) {
  std::vector<ParallelLayout> layouts;
  const std::vector<model::Recompute> recomputes = {model::Recompute::kNone, model::Recompute::kSelective,
                                                    model::Recompute::kFull};
  std::vector<parallel::ScheduleKind> schedules = {parallel::ScheduleKind::kOneFOneB,
                                                   parallel::ScheduleKind::kAllForwardAllBackward};
  const model::Software software = model::software_by_name(r.software, r.cluster.device);
  if (software.zero_bubble_schedule) {
    schedules.push_back(parallel::ScheduleKind::kZeroBubbleH1);
    schedules.push_back(parallel::ScheduleKind::kZeroBubbleV);
  }
  const bool interleaves = software.interleaved_schedule;
  for (int tp : divisors(r.devices)) {
    if (!allowed(r.tp, tp)) continue;
    for (int pp : divisors(r.devices / tp)) {
      if (!allowed(r.pp, pp) || !model::check_partition(r.model, tp, pp).empty()) continue;
      const int dp = r.devices / tp / pp;
      if (r.global_batch % dp != 0) continue;
      const std::int64_t per_replica = r.global_batch / dp;
      for (int mb : divisors(per_replica)) {
        if (!allowed(r.micro_batch, mb)) continue;
        for (int zero = 0; zero <= (dp > 1 ? 3 : 0); ++zero) {
          if (!allowed(r.zero, zero)) continue;
          for (int sp = 0; sp <= (tp > 1 ? 1 : 0); ++sp) {
            if (!allowed(r.sequence_parallel, sp) || (sp && (mb * r.seq_len) % tp != 0)) continue;
            for (model::Recompute rc : recomputes) {
              if (!allowed(r.recompute, rc)) continue;
              for (parallel::ScheduleKind sk : schedules) {
                // A one-stage pipeline runs every schedule alike: listed once, as 1F1B.
                if (pp == 1 && sk != parallel::ScheduleKind::kOneFOneB) continue;
                // When choosing v, an interleaved-only restriction still
                // needs the 1F1B layouts to interleave from.
                const bool interleaving_source = r.virtual_stages == 0 && sk == parallel::ScheduleKind::kOneFOneB;
                if (pp > 1 && !allowed(r.schedule, sk) && !interleaving_source) continue;
                ParallelLayout l;
                l.tp = tp;
                l.pp = pp;
                l.dp = dp;
                l.zero = zero;
                l.sequence_parallel = sp == 1;
                l.recompute = rc;
                l.schedule = sk;
                l.micro_batch = mb;
                l.micro_batches = per_replica / mb;
                l.seq_len = r.seq_len;
                l.precision = r.precision();
                l.device = r.cluster.device;
                // As Trainer::keeps_fp8_weight_copies: not under ZeRO-3.
                l.fp8_weight_copies = r.fp8_matmuls() && r.fp8_weight_cache && l.zero_stage() < 3;
                l.fp8_matmuls = r.fp8_matmuls();
                // The shapes the FP8 GEMMs refuse, as train refuses them.
                if (r.precision_flag == "fp8" && !model::check_fp8_shapes(r.model, tp, mb * r.seq_len).empty()) continue;
                if (pp > 1 && r.virtual_stages > 1 && !can_interleave(r, l)) continue;
                if (sk == parallel::ScheduleKind::kZeroBubbleV &&
                    !parallel::zero_bubble_v_refusal(pp, r.model.n_layer).empty())
                  continue;
                // The request's v (1: plain) and, when choosing, the plain
                // layout and every interleaving of it.
                if (r.virtual_stages != 0 || pp == 1 || allowed(r.schedule, sk)) layouts.push_back(l);
                if (r.virtual_stages != 0 || !interleaves || !allowed(r.schedule, parallel::ScheduleKind::kInterleaved))
                  continue;
                for (int v = 2; v <= r.model.n_layer / pp; ++v) {
                  if (!can_interleave(r, l, v)) continue;
                  ParallelLayout chunked = l;
                  chunked.schedule = parallel::ScheduleKind::kInterleaved;
                  chunked.virtual_stages = v;
                  layouts.push_back(chunked);
                }
              }
            }
          }
        }
      }
    }
  }
  return layouts;
}

Prediction predict(const PlanRequest& r, const ParallelLayout& l) {
  const parallel::Cluster& c = r.cluster;
  const model::GptConfig& m = r.model;
  const model::Software software = model::software_by_name(r.software, c.device);
  // See the header: on the CPU the cores that compute also do the copies.
  const bool overlap = c.device == engine::DeviceType::kCuda &&
                       (software.overlap_dp == model::Software::DpOverlap::kAlways || l.pp == 1);
  const double mbs = static_cast<double>(l.micro_batches);
  const engine::DType working = model::activation_dtype(l.precision);
  const parallel::Link pp_link = parallel::axis_link(c, parallel::Axis::kPp, l.tp, l.pp, l.dp);
  const parallel::Link dp_link = parallel::axis_link(c, parallel::Axis::kDp, l.tp, l.pp, l.dp);
  const int zero = l.zero_stage();
  const int chunks = layout_chunks(r, l);  // interleaved 1F1B: chunks of layers per device
  ParallelLayout as_1f1b = l;  // an interleaved layout is a 1F1B one cut finer
  if (l.schedule == parallel::ScheduleKind::kInterleaved) as_1f1b.schedule = parallel::ScheduleKind::kOneFOneB;
  const bool v_shape = l.pp > 1 && l.schedule == parallel::ScheduleKind::kZeroBubbleV;
  ENGINE_CHECK(v_shape || chunks == 1 || (software.interleaved_schedule && can_interleave(r, as_1f1b, chunks)),
               "layout tp ", l.tp, " pp ", l.pp,
               " cannot run ", chunks, " virtual stages with software '", r.software,
               "' (interleaving needs software that has it, pp > 2, 1F1B, layers split into pp x v, micro-batches a multiple of pp)");

  // Pipeline boundary: the (B,T,C) activation forward and its gradient backward.
  // Under sequence parallelism each tensor-parallel rank holds and sends its
  // 1/tp of it; software that scatters and gathers (Narayanan et al. 2021,
  // section 4.1) sends 1/tp from each rank too and all-gathers the whole over
  // the tensor-parallel link on arrival.
  const bool split_boundary = l.tp > 1 && (l.sequence_parallel || software.pipeline_scatter_gather);
  const double boundary_elements = static_cast<double>(l.micro_batch * l.seq_len * m.n_embd) / (split_boundary ? l.tp : 1);
  double send = l.pp > 1 ? parallel::send_seconds(bytes_of(boundary_elements, working), pp_link) : 0.0;
  if (l.pp > 1 && l.tp > 1 && !l.sequence_parallel && software.pipeline_scatter_gather) {
    const parallel::Link tp_link = parallel::axis_link(c, parallel::Axis::kTp, l.tp, l.pp, l.dp);
    send += parallel::all_gather_seconds(bytes_of(boundary_elements * l.tp, working), l.tp, tp_link);
  }

  Prediction p;
  p.layout = l;
  const bool zero_bubble = l.pp > 1 && l.schedule == parallel::ScheduleKind::kZeroBubbleH1;
  double slowest = 0, slowest_comm = 0, end_exposed = 0, optimizer = 0;
  model::StageSeconds slowest_passes;  // the slowest rank's passes (ZB-V's bubble is simulated with them)
  double sum_fill = 0, slowest_fill = 0;  // each stage's share of fill and drain, and the slowest stage's
  for (int s = 0; s < l.pp; ++s) {
    const model::StageSeconds st = model::stage_micro_batch_seconds(m, l, c, s, software);
    const double params = model::stage_parameters(m, l, s);
    const double grads = params * software.grad_reduce_bytes, weights = bytes_of(params, working);
    // Data-parallel traffic, per micro-batch (ZeRO-2/3) or at the end of the step.
    double per_micro_batch = 0, at_end = 0;
    const double overlapped_backward = overlap ? st.backward : 0.0;
    if (l.dp > 1) {
      if (zero <= 1) {
        const double reduce = zero == 0 ? parallel::all_reduce_seconds(grads, l.dp, dp_link)
                                        : parallel::reduce_scatter_seconds(grads, l.dp, dp_link);
        at_end += std::max(0.0, reduce - overlapped_backward);
      } else {
        per_micro_batch += zero_units_seconds(stage_units(m, l, s, chunks), st, zero, l.dp, dp_link, overlap, working,
                                              software.grad_reduce_bytes);
      }
      if (zero == 1 || zero == 2) at_end += parallel::all_gather_seconds(weights, l.dp, dp_link);  // updated weights
    }
    // Each of a device's chunks sends its activation on and its input's
    // gradient back, but for the first chunk of the first stage and the last
    // chunk of the last (send is 0 without a pipeline).
    // In ZB-V's V, rank 0 holds both ends and rank pp - 1 turns the V round
    // itself: 2 messages a chunk end each way, less those.
    const double sends =
        (v_shape ? 2.0 * (s > 0) + 2.0 * (s < l.pp - 1) : 2.0 * chunks - (s == 0 ? 1 : 0) - (s == l.pp - 1 ? 1 : 0)) *
        send;
    const double t = st.forward + st.backward + sends + per_micro_batch;
    // ZB-H1 (Qi et al. 2024, section 3.1): the weight passes fill the bubble,
    // so each stage's part of fill and drain is F + B - W instead of F + B + W.
    const double fill = zero_bubble ? t - 2.0 * st.weight_grad : t;
    sum_fill += fill;
    if (t > slowest) {
      slowest = t;
      slowest_passes = st;
      slowest_fill = fill;
      slowest_comm = st.tp_comm + sends + per_micro_batch;
    }
    end_exposed = std::max(end_exposed, at_end);
    optimizer = std::max(optimizer, model::optimizer_seconds(m, l, c, s));
  }
  // Fill and drain (sum_s t_s - max_s t_s) run in chunks of 1/v of a stage.
  // ZB-V: its fixed order idles by the ratio of its passes (zero only at
  // equal times), so the list itself is simulated with the slowest rank's
  // forward, input-gradient and weight passes, each chunk half of them.
  const double pipeline = v_shape ? mbs * slowest + zero_bubble_v_idle_seconds(l.pp, l.micro_batches, slowest_passes,
                                                                               slowest - slowest_passes.forward -
                                                                                   slowest_passes.backward)
                                  : mbs * slowest + (sum_fill - slowest_fill) / chunks;
  // The tied embedding's two copies (first and last stage) are summed once per
  // step; an untied head has one copy.
  double tied = 0;
  if (l.pp > 1 && m.tied_embeddings) {
    const double wte = static_cast<double>(m.padded_vocab() / l.tp * m.n_embd);
    tied = parallel::all_reduce_seconds(wte * software.grad_reduce_bytes, 2, pp_link);
  }
  const parallel::Link& world_link = l.devices() <= c.devices_per_node ? c.intra_node : c.inter_node;
  const double scalars = 3 * scalar_reduction_seconds(l.devices(), world_link);

  p.step_seconds = pipeline + end_exposed + tied + optimizer + scalars;
  p.bubble_seconds = pipeline - mbs * slowest;
  p.exposed_comm_seconds = mbs * slowest_comm + end_exposed + tied + scalars;
  p.optimizer_seconds = optimizer;
  p.virtual_stages = chunks;
  p.compute_seconds = p.step_seconds - p.bubble_seconds - p.exposed_comm_seconds;
  p.model_flops = model::training_flops_per_step(m, r.global_batch, r.seq_len, r.attention);
  p.hardware_flops = p.model_flops + model::recompute_flops_per_step(m, r.global_batch, r.seq_len, l.recompute, r.attention);
  if (l.recompute == model::Recompute::kFull && software.rerun_whole_forward) {
    // The engine's full recomputation skips the MLP projection (model/flops.h); this software reruns it too.
    const double h = static_cast<double>(m.n_embd);
    p.hardware_flops += 2.0 * static_cast<double>(r.global_batch) * r.seq_len * 4.0 * h * h * m.n_layer;
  }
  const double device_seconds = p.step_seconds * l.devices();
  p.tflops_per_device = p.model_flops / device_seconds / 1e12;
  p.mfu = p.model_flops / device_seconds / c.peak_flops;
  p.hfu = p.hardware_flops / device_seconds / c.peak_flops;

  // An interleaved device holds a stage per chunk, each with its own slots
  // (model/memory_plan.h): planned as the engine lays it out.
  model::ParallelLayout as_run = l;
  if (l.pp == 1) as_run.schedule = parallel::ScheduleKind::kOneFOneB;
  if (v_shape) {
    as_run.virtual_stages = 2;
  } else if (chunks > 1) {
    as_run.schedule = parallel::ScheduleKind::kInterleaved;
    as_run.virtual_stages = chunks;
  }
  // On GPUs the ranks talk over NCCL, whose own buffers count too (at
  // NCCL's default sizes: parallel/nccl_memory.h).
  as_run.nccl = c.device == engine::DeviceType::kCuda && r.nccl_comm;
  as_run.nccl_buffers = r.nccl_buffers;
  const model::MemoryPlan memory = model::plan_memory(m, as_run);
  p.memory = memory.largest_of_each();
  for (const model::RankMemory& stage : memory.stages) p.stage_activations.push_back(stage.activations);
  p.memory_bytes_per_device = memory.largest_total();
  p.fits = static_cast<double>(p.memory_bytes_per_device) <= c.memory_bytes;
  return p;
}

std::vector<Prediction> plan(const PlanRequest& r) {
  const std::string problem = r.check();
  ENGINE_CHECK(problem.empty(), problem);
  std::vector<Prediction> all;
  for (const ParallelLayout& l : enumerate_layouts(r)) all.push_back(predict(r, l));
  std::stable_sort(all.begin(), all.end(), [](const Prediction& a, const Prediction& b) {
    if (a.fits != b.fits) return a.fits;
    if (a.step_seconds != b.step_seconds) return a.step_seconds < b.step_seconds;
    return a.memory_bytes_per_device < b.memory_bytes_per_device;
  });
  return all;
}

nlohmann::json prediction_json(const Prediction& p) {
  const ParallelLayout& l = p.layout;
  return {{"tp", l.tp},
          {"pp", l.pp},
          {"dp", l.dp},
          {"micro_batch", l.micro_batch},
          {"zero", l.zero_stage()},
          {"recompute", model::recompute_name(l.recompute)},
          {"schedule", parallel::schedule_name(l.schedule)},
          {"virtual_stages", p.virtual_stages},
          {"sequence_parallel", l.sequence_parallel},
          {"step_seconds", p.step_seconds},
          {"tflops_per_device", p.tflops_per_device},
          {"mfu", p.mfu},
          {"hfu", p.hfu},
          {"memory_bytes_per_device", p.memory_bytes_per_device},
          {"fits", p.fits},
          {"compute_seconds", p.compute_seconds},
          {"exposed_comm_seconds", p.exposed_comm_seconds},
          {"bubble_seconds", p.bubble_seconds},
          {"optimizer_seconds", p.optimizer_seconds},
          {"memory", {{"weights", p.memory.weights},
                      {"grads", p.memory.grads},
                      {"optimizer", p.memory.optimizer},
                      {"activations", p.memory.activations},
                      {"staging", p.memory.staging},
                      {"communication", p.memory.communication}}},
          {"stage_activations", p.stage_activations}};
}

}  // namespace launch
