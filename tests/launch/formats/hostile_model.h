// Hostile model files for the tests of launch/formats/: a small GPT-2 written
// as a Hugging Face folder, and safetensors files whose header a test edits
// or writes verbatim.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "engine/check.h"
#include "launch/formats/hf_gpt2.h"
#include "model/gpt_params.h"
#include "tests/launch/hostile_input.h"

namespace hostile {

// 200 tokens (padded to 256), 2 layers of 2 heads, 32 wide: small enough to
// write and read hundreds of times a second.
inline model::GptConfig small_gpt() {
  model::GptConfig c;
  c.vocab_size = 200;
  c.max_seq_len = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  return c;
}

struct SmallModel {
  model::GptConfig config = small_gpt();
  model::ParamRegistry registry = model::build_gpt_registry(config);
  std::vector<float> master;
  SmallModel() {
    master.assign(static_cast<std::size_t>(registry.total_numel()), 0.0f);
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 0.5f);
    for (const model::ParamInfo& p : registry.entries())
      for (std::int64_t i = 0; i < p.numel(); ++i) master[static_cast<std::size_t>(p.offset + i)] = normal(rng);
  }
  // DIR/model.safetensors and DIR/config.json.
  void write(const std::string& dir) const {
    launch::write_hf_gpt2(dir, config, registry, master.data(), launch::SafetensorsDType::kF32);
  }
};

// A safetensors file of `header` (verbatim) and `data`.
inline std::string safetensors_bytes(const std::string& header, const std::string& data) {
  const std::uint64_t n = header.size();
  return std::string(reinterpret_cast<const char*>(&n), 8) + header + data;
}

// The header and the data of a safetensors file's bytes.
inline std::pair<nlohmann::json, std::string> split_safetensors(const std::string& bytes) {
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  return {nlohmann::json::parse(bytes.substr(8, n)), bytes.substr(8 + n)};
}

// Edits the header of the safetensors file at `path`, keeping its data.
inline void edit_header(const fs::path& path, const std::function<void(nlohmann::json&)>& edit) {
  auto [header, data] = split_safetensors(read_file(path));
  edit(header);
  write_file(path, safetensors_bytes(header.dump(), data));
}

// What `fn` threw as an engine::Error ("" when it returned); anything else
// thrown is reported as such.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const engine::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("NOT AN engine::Error: ") + e.what();
  }
  return "";
}

}  // namespace hostile
