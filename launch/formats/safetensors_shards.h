// A model's tensors in one safetensors file (launch/formats/safetensors.h), or
// sharded over several as transformers' save_pretrained(max_shard_size=...)
// and the Hub's large checkpoints lay them out: an index file
//   model.safetensors.index.json   {"metadata": {...},
//                                   "weight_map": {"NAME": "model-00001-of-00003.safetensors", ...}}
// beside the shard files it names (paths relative to the index's folder).
// An index is refused, on one line naming it, when it is not JSON or has no
// weight_map, when weight_map names a file outside the index's folder (a
// '..', an absolute path, a symbolic link leading out: the index is as
// untrusted as the shards), a file that is missing or not a regular file,
// or a tensor its
// file does not hold, when a tensor is held by two files, or when a shard
// holds a tensor weight_map does not list (an index and shards that disagree
// are not trusted either way).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "launch/formats/safetensors.h"

namespace launch {

class SafetensorsShards {
 public:
  // `path`: a .safetensors file (one shard), or an index (*.json).
  explicit SafetensorsShards(const std::string& path);

  // The file or index opened, for messages.
  const std::string& path() const { return path_; }
  // Every tensor of every shard, by name.
  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  const SafetensorsEntry& entry(const std::string& name) const;  // throws naming the missing tensor
  // Reads tensor `name` converted to f32 into out[0, numel), from its shard.
  void read_f32(const std::string& name, float* out) const;
  std::size_t shard_count() const { return files_.size(); }

 private:
  std::string path_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::size_t> shard_of_;  // tensor -> files_ index
};

}  // namespace launch
