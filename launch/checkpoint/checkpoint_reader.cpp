// Reading checkpoints: which one to resume from, and loading it with every
// check (launch/checkpoint/checkpoint.h has the format). A failed check is a
// DamagedCheckpoint that names the file and the tensor; the trainer then
// falls back to an older checkpoint.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "engine/check.h"
#include "launch/checkpoint/checkpoint.h"
#include "launch/checkpoint/checkpoint_files.h"
#include "launch/checkpoint/tensor_slices.h"
#include "launch/files/checksum.h"
#include "launch/files/untrusted_json.h"

namespace launch {

namespace fs = std::filesystem;
using namespace checkpoint_files;
using model::ParamInfo;

namespace {

template <typename... Args>
[[noreturn]] void damaged(const Args&... args) {
  std::ostringstream message;
  (message << ... << args);
  throw DamagedCheckpoint(message.str());
}

// The whole text of a file; damaged() when it cannot be read.
std::string read_text(const fs::path& path, const std::string& step_dir) {
  std::ifstream in(path, std::ios::binary);
  if (!in.good()) damaged("checkpoint '", step_dir, "': cannot read '", path.filename().string(), "' (",
                          std::strerror(errno), ")");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

nlohmann::json parse(const std::string& text, const fs::path& path, const std::string& step_dir) {
  const std::string what = "checkpoint '" + step_dir + "': '" + path.filename().string() + "'";
  try {
    check_json_text(text, what, kMaxConfigJsonBytes);  // untrusted: size and nesting bounded first
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    damaged(what, " is not valid JSON (", e.what(), ")");
  } catch (const std::runtime_error& e) {
    damaged(e.what());
  }
}

// state.json, with its own checksum verified.
nlohmann::json read_state(const std::string& step_dir) {
  const fs::path path = fs::path(step_dir) / kStateFile;
  if (!fs::exists(path))
    damaged("checkpoint '", step_dir, "' has no ", kStateFile, " (incomplete, damaged or not a checkpoint)");
  const nlohmann::json state = parse(read_text(path, step_dir), path, step_dir);
  if (!state.is_object() || state.value("format", "") != kStateFormat)
    damaged("checkpoint '", step_dir, "': '", kStateFile, "' is not a ", kStateFormat, " file");
  // Version 1 had no checksums at all: not damaged, just not trusted.
  ENGINE_CHECK(state.contains("checksum") || !state.contains("version") || state.at("version") != 1, "checkpoint '",
               step_dir, "' has format version 1 (no checksums); this engine reads version ", kStateVersion, " only");
  // The checksum first, so a damaged version number reads as damage.
  const std::string stored = state.contains("checksum") && state.at("checksum").is_string()
                                 ? state.at("checksum").get<std::string>() : "";
  const std::string computed = state_checksum(state);
  if (stored != computed)
    damaged("checkpoint '", step_dir, "': '", kStateFile, "' fails its checksum (stored '", stored, "', computed '",
            computed, "'): it was changed after it was written");
  const nlohmann::json version = state.value("version", nlohmann::json());
  ENGINE_CHECK(version == kStateVersion, "checkpoint '", step_dir, "' has format version ", version.dump(),
               "; this engine reads version ", kStateVersion, " only");
  return state;
}

// One file's entry in state.json: its size and checksum.
const nlohmann::json& file_entry(const nlohmann::json& state, const std::string& name, const std::string& step_dir) {
  const nlohmann::json& files = state.at("files");
  if (!files.contains(name)) damaged("checkpoint '", step_dir, "': '", name, "' is not among the files ", kStateFile,
                                     " lists");
  return files.at(name);
}

// An index file (rank_NNNNN.json, rank_NNNNN_<tag>.json), checked whole.
nlohmann::json read_index(const nlohmann::json& state, const std::string& name, const std::string& step_dir) {
  const fs::path path = fs::path(step_dir) / name;
  if (!fs::exists(path)) damaged("checkpoint '", step_dir, "' lists '", name, "', which is missing");
  const std::string text = read_text(path, step_dir);
  const nlohmann::json& entry = file_entry(state, name, step_dir);
  if (text.size() != entry.at("bytes").get<std::size_t>() || checksum_of(text) != entry.at("xxh3").get<std::string>())
    damaged("checkpoint '", step_dir, "': '", name, "' fails its checksum or size (", text.size(), " bytes, ",
            entry.at("bytes").get<std::size_t>(), " written)");
  return parse(text, path, step_dir);
}

// The data files of one checkpoint, opened once each, each checked for its
// written size before it is trusted (a truncated file says so, by name).
class DataFiles {
 public:
  DataFiles(const nlohmann::json& state, std::string step_dir) : state_(state), step_dir_(std::move(step_dir)) {}

  // Reads `count` floats at `byte_offset` of `file` and checks them against
  // `xxh3`; `what` names the tensor in errors.
  void read(const std::string& file, std::int64_t byte_offset, std::int64_t count, const std::string& xxh3,
            const std::string& what, float* out) {
    std::FILE* f = open(file);
    const std::size_t bytes = static_cast<std::size_t>(count) * sizeof(float);
    if (std::fseek(f, static_cast<long>(byte_offset), SEEK_SET) != 0 || std::fread(out, 1, bytes, f) != bytes)
      damaged("checkpoint '", step_dir_, "': cannot read ", what, " from '", file, "' (", bytes, " bytes at ",
              byte_offset, ")");
    const std::string computed = checksum_of(out, bytes);
    if (computed != xxh3)
      damaged("checkpoint '", step_dir_, "': ", what, " in '", file, "' fails its checksum (stored ", xxh3,
              ", read ", computed, "): the file is damaged");
  }

 private:
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };

  std::FILE* open(const std::string& file) {
    auto it = open_.find(file);
    if (it != open_.end()) return it->second.get();
    const fs::path path = fs::path(step_dir_) / file;
    const std::size_t written = file_entry(state_, file, step_dir_).at("bytes").get<std::size_t>();
    std::error_code ec;
    const std::uintmax_t size = fs::file_size(path, ec);
    if (ec) damaged("checkpoint '", step_dir_, "': data file '", file, "' is missing or unreadable (", ec.message(), ")");
    if (size != written)
      damaged("checkpoint '", step_dir_, "': data file '", file, "' is ", size < written ? "truncated" : "too long",
              ": ", size, " bytes, ", written, " written");
    std::unique_ptr<std::FILE, Closer> f(std::fopen(path.string().c_str(), "rb"));
    if (!f) damaged("checkpoint '", step_dir_, "': cannot open '", file, "': ", std::strerror(errno));
    return open_.emplace(file, std::move(f)).first->second.get();
  }

  const nlohmann::json& state_;
  std::string step_dir_;
  std::map<std::string, std::unique_ptr<std::FILE, Closer>> open_;
};

struct StoredSlice {
  SliceRecord slice;
  std::string file;
  std::int64_t byte_offset;
  std::string xxh3;
};

}  // namespace

std::vector<std::string> resume_candidates(const std::string& resume, const std::string& checkpoint_dir,
                                           std::vector<std::string>& notes) {
  if (resume != "latest" && resume != "auto") {
    ENGINE_CHECK(fs::is_directory(resume), "--resume '", resume, "' is not a checkpoint directory");
    return {resume};
  }
  // Every committed-looking step directory, newest first.
  std::vector<std::pair<std::int64_t, std::string>> steps;
  std::error_code ec;
  if (fs::is_directory(checkpoint_dir, ec))
    for (const fs::directory_entry& entry : fs::directory_iterator(checkpoint_dir))
      if (const auto step = step_of_dir_name(entry.path().filename().string()); step && entry.is_directory())
        steps.emplace_back(*step, entry.path().string());
  std::sort(steps.begin(), steps.end(), [](const auto& a, const auto& b) { return a.first > b.first; });

  std::vector<std::string> out;
  const fs::path latest = fs::path(checkpoint_dir) / kLatestFile;
  std::int64_t latest_step = -1;
  if (fs::exists(latest)) {
    std::ifstream in(latest);
    std::string name;
    std::getline(in, name);
    const std::optional<std::int64_t> step = step_of_dir_name(name);
    if (step && fs::is_directory(fs::path(checkpoint_dir) / name)) {
      latest_step = *step;
      out.push_back((fs::path(checkpoint_dir) / name).string());
    } else {
      std::ostringstream note;  // (a stream: GCC 12 warns falsely on chains of string +)
      note << "'" << latest.string() << "' names '" << name.substr(0, 80)
           << "', which is not a checkpoint directory; looking for the newest step_* directory instead";
      notes.push_back(note.str());
    }
  } else if (!steps.empty()) {
    std::ostringstream note;
    note << "'" << latest.string() << "' is missing; looking for the newest step_* directory instead";
    notes.push_back(note.str());
  }
  // Older ones, to fall back on (those newer than `latest` belong to a
  // timeline that a resume from an older checkpoint abandoned).
  for (const auto& [step, path] : steps)
    if (latest_step < 0 || step < latest_step) out.push_back(path);
  ENGINE_CHECK(!out.empty() || resume == "auto", "--resume latest: no checkpoint to resume from in '",
               checkpoint_dir, "'");
  // "auto" starts fresh only where nothing was ever saved: a `latest` or a
  // set-aside damaged checkpoint means a run was here, and starting over
  // would silently throw its progress away.
  if (out.empty() && fs::exists(latest))
    ENGINE_FAIL("--resume auto: '", checkpoint_dir, "' has a 'latest' file but no intact checkpoint to resume from "
                "(damaged ones are set aside as step_*.damaged); refusing to start fresh over it. Restore a "
                "checkpoint, or remove '", latest.string(), "' to start over");
  return out;
}

TrainingState load_checkpoint(const std::string& step_dir, const nlohmann::json& expected_run,
                              const model::ParamRegistry& registry, const HostState& host) {
  const nlohmann::json state = read_state(step_dir);

  // The run's identity must match, or "resume" would silently train something else.
  const nlohmann::json& found_run = state.at("run");
  std::string differences;
  for (const auto& [key, value] : expected_run.items()) {
    const nlohmann::json found = found_run.contains(key) ? found_run.at(key) : nlohmann::json();
    if (found != value) differences += "\n  " + key + ": checkpoint has " + found.dump() + ", this run has " + value.dump();
  }
  ENGINE_CHECK(differences.empty(), "checkpoint '", step_dir, "' was written by a different run:", differences);

  // Every shard's records, by (name, kind), from every rank that wrote one.
  std::map<std::pair<std::string, std::string>, std::vector<StoredSlice>> records;
  for (const nlohmann::json& shard : state.at("shards")) {
    const nlohmann::json index = read_index(state, shard.get<std::string>(), step_dir);
    for (const nlohmann::json& t : index.at("tensors")) {
      StoredSlice s{slice_from_json(t), t.at("file").get<std::string>(), t.at("byte_offset").get<std::int64_t>(),
                    t.at("xxh3").get<std::string>()};
      records[{s.slice.name, s.slice.kind}].push_back(std::move(s));
    }
  }
  DataFiles files(state, step_dir);
  const std::pair<const char*, float*> kinds[] = {{"param", host.master}, {"adam_m", host.adam_m}, {"adam_v", host.adam_v}};
  for (const auto& [kind, buffer] : kinds) {
    for (const ParamInfo& p : registry.entries()) {
      const auto found = records.find({p.name, kind});
      if (found == records.end()) damaged("checkpoint '", step_dir, "' has no ", kind, " for '", p.name, "'");
      const std::vector<StoredSlice>& stored = found->second;
      std::vector<SliceRecord> pieces;
      for (const StoredSlice& s : stored) pieces.push_back(s.slice);
      const std::string what = std::string(kind) + " of '" + p.name + "'";
      try {
        cut_slice(p, kind, pieces,
                  [&](std::size_t i, float* out) {
                    const StoredSlice& s = stored[i];
                    files.read(s.file, s.byte_offset, s.slice.shape.numel(), s.xxh3,
                               what + " (slice " + split_to_json(s.slice.split).dump() + ")", out);
                  },
                  buffer + p.offset);
      } catch (const DamagedCheckpoint&) {
        throw;
      } catch (const std::exception& e) {
        ENGINE_FAIL("checkpoint '", step_dir, "': ", e.what());
      }
    }
  }
  TrainingState out;
  out.step = state.at("step").get<std::int64_t>();
  out.optimizer_steps = state.value("optimizer_steps", std::int64_t{-1});
  out.sampler_rng = state.value("sampler_rng", "");
  out.run = found_run;
  out.layout = state.value("layout", nlohmann::json());
  out.optimizer = state.value("optimizer", nlohmann::json());
  return out;
}

std::optional<RankExtra> load_rank_extra(const std::string& step_dir, const std::string& tag, int rank) {
  const nlohmann::json state = read_state(step_dir);
  const std::string wanted = extra_name(rank, tag, "json");
  bool listed = false;
  if (state.contains("rank_extras") && state.at("rank_extras").contains(tag))
    for (const nlohmann::json& f : state.at("rank_extras").at(tag)) listed = listed || f == wanted;
  if (!listed) return std::nullopt;
  const nlohmann::json index = read_index(state, wanted, step_dir);
  if (index.at("rank").get<int>() != rank || index.at("tag") != tag)
    damaged("checkpoint '", step_dir, "': '", wanted, "' is not rank ", rank, "'s ", tag, " state");
  RankExtra out;
  out.tag = tag;
  out.meta = index.at("meta");
  DataFiles files(state, step_dir);
  const std::string file = index.at("file").get<std::string>();
  for (const nlohmann::json& a : index.at("arrays")) {
    RankArray array{a.at("name").get<std::string>(), std::vector<float>(a.at("count").get<std::size_t>())};
    files.read(file, a.at("byte_offset").get<std::int64_t>(), static_cast<std::int64_t>(array.values.size()),
               a.at("xxh3").get<std::string>(), "rank " + std::to_string(rank) + "'s " + tag + " array '" + array.name + "'",
               array.values.data());
    out.arrays.push_back(std::move(array));
  }
  return out;
}

}  // namespace launch
