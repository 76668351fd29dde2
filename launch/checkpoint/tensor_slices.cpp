#include "launch/checkpoint/tensor_slices.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "engine/check.h"

namespace launch {

using model::ParamInfo;
using model::Split;

nlohmann::json shape_to_json(const engine::Shape& s) {
  nlohmann::json out = nlohmann::json::array();
  for (int i = 0; i < s.ndim(); ++i) out.push_back(s[i]);
  return out;
}

engine::Shape shape_from_json(const nlohmann::json& d) {
  switch (d.size()) {
    case 1: return engine::Shape{d[0].get<std::int64_t>()};
    case 2: return engine::Shape{d[0].get<std::int64_t>(), d[1].get<std::int64_t>()};
    case 3: return engine::Shape{d[0].get<std::int64_t>(), d[1].get<std::int64_t>(), d[2].get<std::int64_t>()};
    case 4:
      return engine::Shape{d[0].get<std::int64_t>(), d[1].get<std::int64_t>(), d[2].get<std::int64_t>(),
                           d[3].get<std::int64_t>()};
    default: ENGINE_FAIL("a tensor shape has 1 to 4 dimensions, got ", d.dump());
  }
}

nlohmann::json split_to_json(const Split& s) {
  nlohmann::json j = {{"dim", s.dim}, {"parts", s.parts}, {"rank", s.rank}, {"count", s.count}};
  if (s.first_block != 0) j["first_block"] = s.first_block;  // absent: equal blocks (older checkpoints)
  return j;
}

Split split_from_json(const nlohmann::json& j) {
  Split s;
  s.dim = j.at("dim").get<int>();
  s.parts = j.at("parts").get<int>();
  s.rank = j.at("rank").get<int>();
  s.count = j.at("count").get<int>();
  s.first_block = j.value("first_block", std::int64_t{0});
  return s;
}

nlohmann::json slice_to_json(const SliceRecord& r) {
  return {{"name", r.name},
          {"kind", r.kind},
          {"global_shape", shape_to_json(r.global_shape)},
          {"split", split_to_json(r.split)},
          {"shape", shape_to_json(r.shape)}};
}

SliceRecord slice_from_json(const nlohmann::json& j) {
  return {j.at("name").get<std::string>(), j.at("kind").get<std::string>(), shape_from_json(j.at("global_shape")),
          shape_from_json(j.at("shape")), split_from_json(j.at("split"))};
}

std::string split_problem(const engine::Shape& global, const engine::Shape& shape, const Split& s) {
  const std::string cut = split_to_json(s).dump();
  if (s.parts < 1 || s.count < 1) return "split " + cut + ": parts and count must be at least 1";
  if (s.rank < 0 || s.rank >= s.count)
    return "split " + cut + ": rank " + std::to_string(s.rank) + " is not below count " + std::to_string(s.count);
  if (s.dim < -1 || s.dim >= global.ndim())
    return "split " + cut + ": dim " + std::to_string(s.dim) + " is not a dimension of global shape " + global.str();
  if (!s.is_split()) {
    if (shape != global) return "an uncut slice (split " + cut + ") has shape " + shape.str() + ", not its global shape " + global.str();
    return "";
  }
  if (global.ndim() > 2) return "split " + cut + ": only 1-D and 2-D tensors are cut, global shape " + global.str();
  const std::int64_t extent = global[s.dim];
  const std::string problem = s.cut_problem(extent);
  if (!problem.empty())
    return "split " + cut + ": dim " + std::to_string(s.dim) + " of global shape " + global.str() + ": " + problem;
  const engine::Shape expected = global.ndim() == 1 ? engine::Shape{extent / s.count}
                                 : s.dim == 0       ? engine::Shape{extent / s.count, global[1]}
                                                    : engine::Shape{global[0], extent / s.count};
  if (shape != expected)
    return "split " + cut + " of global shape " + global.str() + " makes slices of shape " + expected.str() + ", not " +
           shape.str();
  return "";
}

namespace {

bool same_cut(const Split& a, const Split& b) {
  if (!a.is_split() || !b.is_split()) return !a.is_split() && !b.is_split();
  return a.dim == b.dim && a.parts == b.parts && a.count == b.count && a.rank == b.rank &&
         a.first_block == b.first_block;
}

ParamInfo as_param(const SliceRecord& r) {
  ParamInfo p;
  p.name = r.name;
  p.global_shape = r.global_shape;
  p.shape = r.shape;
  p.split = r.split;
  return p;
}

}  // namespace

std::size_t cut_slice(const ParamInfo& target, const std::string& kind, const std::vector<SliceRecord>& pieces,
                      const std::function<void(std::size_t, float*)>& read_piece, float* out) {
  ENGINE_CHECK(!pieces.empty(), "no ", kind, " for '", target.name, "'");
  for (const SliceRecord& r : pieces) {
    ENGINE_CHECK(r.global_shape == target.global_shape, kind, " '", target.name, "' has global shape ",
                 r.global_shape.str(), ", this run expects ", target.global_shape.str());
    // Every piece checked before any is read: a rank past its count, zero
    // parts or a dim out of range would place it out of bounds below.
    const std::string problem = split_problem(r.global_shape, r.shape, r.split);
    ENGINE_CHECK(problem.empty(), kind, " '", target.name, "': ", problem);
  }
  // The same cut: no re-slicing.
  for (std::size_t i = 0; i < pieces.size(); ++i)
    if (same_cut(pieces[i].split, target.split) && pieces[i].shape == target.shape) {
      read_piece(i, out);
      return 1;
    }
  // Otherwise the whole tensor: from a whole copy, else from one complete set
  // of pieces of one split, keyed by (dim, parts, count) -> piece per rank.
  std::vector<std::size_t> chosen;
  for (std::size_t i = 0; i < pieces.size() && chosen.empty(); ++i)
    if (!pieces[i].split.is_split()) chosen.push_back(i);
  if (chosen.empty()) {
    std::map<std::tuple<int, int, int, std::int64_t>, std::map<int, std::size_t>> sets;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      const Split& s = pieces[i].split;
      sets[{s.dim, s.parts, s.count, s.first_block}].emplace(s.rank, i);
    }
    for (const auto& [key, by_rank] : sets) {
      if (static_cast<int>(by_rank.size()) != std::get<2>(key)) continue;
      for (const auto& [rank, index] : by_rank) chosen.push_back(index);
      break;
    }
  }
  ENGINE_CHECK(!chosen.empty(), kind, " '", target.name, "': the slices present (", pieces.size(),
               ") do not cover the whole tensor, so its ", split_to_json(target.split).dump(),
               " slice cannot be cut");
  std::vector<float> whole(static_cast<std::size_t>(target.global_shape.numel()));
  std::vector<float> piece;
  for (std::size_t index : chosen) {
    const ParamInfo from = as_param(pieces[index]);
    piece.resize(static_cast<std::size_t>(from.numel()));
    read_piece(index, piece.data());
    model::for_each_run(from, [&](std::int64_t local, std::int64_t global, std::int64_t count) {
      std::copy_n(piece.data() + local, count, whole.data() + global);
    });
  }
  model::for_each_run(target, [&](std::int64_t local, std::int64_t global, std::int64_t count) {
    std::copy_n(whole.data() + global, count, out + local);
  });
  return chosen.size();
}

}  // namespace launch
