#include "launch/run/whole_model.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "engine/check.h"
#include "launch/checkpoint/tensor_slices.h"

namespace launch {

namespace {

engine::Tensor host_tensor(void* data, std::int64_t count, engine::DType dtype) {
  return engine::Tensor(data, engine::Shape{count}, dtype, engine::DeviceType::kCpu);
}

// One rank's contribution: its slices (unpadded, in registry order) and their index.
struct Contribution {
  std::vector<SliceRecord> slices;
  std::vector<std::int64_t> offsets;  // into values
  std::vector<float> values;
};

Contribution pack(const model::ParamRegistry& registry, const float* master) {
  Contribution c;
  for (const model::ParamInfo& p : registry.entries()) {
    c.slices.push_back({p.name, "param", p.global_shape, p.shape, p.split});
    c.offsets.push_back(static_cast<std::int64_t>(c.values.size()));
    c.values.insert(c.values.end(), master + p.offset, master + p.offset + p.numel());
  }
  return c;
}

std::string index_json(const Contribution& c) {
  nlohmann::json index = nlohmann::json::array();
  for (std::size_t i = 0; i < c.slices.size(); ++i) {
    nlohmann::json s = slice_to_json(c.slices[i]);
    s["offset"] = c.offsets[i];
    index.push_back(std::move(s));
  }
  return index.dump();
}

}  // namespace

std::vector<float> gather_whole_model(parallel::Communicator& world, const model::ParamRegistry& registry,
                                      const float* mine, const model::ParamRegistry& whole) {
  // Header per contributing rank: {index bytes, value count} as f64 (exact
  // for any model that fits in memory), then the index as i32 words, then
  // the values.
  std::vector<Contribution> received;
  if (world.rank() != 0) {
    double header[2] = {0, 0};
    Contribution c;
    std::string index;
    if (mine) {
      c = pack(registry, mine);
      index = index_json(c);
      header[0] = static_cast<double>(index.size());
      header[1] = static_cast<double>(c.values.size());
    }
    world.send(host_tensor(header, 2, engine::DType::kF64), 0);
    if (!mine) return {};
    std::vector<std::int32_t> words((index.size() + 3) / 4, 0);
    std::copy(index.begin(), index.end(), reinterpret_cast<char*>(words.data()));
    world.send(host_tensor(words.data(), static_cast<std::int64_t>(words.size()), engine::DType::kI32), 0);
    world.send(host_tensor(c.values.data(), static_cast<std::int64_t>(c.values.size()), engine::DType::kF32), 0);
    return {};
  }
  if (mine) received.push_back(pack(registry, mine));
  for (int r = 1; r < world.size(); ++r) {
    double header[2] = {0, 0};
    world.recv(host_tensor(header, 2, engine::DType::kF64), r);
    if (header[0] == 0) continue;
    std::vector<std::int32_t> words((static_cast<std::size_t>(header[0]) + 3) / 4, 0);
    world.recv(host_tensor(words.data(), static_cast<std::int64_t>(words.size()), engine::DType::kI32), r);
    Contribution c;
    c.values.resize(static_cast<std::size_t>(header[1]));
    world.recv(host_tensor(c.values.data(), static_cast<std::int64_t>(c.values.size()), engine::DType::kF32), r);
    const nlohmann::json index =
        nlohmann::json::parse(std::string(reinterpret_cast<const char*>(words.data()), static_cast<std::size_t>(header[0])));
    for (const nlohmann::json& s : index) {
      c.slices.push_back(slice_from_json(s));
      c.offsets.push_back(s.at("offset").get<std::int64_t>());
    }
    received.push_back(std::move(c));
  }
  // Every tensor of the whole model from the slices of its name.
  std::map<std::string, std::vector<std::pair<const Contribution*, std::size_t>>> by_name;
  for (const Contribution& c : received)
    for (std::size_t i = 0; i < c.slices.size(); ++i) by_name[c.slices[i].name].emplace_back(&c, i);
  std::vector<float> out(static_cast<std::size_t>(whole.total_numel()), 0.0f);
  for (const model::ParamInfo& p : whole.entries()) {
    const auto& sources = by_name[p.name];
    std::vector<SliceRecord> pieces;
    for (const auto& [c, i] : sources) pieces.push_back(c->slices[i]);
    cut_slice(p, "param", pieces,
              [&](std::size_t k, float* buffer) {
                const auto& [c, i] = sources[k];
                std::copy_n(c->values.data() + c->offsets[i], c->slices[i].shape.numel(), buffer);
              },
              out.data() + p.offset);
  }
  return out;
}

}  // namespace launch
