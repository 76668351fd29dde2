#include "launch/trainer.h"

#include <chrono>
#include <limits>
#include <cmath>
#include <cstdlib>
#include <ostream>
#include <sstream>
#include <tuple>

#include "engine/device.h"
#include "engine/ops.h"
#include "launch/byte_tokenizer.h"
#include "launch/checkpoint.h"
#include "launch/sampler.h"
#include "model/flops.h"
#include "model/gpt_params.h"
#include "optim/grad_clip.h"
#include "parallel/mpi_communicator.h"
#include "parallel/pipeline_runner.h"
#ifdef ENGINE_WITH_NCCL
#include "parallel/nccl_communicator.h"
#endif

namespace launch {

using Clock = std::chrono::steady_clock;
using engine::Tensor;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The node-local rank picks the GPU (one GPU per rank; several ranks share
// one only in correctness runs with the MPI communicator).
int local_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"})
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return 0;
}

int world_rank_of(MPI_Comm world) {
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  return rank;
}

int world_size_of(MPI_Comm world) {
  int size = 1;
  MPI_Comm_size(world, &size);
  return size;
}

}  // namespace

// ---- the pipeline's view of this rank's stage ---------------------------------

// Adapts model::GptStage to parallel::Stage: micro-batch i uses activation
// slot i % slots (1F1B retires micro-batches in order, so at most `slots` are
// alive), reads its tokens where the stage needs them, accumulates the loss
// on the last stage, and during the last micro-batch's backward reports
// finished layers to the data-parallel gradient buckets.
class Trainer::PipelineStage : public parallel::Stage {
 public:
  explicit PipelineStage(Trainer& t) : t_(t) {
    const std::int64_t n = t.config_.micro_batch * t.config_.seq_len;
    inputs_.assign(static_cast<std::size_t>(n), 0);
    targets_.assign(static_cast<std::size_t>(n), 0);
    t.stage_->set_backward_hook([this](std::int64_t layer) {
      if (reporting_) t_.grad_buckets_->layer_done(layer);
    });
  }

  void begin_step(std::int64_t step, double grad_scale) {
    step_ = step;
    grad_scale_ = grad_scale;
    loss_sum_ = 0;
  }
  double loss_sum() const { return loss_sum_; }

  void forward(int micro) override {
    const model::StageRange& r = t_.range_;
    if (r.has_embedding || r.has_head)
      t_.train_data_->read_sequences(t_.layout_.first_sequence(step_, micro), t_.config_.micro_batch, inputs_.data(),
                                     targets_.data());
    t_.stage_->forward(slot(micro), r.has_embedding ? inputs_.data() : nullptr, r.has_head ? targets_.data() : nullptr,
                       grad_scale_);
    if (r.has_head) loss_sum_ += t_.stage_->loss_sum(slot(micro));
  }

  void backward(int micro) override {
    const bool last = micro == t_.layout_.micro_batches() - 1;
    // 1-bit Adam's compression stage reduces no gradients over dp.
    reporting_ = last && t_.grad_buckets_ && t_.config_.overlap_grad_reduce && !t_.compressing();
    t_.stage_->backward(slot(micro));
    reporting_ = false;
  }

  Tensor forward_input(int micro) override { return t_.stage_->input(slot(micro)); }
  Tensor forward_output(int micro) override { return t_.stage_->output(slot(micro)); }
  Tensor backward_input_grad(int micro) override { return t_.stage_->output_grad(slot(micro)); }
  Tensor backward_output_grad(int) override { return t_.stage_->input_grad(); }

 private:
  int slot(int micro) const { return micro % t_.stage_->slots(); }

  Trainer& t_;
  std::vector<std::int32_t> inputs_, targets_;  // (B,T) host staging
  std::int64_t step_ = 0;
  double grad_scale_ = 0;
  double loss_sum_ = 0;
  bool reporting_ = false;
};

// ---- set-up ---------------------------------------------------------------------

double measure_cpu_matmul_flops() {
  const std::int64_t n = 1024;
  engine::Buffer a(engine::DeviceType::kCpu, n * n * 4), w(engine::DeviceType::kCpu, n * n * 4),
      o(engine::DeviceType::kCpu, n * n * 4);
  const Tensor ta = a.as_tensor(engine::Shape{n, n}, engine::DType::kF32);
  const Tensor tw = w.as_tensor(engine::Shape{n, n}, engine::DType::kF32);
  const Tensor to = o.as_tensor(engine::Shape{n, n}, engine::DType::kF32);
  engine::ops::fill(ta, 0.5);
  engine::ops::fill(tw, 0.25);
  double best = 1e30;
  for (int rep = 0; rep < 4; ++rep) {  // the first warms up caches and threads
    const auto t0 = Clock::now();
    engine::ops::matmul_forward(to, ta, tw, Tensor{});
    if (rep > 0) best = std::min(best, seconds_since(t0));
  }
  return 2.0 * n * n * n / best;
}

void check_inputs(const TrainConfig& config) {
  const int T = static_cast<int>(config.seq_len), V = static_cast<int>(config.model.vocab_size);
  DataLoader train(config.train_data, T, V, config.shuffle, config.seed);
  if (!config.val_data.empty()) DataLoader val(config.val_data, T, V, false, config.seed);
  if (!config.init_from.empty()) {
    const model::GptConfig found = read_llmc_config(config.init_from);
    ENGINE_CHECK(found == config.model, "--init-from '", config.init_from, "' holds a model of another shape: ",
                 found.describe(), "; this run's model is ", config.model.describe());
  }
}

Trainer::Trainer(const TrainConfig& config, std::ostream& out, MPI_Comm world)
    : config_(config),
      out_(out),
      grid_(world_size_of(world), world_rank_of(world), config.tp, config.pp, config.dp),
      metrics_(world_rank_of(world) == 0 ? config.log_file : std::string()) {
  const model::GptConfig& mc = config.model;
  if (config.device_type == engine::DeviceType::kCuda)
    engine::cuda_set_device(local_rank() % engine::cuda_device_count());

  // Communicators: device traffic on MPI or NCCL; host scalars always on MPI.
  host_world_ = std::make_unique<parallel::MpiCommunicator>(world, "world");
  if (config.comm == "nccl") {
#ifdef ENGINE_WITH_NCCL
    comms_ = parallel::make_nccl_comms(grid_, world);
#else
    ENGINE_FAIL("--comm nccl: this engine was built without NCCL");
#endif
  } else {
    comms_ = parallel::make_mpi_comms(grid_, world);
  }
  // The first and last stage of each pipeline hold the tied token embedding;
  // their gradients are summed over this group (Narayanan et al. 2021).
  if (grid_.pp_size() > 1) {
    const bool holds_wte = grid_.is_first_stage() || grid_.is_last_stage();
    MPI_Comm group = MPI_COMM_NULL;
    MPI_Comm_split(world, holds_wte ? grid_.tp_rank() + grid_.tp_size() * grid_.dp_rank() : MPI_UNDEFINED,
                   grid_.pp_rank(), &group);
    if (holds_wte) {
#ifdef ENGINE_WITH_NCCL
      if (config.comm == "nccl") embedding_comm_ = std::make_unique<parallel::NcclCommunicator>(group, "embedding");
#endif
      if (!embedding_comm_) embedding_comm_ = std::make_unique<parallel::MpiCommunicator>(group, "embedding");
      MPI_Comm_free(&group);
    }
  }

  range_ = model::pipeline_stage_range(mc, grid_.pp_rank(), grid_.pp_size());
  tp_ = model::TensorParallel{grid_.tp_rank(), grid_.tp_size(), config.sequence_parallel};
  // ZeRO (Rajbhandari et al. 2020) shards over the data-parallel group; with
  // one replica there is nothing to shard and every stage is stage 0.
  zero_stage_ = grid_.dp_size() > 1 ? config.zero : 0;
  const bool zero = zero_stage_ >= 1;
  registry_ = model::build_gpt_registry(mc, range_, tp_, zero ? grid_.dp_size() : 1);
  for (const model::ParamUnit& u : registry_.units()) unit_ranges_.push_back({u.offset, u.count});

  train_data_ = std::make_unique<DataLoader>(config.train_data, static_cast<int>(config.seq_len),
                                             static_cast<int>(mc.vocab_size), config.shuffle, config.seed);
  if (!config.val_data.empty())
    val_data_ = std::make_unique<DataLoader>(config.val_data, static_cast<int>(config.seq_len),
                                             static_cast<int>(mc.vocab_size), false, config.seed);
  layout_ = BatchLayout{config.batch_tokens / config.seq_len, grid_.dp_size(), grid_.dp_rank(), config.micro_batch};
  layout_.validate();

  // Stages 2 and 3 keep only this rank's chunks of every unit: of the
  // gradients, and at stage 3 of the weights too (parallel/zero_units.h).
  model::StoreSharding sharding;
  if (zero_stage_ >= 2) {
    sharding.owned = parallel::owned_chunks(unit_ranges_, comms_.dp->rank(), comms_.dp->size());
    sharding.grads = true;
    sharding.weights = zero_stage_ >= 3;
  }
  store_ = std::make_unique<model::ParamStore>(registry_, config.device_type, config.precision_mode, sharding);
  if (zero_stage_ >= 2)
    zero_units_ = std::make_unique<parallel::ZeroUnits>(*comms_.dp, unit_ranges_,
                                                        zero_stage_ >= 3 ? store_->working() : Tensor{}, store_->grads());
  if (!config.init_from.empty()) {
    // Read the whole model, then keep this rank's slices of it.
    const model::ParamRegistry full = model::build_gpt_registry(mc);
    std::vector<float> whole(static_cast<std::size_t>(full.total_numel()), 0.0f);
    read_llmc_model(config.init_from, mc, full, whole.data());
    std::vector<float> mine(static_cast<std::size_t>(registry_.total_numel()), 0.0f);
    for (const model::ParamInfo& p : registry_.entries()) {
      const float* src = whole.data() + full.find(p.name).offset;
      model::for_each_run(p, [&](std::int64_t local, std::int64_t global, std::int64_t count) {
        std::copy(src + global, src + global + count, mine.data() + p.offset + local);
      });
    }
    store_->upload_master(mine.data());
  } else {
    store_->initialize(config.seed);
  }

  // The schedule decides how many micro-batches are alive at once, and so
  // how many activation slots the stage needs.
  schedule_ = parallel::make_schedule(parallel::parse_schedule(config.pipeline_schedule), grid_.pp_size(),
                                      grid_.pp_rank(), layout_.micro_batches());
  const int slots = std::max(1, parallel::peak_in_flight(schedule_));
  const model::ActivationShape shape{config.micro_batch, config.seq_len, model::activation_dtype(config.precision_mode)};
  stage_ = std::make_unique<model::GptStage>(mc, *store_, range_, shape, slots, tp_, comms_.tp.get(),
                                             config.recompute_mode, zero_units_.get());
  engine::Arena plan = engine::Arena::planning(config.device_type);
  stage_->allocate(plan);
  activations_ = engine::Arena(config.device_type, plan.used());
  stage_->allocate(activations_);


  // Gradient ranges: readiness keys for the data-parallel buckets, and the
  // ranges the global norm counts (split tensors on every tensor-parallel
  // rank, replicated ones on rank 0 only, the last stage's wte copy never).
  std::vector<parallel::GradRange> ranges;
  const auto& entries = registry_.entries();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const model::ParamInfo& p = entries[i];
    const std::int64_t end = i + 1 < entries.size() ? entries[i + 1].offset : registry_.total_numel();
    std::int64_t key = mc.n_layer;  // the head's tensors are final before any block's backward
    if (p.name.rfind("h.", 0) == 0) key = std::stoll(p.name.substr(2));
    else if (range_.has_embedding && (p.name == "wte" || p.name == "wpe")) key = -1;
    // Under ZeRO the tied embedding's two copies must be summed before the
    // reduce-scatter (their chunks sit at different offsets on the first and
    // last stage), so its bucket waits for finish().
    if (zero && grid_.pp_size() > 1 && p.name == "wte") key = std::numeric_limits<std::int64_t>::min();
    ranges.push_back({p.offset, end - p.offset, key});
    const bool counted = (p.split.is_split() || tp_.rank == 0) && !(p.name == "wte" && !range_.has_embedding);
    if (!counted) continue;
    if (!norm_ranges_.empty() && norm_ranges_.back().first + norm_ranges_.back().second == p.offset)
      norm_ranges_.back().second += end - p.offset;
    else
      norm_ranges_.push_back({p.offset, end - p.offset});
  }
  local_norm_ranges_ = norm_ranges_;
  // Stages 0 and 1 reduce whole buckets of the gradient buffer; stages 2
  // and 3 reduce unit by unit as the stage releases them (zero_units_).
  if (grid_.dp_size() > 1 && zero_stage_ <= 1) {
    const auto bucket_elements = static_cast<std::int64_t>(config.bucket_mb * 1024 * 1024 /
                                                           engine::dtype_size(store_->grads().dtype()));
    grad_buckets_ = std::make_unique<parallel::GradBuckets>(
        *comms_.dp, store_->grads(), ranges, std::max<std::int64_t>(1, bucket_elements),
        zero ? parallel::GradBuckets::Mode::kReduceScatter : parallel::GradBuckets::Mode::kAllReduce);
  }

  // The optimizer: over everything, or under ZeRO over the chunks this rank
  // owns (Rajbhandari et al. 2020): its moments compact in a shard (P_os),
  // from stage 2 the gradients too (P_os+g), at stage 3 the weights (P_os+g+p).
  std::vector<optim::ParamSegment> segments;
  std::int64_t state_elements = -1;
  if (zero) {
    owned_ = zero_units_ ? zero_units_->owned() : grad_buckets_->owned_chunks();
    state_elements = parallel::shard_elements(owned_);
    for (const model::DecaySegment& d : registry_.decay_segments())
      for (const parallel::ShardChunk& c : owned_) {
        const std::int64_t begin = std::max(d.offset, c.full_offset);
        const std::int64_t end = std::min(d.offset + d.count, c.full_offset + c.count);
        if (begin >= end) continue;
        const std::int64_t in_shard = c.shard_offset + (begin - c.full_offset);
        optim::ParamSegment seg{begin, end - begin, d.decay, begin, in_shard};
        if (zero_stage_ >= 2) seg.grad_offset = in_shard;
        if (zero_stage_ >= 3) seg.offset = seg.master_offset = in_shard;
        segments.push_back(seg);
      }
    // The norm counts each rank's own reduced chunks; every rank contributes.
    // They sit at their full-layout offsets under stage 1 and in the
    // gradient shard from stage 2.
    std::vector<std::pair<std::int64_t, std::int64_t>> owned_norm;
    for (const auto& [offset, count] : norm_ranges_)
      for (const parallel::ShardChunk& c : owned_) {
        const std::int64_t begin = std::max(offset, c.full_offset);
        const std::int64_t end = std::min(offset + count, c.full_offset + c.count);
        if (begin < end)
          owned_norm.push_back({zero_stage_ >= 2 ? c.shard_offset + (begin - c.full_offset) : begin, end - begin});
      }
    norm_ranges_ = owned_norm;
  } else {
    for (const model::DecaySegment& d : registry_.decay_segments()) segments.push_back({d.offset, d.count, d.decay});
  }
  const optim::FlatParams flat{store_->master(), store_->grads(), store_->working()};
  if (config.onebit) {
    // 1-bit Adam: the same segments and variance layout; the momentum is
    // whole even under ZeRO (optim/onebit_adam.h, "Composition").
    std::vector<std::pair<std::int64_t, std::int64_t>> padding;  // between (and after) the tensors
    std::int64_t at = 0;
    for (const model::ParamInfo& p : registry_.entries()) {
      if (p.offset > at) padding.push_back({at, p.offset - at});
      at = p.offset + p.numel();
    }
    if (registry_.total_numel() > at) padding.push_back({at, registry_.total_numel() - at});
    onebit_ = std::make_unique<optim::OneBitAdam>(flat, segments, config.onebit_adam, *comms_.dp,
                                                  compression_groups(), state_elements, padding);
  } else {
    adamw_ = std::make_unique<optim::AdamW>(flat, segments, config.adamw, state_elements);
  }
  pipeline_ = std::make_unique<PipelineStage>(*this);
  sampler_rng_.seed(config.seed);

  // Bytes each rank holds, as laid out for this layout before step 1; the
  // largest over all ranks is what must fit on one device. ZeRO-2/3's
  // staging buffers are allocated as the first step needs them; the pool
  // holds at most as many as are in use at once (parallel/zero_units.h): 3
  // gathered units (ZeRO-3: in use, prefetched, the embedding's pair) and 4
  // gradient units (in use, the held token embedding, 2 reductions in
  // flight), each at most the largest unit.
  const bool separate_working = store_->working().data() != store_->master().data();
  const MemoryAccount account = memory_account();
  std::int64_t largest_unit = 0;
  for (const parallel::FlatRange& u : unit_ranges_) largest_unit = std::max(largest_unit, u.count);
  const double staging_bound = zero_stage_ < 2 ? 0.0
                                               : static_cast<double>(largest_unit) * (zero_stage_ >= 3 ? 7.0 : 4.0) *
                                                     static_cast<double>(std::max(engine::dtype_size(store_->working().dtype()),
                                                                                  engine::dtype_size(store_->grads().dtype())));
  double held[5] = {static_cast<double>(account.weights), static_cast<double>(account.grads),
                    static_cast<double>(account.optimizer), static_cast<double>(account.activations), staging_bound};
  host_world_->all_reduce(Tensor(held, engine::Shape{5}, engine::DType::kF64, engine::DeviceType::kCpu),
                          parallel::ReduceOp::kMax);
  if (is_logger()) {
    auto bytes = [](double b) { return engine::format_bytes(static_cast<std::size_t>(b)); };
    out_ << config.describe() << "\n"
         << "rank 0     " << grid_.describe() << ", layers [" << range_.first_layer << ", " << range_.last_layer << ")\n"
         << "memory     per rank (largest over ranks): parameters " << bytes(held[0])
         << (separate_working ? " (fp32 master + working copy)" : "") << (zero_stage_ >= 3 ? " (ZeRO-3 shard)" : "")
         << ", gradients " << bytes(held[1]) << (zero_stage_ >= 2 ? " (ZeRO shard)" : "")
         << ", optimizer state " << bytes(held[2])
         << (onebit_ ? (zero_sharded() ? " (1-bit Adam: whole momentum and error buffers, ZeRO-1 variance shard)"
                                       : " (1-bit Adam: momentum, variance, error buffers)")
                     : (zero_sharded() ? " (ZeRO shard)" : ""))
         << ", activations "
         << bytes(held[3]) << " (" << slots << " micro-batch slot" << (slots > 1 ? "s" : "") << ", recompute "
         << model::recompute_name(config.recompute_mode) << ")";
    if (zero_stage_ >= 2)
      out_ << ", ZeRO-" << zero_stage_ << " gather/reduce buffers <= " << bytes(held[4]) << " (allocated as used)";
    out_ << "\n"
         << "flops      " << model::flops_convention() << "\n";
  }
  if (!config.resume.empty()) resume();
}

Trainer::~Trainer() = default;

MemoryAccount Trainer::memory_account() const {
  MemoryAccount a;
  const bool separate_working = store_->working().data() != store_->master().data();
  a.weights = store_->master().bytes() + (separate_working ? store_->working().bytes() : 0);
  a.grads = store_->grads().bytes();
  a.optimizer = optimizer_m().bytes() + optimizer_v().bytes() + (onebit_ ? onebit_->extra_state_bytes() : 0);
  a.activations = activations_.capacity();
  a.zero_staging = zero_units_ ? zero_units_->staging_bytes() : 0;
  return a;
}

void Trainer::optimizer_step(double lr, double norm) {
  const double clip = optim::clip_factor(norm, config_.grad_clip);
  if (adamw_) {
    adamw_->step(lr, clip);
    return;
  }
  if (onebit_->compressing()) {
    // Under ZeRO the warm-up kept only the owned chunks of the whole
    // momentum current: gather it once before the first exchange.
    if (onebit_m_partial_) {
      grad_buckets_->gather(onebit_->m());
      onebit_m_partial_ = false;
    }
    // dp * local gradient: each rank's estimate of the whole batch's
    // gradient, so the mean of the local momenta is the momentum of the
    // whole batch (see global_grad_norm).
    onebit_->step(lr, clip * grid_.dp_size());
  } else {
    onebit_->step(lr, clip);
    onebit_m_partial_ = zero_sharded();
  }
}

// ---- one step ------------------------------------------------------------------------

double Trainer::sum_over_world(double local) {
  host_world_->all_reduce(Tensor(&local, engine::Shape{1}, engine::DType::kF64, engine::DeviceType::kCpu));
  return local;
}

void Trainer::reduce_gradients() {
  // Whatever of the reductions backward did not hide is exposed here.
  engine::device_synchronize();
  const auto t0 = Clock::now();
  if (compressing()) {
    // 1-bit Adam's compression stage: no data-parallel reduction (the
    // momentum is exchanged instead); the tied embedding's two copies are
    // still summed, on this replica's local gradients.
    if (embedding_comm_) embedding_comm_->all_reduce(store_->grad("wte"));
  } else if (zero_units_) {
    // ZeRO-2/3: backward started every unit's reduce-scatter; land them.
    // Then the tied embedding's two copies: "wte" is a unit of its own on
    // the first and the last stage, so the owned chunks cover the same
    // elements on both and their sum is the sum of the reduced copies.
    zero_units_->finish_grads();
    if (embedding_comm_) {
      const parallel::ShardChunk& c = owned_[static_cast<std::size_t>(registry_.unit_index("wte"))];
      embedding_comm_->all_reduce(store_->grads().flat_slice(c.shard_offset, c.count));
    }
  } else if (zero_sharded()) {
    // ZeRO-1: the tied embedding's copies are summed before the reduce-scatter.
    if (embedding_comm_) embedding_comm_->all_reduce(store_->grad("wte"));
    grad_buckets_->finish();
  } else {
    if (grad_buckets_) grad_buckets_->finish();  // starts what backward did not, waits for all
    if (embedding_comm_) embedding_comm_->all_reduce(store_->grad("wte"));
  }
  engine::device_synchronize();
  exposed_comm_seconds_ = seconds_since(t0);
}

double Trainer::global_grad_norm() {
  if (compressing()) {
    // 1-bit Adam's compression stage: nothing was reduced, each dp rank r
    // holds its local gradient g_r (scaled by 1/global tokens, so the true
    // gradient is sum_r g_r) and the optimizer uses dp * g_r, rank r's
    // estimate of the whole batch's gradient (optimizer_step). Every rank
    // must clip by the same factor, so the norm is the root of the MEAN over
    // dp ranks of ||dp g_r||^2 = dp * sum_r ||g_r||^2: one scalar all-reduce.
    // It exceeds the norm of the mean gradient by the gradient noise, so
    // clipping engages somewhat earlier than under AdamW.
    double local = 0;
    for (const auto& [offset, count] : local_norm_ranges_)
      local += optim::grad_sum_of_squares(store_->grads().flat_slice(offset, count));
    return std::sqrt(sum_over_world(local) * grid_.dp_size());
  }
  // After the data-parallel reduction every dp replica holds the same
  // gradients: count them once, on dp rank 0. Under ZeRO each rank holds
  // different (its own) reduced chunks, and all count.
  double local = 0;
  if (grid_.dp_rank() == 0 || zero_sharded())
    for (const auto& [offset, count] : norm_ranges_)
      local += optim::grad_sum_of_squares(store_->grads().flat_slice(offset, count));
  return std::sqrt(sum_over_world(local));
}

double Trainer::train_step(std::int64_t step) {
  // Each token's loss enters the objective with weight 1/(tokens per step).
  const double grad_scale = 1.0 / static_cast<double>(config_.batch_tokens);
  store_->zero_grads();
  if (grad_buckets_) grad_buckets_->start_step();
  pipeline_->begin_step(step, grad_scale);
  parallel::run_schedule(schedule_, *pipeline_, *comms_.pp);
  reduce_gradients();
  // After the data-parallel reduction has landed (it may still be writing
  // these buffers until then); sums commute, so the order is free.
  stage_->reduce_sequence_parallel_grads();
  // Every data-parallel replica's last stage holds part of the loss; count
  // each tensor-parallel group once.
  const bool contributes = range_.has_head && tp_.rank == 0;
  return sum_over_world(contributes ? pipeline_->loss_sum() : 0.0) * grad_scale;
}

double Trainer::validate() {
  const std::int64_t B = config_.micro_batch, T = config_.seq_len;
  const std::int64_t batches =
      std::max<std::int64_t>(1, std::min(config_.val_batches, val_data_->sequences_per_epoch() / B));
  std::vector<std::int32_t> inputs(static_cast<std::size_t>(B * T)), targets(inputs.size());
  parallel::Communicator& pp = *comms_.pp;
  double loss_sum = 0.0;
  // Forward only, micro-batch by micro-batch through the pipeline; every
  // data-parallel replica evaluates the same batches and dp rank 0 reports.
  for (std::int64_t i = 0; i < batches; ++i) {
    val_data_->read_sequences(i * B, B, inputs.data(), targets.data());
    if (!range_.has_embedding) pp.recv(stage_->input(0), pp.rank() - 1);
    stage_->forward(0, inputs.data(), targets.data(), 0.0);
    if (!range_.has_head) pp.send(stage_->output(0), pp.rank() + 1);
    if (range_.has_head) loss_sum += stage_->loss_sum(0);
  }
  const bool contributes = range_.has_head && tp_.rank == 0 && grid_.dp_rank() == 0;
  return sum_over_world(contributes ? loss_sum : 0.0) / static_cast<double>(batches * B * T);
}

double Trainer::peak_flops_per_device() {
  if (config_.peak_tflops > 0) {
    if (is_logger()) out_ << "peak       " << config_.peak_tflops << " TFLOP/s per device (--peak-tflops)\n";
    return config_.peak_tflops * 1e12;
  }
  if (config_.device_type == engine::DeviceType::kCuda) {
    const std::string name = engine::cuda_device_name(local_rank() % engine::cuda_device_count());
    const double peak = engine::gpu_peak_flops_by_name(name);
    ENGINE_CHECK(peak > 0, "no peak FLOP/s known for GPU '", name, "'; give it with --peak-tflops");
    if (is_logger()) out_ << "peak       " << peak / 1e12 << " TFLOP/s dense bf16 (" << name << ", from the device table)\n";
    return peak;
  }
  if (!is_logger()) return 1.0;  // only rank 0 reports MFU
  const double peak = measure_cpu_matmul_flops();
  out_ << "peak       " << peak / 1e9 << " GFLOP/s fp32 (measured: best 1024^3 matmul on this CPU)\n";
  return peak;
}

std::string Trainer::sample_text(const model::ParamStore& store) {
  const model::ActivationShape shape{1, config_.seq_len, model::activation_dtype(config_.precision_mode)};
  model::GptStage sampler(config_.model, store, model::whole_model(config_.model), shape, 1);
  engine::Arena plan = engine::Arena::planning(config_.device_type);
  sampler.allocate(plan);
  engine::Arena arena(config_.device_type, plan.used());
  sampler.allocate(arena);
  ByteTokenizer tokenizer;
  std::vector<std::int32_t> prompt;
  for (std::uint16_t t : tokenizer.encode(config_.sample_prompt)) prompt.push_back(t);
  if (prompt.empty()) prompt.push_back('\n');
  const SamplingOptions options{config_.sample_tokens, config_.temperature, config_.top_k};
  const std::vector<std::int32_t> ids = generate(sampler, config_.model.vocab_size, prompt, options, sampler_rng_);
  return config_.sample_prompt + tokenizer.decode(ids);
}

RunSummary Trainer::run() {
  RunSummary summary;
  summary.first_step = start_step_;
  const double peak = peak_flops_per_device();
  const double step_flops =
      model::training_flops_per_step(config_.model, config_.batch_tokens / config_.seq_len, config_.seq_len);
  const int devices = grid_.world_size();
  parallel::Communicator* axes[] = {comms_.tp.get(), comms_.dp.get(), comms_.pp.get(), embedding_comm_.get()};

  for (std::int64_t step = start_step_; step < config_.steps; ++step) {
    for (parallel::Communicator* c : axes)
      if (c) c->reset_bytes_sent();
    const auto t0 = Clock::now();
    const double loss = train_step(step);
    ENGINE_CHECK(std::isfinite(loss), "training loss is ", loss, " at step ", step + 1,
                 "; stopping without saving (try a lower --lr or --grad-clip)");
    const double norm = global_grad_norm();
    const double lr = config_.lr_schedule.at(step);
    // ZeRO-3: no gather may still be reading the shards the optimizer is
    // about to write, and every gathered copy is stale after it.
    if (zero_stage_ == 3) zero_units_->drop_weights();
    optimizer_step(lr, norm);
    // ZeRO: every rank updated its own chunks. Stages 1 and 2 gather the
    // whole working copy now; stage 3 gathers unit by unit as the next
    // passes need them.
    if (zero_stage_ == 1) grad_buckets_->gather(store_->working());
    if (zero_stage_ == 2) parallel::all_gather_chunks(*comms_.dp, unit_ranges_, owned_, store_->working());
    engine::device_synchronize();
    const double seconds = seconds_since(t0);

    StepMetrics m;
    m.step = step + 1;
    m.steps = config_.steps;
    m.loss = loss;
    m.grad_norm = norm;
    m.lr = lr;
    m.step_seconds = seconds;
    m.tokens_per_second = static_cast<double>(config_.batch_tokens) / seconds;
    m.tflops_per_device = step_flops / seconds / devices / 1e12;
    m.mfu = step_flops / (seconds * devices * peak);
    m.peak_memory_bytes = engine::memory_stats(config_.device_type).peak;
    m.peak_rss_bytes = peak_rss_bytes();
    m.parallel = devices > 1;
    m.exposed_comm_seconds = exposed_comm_seconds_;
    if (m.parallel) {
      m.bubble_fraction = parallel::bubble_fraction(grid_.pp_size(), layout_.micro_batches());
      m.comm_bytes_tp = sum_over_world(static_cast<double>(comms_.tp->bytes_sent()));
      m.comm_bytes_dp = sum_over_world(static_cast<double>(comms_.dp->bytes_sent()));
      m.comm_bytes_pp = sum_over_world(static_cast<double>(comms_.pp->bytes_sent()) +
                                       (embedding_comm_ ? static_cast<double>(embedding_comm_->bytes_sent()) : 0.0));
    }
    const bool last = step + 1 == config_.steps;
    if (val_data_ && ((config_.val_interval > 0 && (step + 1) % config_.val_interval == 0) || last)) {
      m.val_loss = validate();
      summary.final_val_loss = *m.val_loss;
    }
    if (is_logger()) {
      out_ << MetricsLog::format_line(m) << std::endl;
      metrics_.record(m);
    }
    summary.losses.push_back(loss);
    if (!config_.checkpoint_dir.empty() &&
        ((config_.checkpoint_interval > 0 && (step + 1) % config_.checkpoint_interval == 0) || last))
      save(step + 1);
  }
  const bool whole_model_here = grid_.tp_size() == 1 && grid_.pp_size() == 1;
  // The whole master weights, gathered by every rank under ZeRO, when the
  // model file or a sampler over ZeRO-3's sharded weights needs them.
  const bool sample_gathered = config_.sample_tokens > 0 && whole_model_here && store_->weights_sharded();
  // Under ZeRO the gather is collective over dp; otherwise only rank 0 reads.
  std::vector<float> master;
  if (((!config_.save_model.empty() && (zero_sharded() || grid_.world_rank() == 0))) || sample_gathered) {
    master.resize(static_cast<std::size_t>(registry_.total_numel()));
    download_master(master.data());
  }
  if (!config_.save_model.empty() && grid_.world_rank() == 0) {
    write_llmc_model(config_.save_model, config_.model, registry_, master.data());
    out_ << "model      written to " << config_.save_model << " (llm.c GPT-2 format)\n";
  }
  if (config_.sample_tokens > 0 && grid_.world_rank() == 0) {
    if (whole_model_here) {
      if (sample_gathered) {
        model::ParamStore whole(registry_, config_.device_type, config_.precision_mode);
        whole.upload_master(master.data());
        summary.sample = sample_text(whole);
      } else {
        summary.sample = sample_text(*store_);
      }
      out_ << "sample     ----\n" << summary.sample << "\n----" << std::endl;
    } else {
      out_ << "sample     skipped: sampling needs the whole model on one rank (tp = pp = 1)\n";
    }
  }
  return summary;
}

}  // namespace launch
