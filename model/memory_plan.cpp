#include "model/memory_plan.h"

#include <algorithm>

#include "engine/check.h"
#include "model/flat_layout.h"
#include "model/gpt_params.h"
#include "model/gpt_stage.h"
#include "model/partition.h"
#include "model/stage_activations.h"
#include "parallel/dp_zero_units.h"
#include "parallel/shard_layout.h"

namespace model {

namespace {
// AdamW's first and second moments (optim/adamw.h), in the master dtype.
constexpr std::size_t kAdamMoments = 2;
}  // namespace

std::vector<int> chunk_activation_slots(const ParallelLayout& layout, int pp_rank) {
  const std::vector<parallel::Action> actions = parallel::make_schedule(
      layout.schedule, layout.pp, pp_rank, static_cast<int>(layout.micro_batches), layout.virtual_stages);
  std::vector<int> slots;
  for (int c = 0; c < layout.virtual_stages; ++c) slots.push_back(std::max(1, parallel::peak_in_flight(actions, c)));
  return slots;
}

WeightPassSets weight_pass_sets(const std::vector<parallel::Action>& schedule, int chunk) {
  if (!parallel::splits_backward(schedule)) return {};
  return {std::max(1, parallel::peak_awaiting_weight(schedule, chunk)),
          std::max(1, parallel::peak_until_weight(schedule, chunk))};
}

WeightPassSets weight_pass_sets(const ParallelLayout& layout, int pp_rank, int chunk) {
  return weight_pass_sets(parallel::make_schedule(layout.schedule, layout.pp, pp_rank,
                                                  static_cast<int>(layout.micro_batches), layout.virtual_stages),
                          chunk);
}

int activation_slots(const ParallelLayout& layout, int pp_rank) {
  int total = 0;
  for (const int s : chunk_activation_slots(layout, pp_rank)) total += s;
  return total;
}

namespace {

// What a stage holds besides its activation slots, and the bytes of the
// slots: allocate_stage_activations gives every slot the same tensors, so
// its bytes are fixed + slots * per_slot exactly (measured at 1 and 2 slots
// rather than allocating thousands of slots of a long pipeline).
struct StageFootprint {
  RankMemory fixed;  // activations: the shared part only
  std::size_t per_slot = 0;
  // A zero-bubble schedule's weight-gradient stash, per micro-batch between
  // its input and weight passes, and its matmul inputs, per micro-batch
  // between its forward and weight pass (then not in per_slot).
  std::size_t per_stash_set = 0, per_input_set = 0;
};

// chunks: the rank's chunks of layers (one, but for the interleaved
// schedule); pp_rank: the rank, whose schedule gives each chunk its slots.
StageFootprint stage_footprint(const GptConfig& config, const ParallelLayout& layout,
                               const std::vector<StageRange>& chunks, int pp_rank) {
  const StageRange range = rank_range(chunks);
  const int zero = layout.zero_stage();
  // Every tp rank of a stage holds the same sizes; rank 0 stands for all.
  const TensorParallel tp{0, layout.tp, layout.sequence_parallel};
  // Under ZeRO every entry is padded so that it splits into dp equal chunks
  // (launch/run/optimizer_setup.h, shard_ways).
  const ParamRegistry registry = build_gpt_registry(config, chunks, tp, zero >= 1 ? layout.dp : 1);
  const parallel::FlatLayout flat = flat_layout(registry, range, tp, config.n_layer);
  const std::int64_t whole = registry.total_numel();
  // The shard of a rank: its chunk of every unit (ZeRO-2/3) or of every
  // gradient bucket (ZeRO-1). Both cut every padded entry into dp equal
  // chunks, so either way it is whole / dp; the units' chunks are counted as
  // the store counts them.
  const std::int64_t shard =
      zero >= 2 ? parallel::shard_elements(parallel::owned_chunks(flat.units, 0, layout.dp)) : whole / layout.dp;

  const engine::DType master = master_dtype(layout.precision), working = activation_dtype(layout.precision);
  const auto bytes = [](std::int64_t elements, engine::DType dt) {
    return static_cast<std::size_t>(elements) * engine::dtype_size(dt);
  };
  StageFootprint f;
  // As model::ParamStore allocates: the master a shard from ZeRO-1, the
  // working copy a shard at ZeRO-3, and a buffer of its own unless it is the
  // master itself (one dtype and one layout).
  const std::int64_t master_elements = zero >= 1 ? shard : whole;
  const std::int64_t working_elements = zero >= 3 ? shard : whole;
  const bool separate_working = separate_working_copy(layout.precision, zero >= 1, zero >= 3);
  f.fixed.weights = bytes(master_elements, master) + (separate_working ? bytes(working_elements, working) : 0);
  if (layout.fp8_weight_copies) {  // one set per block of every chunk (model/gpt_stage.h)
    std::int64_t blocks = 0;
    for (const StageRange& chunk : chunks) blocks += chunk.last_layer - chunk.first_layer;
    f.fixed.weights += static_cast<std::size_t>(blocks) * fp8_weight_copy_bytes_per_block(config, tp, layout.device);
  }
  f.fixed.grads = bytes(zero >= 2 ? shard : whole, master);
  f.fixed.optimizer = kAdamMoments * bytes(zero >= 1 ? shard : whole, master);
  if (zero >= 2) f.fixed.staging = parallel::ZeroUnitShards::staging_bound(zero, flat.units, working, master);
  const ActivationShape shape{layout.micro_batch, layout.seq_len, working, layout.fp8_matmuls};
  if (chunks.size() > 1) {
    // One GptStage per chunk (launch/run/trainer.cpp), each with its own
    // slots and scratch: their bytes, summed; the slots are in already.
    // ZB-V's chunks each keep their own weight passes' sets.
    int c = 0;
    for (const int slots : chunk_activation_slots(layout, pp_rank)) {
      const WeightPassSets sets = weight_pass_sets(layout, pp_rank, c);
      f.fixed.activations += stage_activation_bytes(layout.device, config, chunks[c++], shape, slots, tp,
                                                    layout.recompute, sets.stash, sets.inputs);
    }
    return f;
  }
  // (slots, stash sets, input sets) -> bytes; each count's share measured by
  // one more of it (a split backward needs input sets >= the other two).
  const auto activation_bytes = [&](int slots, int stash_sets, int input_sets) {
    return stage_activation_bytes(layout.device, config, range, shape, slots, tp, layout.recompute, stash_sets,
                                  input_sets);
  };
  if (layout.schedule == parallel::ScheduleKind::kZeroBubbleH1) {
    const std::size_t base = activation_bytes(1, 1, 2);
    f.per_slot = activation_bytes(2, 1, 2) - base;
    f.per_stash_set = activation_bytes(1, 2, 2) - base;
    f.per_input_set = activation_bytes(1, 1, 3) - base;
    f.fixed.activations = base - f.per_slot - f.per_stash_set - 2 * f.per_input_set;
    return f;
  }
  const std::size_t one = activation_bytes(1, 0, 0), two = activation_bytes(2, 0, 0);
  f.per_slot = two - one;
  f.fixed.activations = one - f.per_slot;
  return f;
}

RankMemory with_slots(const StageFootprint& f, int slots, WeightPassSets sets) {
  RankMemory m = f.fixed;
  m.activations += static_cast<std::size_t>(slots) * f.per_slot +
                   static_cast<std::size_t>(sets.stash) * f.per_stash_set +
                   static_cast<std::size_t>(sets.inputs) * f.per_input_set;
  return m;
}

}  // namespace

std::size_t nccl_buffer_bytes(const GptConfig& config, const ParallelLayout& layout, int pp_rank) {
  if (!layout.nccl) return 0;
  const std::size_t collective = parallel::nccl_collective_bytes(layout.nccl_buffers);
  std::size_t bytes = 0;
  if (layout.tp > 1) bytes += collective;
  if (layout.dp > 1) bytes += collective;
  if (layout.pp > 1) {
    // Neighbours: one for a pipeline of two; else up to two (the interleaved
    // schedule's first and last stages talk to each other too).
    bytes += parallel::nccl_point_to_point_bytes(layout.pp == 2 ? 1 : 2, layout.nccl_buffers);
    // The tied embedding's pair (parallel/tied_embedding.h): none when one
    // rank holds both ends (ZB-V's V) or the head has its own weight.
    const bool holds_an_end = pp_rank == 0 || pp_rank == layout.pp - 1;
    const bool ends_apart = parallel::stage_placement(layout.schedule) != parallel::StagePlacement::kVShape;
    if (config.tied_embeddings && holds_an_end && ends_apart) bytes += collective;
  }
  return bytes;
}

RankMemory plan_stage_memory(const GptConfig& config, const ParallelLayout& layout, int pp_rank) {
  const std::vector<StageRange> chunks = pipeline_chunk_ranges(config, pp_rank, layout.pp, layout.virtual_stages,
                                                               parallel::stage_placement(layout.schedule));
  RankMemory m = chunks.size() > 1 ? stage_footprint(config, layout, chunks, pp_rank).fixed
                                   : with_slots(stage_footprint(config, layout, chunks, pp_rank),
                                                activation_slots(layout, pp_rank), weight_pass_sets(layout, pp_rank));
  m.communication = nccl_buffer_bytes(config, layout, pp_rank);
  return m;
}

MemoryPlan plan_memory(const GptConfig& config, const ParallelLayout& layout) {
  const std::string problem = check_partition(config, layout.tp, layout.pp);
  ENGINE_CHECK(problem.empty(), problem);
  ENGINE_CHECK(layout.dp >= 1 && layout.micro_batch >= 1 && layout.micro_batches >= 1 && layout.seq_len >= 1,
               "memory plan: dp ", layout.dp, ", micro-batch ", layout.micro_batch, ", micro-batches ",
               layout.micro_batches, " and sequence length ", layout.seq_len, " must all be >= 1");
  ENGINE_CHECK(!(layout.sequence_parallel && layout.tp > 1) || (layout.micro_batch * layout.seq_len) % layout.tp == 0,
               "sequence parallel: the ", layout.micro_batch, " x ", layout.seq_len,
               " tokens of a micro-batch do not split evenly over tp ", layout.tp);
  if (layout.schedule == parallel::ScheduleKind::kInterleaved) {
    const std::string refusal = parallel::interleaved_refusal(layout.pp, static_cast<int>(layout.micro_batches),
                                                              layout.virtual_stages, config.n_layer);
    ENGINE_CHECK(refusal.empty(), refusal);
  }
  if (layout.schedule == parallel::ScheduleKind::kZeroBubbleV) {
    const std::string refusal = parallel::zero_bubble_v_refusal(layout.pp, config.n_layer);
    ENGINE_CHECK(refusal.empty(), refusal);
    ENGINE_CHECK(layout.virtual_stages == 2, "memory plan: zb-v runs 2 chunks per rank, not ", layout.virtual_stages);
  }
  // Stages differ only in their layer count (balanced to within one), the
  // embedding, the head and their slots: size each kind of stage once.
  struct Seen {
    std::int64_t layers;
    bool embedding, head;
    StageFootprint footprint;
  };
  std::vector<Seen> seen;
  MemoryPlan plan;
  for (int s = 0; s < layout.pp; ++s) {
    if (layout.virtual_stages > 1) {  // every rank's chunks differ: no sharing of footprints
      plan.stages.push_back(plan_stage_memory(config, layout, s));
      continue;
    }
    const StageRange range = pipeline_stage_range(config, s, layout.pp);
    const std::int64_t layers = range.last_layer - range.first_layer;
    const Seen* match = nullptr;
    for (const Seen& k : seen)
      if (k.layers == layers && k.embedding == range.has_embedding && k.head == range.has_head) match = &k;
    if (!match) {
      seen.push_back({layers, range.has_embedding, range.has_head, stage_footprint(config, layout, {range}, s)});
      match = &seen.back();
    }
    plan.stages.push_back(with_slots(match->footprint, activation_slots(layout, s), weight_pass_sets(layout, s)));
    plan.stages.back().communication = nccl_buffer_bytes(config, layout, s);
  }
  return plan;
}

RankMemory MemoryPlan::largest_of_each() const {
  RankMemory m;
  for (const RankMemory& s : stages) {
    m.weights = std::max(m.weights, s.weights);
    m.grads = std::max(m.grads, s.grads);
    m.optimizer = std::max(m.optimizer, s.optimizer);
    m.activations = std::max(m.activations, s.activations);
    m.staging = std::max(m.staging, s.staging);
    m.communication = std::max(m.communication, s.communication);
  }
  return m;
}

std::size_t MemoryPlan::largest_total() const {
  std::size_t most = 0;
  for (const RankMemory& s : stages) most = std::max(most, s.total());
  return most;
}

}  // namespace model
