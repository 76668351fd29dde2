// What the checkpoint writer and reader agree on besides the public API
// (launch/checkpoint/checkpoint.h): file names, the state file's format, its checksum.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace launch::checkpoint_files {

constexpr const char* kStateFormat = "gpt-engine-training-state";
// 2: checksums on every file and tensor (1 had none and is no longer read).
constexpr int kStateVersion = 2;
constexpr const char* kStateFile = "state.json";
constexpr const char* kLatestFile = "latest";

std::string step_dir_name(std::int64_t step);  // "step_00000100"
// The step of a directory named exactly like step_dir_name(), else nullopt
// (so "step_00000100.tmp" and "step_00000100.damaged" are not checkpoints).
std::optional<std::int64_t> step_of_dir_name(const std::string& name);
std::string shard_name(int rank, const char* extension);                          // "rank_00003.bin"
std::string extra_name(int rank, const std::string& tag, const char* extension);  // "rank_00003_onebit.json"

// The checksum state.json carries of itself: XXH3 of its JSON with the
// "checksum" member removed, serialised compactly (nlohmann::json sorts
// object keys, so the text is canonical).
std::string state_checksum(const nlohmann::json& state);

}  // namespace launch::checkpoint_files
