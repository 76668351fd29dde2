// Writing checkpoints: begin, write this rank's files, commit, keep the
// newest few (launch/checkpoint/checkpoint.h has the format).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>

#include "engine/check.h"
#include "launch/checkpoint/checkpoint.h"
#include "launch/checkpoint/checkpoint_files.h"
#include "launch/checkpoint/tensor_slices.h"
#include "launch/files/atomic_file.h"
#include "launch/files/checksum.h"
#include "launch/formats/llmc_model.h"
#include "launch/resilience/rank_agreement.h"

namespace launch {

namespace fs = std::filesystem;
using namespace checkpoint_files;
using model::ParamInfo;

namespace {

// Where the first NaN or infinity of `values` is, or -1.
std::int64_t first_nonfinite(const float* values, std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i)
    if (!std::isfinite(values[i])) return i;
  return -1;
}

nlohmann::json file_entry(const WrittenFile& f) { return {{"bytes", f.bytes}, {"xxh3", f.xxh3}}; }

// This rank's slices and their index. Returns false (and says why in `out`)
// when a tensor holds a non-finite value: nothing is committed then.
bool write_shard(const std::string& dir, const model::ParamRegistry& registry, const HostState& host, int rank,
                 RankFiles& out) {
  const std::string data_name = shard_name(rank, "bin");
  AtomicFile data((fs::path(dir) / data_name).string());
  nlohmann::json tensors = nlohmann::json::array();
  const std::pair<const char*, const float*> kinds[] = {
      {"param", host.master}, {"adam_m", host.adam_m}, {"adam_v", host.adam_v}};
  for (const auto& [kind, buffer] : kinds) {
    for (const ParamInfo& p : registry.entries()) {
      const float* values = buffer + p.offset;
      const std::int64_t bad = first_nonfinite(values, p.numel());
      if (bad >= 0) {
        out.nonfinite = true;
        out.error = std::string(kind) + " of '" + p.name + "' holds " + std::to_string(values[bad]) +
                    " at element " + std::to_string(bad);
        return false;
      }
      const std::size_t bytes = static_cast<std::size_t>(p.numel()) * sizeof(float);
      nlohmann::json record = slice_to_json({p.name, kind, p.global_shape, p.shape, p.split});
      record["dtype"] = "f32";
      record["file"] = data_name;
      record["byte_offset"] = data.bytes_written();
      record["xxh3"] = checksum_of(values, bytes);
      tensors.push_back(std::move(record));
      data.write(values, bytes);
    }
  }
  out.files[data_name] = file_entry(data.commit());
  out.shard_index = shard_name(rank, "json");
  AtomicFile index((fs::path(dir) / out.shard_index).string());
  index.write(nlohmann::json{{"rank", rank}, {"tensors", tensors}}.dump(1));
  out.files[out.shard_index] = file_entry(index.commit());
  return true;
}

void write_rank_extra(const std::string& dir, const RankExtra& extra, int rank, RankFiles& out) {
  const std::string data_name = extra_name(rank, extra.tag, "bin");
  AtomicFile data((fs::path(dir) / data_name).string());
  nlohmann::json arrays = nlohmann::json::array();
  for (const RankArray& a : extra.arrays) {
    const std::size_t bytes = a.values.size() * sizeof(float);
    arrays.push_back({{"name", a.name},
                      {"count", a.values.size()},
                      {"dtype", "f32"},
                      {"byte_offset", data.bytes_written()},
                      {"xxh3", checksum_of(a.values.data(), bytes)}});
    data.write(a.values.data(), bytes);
  }
  out.files[data_name] = file_entry(data.commit());
  out.extra_index = extra_name(rank, extra.tag, "json");
  out.extra_tag = extra.tag;
  AtomicFile index((fs::path(dir) / out.extra_index).string());
  index.write(nlohmann::json{{"rank", rank}, {"tag", extra.tag}, {"file", data_name}, {"meta", extra.meta},
                             {"arrays", arrays}}
                  .dump(1));
  out.files[out.extra_index] = file_entry(index.commit());
}

nlohmann::json rank_files_json(const RankFiles& f) {
  return {{"shard_index", f.shard_index}, {"extra_index", f.extra_index}, {"extra_tag", f.extra_tag},
          {"files", f.files}};
}

// Rank 0's part of a commit: state.json from what every rank wrote, the
// rename into place, `latest`, retention.
void write_state_and_rename(const std::string& checkpoint_dir, const std::string& temp_dir,
                            const std::string& final_dir, const TrainingState& state,
                            const std::vector<std::string>& per_rank, int keep) {
  nlohmann::json shards = nlohmann::json::array();
  nlohmann::json extras = nlohmann::json::object();
  nlohmann::json files = nlohmann::json::object();
  for (std::size_t r = 0; r < per_rank.size(); ++r) {
    const nlohmann::json written = nlohmann::json::parse(per_rank[r]);
    // The names come from what each rank said it wrote, not from a directory
    // listing, which a network file system may serve stale; each is checked
    // to be there, whole, as rank 0 sees it.
    for (const auto& [name, entry] : written.at("files").items()) {
      std::error_code ec;
      const std::uintmax_t size = fs::file_size(fs::path(temp_dir) / name, ec);
      ENGINE_CHECK(!ec && size == entry.at("bytes").get<std::uintmax_t>(), "rank ", r, " wrote '", name, "' (",
                   entry.at("bytes").get<std::uintmax_t>(), " bytes) but rank 0 ",
                   ec ? "does not see it" : "sees " + std::to_string(size) + " bytes", " in '", temp_dir,
                   "' (is the directory on a shared file system?)");
      files[name] = entry;
    }
    if (!written.at("shard_index").get<std::string>().empty()) shards.push_back(written.at("shard_index"));
    const std::string tag = written.at("extra_tag").get<std::string>();
    if (!tag.empty()) extras[tag].push_back(written.at("extra_index"));
  }
  nlohmann::json index = {{"format", kStateFormat},
                          {"version", kStateVersion},
                          {"step", state.step},
                          {"optimizer_steps", state.optimizer_steps},
                          {"run", state.run},
                          {"layout", state.layout},
                          {"sampler_rng", state.sampler_rng},
                          {"shards", shards},
                          {"files", files}};
  if (!state.optimizer.is_null()) index["optimizer"] = state.optimizer;
  if (!state.lr_schedule.is_null()) index["lr_schedule"] = state.lr_schedule;
  if (!extras.empty()) index["rank_extras"] = extras;
  index["checksum"] = state_checksum(index);
  AtomicFile state_file((fs::path(temp_dir) / kStateFile).string());
  state_file.write(index.dump(1));
  state_file.commit();
  commit_directory(temp_dir, final_dir);
  try {
    AtomicFile latest((fs::path(checkpoint_dir) / kLatestFile).string());
    latest.write(fs::path(final_dir).filename().string() + "\n");
    latest.commit();
  } catch (const std::exception& e) {
    ENGINE_FAIL("'", final_dir, "' is complete, but '", kLatestFile, "' still names the previous checkpoint: ",
                e.what());
  }
  // Only now, with a newer checkpoint complete, may an older one go.
  try {
    remove_old_checkpoints(checkpoint_dir, keep, fs::path(final_dir).filename().string());
  } catch (const std::exception& e) {
    std::cerr << "warning: removing old checkpoints: " << e.what() << std::endl;
  }
}

}  // namespace

const std::vector<float>* RankExtra::find(const std::string& name) const {
  for (const RankArray& a : arrays)
    if (a.name == name) return &a.values;
  return nullptr;
}

std::string begin_checkpoint(const std::string& checkpoint_dir, std::int64_t step, parallel::Communicator& world) {
  const std::string temp_dir = (fs::path(checkpoint_dir) / step_dir_name(step)).string() + ".tmp";
  std::string error;
  if (world.rank() == 0) {
    std::error_code ec;
    fs::create_directories(checkpoint_dir, ec);
    if (!ec) fs::remove_all(temp_dir, ec);  // left by a crash
    if (!ec) fs::create_directory(temp_dir, ec);
    if (ec) error = "cannot create checkpoint directory '" + temp_dir + "': " + ec.message();
  }
  error = first_error(world, error);
  if (!error.empty())
    throw CheckpointError("checkpoint at step " + std::to_string(step) + " not started (the previous one is intact): " +
                          error);
  return temp_dir;
}

RankFiles write_rank_files(const std::string& temp_dir, const model::GptConfig& config,
                           const model::ParamRegistry& registry, const HostState& host, const ShardRole& role,
                           const RankExtra* extra) noexcept {
  RankFiles out;
  try {
    ENGINE_CHECK(!role.fail_writes, "cannot write '", temp_dir, "': No space left on device (injected by "
                 "ENGINE_TEST_FAIL_SAVES)");
    if (role.writes_shard && !write_shard(temp_dir, registry, host, role.rank, out)) return out;
    if (role.writes_llmc)
      out.files["model.bin"] = file_entry(write_llmc_model((fs::path(temp_dir) / "model.bin").string(), config,
                                                           registry, host.master));
    if (extra) write_rank_extra(temp_dir, *extra, role.rank, out);
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

std::string commit_checkpoint(const std::string& checkpoint_dir, const TrainingState& state, const RankFiles& mine,
                              int keep, parallel::Communicator& world) {
  const std::string step = std::to_string(state.step);
  const std::string final_dir = (fs::path(checkpoint_dir) / step_dir_name(state.step)).string();
  const std::string temp_dir = final_dir + ".tmp";
  // A failure anywhere abandons the temporary directory and leaves the
  // previous checkpoint as it was.
  std::string error = first_error(world, mine.error);
  if (!error.empty()) {
    const bool nonfinite = !all_ranks_ok(world, !mine.nonfinite);
    if (nonfinite) error = first_error(world, mine.nonfinite ? mine.error : "");
    if (world.rank() == 0) {
      std::error_code ec;
      fs::remove_all(temp_dir, ec);
    }
    if (nonfinite)
      throw NonFiniteStateError("refusing to write the checkpoint of step " + step + ": " + error +
                                " (the previous checkpoint is kept)");
    throw CheckpointError("checkpoint at step " + step + " abandoned (the previous one is intact): " + error);
  }
  const std::vector<std::string> per_rank = all_gather_strings(world, rank_files_json(mine).dump());
  if (world.rank() == 0) {
    try {
      write_state_and_rename(checkpoint_dir, temp_dir, final_dir, state, per_rank, keep);
    } catch (const std::exception& e) {
      error = e.what();
      std::error_code ec;
      fs::remove_all(temp_dir, ec);  // a full disk must not stay full of an abandoned save
    }
  }
  error = first_error(world, error);
  if (!error.empty()) throw CheckpointError("checkpoint at step " + step + " not committed: " + error);
  return final_dir;
}

std::string save_checkpoint(const std::string& checkpoint_dir, const TrainingState& state,
                            const model::GptConfig& config, const model::ParamRegistry& registry,
                            const HostState& host, const ShardRole& role, parallel::Communicator& world,
                            const RankExtra* extra, int keep) {
  const std::string temp_dir = begin_checkpoint(checkpoint_dir, state.step, world);
  const RankFiles mine = write_rank_files(temp_dir, config, registry, host, role, extra);
  return commit_checkpoint(checkpoint_dir, state, mine, keep, world);
}

std::vector<std::string> remove_old_checkpoints(const std::string& checkpoint_dir, int keep,
                                                const std::string& newest) {
  std::vector<std::string> removed;
  std::vector<std::pair<std::int64_t, fs::path>> complete;
  const std::optional<std::int64_t> newest_step = step_of_dir_name(newest);
  for (const fs::directory_entry& entry : fs::directory_iterator(checkpoint_dir)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory()) continue;
    // A temporary directory a crashed save left behind (no save is in flight
    // now: commits run one at a time, after the write they commit).
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0 &&
        step_of_dir_name(name.substr(0, name.size() - 4))) {
      std::error_code ec;
      if (fs::remove_all(entry.path(), ec) > 0 && !ec) removed.push_back(name);
      continue;
    }
    // Only those older than `newest`: newer ones belong to a timeline a
    // resume from an older checkpoint abandoned, which no resume will pick
    // (launch/checkpoint/checkpoint_reader.cpp) and which must not push out the
    // checkpoints this run can go back to. They are left alone.
    const std::optional<std::int64_t> step = step_of_dir_name(name);
    if (step && newest_step && *step < *newest_step && fs::exists(entry.path() / kStateFile))
      complete.emplace_back(*step, entry.path());
  }
  if (keep <= 0) return removed;
  std::sort(complete.begin(), complete.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  // `newest` is one of the `keep`.
  for (std::size_t i = static_cast<std::size_t>(keep - 1); i < complete.size(); ++i) {
    std::error_code ec;
    fs::remove_all(complete[i].second, ec);
    ENGINE_CHECK(!ec, "cannot remove old checkpoint '", complete[i].second.string(), "': ", ec.message());
    removed.push_back(complete[i].second.filename().string());
  }
  return removed;
}

}  // namespace launch
