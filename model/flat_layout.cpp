#include "model/flat_layout.h"

#include <string>

namespace model {

parallel::FlatLayout flat_layout(const ParamRegistry& registry, const StageRange& range, const TensorParallel& tp,
                                 std::int64_t n_layer) {
  parallel::FlatLayout layout;
  layout.total = registry.total_numel();
  const auto& entries = registry.entries();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const ParamInfo& p = entries[i];
    const std::int64_t end = i + 1 < entries.size() ? entries[i + 1].offset : registry.total_numel();
    std::int64_t key = n_layer;
    if (p.name.rfind("h.", 0) == 0) key = std::stoll(p.name.substr(2));
    else if (range.has_embedding && (p.name == "wte" || p.name == "wpe")) key = -1;
    layout.ranges.push_back({p.offset, end - p.offset, key});
    const bool counted = (p.split.is_split() || tp.rank == 0) && !(p.name == "wte" && !range.has_embedding);
    if (!counted) continue;
    std::vector<parallel::FlatRange>& norm = layout.norm_ranges;
    if (!norm.empty() && norm.back().offset + norm.back().count == p.offset)
      norm.back().count += end - p.offset;
    else
      norm.push_back({p.offset, end - p.offset});
  }
  for (const ParamUnit& u : registry.units()) layout.units.push_back({u.offset, u.count});
  if (registry.contains("wte")) {
    const ParamInfo& wte = registry.find("wte");
    layout.tied = {wte.offset, wte.numel()};
    layout.tied_unit = wte.unit;
  }
  return layout;
}

}  // namespace model
