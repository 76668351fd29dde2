#include "launch/formats/safetensors_shards.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/check.h"
#include "launch/files/untrusted_json.h"
#include "launch/formats/untrusted_files.h"
#include "launch/formats/untrusted_values.h"

namespace launch {

namespace {

// weight_map of the index at `path`, as (tensor, shard file name).
std::map<std::string, std::string> read_weight_map(const std::string& path) {
  const std::string not_regular = regular_file_problem(path);  // a FIFO would block the read
  ENGINE_CHECK(not_regular.empty(), "safetensors index '", path, "' ", not_regular);
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

// (A function-try-block: the messages below quote the index's names and
// bytes, which must print on one line as valid UTF-8.)
SafetensorsShards::SafetensorsShards(const std::string& path) try : path_(path) {
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
    // The index is as untrusted as the shards: a name leading out of the
    // folder would read any file the user can.
    const std::string outside = outside_folder_problem(folder, file);
    ENGINE_CHECK(outside.empty(), "safetensors index '", path, "': weight_map maps tensor '", name, "' to '", file,
                 "', which ", outside);
    const std::string shard = (folder / file).string();
    const std::string not_regular = regular_file_problem(shard);
    ENGINE_CHECK(not_regular.empty(), "safetensors index '", path, "': weight_map maps tensor '", name, "' to '", file,
                 "', which ", not_regular);
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
} catch (const engine::Error& e) {
  throw engine::Error(printable_text(e.what()));
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
