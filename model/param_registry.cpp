#include "model/param_registry.h"

#include <cstring>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "engine/rng.h"

namespace model {

std::string Split::cut_problem(std::int64_t extent) const {
  const auto text = [](auto v) { return std::to_string(v); };
  if (parts < 1 || count < 1) return "parts and count must be at least 1";
  if (first_block != 0) {
    if (parts < 2 || first_block < 0 || first_block >= extent || (extent - first_block) % (parts - 1) != 0)
      return "a first block of " + text(first_block) + " does not leave " + text(parts - 1) +
             " equal blocks of the extent " + text(extent);
  } else if (extent % parts != 0) {
    return "the extent " + text(extent) + " is not " + text(parts) + " equal blocks";
  }
  for (int b = 0; b < parts; ++b)
    if (block_extent(b, extent) % count != 0)
      return "block " + text(b) + " (" + text(block_extent(b, extent)) + ") does not cut into " + text(count) +
             " equal pieces";
  return "";
}

ParamRegistry::ParamRegistry(std::int64_t align_elements) : align_(align_elements) {
  ENGINE_CHECK(align_elements >= 1, "parameter alignment must be >= 1 element, got ", align_elements);
}

const ParamInfo& ParamRegistry::add(const std::string& name, engine::Shape global_shape, Init init,
                                    double init_std, bool weight_decay, Split split) {
  ENGINE_CHECK(!contains(name), "parameter '", name, "' registered twice");
  ParamInfo info;
  info.name = name;
  info.global_shape = global_shape;
  info.shape = global_shape;
  info.split = split;
  if (split.is_split()) {
    ENGINE_CHECK(split.dim < global_shape.ndim() && split.parts >= 1 && split.rank >= 0 && split.rank < split.count,
                 "parameter '", name, "': bad split (dim ", split.dim, ", parts ", split.parts, ", rank ", split.rank,
                 " of ", split.count, ") for shape ", global_shape.str());
    const std::int64_t extent = global_shape[split.dim];
    const std::string problem = split.cut_problem(extent);
    ENGINE_CHECK(problem.empty(), "parameter '", name, "' of shape ", global_shape.str(), ": dim ", split.dim, " (",
                 extent, ") does not split into ", split.parts, " blocks x ", split.count, " pieces: ", problem);
    info.shape = global_shape.ndim() == 1
                     ? engine::Shape{extent / split.count}
                     : (split.dim == 0 ? engine::Shape{extent / split.count, global_shape[1]}
                                       : engine::Shape{global_shape[0], extent / split.count});
  }
  info.offset = total_;
  if (!unit_open_) unit_names_.push_back(name);
  info.unit = static_cast<int>(unit_names_.size()) - 1;
  info.init = init;
  info.init_std = init_std;
  info.weight_decay = weight_decay;
  total_ += (info.numel() + align_ - 1) / align_ * align_;
  if (!unit_open_) unit_index_.emplace(name, unit_names_.size() - 1);
  entry_index_.emplace(name, entries_.size());
  entries_.push_back(info);
  return entries_.back();
}

void ParamRegistry::begin_unit(const std::string& name) {
  ENGINE_CHECK(!unit_index_.count(name), "parameter unit '", name, "' begun twice");
  ENGINE_CHECK(!unit_open_ || (!entries_.empty() && entries_.back().unit + 1 == static_cast<int>(unit_names_.size())),
               "parameter unit '", unit_names_.empty() ? "" : unit_names_.back(), "' was begun but holds no entry");
  unit_index_.emplace(name, unit_names_.size());
  unit_names_.push_back(name);
  unit_open_ = true;
}

std::vector<ParamUnit> ParamRegistry::units() const {
  std::vector<ParamUnit> units;
  int current = -1;
  for (const ParamInfo& p : entries_) {
    if (p.unit == current) continue;  // entries of a unit are consecutive
    current = p.unit;
    if (!units.empty()) units.back().count = p.offset - units.back().offset;
    units.push_back({unit_names_[static_cast<std::size_t>(p.unit)], p.offset, 0});
  }
  if (!units.empty()) units.back().count = total_ - units.back().offset;
  return units;
}

int ParamRegistry::unit_index(const std::string& unit_name) const {
  const auto found = unit_index_.find(unit_name);
  if (found != unit_index_.end()) return static_cast<int>(found->second);
  ENGINE_FAIL("no parameter unit named '", unit_name, "' in the registry (", unit_names_.size(), " units)");
}

bool ParamRegistry::contains(const std::string& name) const {
  return entry_index_.count(name) != 0;
}

const ParamInfo& ParamRegistry::find(const std::string& name) const {
  const auto found = entry_index_.find(name);
  if (found != entry_index_.end()) return entries_[found->second];
  ENGINE_FAIL("no parameter named '", name, "' in the registry (", entries_.size(), " entries)");
}

engine::Tensor ParamRegistry::view(const engine::Tensor& flat, const std::string& name) const {
  return view(flat, find(name));
}

engine::Tensor ParamRegistry::view(const engine::Tensor& flat, const ParamInfo& info) const {
  ENGINE_CHECK(flat.numel() == total_, "flat buffer has ", flat.numel(), " elements, the registry lays out ",
               total_);
  return flat.flat_slice(info.offset, info.numel()).view(info.shape);
}

std::vector<DecaySegment> ParamRegistry::decay_segments() const {
  std::vector<DecaySegment> segments;
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const std::int64_t end = i + 1 < entries_.size() ? entries_[i + 1].offset : total_;
    if (!segments.empty() && segments.back().decay == entries_[i].weight_decay)
      segments.back().count = end - segments.back().offset;
    else
      segments.push_back({entries_[i].offset, end - entries_[i].offset, entries_[i].weight_decay});
  }
  return segments;
}

void for_each_run(const ParamInfo& p, const std::function<void(std::int64_t, std::int64_t, std::int64_t)>& fn) {
  if (!p.split.is_split()) {
    fn(0, 0, p.numel());
    return;
  }
  ENGINE_CHECK(p.global_shape.ndim() <= 2, "'", p.name, "': only 1-D and 2-D tensors can be split");
  const Split& s = p.split;
  const std::int64_t extent = p.global_shape[s.dim];
  // Local and global start of each block's piece along the split dim.
  struct Piece {
    std::int64_t local, global, size;
  };
  std::vector<Piece> pieces;
  std::int64_t local = 0;
  for (int b = 0; b < s.parts; ++b) {
    const std::int64_t size = s.block_extent(b, extent) / s.count;
    pieces.push_back({local, s.block_start(b, extent) + s.rank * size, size});
    local += size;
  }
  if (p.global_shape.ndim() == 1 || s.dim == 0) {
    // Whole rows (or elements): one run per piece of each block.
    const std::int64_t row = p.global_shape.ndim() == 1 ? 1 : p.global_shape[1];
    for (const Piece& q : pieces) fn(q.local * row, q.global * row, q.size * row);
    return;
  }
  // Split along columns: one run per row and block.
  const std::int64_t rows = p.shape[0], local_cols = p.shape[1], global_cols = p.global_shape[1];
  for (std::int64_t r = 0; r < rows; ++r)
    for (const Piece& q : pieces) fn(r * local_cols + q.local, r * global_cols + q.global, q.size);
}

namespace {
template <typename T>
void initialize_entry(T* out, const ParamInfo& p, std::uint64_t seed) {
  const std::int64_t n = p.numel();
  if (p.init == Init::kZeros || p.init == Init::kOnes) {
    const T value = p.init == Init::kOnes ? T(1) : T(0);
    for (std::int64_t i = 0; i < n; ++i) out[i] = value;
    return;
  }
  // Draw i of the stream is element i of the GLOBAL tensor in row-major order;
  // a slice draws the indices it covers.
  const std::uint64_t key = engine::rng_key(seed, p.name);
  for_each_run(p, [&](std::int64_t local, std::int64_t global, std::int64_t count) {
    engine::fill_normal(out + local, count, key, global, 0.0, p.init_std);
  });
}
}  // namespace

void ParamRegistry::initialize(const engine::Tensor& flat, std::uint64_t seed) const {
  ENGINE_CHECK(flat.device() == engine::DeviceType::kCpu, "initialize: expected a host buffer, got ",
               flat.describe());
  engine::ops::fill(flat, 0.0);  // padding between entries stays zero
  for (const ParamInfo& p : entries_) {
    const engine::Tensor t = view(flat, p);
    if (flat.dtype() == engine::DType::kF32)
      initialize_entry(t.data_as<float>(), p, seed);
    else if (flat.dtype() == engine::DType::kF64)
      initialize_entry(t.data_as<double>(), p, seed);
    else
      ENGINE_FAIL("initialize: host buffer must be f32 or f64, got ", flat.describe());
  }
}

}  // namespace model
