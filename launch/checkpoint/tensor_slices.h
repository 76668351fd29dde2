// Re-cutting tensor-parallel slices: the piece of a checkpoint that lets a
// run resume under another tensor-parallel size, and lets one rank put the
// whole model together from every rank's slices (--save-model, sampling).
//
// A slice is described by the tensor's name, what it is (parameter or an
// optimizer moment), the global shape, and the Split that cut it
// (model/param_registry.h: `parts` blocks along `dim`, each cut into `count`
// pieces, rank r holding piece r of every block). Those are enough to place
// any slice in the whole tensor and to cut any other slice out of it
// (ARCHITECTURE.md: names, global shapes and splits are the checkpoint contract).
// Optimizer moments are element-wise, so they are re-cut exactly as their
// parameters are.
#pragma once

#include <cstddef>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/param_registry.h"

namespace launch {

struct SliceRecord {
  std::string name;  // "h.3.attn.qkv.weight"
  std::string kind;  // "param", "adam_m", "adam_v"
  engine::Shape global_shape;
  engine::Shape shape;  // of the slice
  model::Split split;
};

nlohmann::json shape_to_json(const engine::Shape& shape);
engine::Shape shape_from_json(const nlohmann::json& dims);
nlohmann::json split_to_json(const model::Split& split);
model::Split split_from_json(const nlohmann::json& split);
// The fields above, as a checkpoint's shard index records them.
nlohmann::json slice_to_json(const SliceRecord& slice);
SliceRecord slice_from_json(const nlohmann::json& record);

// Fills `out` (target.numel() floats) with `target`'s slice of the tensor
// that `pieces` hold (records of target's name and kind, in any split):
//   - a piece cut exactly like target (same split and rank) is read as is;
//   - else a whole copy, or one complete set of pieces of some split (ranks
//     0..count-1), is read, the whole tensor put together, and target's
//     slice cut from it.
// read_piece(i, buffer) fills buffer with pieces[i]'s values. Throws, naming
// the tensor, when the pieces disagree with target's global shape or do not
// cover the tensor. Returns how many pieces were read.
std::size_t cut_slice(const model::ParamInfo& target, const std::string& kind, const std::vector<SliceRecord>& pieces,
                      const std::function<void(std::size_t, float*)>& read_piece, float* out);

}  // namespace launch
