// Hostile checkpoints for the tests: a small checkpoint of random state, and
// edits made as an attacker who recomputes every checksum would make them
// (each edited file's size and XXH3 in state.json, then state.json's own
// checksum), so that what the reader refuses it refuses by validation, not
// because a checksum failed.
#pragma once

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/check.h"
#include "engine/rng.h"
#include "launch/checkpoint/checkpoint.h"
#include "launch/checkpoint/checkpoint_files.h"
#include "launch/files/checksum.h"
#include "model/gpt_params.h"
#include "parallel/mpi_communicator.h"
#include "tests/launch/hostile_input.h"

namespace hostile {

namespace fs = std::filesystem;

inline nlohmann::json read_json(const fs::path& path) { return nlohmann::json::parse(read_file(path)); }

// state.json with `state`, its own checksum recomputed.
inline void write_signed_state(const fs::path& step_dir, nlohmann::json state) {
  state["checksum"] = launch::checkpoint_files::state_checksum(state);
  write_file(step_dir / launch::checkpoint_files::kStateFile, state.dump(1));
}

// Writes `text` as `name` in `step_dir`, and lists it in state.json with its
// real size and checksum (under `listed_as`, when given: a name other than
// the file's own).
inline void write_signed(const fs::path& step_dir, const std::string& name, const std::string& text,
                         const std::string& listed_as = "") {
  write_file(step_dir / name, text);
  nlohmann::json state = read_json(step_dir / launch::checkpoint_files::kStateFile);
  state["files"][listed_as.empty() ? name : listed_as] = {{"bytes", text.size()}, {"xxh3", launch::checksum_of(text)}};
  write_signed_state(step_dir, state);
}

// Edits the JSON file `name` of `step_dir` and signs it.
inline void edit_signed(const fs::path& step_dir, const std::string& name,
                        const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = read_json(step_dir / name);
  edit(j);
  write_signed(step_dir, name, j.dump(1));
}

// Edits state.json and signs it.
inline void edit_state(const fs::path& step_dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json state = read_json(step_dir / launch::checkpoint_files::kStateFile);
  edit(state);
  write_signed_state(step_dir, state);
}

// A small model (a 4x6 matrix, a vector of 8) so that a test can try
// hundreds of variants of its checkpoint in a second.
struct SmallState {
  model::GptConfig config = model::gpt_preset("gpt-micro");  // unused: no model.bin is written
  model::ParamRegistry registry;
  std::vector<float> p, m, v;
  launch::TrainingState state;
  SmallState() {
    registry.add("a.weight", engine::Shape{4, 6}, model::Init::kNormal, 1.0, true);
    registry.add("b.bias", engine::Shape{8}, model::Init::kNormal, 1.0, false);
    std::uint64_t seed = 1;
    for (std::vector<float>* buffer : {&p, &m, &v}) {
      buffer->resize(static_cast<std::size_t>(registry.total_numel()));
      engine::fill_normal(buffer->data(), registry.total_numel(), engine::rng_key(seed++, "hostile"), 0, 0.0, 1.0);
    }
    state.step = 10;
    state.run = {{"seed", 1}};
  }
  launch::HostState host() { return {p.data(), m.data(), v.data()}; }
  // Saves into `checkpoint_dir` (the shards and, with `extra`, a rank
  // extra; no model.bin) and returns the step directory.
  std::string save(const std::string& checkpoint_dir, const launch::RankExtra* extra = nullptr) {
    parallel::MpiCommunicator self(MPI_COMM_SELF, "self");
    launch::ShardRole role;
    role.writes_llmc = false;
    return launch::save_checkpoint(checkpoint_dir, state, config, registry, host(), role, self, extra);
  }
  // Loads `dir`; "" when it loads, else what was thrown. Anything thrown
  // that is not an engine::Error (a JSON library exception escaping, say)
  // is reported as such.
  std::string load_error(const std::string& dir) {
    std::vector<float> p2(p.size()), m2(p.size()), v2(p.size());
    try {
      launch::load_checkpoint(dir, state.run, registry, {p2.data(), m2.data(), v2.data()});
    } catch (const engine::Error& e) {
      return e.what();
    } catch (const std::exception& e) {
      return std::string("NOT AN engine::Error: ") + e.what();
    }
    return "";
  }
};

}  // namespace hostile

