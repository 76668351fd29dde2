// Reading checkpoints: which one to resume from, and loading it with every
// check (launch/checkpoint/checkpoint.h has the format). A failed check is a
// DamagedCheckpoint that names the file and the tensor; the trainer then
// falls back to an older checkpoint.
#include <sys/stat.h>

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
#include "launch/checkpoint/checkpoint_records.h"
#include "launch/checkpoint/tensor_slices.h"
#include "launch/files/checksum.h"
#include "launch/files/untrusted_json.h"
#include "launch/formats/untrusted_files.h"
#include "launch/formats/untrusted_values.h"

namespace launch {

namespace fs = std::filesystem;
using namespace checkpoint_files;
using namespace checkpoint_records;
using model::ParamInfo;

namespace {

// The whole text of file `name` of the checkpoint; damaged() when it leads
// out of the folder, is not a regular file (a FIFO would block) or cannot
// be read.
std::string read_text(const std::string& name, const std::string& step_dir) {
  const std::string outside = outside_folder_problem(step_dir, name);
  if (!outside.empty()) damaged("checkpoint '", step_dir, "': '", name, "' ", outside);
  std::string why;
  const ReadFile f = open_regular_file(fs::path(step_dir) / name, why);
  if (!f) damaged("checkpoint '", step_dir, "': '", name, "' ", why);
  std::string text;
  char buffer[65536];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, f.get())) > 0;) text.append(buffer, n);
  if (std::ferror(f.get())) damaged("checkpoint '", step_dir, "': cannot read '", name, "' (", std::strerror(errno), ")");
  return text;
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

// state.json, with its own checksum verified, and its fields.
StateRecord read_state(const std::string& step_dir) {
  const fs::path path = fs::path(step_dir) / kStateFile;
  if (!fs::exists(path))
    damaged("checkpoint '", step_dir, "' has no ", kStateFile, " (incomplete, damaged or not a checkpoint)");
  const nlohmann::json state = parse(read_text(kStateFile, step_dir), path, step_dir);
  if (!state.is_object() || !state.contains("format") || state.at("format") != kStateFormat)
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
  ENGINE_CHECK(version == kStateVersion, "checkpoint '", step_dir, "' has format version ", json_excerpt(version),
               "; this engine reads version ", kStateVersion, " only");
  return parse_state(state, step_dir);
}

// An index file (rank_NNNNN.json, rank_NNNNN_<tag>.json), checked whole.
nlohmann::json read_index(const StateRecord& state, const std::string& name, const std::string& step_dir) {
  const FileEntry& entry = state.file(name, "checkpoint '" + step_dir + "'");
  const fs::path path = fs::path(step_dir) / name;
  if (!fs::exists(path)) damaged("checkpoint '", step_dir, "' lists '", name, "', which is missing");
  const std::string text = read_text(name, step_dir);
  if (text.size() != entry.bytes || checksum_of(text) != entry.xxh3)
    damaged("checkpoint '", step_dir, "': '", name, "' fails its checksum or size (", text.size(), " bytes, ",
            entry.bytes, " written)");
  return parse(text, path, step_dir);
}

// The data files of one checkpoint, opened once each, each checked for its
// written size before it is trusted (a truncated file says so, by name).
class DataFiles {
 public:
  DataFiles(const StateRecord& state, std::string step_dir) : state_(state), step_dir_(std::move(step_dir)) {}

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
  std::FILE* open(const std::string& file) {
    auto it = open_.find(file);
    if (it != open_.end()) return it->second.get();
    const std::uint64_t written = state_.file(file, "checkpoint '" + step_dir_ + "'").bytes;
    // A regular file only (a FIFO would block), opened once; its size is
    // that of what was opened.
    std::string why;
    ReadFile f = open_regular_file(fs::path(step_dir_) / file, why);
    if (!f) damaged("checkpoint '", step_dir_, "': data file '", file, "' ",
                    why == "does not exist" ? "is missing or unreadable (it does not exist)" : why);
    struct stat st {};
    if (::fstat(::fileno(f.get()), &st) != 0)
      damaged("checkpoint '", step_dir_, "': data file '", file, "' is unreadable (", std::strerror(errno), ")");
    const auto size = static_cast<std::uint64_t>(st.st_size);
    if (size != written)
      damaged("checkpoint '", step_dir_, "': data file '", file, "' is ", size < written ? "truncated" : "too long",
              ": ", size, " bytes, ", written, " written");
    return open_.emplace(file, std::move(f)).first->second.get();
  }

  const StateRecord& state_;
  std::string step_dir_;
  std::map<std::string, ReadFile> open_;
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
  if (const std::string not_regular = fs::exists(latest) ? regular_file_problem(latest) : ""; !not_regular.empty()) {
    // A FIFO would block the read below.
    std::ostringstream note;
    note << "'" << latest.string() << "' " << not_regular << "; looking for the newest step_* directory instead";
    notes.push_back(note.str());
  } else if (fs::exists(latest)) {
    std::ifstream in(latest);
    std::string name;
    std::getline(in, name);
    const std::optional<std::int64_t> step = step_of_dir_name(name);
    if (step && fs::is_directory(fs::path(checkpoint_dir) / name)) {
      latest_step = *step;
      out.push_back((fs::path(checkpoint_dir) / name).string());
    } else {
      std::ostringstream note;  // (a stream: GCC 12 warns falsely on chains of string +)
      note << "'" << latest.string() << "' names '" << printable_text(name.substr(0, 80))
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
  const StateRecord state = read_state(step_dir);

  // The run's identity must match, or "resume" would silently train something else.
  const nlohmann::json& found_run = state.run;
  std::string differences;
  for (const auto& [key, value] : expected_run.items()) {
    const nlohmann::json found = found_run.contains(key) ? found_run.at(key) : nlohmann::json();
    // One line, each difference after "; ": the message names what a
    // hostile file holds, and goes to logs that take one line per error.
    if (found != value)
      differences += std::string(differences.empty() ? " " : "; ") + key + ": checkpoint has " +
                     found.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                     ", this run has " + value.dump();
  }
  ENGINE_CHECK(differences.empty(), "checkpoint '", step_dir, "' was written by a different run:", differences);

  // Every shard's records, by (name, kind), from every rank that wrote one;
  // every record validated before any byte is read (checkpoint_records.h).
  std::map<std::pair<std::string, std::string>, std::vector<TensorRecord>> records;
  for (const std::string& shard : state.shards)
    for (TensorRecord& t : parse_shard_index(read_index(state, shard, step_dir), shard, state, step_dir))
      records[{t.slice.name, t.slice.kind}].push_back(std::move(t));
  DataFiles files(state, step_dir);
  const std::pair<const char*, float*> kinds[] = {{"param", host.master}, {"adam_m", host.adam_m}, {"adam_v", host.adam_v}};
  for (const auto& [kind, buffer] : kinds) {
    for (const ParamInfo& p : registry.entries()) {
      const auto found = records.find({p.name, kind});
      if (found == records.end()) damaged("checkpoint '", step_dir, "' has no ", kind, " for '", p.name, "'");
      const std::vector<TensorRecord>& stored = found->second;
      std::vector<SliceRecord> pieces;
      for (const TensorRecord& s : stored) pieces.push_back(s.slice);
      const std::string what = std::string(kind) + " of '" + p.name + "'";
      try {
        cut_slice(p, kind, pieces,
                  [&](std::size_t i, float* out) {
                    const TensorRecord& s = stored[i];
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
  out.step = state.step;
  out.optimizer_steps = state.optimizer_steps;
  out.sampler_rng = state.sampler_rng;
  out.run = found_run;
  out.layout = state.layout;
  out.optimizer = state.optimizer;
  out.lr_schedule = state.lr_schedule;
  return out;
}

std::optional<RankExtra> load_rank_extra(const std::string& step_dir, const std::string& tag, int rank) {
  const StateRecord state = read_state(step_dir);
  const std::string wanted = extra_name(rank, tag, "json");
  const auto tagged = state.rank_extras.find(tag);
  if (tagged == state.rank_extras.end() ||
      std::find(tagged->second.begin(), tagged->second.end(), wanted) == tagged->second.end())
    return std::nullopt;
  // Validated whole (counts against the file's size) before anything is allocated.
  const ExtraIndex index = parse_extra_index(read_index(state, wanted, step_dir), wanted, state, step_dir);
  if (index.rank != rank || index.tag != tag)
    damaged("checkpoint '", step_dir, "': '", wanted, "' is not rank ", rank, "'s ", tag, " state");
  RankExtra out;
  out.tag = tag;
  out.meta = index.meta;
  DataFiles files(state, step_dir);
  for (const ArrayRecord& a : index.arrays) {
    RankArray array{a.name, std::vector<float>(static_cast<std::size_t>(a.count))};
    files.read(index.file, a.byte_offset, a.count, a.xxh3,
               "rank " + std::to_string(rank) + "'s " + tag + " array '" + array.name + "'", array.values.data());
    out.arrays.push_back(std::move(array));
  }
  return out;
}

}  // namespace launch
