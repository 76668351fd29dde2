// The ways of keeping data-parallel replicas in step, behind one interface.
//
// Every data-parallel rank computes gradients on its own slice of the batch;
// something must make the replicas take the same update. The engine has four
// ways, each in its own file, and the trainer picks one at start-up
// (launch/run/optimizer_setup.h) and never asks which again:
//
//   BucketedAllReduce   (dp_all_reduce.h)  plain data parallel: gradient
//       buckets all-reduced while backward goes on (Li et al. 2020).
//   ZeroOptimizerShards (dp_zero1.h)       ZeRO-1: the same buckets
//       reduce-scattered; each rank updates and keeps the optimizer state of
//       its chunks, then the working weights are all-gathered (Rajbhandari et
//       al. 2020, section 5.1, P_os).
//   ZeroUnitShards      (dp_zero_units.h)  ZeRO-2 and 3: gradients (and at
//       stage 3 the weights) kept only as this rank's chunks of every
//       parameter unit (sections 5.2 and 5.3, P_os+g and P_os+g+p).
//   OneBitCompression   (optim/dp_onebit.h) 1-bit Adam's compression stage:
//       no gradient reduction at all; the optimizer exchanges its momentum
//       compressed to one bit (Tang et al. 2021). Before the freeze step it
//       is whichever of the first two it wraps.
//
// What a strategy owns, in the order a step meets it: starting the
// gradient reduction during the last micro-batch's backward (layer_done),
// finishing it (finish_gradients), which gradient ranges the global norm
// counts (norm_ranges, norm_scale), how the optimizer is to scale this
// rank's gradients (update_scale), which chunks the optimizer updates and
// which buffers are sharded (sharding), what happens around the update
// (before_update, after_update), whole-tensor copies for checkpoints, the
// model file and sampling (download_master, download_state, upload_state),
// and the bytes it holds (staging_bytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "parallel/grad_buckets.h"
#include "parallel/shard_layout.h"

namespace parallel {

class ZeroUnits;

// The flat parameter layout of one (tp, pp) position as the strategies see
// it; model::flat_layout builds it from the parameter registry.
struct FlatLayout {
  std::int64_t total = 0;                // elements of each whole flat buffer, padding included
  std::vector<GradRange> ranges;         // every tensor with its padding, in layout order, with its readiness key
  std::vector<FlatRange> units;          // the parameter units (ZeRO-2/3 shard by them)
  std::vector<FlatRange> norm_ranges;    // counted once in the global norm by this (tp, pp) position
  // The tensor another pipeline stage holds a copy of (the tied token
  // embedding; parallel/tied_embedding.h), without its padding, and its unit.
  FlatRange tied{0, 0};
  int tied_unit = -1;
};

// Which flat buffers hold only this rank's chunks, packed (shard_layout.h).
// With `owned` empty every buffer is whole and the optimizer updates all of it.
struct Sharding {
  std::vector<ShardChunk> owned;  // the chunks whose update this rank makes
  bool state = false;             // optimizer moments (ZeRO-1 and up)
  bool master = false;            // master weights (ZeRO-1 and up)
  bool grads = false;             // gradients (ZeRO-2 and 3)
  bool weights = false;           // working weights (ZeRO-3; the master is sharded by `master`)
};

class DataParallel {
 public:
  virtual ~DataParallel() = default;

  // ---- one step ----------------------------------------------------------------
  virtual void begin_step() {}
  // During the last micro-batch's backward: the gradients of layer `layer`
  // (and of every later one) are final (model::GptStage's backward hook).
  virtual void layer_done(std::int64_t /*layer*/) {}
  // Completes whatever reduction the step needs, the tied embedding's copies
  // included: afterwards the gradients this rank's update reads are final.
  virtual void finish_gradients() = 0;
  // The global norm is sqrt(norm_scale() * sum over all ranks of the squared
  // gradients in norm_ranges(), offsets into the store's gradient buffer).
  virtual const std::vector<FlatRange>& norm_ranges() const = 0;
  virtual double norm_scale() const { return 1.0; }
  // The optimizer multiplies this rank's gradients by this (and the clip factor).
  virtual double update_scale() const { return 1.0; }
  virtual void before_update() {}
  virtual void after_update() {}

  // ---- layout ---------------------------------------------------------------------
  virtual const Sharding& sharding() const = 0;
  // The units layers acquire and release their parameters through (ZeRO-2/3;
  // model/param_access.h), or null when they are plain slices of the store.
  virtual ZeroUnits* staged_units() { return nullptr; }

  // ---- whole tensors (checkpoints, the model file, sampling) -----------------------
  // The whole master weights of this (tp, pp) position as f32 on the host.
  // Collective over dp where the weights are sharded: every rank of the
  // group calls it; `host` may be null on ranks that do not want the copy.
  virtual void download_master(float* host) = 0;
  // The same for an optimizer moment laid out as sharding().state says
  // (`host` may be null too).
  virtual void download_state(const engine::Tensor& state, float* host) = 0;
  // Loads a whole moment from the host, keeping this rank's chunks when sharded.
  virtual void upload_state(const engine::Tensor& state, const float* host);
  // `full` is laid out whole, but each rank has updated only its owned chunks
  // of it (1-bit Adam's whole momentum under ZeRO): fills in the other ranks'
  // chunks. Collective over dp; nothing to do when unsharded.
  virtual void gather_owned(const engine::Tensor& /*full*/) {}

  // ---- accounting ------------------------------------------------------------------
  // Bytes of buffers it allocated beyond the store and the optimizer, now;
  // and the most it may allocate (0 = nothing beyond a fixed set).
  virtual std::size_t staging_bytes() const { return 0; }
  virtual std::size_t staging_bound() const { return 0; }
  // For the start-up memory line: what is sharded, e.g. "ZeRO-2".
  virtual std::string name() const = 0;
};

}  // namespace parallel
