// A sharded model's model.safetensors.index.json (`--init-from` a folder
// saved with save_pretrained(max_shard_size=...)): its weight_map names the
// shard of each tensor, relative to the index's folder, which holds two real
// shards (model-00001-of-00002.safetensors: "a", "b"; model-00002-...: "c").
// The index is as untrusted as the shards: a '..', an absolute path, a
// missing file, a tensor named twice or in the wrong file is refused. An
// accepted index then reads every tensor.
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "launch/formats/safetensors_shards.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

// A safetensors file holding F32 tensors of shape [2], valued 1, 2, 3, ...
std::string shard_bytes(const std::vector<std::string>& names) {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const std::string& name : names) {
    header[name] = {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {data.size(), data.size() + 8}}};
    for (float v : {1.0f + static_cast<float>(data.size()), 2.0f}) data.append(reinterpret_cast<const char*>(&v), 4);
  }
  const std::string text = header.dump();
  const std::uint64_t length = text.size();
  return std::string(reinterpret_cast<const char*>(&length), 8) + text + data;
}

std::string write_shard(const std::string& name, const std::vector<std::string>& tensors) {
  const std::string bytes = shard_bytes(tensors);
  return fuzz::input_file(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size(), name);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool shards_written = [] {
    write_shard("model-00001-of-00002.safetensors", {"a", "b"});
    write_shard("model-00002-of-00002.safetensors", {"c"});
    return true;
  }();
  (void)shards_written;
  const std::string path = fuzz::input_file(data, size, "model.safetensors.index.json");
  std::optional<launch::SafetensorsShards> shards;
  if (!fuzz::accepts([&] { shards.emplace(path); })) return 0;
  std::vector<float> values;
  for (const auto& tensor : shards->entries()) {
    values.resize(static_cast<std::size_t>(tensor.second.numel()));
    fuzz::accepts([&] { shards->read_f32(tensor.first, values.data()); });
  }
  return 0;
}
