#include "launch/run/run_folder.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "engine/check.h"
#include "launch/checkpoint/checkpoint_files.h"
#include "launch/files/atomic_file.h"
#include "launch/files/untrusted_json.h"

namespace launch {

namespace fs = std::filesystem;

namespace {

// Entries of a checkpoint folder that belong to a run: step directories
// (complete, crashed `.tmp`, set-aside `.damaged`) and the `latest` pointer.
std::vector<fs::path> checkpoint_entries(const std::string& dir) {
  std::vector<fs::path> found;
  std::error_code error;
  if (dir.empty() || !fs::is_directory(dir, error)) return found;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    // Only names a checkpoint writer gives: step_NNNNNNNN, with .tmp (a
    // crashed save) or .damaged (set aside by a resume).
    static const std::regex kStepDir(R"(step_[0-9]{8}(\.tmp|\.damaged)?)");
    const std::string name = entry.path().filename().string();
    if (name == checkpoint_files::kLatestFile || std::regex_match(name, kStepDir)) found.push_back(entry.path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

bool non_empty_file(const std::string& path) {
  std::error_code error;
  return !path.empty() && fs::is_regular_file(path, error) && fs::file_size(path, error) > 0;
}

// A line this engine's MetricsLog writes: a JSON object with an "event"
// name, or a "step" number with its "loss" or "val_loss".
bool is_metrics_record(const std::string& line) {
  if (line.empty() || line.front() != '{' || json_nesting_depth(line) > kMaxJsonDepth) return false;
  const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!record.is_object()) return false;
  if (record.contains("event")) return record["event"].is_string();
  return record.contains("step") && record["step"].is_number_integer() &&
         (record.contains("loss") || record.contains("val_loss"));
}

// "" when `path` holds only this engine's metrics records (a last line
// without its newline, cut short by a crash, may be any start of one);
// else what is not: "line 3 is not a metrics record".
std::string foreign_metrics_content(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "it cannot be read";
  std::int64_t number = 0, records = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    const bool complete = !in.eof();  // getline stopped at a newline
    if (is_metrics_record(line)) {
      ++records;
    } else if (complete || line.empty() || line.front() != '{') {
      return "line " + std::to_string(number) + " is not a metrics record";
    }
  }
  return records > 0 ? "" : "it holds no metrics record";
}

}  // namespace

void refuse_foreign_log_file(const TrainConfig& config) {
  // --eval-only only appends: nothing of the file can be lost.
  if (config.eval_only || !non_empty_file(config.log_file)) return;
  const std::string foreign = foreign_metrics_content(config.log_file);
  ENGINE_CHECK(foreign.empty(), "--log-file '", config.log_file, "' is not this engine's metrics (", foreign,
               "): it would be ", config.overwrite ? "deleted by --overwrite" : "rewritten or appended to",
               "; name a new file for the metrics");
}

RunPaths run_paths(const TrainConfig& config) {
  if (config.run_dir.empty()) return {};
  const fs::path dir(config.run_dir);
  return {(dir / "config.json").string(), (dir / "train.log").string(), (dir / "summary.json").string()};
}

std::vector<std::string> previous_run_outputs(const TrainConfig& config) {
  std::vector<std::string> found;
  const std::vector<fs::path> checkpoints = checkpoint_entries(config.checkpoint_dir);
  if (!checkpoints.empty()) {
    std::string names;
    for (std::size_t i = 0; i < checkpoints.size() && i < 3; ++i)
      names += (i ? ", " : "") + checkpoints[i].filename().string();
    if (checkpoints.size() > 3) names += ", ... (" + std::to_string(checkpoints.size()) + " entries)";
    found.push_back("checkpoints " + names + " in '" + config.checkpoint_dir + "'");
  }
  if (non_empty_file(config.log_file)) found.push_back("metrics in '" + config.log_file + "'");
  const RunPaths paths = run_paths(config);
  if (non_empty_file(paths.summary)) found.push_back("a run's summary '" + paths.summary + "'");
  return found;
}

void refuse_to_mix_runs(const TrainConfig& config) {
  if (config.eval_only || config.overwrite || !config.resume.empty()) return;
  const std::vector<std::string> found = previous_run_outputs(config);
  if (found.empty()) return;
  std::string what;
  for (const std::string& f : found) what += (what.empty() ? "" : "; ") + f;
  ENGINE_FAIL("another run's outputs are here (", what, "): give --resume auto to continue that run, --overwrite ",
              "to delete them and start afresh, or another ", config.run_dir.empty() ? "--checkpoint-dir / --log-file"
                                                                                      : "--run-dir");
}

void remove_previous_run(const TrainConfig& config) {
  std::error_code error;
  for (const fs::path& entry : checkpoint_entries(config.checkpoint_dir)) {
    fs::remove_all(entry, error);
    ENGINE_CHECK(!error, "--overwrite: cannot delete '", entry.string(), "': ", error.message());
  }
  // Checked again here, just before deleting (the start-up check may be a
  // while ago): never delete a file the engine cannot show it wrote.
  refuse_foreign_log_file(config);
  const RunPaths paths = run_paths(config);
  for (const std::string& file : {config.log_file, paths.text_log, paths.summary, paths.config}) {
    // Files only: never a device such as --log-file /dev/stdout.
    if (file.empty() || !fs::is_regular_file(file, error)) continue;
    fs::remove(file, error);
    ENGINE_CHECK(!error, "--overwrite: cannot delete '", file, "': ", error.message());
  }
}

void write_file_atomically(const std::string& path, const std::string& text) {
  AtomicFile file(path);
  file.write(text);
  file.commit();
}

}  // namespace launch
