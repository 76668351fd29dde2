#include "model/param_registry.h"

#include <cstring>

#include "engine/ops.h"
#include "engine/rng.h"

namespace model {

const ParamInfo& ParamRegistry::add(const std::string& name, engine::Shape global_shape, Init init,
                                    double init_std, bool weight_decay) {
  ENGINE_CHECK(!contains(name), "parameter '", name, "' registered twice");
  ParamInfo info;
  info.name = name;
  info.global_shape = global_shape;
  info.shape = global_shape;
  info.offset = total_;
  info.init = init;
  info.init_std = init_std;
  info.weight_decay = weight_decay;
  total_ += (info.numel() + kAlignElements - 1) / kAlignElements * kAlignElements;
  entries_.push_back(info);
  return entries_.back();
}

bool ParamRegistry::contains(const std::string& name) const {
  for (const ParamInfo& p : entries_)
    if (p.name == name) return true;
  return false;
}

const ParamInfo& ParamRegistry::find(const std::string& name) const {
  for (const ParamInfo& p : entries_)
    if (p.name == name) return p;
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
  // a slice draws the indices it covers, row by row.
  const std::uint64_t key = engine::rng_key(seed, p.name);
  if (p.shape.ndim() == 1) {
    engine::fill_normal(out, n, key, p.slice_start[0], 0.0, p.init_std);
    return;
  }
  ENGINE_CHECK(p.shape.ndim() == 2, "initialise '", p.name, "': only 1-D and 2-D parameters are supported");
  const std::int64_t rows = p.shape[0], cols = p.shape[1], global_cols = p.global_shape[1];
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t first = (p.slice_start[0] + r) * global_cols + p.slice_start[1];
    engine::fill_normal(out + r * cols, cols, key, first, 0.0, p.init_std);
  }
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
