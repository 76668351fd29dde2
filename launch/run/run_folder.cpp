#include "launch/run/run_folder.h"

#include <algorithm>
#include <filesystem>
#include <regex>
#include <sstream>

#include "engine/check.h"
#include "launch/checkpoint/checkpoint_files.h"
#include "launch/files/atomic_file.h"

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

}  // namespace

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
