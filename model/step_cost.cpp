#include "model/step_cost.h"

#include <cmath>

#include "engine/check.h"
#include "model/gpt_params.h"
#include "model/partition.h"
#include "parallel/comm_cost.h"

namespace model {

namespace {

// Ops per block (kernel launches or parallel regions), see the header.
constexpr double kForwardOpsPerBlock = 10;
constexpr double kBackwardOpsPerBlock = 18;
// Memory-bound values per token and block in forward (the header): position-wise
// values (/tp under sequence parallelism) and GELU's (/tp always).
constexpr double kPositionWisePerC = 10;
constexpr double kGeluPerC = 8;
// Backward moves about twice what forward does.
constexpr double kBackwardTraffic = 2;
// Per logit of the last stage: written, softmax-ed in place, turned into its gradient, read by backward.
constexpr double kPerLogit = 4;
// AdamW per parameter: master, gradient and 2 moments read; master and moments written (master dtype),
// the working copy written (activation dtype); plus zeroing and the norm's read of the gradient.
constexpr double kAdamMasterValues = 7 + 2;

double matmul_seconds(double flops, const parallel::Cluster& c) {
  ENGINE_CHECK(c.peak_flops > 0 && c.gemm_efficiency > 0, "cluster '", c.name,
               "': peak_flops and gemm_efficiency must be positive");
  return flops / (c.peak_flops * c.gemm_efficiency);
}

double memory_seconds(double bytes, const parallel::Cluster& c) {
  ENGINE_CHECK(c.memory_bandwidth > 0, "cluster '", c.name, "': memory_bandwidth must be positive");
  return bytes / c.memory_bandwidth;
}

}  // namespace

double gemm_efficiency_at(const parallel::Cluster& cluster, double m, double n, double k) {
  const parallel::GemmRate* nearest = nullptr;
  double best = 0;
  for (const parallel::GemmRate& r : cluster.gemm_rates) {
    const double dm = std::log(m / static_cast<double>(r.m)), dn = std::log(n / static_cast<double>(r.n)),
                 dk = std::log(k / static_cast<double>(r.k));
    const double d = dm * dm + dn * dn + dk * dk;
    if (!nearest || d < best) nearest = &r, best = d;
  }
  const double far = std::log(2.0) + 1e-12;
  if (nearest && std::abs(std::log(m / static_cast<double>(nearest->m))) <= far &&
      std::abs(std::log(n / static_cast<double>(nearest->n))) <= far &&
      std::abs(std::log(k / static_cast<double>(nearest->k))) <= far)
    return nearest->efficiency;
  return cluster.gemm_efficiency;
}

Software engine_software(engine::DeviceType device) {
  Software s;
  s.name = "engine";
  s.interleaved_schedule = true;  // --pipeline-schedule interleaved --virtual-stages V
  s.zero_bubble_schedule = true;  // --pipeline-schedule zb-h1 and zb-v
  if (device == engine::DeviceType::kCpu) {
    s.flash_attention = false;
    s.values_per_score = 2;  // the probabilities, written and read
  }
  return s;
}

Software megatron_lm_2021() {
  Software s;
  s.name = "megatron-lm-2021";
  s.flash_attention = false;
  // scores written (1), softmax read + write (2), dropout read + write (2) +
  // its 1-byte mask (0.5 of a 2-byte value), read by the product with V (1).
  s.values_per_score = 6.5;
  s.causal_skip = false;
  s.hidden_dropout = true;
  s.rerun_whole_forward = true;
  s.attention_output_copy = true;
  // main_grad.add_(grad) in fp16: the gradient and the buffer read, the buffer written.
  s.grad_accumulation_bytes = 3 * 2;
  s.pipeline_scatter_gather = true;
  s.overlap_dp = Software::DpOverlap::kWithoutPipeline;
  s.grad_reduce_bytes = 2;
  s.interleaved_schedule = true;
  return s;
}

Software software_by_name(const std::string& name, engine::DeviceType device) {
  if (name == "engine") return engine_software(device);
  if (name == "megatron-lm-2021") return megatron_lm_2021();
  ENGINE_FAIL("unknown software '", name, "'; expected engine or megatron-lm-2021");
}

namespace {
// What rank pp_rank runs: its layers' chunks (ZB-V's two, in a V: rank 0
// then runs the embedding and the head; every other schedule's rank holds
// the layers of its plain stage, whatever the interleaving, as the counts
// are the same).
std::vector<StageRange> rank_chunks(const GptConfig& config, const ParallelLayout& layout, int pp_rank) {
  if (layout.schedule == parallel::ScheduleKind::kZeroBubbleV && layout.pp > 1)
    return pipeline_chunk_ranges(config, pp_rank, layout.pp, 2, parallel::StagePlacement::kVShape);
  return {pipeline_stage_range(config, pp_rank, layout.pp)};
}
}  // namespace

StageSeconds stage_micro_batch_seconds(const GptConfig& config, const ParallelLayout& layout,
                                       const parallel::Cluster& cluster, int pp_rank, const Software& software) {
  const std::vector<StageRange> chunks = rank_chunks(config, layout, pp_rank);
  const StageRange range = rank_range(chunks);
  double blocks = 0;
  for (const StageRange& c : chunks) blocks += static_cast<double>(c.last_layer - c.first_layer);
  const double t = layout.tp, B = static_cast<double>(layout.micro_batch), T = static_cast<double>(layout.seq_len);
  const double C = static_cast<double>(config.n_embd), H = static_cast<double>(config.n_head);
  const double V = static_cast<double>(config.padded_vocab());
  const double tokens = B * T;
  const double value = static_cast<double>(engine::dtype_size(activation_dtype(layout.precision)));
  const bool sp = layout.sequence_parallel && layout.tp > 1;
  const double square = software.causal_skip ? 0.5 : 1.0;  // of the T x T scores computed
  const bool full = layout.recompute == Recompute::kFull;

  // The matmuls of a block on one tp rank, each at the rate of its own shape
  // (gemm_efficiency_at): the four weight matmuls (24 C^2 FLOPs per token for
  // GPT-2; a Llama's grouped-query qkv and SwiGLU widths as they are), each
  // run forward as (tokens, out, in), for the input gradient as (tokens, in,
  // out) and for the weight gradient as (out, in, tokens); and the attention
  // core (4 T C per token over the square; the causal half where the kernels
  // skip the rest), batched products of head size, at gemm_efficiency.
  const auto product = [&](double m, double n, double k) {
    ENGINE_CHECK(cluster.peak_flops > 0, "cluster '", cluster.name, "': peak_flops must be positive");
    return 2.0 * m * n * k / (cluster.peak_flops * gemm_efficiency_at(cluster, m, n, k));
  };
  struct Linear {
    double in, out;
  };
  const Linear linears[] = {{C, static_cast<double>(config.qkv_width()) / t},
                            {C / t, C},
                            {C, static_cast<double>(config.fc_width()) / t},
                            {static_cast<double>(config.mlp_width()) / t, C}};
  // --precision fp8 (engine/cuda/fp8_linear.cu): these four products with
  // E4M3 operands, at fp8_gemm_speedup times their bf16 rate (1 until
  // measured), and the casts around each, memory-bound, in bytes: forward,
  // the input's amax (a bf16 read) and its cast (a read, a one-byte write),
  // 5 per input value; backward, the output gradient's amax and its cast-
  // transpose (a read, two one-byte writes), 6 per output value, and the
  // input's amax and transposed cast for the weight gradient, 5 per input
  // value. The weights are cast once per optimizer step (the weight cache):
  // not counted per micro-batch.
  const bool fp8 = layout.fp8_matmuls;
  const double fp8_rate = fp8 && cluster.fp8_gemm_speedup > 0 ? cluster.fp8_gemm_speedup : 1.0;
  double linear_forward = 0, linear_backward = 0, weight_grad = 0, linear_rerun = 0;
  double cast_forward_bytes = 0, cast_backward_bytes = 0, cast_rerun_bytes = 0;
  for (std::size_t i = 0; i < 4; ++i) {
    const Linear& l = linears[i];
    const double forward = product(tokens, l.out, l.in) / fp8_rate, wgrad = product(l.out, l.in, tokens) / fp8_rate;
    linear_forward += forward;
    linear_backward += product(tokens, l.in, l.out) / fp8_rate + wgrad;
    weight_grad += wgrad;
    const double cast_in = fp8 ? 5.0 * tokens * l.in : 0.0;
    cast_forward_bytes += cast_in;
    cast_backward_bytes += fp8 ? 6.0 * tokens * l.out + cast_in : 0.0;
    // Full recomputation reruns the forward up to the MLP projection (model/recompute.h).
    if (i < 3 || software.rerun_whole_forward) {
      linear_rerun += forward;
      cast_rerun_bytes += cast_in;
    }
  }
  const double core_flops = 4.0 * square * tokens * T * C / t;
  const double core = matmul_seconds(core_flops, cluster);
  double recompute = 0;
  if (layout.recompute == Recompute::kSelective) recompute = core;
  if (full) recompute = linear_rerun + core;
  // The head (C -> V/tp), forward and both backward products.
  const double head_forward = range.has_head ? product(tokens, V / t, C) : 0.0;
  const double head_backward = range.has_head ? product(tokens, C, V / t) + product(V / t, C, tokens) : 0.0;

  // Memory-bound bytes per block, forward.
  const double position_wise = (kPositionWisePerC + (software.hidden_dropout ? 1.0 : 0.0)) * C / (sp ? t : 1.0);
  const double probabilities = software.flash_attention ? 0.0 : software.values_per_score * square * H / t * T;
  const double output_copy = software.attention_output_copy ? 2.0 * C / t : 0.0;
  const double forward_values = tokens * (position_wise + kGeluPerC * C / t + probabilities + output_copy);
  double recompute_values = 0;
  if (layout.recompute == Recompute::kSelective) recompute_values = tokens * probabilities;
  if (full) recompute_values = forward_values;
  const double head_values = range.has_head ? kPerLogit * tokens * V / t + 2 * tokens * C : 0.0;
  const double embedding_values = range.has_embedding ? 3 * tokens * C : 0.0;

  // Tensor-parallel collectives of the activations, (B,T,C) each.
  const parallel::Link tp_link = parallel::axis_link(cluster, parallel::Axis::kTp, layout.tp, layout.pp, layout.dp);
  const double activation_bytes = tokens * C * value;
  const double one = parallel::all_reduce_seconds(activation_bytes, layout.tp, tp_link);
  const double tp_forward = blocks * 2 * one + (range.has_embedding ? one : 0.0);
  const double tp_backward = blocks * 2 * one + (full ? blocks * (software.rerun_whole_forward ? 2 : 1) * one : 0.0) +
                             (range.has_head ? one : 0.0);

  StageSeconds s;
  const double fwd_matmul = blocks * (linear_forward + core) + head_forward;
  const double bwd_matmul = blocks * (linear_backward + 2 * core + recompute) + head_backward;
  const double fwd_memory = memory_seconds(
      (blocks * forward_values + embedding_values + head_values / 2) * value + blocks * cast_forward_bytes, cluster);
  const double grad_accumulation = software.grad_accumulation_bytes * stage_parameters(config, layout, pp_rank);
  // A backward split into input and weight passes (ZB-H1) moves more: each
  // block's four matmul output gradients (3C + C + 4C + C per token at tp 1;
  // the inputs' widths split by tp as in the matmuls) are written by the
  // input pass and read back by the weight pass, and the weight pass reads
  // the matmuls' inputs (ln1, atty, ln2, fc_gelu: 2C + 5C/t) again, where the
  // fused backward found them in cache: 19C/t + 6C values per token. On this
  // project's CPU that is the +9-11% a split backward measures
  // (examples/benchmarks/RESULTS.md, train_step_bench --passes).
  const double split_values =
      parallel::splits_backward(layout.schedule, layout.pp) ? tokens * (19.0 * C / t + 6.0 * C) : 0.0;
  const double bwd_memory = memory_seconds(
      (blocks * (kBackwardTraffic * forward_values + recompute_values + split_values) + embedding_values +
       head_values / 2) * value +
          grad_accumulation + blocks * (cast_backward_bytes + (full ? cast_rerun_bytes : 0.0)),
      cluster);
  const double recompute_ops = full ? kForwardOpsPerBlock
                               : layout.recompute == Recompute::kSelective ? 1.0
                                                                             : 0.0;
  const double fwd_ops = blocks * kForwardOpsPerBlock + 4;  // + embedding, final norm, head, loss
  const double bwd_ops = blocks * (kBackwardOpsPerBlock + recompute_ops) + 6;
  s.forward = fwd_matmul + fwd_memory + fwd_ops * cluster.op_overhead_seconds + tp_forward;
  s.backward = bwd_matmul + bwd_memory + bwd_ops * cluster.op_overhead_seconds + tp_backward;
  s.tp_comm = tp_forward + tp_backward;
  s.weight_grad = blocks * weight_grad;
  return s;
}

double stage_parameters(const GptConfig& config, const ParallelLayout& layout, int pp_rank) {
  const TensorParallel tp{0, layout.tp, layout.sequence_parallel};
  return static_cast<double>(
      build_gpt_registry(config, rank_chunks(config, layout, pp_rank), tp, layout.zero_stage() >= 1 ? layout.dp : 1)
          .total_numel());
}

double optimizer_seconds(const GptConfig& config, const ParallelLayout& layout, const parallel::Cluster& cluster,
                         int pp_rank) {
  const double whole = stage_parameters(config, layout, pp_rank);
  const double updated = layout.zero_stage() >= 1 ? whole / layout.dp : whole;
  const double master = static_cast<double>(engine::dtype_size(master_dtype(layout.precision)));
  const double working = static_cast<double>(engine::dtype_size(activation_dtype(layout.precision)));
  // The working copy is written too when it is a buffer of its own.
  const int zero = layout.zero_stage();
  const bool separate_working = separate_working_copy(layout.precision, zero >= 1, zero >= 3);
  const double per_parameter = kAdamMasterValues * master + (separate_working ? working : 0.0);
  // A handful of ops per parameter tensor: count the whole optimizer as a few launches.
  return memory_seconds(updated * per_parameter, cluster) + 4 * cluster.op_overhead_seconds;
}

}  // namespace model
