#include "launch/run/input_checks.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "engine/check.h"
#include "launch/checkpoint/checkpoint.h"
#include "launch/data/data_loader.h"
#include "launch/formats/llmc_model.h"
#include "launch/formats/model_files.h"
#include "launch/resilience/fault_injection.h"
#include "launch/run/run_folder.h"

namespace launch {

namespace {
// Creates `dir` if needed and writes, reads back and removes a small file in
// it, so an unwritable or missing folder stops the run before any step
// rather than at its first save.
void probe_writable_dir(const std::filesystem::path& dir, const char* flag) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  ENGINE_CHECK(!error, flag, " '", dir.string(), "': cannot create the folder: ", error.message());
  const std::filesystem::path probe = dir / (".write_probe_" + std::to_string(std::random_device{}()));
  {
    std::ofstream out(probe, std::ios::binary);
    out << "probe";
    out.close();
    ENGINE_CHECK(out.good(), flag, " '", dir.string(), "': cannot write in the folder (", probe.filename().string(),
                 "): ", std::strerror(errno));
  }
  std::filesystem::remove(probe, error);
}
}  // namespace

void check_resume_source(const TrainConfig& config) {
  if (config.resume.empty()) return;
  std::vector<std::string> notes;  // printed by the trainer, which looks again
  resume_candidates(config.resume, config.checkpoint_dir, notes);
}

void check_inputs(const TrainConfig& config) {
  const int T = static_cast<int>(config.seq_len), V = static_cast<int>(config.model.vocab_size);
  if (!config.train_data.empty()) DataLoader(config.train_data, T, V, config.shuffle, config.seed);
  // Validation data is small and read again and again: check every token now
  // rather than find a bad one after the first interval of training. (The
  // training shards are checked as each is first needed, see Trainer::run.)
  if (!config.val_data.empty()) DataLoader(config.val_data, T, V, false, config.seed).verify_all();
  // Every place the run will write, before any step: a missing folder is
  // created, an unwritable one refused (not found at the end, with the
  // model lost). --eval-only writes nothing but an explicit --log-file.
  auto probe_parent = [](const std::string& file, const char* flag) {
    const std::filesystem::path parent = std::filesystem::path(file).parent_path();
    probe_writable_dir(parent.empty() ? "." : parent, flag);
  };
  if (!config.log_file.empty()) probe_parent(config.log_file, "--log-file");
  if (!config.eval_only) {
    if (!config.run_dir.empty()) probe_writable_dir(config.run_dir, "--run-dir");
    if (!config.checkpoint_dir.empty()) probe_writable_dir(config.checkpoint_dir, "--checkpoint-dir");
    if (!config.save_model.empty()) probe_parent(config.save_model, "--save-model");
    if (!config.save_hf.empty()) probe_writable_dir(config.save_hf, "--save-hf");
  }
  if (!config.init_from.empty()) {
    if (is_hf_model_path(config.init_from)) {
      check_hf_model(config.init_from, config.model);
    } else {
      const model::GptConfig found = read_llmc_config(config.init_from);
      ENGINE_CHECK(found == config.model, "--init-from '", config.init_from, "' holds a model of another shape: ",
                   found.describe(), "; this run's model is ", config.model.describe());
    }
  }
  // Last: a bad input is named as such even where another run's outputs are.
  // A --log-file of the user's own is named as such before the rule on runs.
  refuse_foreign_log_file(config);
  refuse_to_mix_runs(config);
  // Under launch/supervise every restart repeats the command: --overwrite
  // would delete the progress of the attempt that just failed.
  ENGINE_CHECK(!config.overwrite || restart_count() == 0, "--overwrite in a restarted job (ENGINE_RESTART_COUNT ",
               restart_count(), ") would delete the run each restart; launch/supervise jobs continue with --resume auto");
}

}  // namespace launch
