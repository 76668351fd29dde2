// The parameter registry: every named tensor of the model, its global shape,
// the slice this process holds, and where that slice lives in the flat buffers.
//
// Parameters, gradients and optimizer moments are each ONE flat buffer with the
// same layout, so gradient synchronisation, clipping, ZeRO sharding and the
// optimizer work on flat ranges while layers see named views. Entries are laid
// out in the order they are registered (layer by layer), so the parameters of a
// block are contiguous: a pipeline stage or a ZeRO-3 gather takes one range.
//
// Names and global shapes are the checkpoint contract (ARCHITECTURE.md); each entry
// is initialised from (seed, name) over its global shape, so any slicing of a
// tensor across ranks starts from the same numbers (engine/rng.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/tensor.h"

namespace model {

enum class Init : std::uint8_t { kZeros, kOnes, kNormal };

// How a tensor is split across the ranks of the tensor-parallel group.
// The tensor is `parts` blocks along `dim` (3 for a fused q|k|v weight, 2 for
// a fused gate|up weight, else 1); each block is cut into `count` equal
// pieces and rank r holds piece r of every block, so its slice is itself
// [q_r | k_r | v_r]. The blocks are equal unless `first_block` gives the
// extent of block 0, the others then sharing the rest equally (grouped-query
// attention's q block is n_head heads wide, its k and v blocks n_kv_head).
struct Split {
  int dim = -1;    // -1: not split (every rank holds the whole tensor)
  int parts = 1;
  int rank = 0;
  int count = 1;
  std::int64_t first_block = 0;  // 0: all blocks equal
  bool is_split() const { return dim >= 0 && count > 1; }
  // Extent of block b and where it starts, for a dim of `extent` elements.
  std::int64_t block_extent(int b, std::int64_t extent) const {
    if (first_block == 0) return extent / parts;
    return b == 0 ? first_block : (extent - first_block) / (parts - 1);
  }
  std::int64_t block_start(int b, std::int64_t extent) const {
    return b == 0 ? 0 : block_extent(0, extent) + (b - 1) * block_extent(1, extent);
  }
  // "" if `extent` cuts into these blocks and pieces, else what is wrong.
  std::string cut_problem(std::int64_t extent) const;
};

struct ParamInfo {
  std::string name;            // "h.3.attn.qkv.weight"
  engine::Shape global_shape;  // shape of the whole tensor in one process
  engine::Shape shape;         // shape of the slice this process holds
  Split split;
  std::int64_t offset = 0;     // element offset in the flat buffers
  Init init = Init::kZeros;
  double init_std = 0.0;       // for kNormal
  bool weight_decay = false;   // AdamW decays 2-D tensors only, not biases or norm gains (nanoGPT, llm.c)
  int unit = 0;                // index into ParamRegistry::units()

  std::int64_t numel() const { return shape.numel(); }
};

// Calls fn(local_offset, global_offset, count) for each run of consecutive
// elements of the local slice, in local order; offsets are row-major element
// indices into the local slice and the global tensor.
void for_each_run(const ParamInfo& info,
                  const std::function<void(std::int64_t, std::int64_t, std::int64_t)>& fn);

// A contiguous range of the flat layout with one weight-decay setting; each
// entry's alignment padding goes with it (its gradient is always zero).
struct DecaySegment {
  std::int64_t offset;
  std::int64_t count;
  bool decay;
};

// A unit: consecutive entries a layer uses together (a transformer block,
// an embedding table, the final layer norm), with the padding after them.
// ZeRO stages 2 and 3 reduce gradients and gather weights unit by unit
// (parallel/zero_units.h).
struct ParamUnit {
  std::string name;     // "h.3", "wte", "ln_f"
  std::int64_t offset;  // elements into the flat buffers
  std::int64_t count;   // up to the next unit's offset (or the end)
};

class ParamRegistry {
 public:
  // Each entry starts on a multiple of this many elements: 256-byte aligned in
  // fp32, which vector units and cuBLASLt like. ZeRO multiplies it by the
  // data-parallel size so that every entry (with its padding) splits into
  // equal per-rank chunks.
  static constexpr std::int64_t kAlignElements = 64;
  explicit ParamRegistry(std::int64_t align_elements = kAlignElements);
  std::int64_t align_elements() const { return align_; }

  // Registers a tensor, split as `split` says (default: held whole).
  const ParamInfo& add(const std::string& name, engine::Shape global_shape, Init init, double init_std,
                       bool weight_decay, Split split = {});

  // Entries added after this call belong to the unit `name`, until the next
  // begin_unit(); entries added before any is begun are units of their own,
  // named after them. Units are indexed in the order they are begun.
  void begin_unit(const std::string& name);

  const std::vector<ParamInfo>& entries() const { return entries_; }
  std::vector<ParamUnit> units() const;
  int unit_index(const std::string& unit_name) const;  // throws naming the missing unit
  const ParamInfo& find(const std::string& name) const;  // throws naming the missing name
  bool contains(const std::string& name) const;
  std::int64_t total_numel() const { return total_; }    // size of each flat buffer, padding included

  // The named entry as a view into a flat buffer laid out by this registry.
  engine::Tensor view(const engine::Tensor& flat, const std::string& name) const;
  engine::Tensor view(const engine::Tensor& flat, const ParamInfo& info) const;

  // The flat layout as a few runs of equal weight decay (for the optimizer).
  std::vector<DecaySegment> decay_segments() const;

  // Fills a host flat buffer (f32 or f64) with every entry's initial values
  // for `seed`; the padding between entries is zeroed.
  void initialize(const engine::Tensor& flat, std::uint64_t seed) const;

 private:
  std::vector<ParamInfo> entries_;
  std::vector<std::string> unit_names_;
  // Names to indices: a model of 100,000 layers registers a million entries,
  // and a search of the list for each would take minutes before the memory
  // plan could refuse it.
  std::unordered_map<std::string, std::size_t> entry_index_, unit_index_;
  bool unit_open_ = false;  // begin_unit() called and no entry added to a unit of its own since
  std::int64_t total_ = 0;
  std::int64_t align_ = kAlignElements;
};

}  // namespace model
