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
// Why `shape` is not the slice that `split` cuts from `global_shape` ("" when
// it is): parts or count below 1, a rank not below count, a dim that is not
// one of global_shape's, an extent that does not divide into parts * count
// pieces, a cut tensor of more than 2 dimensions, or another shape. What
// for_each_run (model/param_registry.h) relies on, checked before a slice
// from a file is placed.
std::string split_problem(const engine::Shape& global_shape, const engine::Shape& shape, const model::Split& split);
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
// the tensor, before any piece is read, when the pieces disagree with
// target's global shape, a piece is not what its split cuts
// (split_problem), or they do not cover the tensor. Returns how many pieces
// were read.
std::size_t cut_slice(const model::ParamInfo& target, const std::string& kind, const std::vector<SliceRecord>& pieces,
                      const std::function<void(std::size_t, float*)>& read_piece, float* out);

}  // namespace launch
