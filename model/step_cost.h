// The compute side of the cost model: how long one pipeline stage takes for
// one micro-batch's forward and backward, and for its optimizer step, on a
// device described by parallel::Cluster. The planner (launch/plan/planner.h)
// composes these with the communication side (parallel/comm_cost.h) into a
// step time; model/memory_plan.h is the memory side.
//
// Each piece is a roofline term (Williams et al. 2009), summed rather than
// overlapped because the engine runs its ops one after another on one stream:
//   matmuls      FLOPs / (peak_flops * gemm_efficiency), the FLOPs of
//                model/flops.h cut to this stage's layers and tp slice
//                (attention's causal half: both backends skip the blocks
//                above the diagonal), recomputation included;
//   memory-bound bytes / memory_bandwidth, for the ops that are not matmuls
//                (layer norms, residual adds, GELU, softmax, the loss): per
//                token and layer the forward reads and writes about 10 C
//                position-wise values (two layer norms 2C each, two residual
//                adds 3C each; / tp under sequence parallelism) and 8 C / tp
//                for the GELU, backward twice that; the CPU backend also
//                writes and reads the softmax probabilities, H/tp x T per
//                token (half of the square); the last stage moves 4 values
//                per logit (write, softmax in place, gradient, read by the
//                head's backward). Values are the activation dtype's size.
//   FP8          under --precision fp8 the blocks' four linear layers run at
//                the cluster's fp8_gemm_speedup times their rate (1 until
//                measured) and their operands' amax and casts add 5 bytes per
//                input value forward, 6 per output and 5 per input value
//                backward (engine/cuda/fp8_linear.cu's passes);
//   op overhead  op_overhead_seconds per op (a kernel launch or an OpenMP
//                fork/join): about 10 ops per block forward and 18 backward;
//   tensor parallel  the collectives Megatron-LM places (Shoeybi et al.
//                2019, section 3): per block 2 all-reduces of the (B,T,C)
//                activations in forward and 2 in backward (or an all-gather
//                and a reduce-scatter each under sequence parallelism, the
//                same volume; Korthikanti et al. 2023), one more when full
//                recomputation reruns the attention projection, the
//                vocabulary-parallel embedding's all-reduce and the head's
//                input-gradient all-reduce. They are synchronous, so exposed.
// The figures are estimates of the engine's own kernels, not fitted to any
// measurement; the cluster file carries the only hardware numbers.
//
// Software: the same model describes another implementation by the few
// choices in which GPT training codes differ (Software below), so the
// planner can be checked against published figures of other systems
// (examples/scaling/README.md: Megatron-LM as of Narayanan et al. 2021).
#pragma once

#include <string>

#include "model/gpt_config.h"
#include "model/memory_plan.h"
#include "parallel/cluster.h"

namespace model {

struct Software {
  std::string name;
  // Attention core: FlashAttention-style kernels never write the (T x T)
  // scores to memory; otherwise `values_per_score` values are moved per
  // score and layer in forward (scores written, softmax read and write,
  // read by the product with V, dropout read, write and its mask).
  bool flash_attention = true;
  double values_per_score = 0;
  bool causal_skip = true;          // attention matmuls skip the blocks above the diagonal
  bool hidden_dropout = false;      // dropout masks written and read at both residual adds
  bool rerun_whole_forward = false; // full recomputation reruns every matmul of the block (the engine skips the MLP projection)
  // The attention output is copied from (B, heads, T, head_dim) to (T, B, C)
  // between the attention core and its projection (C / tp values read and
  // written per token); the engine's kernels write it in place.
  bool attention_output_copy = false;
  // Bytes per parameter and micro-batch of a separate pass that adds each
  // weight gradient into the accumulation buffer; 0 where the matmuls
  // accumulate in place (the engine: engine/ops.h, parameter gradients +=).
  double grad_accumulation_bytes = 0;
  // Without sequence parallelism, the pipeline boundary is sent as 1/tp from
  // each tensor-parallel rank and all-gathered on arrival (Narayanan et al.
  // 2021, section 4.1, Megatron-LM's default then); else every rank sends it whole.
  bool pipeline_scatter_gather = false;
  // Plain DP / ZeRO-1 reductions start during the last backward (on a GPU):
  // always (the engine), or only without a pipeline (Megatron-LM's
  // run_table_1.sh used PyTorch DDP at pp 1 and its own after-backward
  // all-reduce with pipelines).
  enum class DpOverlap { kAlways, kWithoutPipeline };
  DpOverlap overlap_dp = DpOverlap::kAlways;
  double grad_reduce_bytes = 4;     // bytes per gradient the data-parallel reduction moves
  // Has the interleaved 1F1B schedule (Narayanan et al. 2021, section
  // 2.2.2): each device holds several non-adjacent chunks of layers, which
  // shrinks the bubble and multiplies the pipeline messages.
  bool interleaved_schedule = false;
  // Has the ZB-H1 zero-bubble schedule (Qi et al. 2024): the backward split
  // into input and weight passes, the weight passes moved into the bubble.
  bool zero_bubble_schedule = false;
};

// The engine on `device`: CUDA runs FlashAttention-style kernels; the CPU
// keeps the softmax probabilities (written once, read once, half the square).
Software engine_software(engine::DeviceType device);
// Megatron-LM as Narayanan et al. 2021 ran it (SC21, section 5): fp16, the
// attention scores materialised (baddbmm, fused scale-mask-softmax, dropout
// 0.1 on the probabilities, bmm) over the whole square, the attention output
// permuted with .contiguous() (a copy), bias-dropout-add on the hidden
// states, full recomputation of each layer's whole forward, and gradients
// all-reduced in fp16, overlapped with backward only without a pipeline
// (NVIDIA/Megatron-LM examples/sc21/run_table_1.sh: DDP=torch at pp 1,
// DDP=local with pipelines). Its local DDP adds each weight's gradient into
// a contiguous buffer after every micro-batch's backward
// (megatron/model/distributed.py of 2021: param.main_grad.add_(param.grad));
// modelled for every row, as torch DDP copies gradients into its buckets
// about as much. Pipeline messages are scattered over the tensor-parallel
// ranks and gathered on arrival (the paper's section 4.1). It has the
// interleaved schedule (--num-layers-per-virtual-pipeline-stage).
Software megatron_lm_2021();
// "engine" or "megatron-lm-2021".
Software software_by_name(const std::string& name, engine::DeviceType device);

struct StageSeconds {
  double forward = 0;   // one micro-batch's forward, its tensor-parallel collectives included
  double backward = 0;  // its backward, recomputation included
  double tp_comm = 0;   // of both, the tensor-parallel collectives
  // Of backward, the blocks' weight-gradient matmuls: what a zero-bubble
  // schedule's W pass runs (the head's weight gradient is taken during the
  // last stage's forward, llm.c's fused classifier).
  double weight_grad = 0;
};

// The efficiency a matrix product of shape (m, n, k) (parallel::GemmRate)
// runs at on `cluster`: the rate of the nearest shape of its gemm_rates
// (nearest in log m, log n, log k: the same ratio off counts the same in any
// dimension) if that shape is within a factor of 2 in every dimension, else
// gemm_efficiency. Exact at a measured shape.
double gemm_efficiency_at(const parallel::Cluster& cluster, double m, double n, double k);

StageSeconds stage_micro_batch_seconds(const GptConfig& config, const ParallelLayout& layout,
                                       const parallel::Cluster& cluster, int pp_rank, const Software& software);

// The optimizer step of one rank of `pp_rank`: AdamW over the parameters it
// updates (its ZeRO shard, or all of its stage), plus zeroing the gradients
// and their squared norm, all memory-bound: per parameter it reads master,
// gradient and both moments and writes master, moments and the working copy.
double optimizer_seconds(const GptConfig& config, const ParallelLayout& layout, const parallel::Cluster& cluster,
                         int pp_rank);

// Parameters (elements, padding included) a rank of `pp_rank` holds whole:
// what its gradient reduction and ZeRO gathers move.
double stage_parameters(const GptConfig& config, const ParallelLayout& layout, int pp_rank);

}  // namespace model
