#include "launch/formats/safetensors_shards.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/check.h"
#include "launch/files/untrusted_json.h"

namespace launch {

namespace {

// weight_map of the index at `path`, as (tensor, shard file name).
std::map<std::string, std::string> read_weight_map(const std::string& path) {
  nlohmann::json index;
  try {
    // Untrusted: size and nesting bounded before parsing (launch/files/untrusted_json.h).
    index = nlohmann::json::parse(read_json_file(path, "safetensors index '" + path + "'", kMaxConfigJsonBytes));
  } catch (const nlohmann::json::exception& e) {
    ENGINE_CHECK(false, "safetensors index '", path, "' is not valid JSON (", e.what(), ")");
  }
  ENGINE_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
               "safetensors index '", path, "' has no \"weight_map\" object (tensor name -> shard file)");
  std::map<std::string, std::string> map;
  for (const auto& [name, file] : index["weight_map"].items()) {
    ENGINE_CHECK(file.is_string(), "safetensors index '", path, "': weight_map maps tensor '", name, "' to ", file.dump(),
                 ", expected a file name");
    map.emplace(name, file.get<std::string>());
  }
  ENGINE_CHECK(!map.empty(), "safetensors index '", path, "' has an empty weight_map");
  return map;
}

}  // namespace

SafetensorsShards::SafetensorsShards(const std::string& path) : path_(path) {
  if (!path.ends_with(".json")) {
    files_.emplace_back(path);
    entries_ = files_.back().entries();
    for (const auto& [name, entry] : entries_) shard_of_[name] = 0;
    return;
  }
  const std::map<std::string, std::string> weight_map = read_weight_map(path);
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  std::map<std::string, std::size_t> shard_index;  // file name -> files_ index
  for (const auto& [name, file] : weight_map) {
    if (shard_index.count(file)) continue;
    const std::string shard = (folder / file).string();
    ENGINE_CHECK(std::filesystem::is_regular_file(shard), "safetensors index '", path, "': weight_map maps tensor '",
                 name, "' to '", file, "', which does not exist");
    shard_index[file] = files_.size();
    files_.emplace_back(shard);
  }
  // Every tensor of every shard, each in exactly one shard, and that shard
  // the one weight_map names.
  for (std::size_t i = 0; i < files_.size(); ++i) {
    for (const auto& [name, entry] : files_[i].entries()) {
      const auto seen = shard_of_.find(name);
      ENGINE_CHECK(seen == shard_of_.end(), "safetensors index '", path, "': tensor '", name, "' is in two shards, '",
                   files_[seen->second].path(), "' and '", files_[i].path(), "'");
      const auto mapped = weight_map.find(name);
      ENGINE_CHECK(mapped != weight_map.end(), "safetensors index '", path, "': shard '", files_[i].path(),
                   "' holds tensor '", name, "', which weight_map does not list");
      ENGINE_CHECK(shard_index.at(mapped->second) == i, "safetensors index '", path, "': tensor '", name,
                   "' is in two shards, '", files_[i].path(), "' and (by weight_map) '", mapped->second, "'");
      shard_of_[name] = i;
      entries_.emplace(name, entry);
    }
  }
  for (const auto& [name, file] : weight_map)
    ENGINE_CHECK(shard_of_.count(name), "safetensors index '", path, "': weight_map maps tensor '", name, "' to '", file,
                 "', which has no such tensor");
}

const SafetensorsEntry& SafetensorsShards::entry(const std::string& name) const {
  const auto it = entries_.find(name);
  ENGINE_CHECK(it != entries_.end(), "safetensors file '", path_, "' has no tensor '", name, "'");
  return it->second;
}

void SafetensorsShards::read_f32(const std::string& name, float* out) const {
  entry(name);  // names the missing tensor
  files_[shard_of_.at(name)].read_f32(name, out);
}

}  // namespace launch
