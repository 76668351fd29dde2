#include "launch/checkpoint/checkpoint_files.h"

#include <cstdio>
#include <cstdlib>

#include "launch/files/checksum.h"

namespace launch::checkpoint_files {

std::string step_dir_name(std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%08lld", static_cast<long long>(step));
  return name;
}

std::optional<std::int64_t> step_of_dir_name(const std::string& name) {
  constexpr std::size_t kPrefix = 5;  // "step_"
  if (name.size() < kPrefix + 8 || name.compare(0, kPrefix, "step_") != 0) return std::nullopt;
  for (std::size_t i = kPrefix; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
  const std::int64_t step = std::strtoll(name.c_str() + kPrefix, nullptr, 10);
  if (step_dir_name(step) != name) return std::nullopt;
  return step;
}

std::string shard_name(int rank, const char* extension) {
  char name[32];
  std::snprintf(name, sizeof name, "rank_%05d.%s", rank, extension);
  return name;
}

std::string extra_name(int rank, const std::string& tag, const char* extension) {
  char name[32];
  std::snprintf(name, sizeof name, "rank_%05d_", rank);
  return name + tag + "." + extension;
}

std::string state_checksum(const nlohmann::json& state) {
  nlohmann::json body = state;
  body.erase("checksum");
  return checksum_of(body.dump());
}

}  // namespace launch::checkpoint_files
