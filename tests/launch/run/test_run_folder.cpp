// Run folders, the saved configuration, the rule that keeps runs apart, the
// end-of-run summary, validation over a fixed number of tokens and
// --eval-only (launch/run/run_folder.h, launch/run/trainer.h).
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <cstdlib>

#include "launch/run/input_checks.h"
#include "launch/run/run_folder.h"
#include "launch/run/train_config.h"
#include "launch/run/trainer.h"
#include "tests/launch/training_fixture.h"

using namespace test_support;
namespace fs = std::filesystem;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> records;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) records.push_back(nlohmann::json::parse(line));
  return records;
}

// What `train --config FILE` would run: the file parsed by the program's
// own options, then resolved.
launch::TrainConfig parse_config_file(const std::string& file, int world = 1) {
  launch::TrainConfig config;
  CLI::App app;
  launch::add_train_options(app, config);
  const std::string flag = "--config=" + file;
  const char* argv[] = {"train", flag.c_str()};
  app.parse(2, argv);
  config.resolve(test_cuda_devices(), world);
  return config;
}

launch::TrainConfig folder_config(const TempDir& dir, std::int64_t steps) {
  launch::TrainConfig config = tiny_config(dir, steps);
  config.run_dir = dir / "run";
  config.val_interval = 2;
  config.val_tokens = 16 * 32;
  return config;
}

}  // namespace

TEST(RunFolder, HoldsConfigMetricsTextLogSummaryAndCheckpoints) {
  TempDir dir("run_folder");
  write_corpus(dir);
  std::string printed;
  const launch::RunSummary summary = train_one_process(folder_config(dir, 4), &printed);

  const fs::path run = dir / "run";
  for (const char* name : {"config.json", "metrics.jsonl", "train.log", "summary.json", "checkpoints/latest"})
    EXPECT_TRUE(fs::exists(run / name)) << name;
  // The copy holds exactly what rank 0 printed.
  EXPECT_EQ(read_text((run / "train.log").string()), printed);
  EXPECT_NE(printed.find("outputs    config " + (run / "config.json").string()), std::string::npos) << printed;

  const nlohmann::json record = nlohmann::json::parse(read_text((run / "summary.json").string()));
  EXPECT_EQ(record["status"], "done");
  EXPECT_EQ(record["last_step"], 4);
  EXPECT_EQ(record["tokens"], 4 * 4 * 32 * 2);
  EXPECT_EQ(record["final_val_loss"].get<double>(), summary.final_val_loss);
  EXPECT_LE(record["best_val_loss"].get<double>(), record["final_val_loss"].get<double>());
  EXPECT_TRUE(record["best_val_step"] == 2 || record["best_val_step"] == 4) << record.dump();
  EXPECT_GT(record["mean_mfu"].get<double>(), 0.0);
  EXPECT_EQ(record["outputs"]["checkpoint"], (run / "checkpoints" / "step_00000004").string());
  // The same record ends the JSONL, after one record per step.
  const std::vector<nlohmann::json> records = read_jsonl((run / "metrics.jsonl").string());
  ASSERT_FALSE(records.empty());
  EXPECT_EQ(records.back()["event"], "summary");
  int steps = 0;
  for (const nlohmann::json& r : records) steps += r.contains("loss") ? 1 : 0;
  EXPECT_EQ(steps, 4);
  EXPECT_NE(printed.find("summary    done after step 4 of 4"), std::string::npos) << printed;
  EXPECT_NE(printed.find("val loss best"), std::string::npos) << printed;
}

TEST(RunFolder, SavedConfigurationReadsBackAsTheSameRun) {
  TempDir dir("run_config");
  write_corpus(dir);
  launch::TrainConfig config = folder_config(dir, 3);
  // Values CLI11 alone would round or mistype: many digits, a false
  // boolean, text that looks like a number, a resolved 0 (dp, seq-len).
  config.lr = 1.2345678901234e-3;
  config.adam_eps = 3.3e-9;
  config.shuffle = false;
  config.sample_prompt = "1";
  config.seq_len = 0;
  config.batch_tokens = 0;
  config.tp = 2;
  config.sequence_parallel = true;
  config.resolve(test_cuda_devices(), 4);
  const std::string saved = launch::resolved_config_json(config);
  const std::string file = dir / "config.json";
  std::ofstream(file) << saved;

  const launch::TrainConfig again = parse_config_file(file, 4);
  EXPECT_EQ(launch::resolved_config_json(again), saved);
  launch::TrainConfig empty_prompt = config;  // an empty text is written, not left to the default ("\n")
  empty_prompt.sample_prompt = "";
  std::ofstream(file) << launch::resolved_config_json(empty_prompt);
  EXPECT_EQ(parse_config_file(file, 4).sample_prompt, "");
  launch::TrainConfig twice = config;  // resolve() may run on a resolved configuration
  twice.resolve(test_cuda_devices(), 4);
  EXPECT_EQ(launch::resolved_config_json(twice), saved);
  EXPECT_EQ(again.lr, config.lr);
  EXPECT_EQ(again.adam_eps, config.adam_eps);
  EXPECT_FALSE(again.shuffle);
  EXPECT_TRUE(again.sequence_parallel);
  EXPECT_EQ(again.sample_prompt, "1");
  EXPECT_EQ(again.dp, 2);
  EXPECT_EQ(again.seq_len, 64);
  // Paths that follow from --run-dir are not pinned to this folder.
  const nlohmann::json json = nlohmann::json::parse(saved);
  EXPECT_FALSE(json.contains("checkpoint-dir"));
  EXPECT_FALSE(json.contains("log-file"));
  EXPECT_FALSE(json.contains("resume"));
  EXPECT_EQ(json["run-dir"], dir / "run");
}

TEST(RunFolder, ANewRunIsRefusedWhereAnotherRunLeftOutputs) {
  TempDir dir("run_refuse");
  write_corpus(dir);
  train_one_process(folder_config(dir, 4));

  launch::TrainConfig second = folder_config(dir, 2);
  second.resolve(test_cuda_devices(), 1);
  try {
    launch::check_inputs(second);
    FAIL() << "a second run into the same folder was not refused";
  } catch (const std::exception& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("step_00000004"), std::string::npos) << message;
    EXPECT_NE(message.find("metrics.jsonl"), std::string::npos) << message;
    EXPECT_NE(message.find("--resume auto"), std::string::npos) << message;
    EXPECT_NE(message.find("--overwrite"), std::string::npos) << message;
  }

  // --resume continues it; --overwrite starts afresh with nothing of the old run left.
  launch::TrainConfig resumed = folder_config(dir, 6);
  resumed.resume = "auto";
  resumed.resolve(test_cuda_devices(), 1);
  EXPECT_NO_THROW(launch::check_inputs(resumed));

  launch::TrainConfig fresh = folder_config(dir, 2);
  fresh.overwrite = true;
  fresh.resolve(test_cuda_devices(), 1);
  EXPECT_NO_THROW(launch::check_inputs(fresh));
  const launch::RunSummary summary = train_one_process(fresh);
  EXPECT_EQ(summary.first_step, 0);
  EXPECT_FALSE(fs::exists(dir / "run/checkpoints/step_00000004"));
  EXPECT_TRUE(fs::exists(dir / "run/checkpoints/step_00000002"));
  int step_records = 0;
  for (const nlohmann::json& r : read_jsonl(dir / "run/metrics.jsonl")) step_records += r.contains("loss") ? 1 : 0;
  EXPECT_EQ(step_records, 2) << "the old run's metrics were not removed";

  // Without a run folder the same rule holds for a metrics file alone.
  launch::TrainConfig plain = tiny_config(dir, 2);
  plain.log_file = dir / "run/metrics.jsonl";
  plain.resolve(test_cuda_devices(), 1);
  EXPECT_THROW(launch::check_inputs(plain), std::exception);
}

TEST(RunFolder, RestartingAFinishedRunKeepsItsSummary) {
  TempDir dir("run_finished");
  write_corpus(dir);
  train_one_process(folder_config(dir, 2));
  const std::string summary = read_text(dir / "run/summary.json");
  const std::string metrics = read_text(dir / "run/metrics.jsonl");
  launch::TrainConfig again = folder_config(dir, 2);
  again.resume = "auto";  // what launch/train.sh and launch/supervise pass
  std::string printed;
  EXPECT_TRUE(train_one_process(again, &printed).losses.empty());
  EXPECT_NE(printed.find("it had already finished at step 2"), std::string::npos) << printed;
  EXPECT_EQ(read_text(dir / "run/summary.json"), summary);
  // The JSONL gains the resume marker, and no second summary.
  int summaries = 0;
  for (const nlohmann::json& r : read_jsonl(dir / "run/metrics.jsonl")) summaries += r.value("event", "") == "summary";
  EXPECT_EQ(summaries, 1) << metrics;
}

TEST(RunFolder, OverwriteIsRefusedInARestartedJob) {
  TempDir dir("run_overwrite_restart");
  write_corpus(dir);
  launch::TrainConfig config = folder_config(dir, 2);
  config.overwrite = true;
  config.resolve(test_cuda_devices(), 1);
  ::setenv("ENGINE_RESTART_COUNT", "1", 1);
  EXPECT_THROW(launch::check_inputs(config), std::exception);
  ::unsetenv("ENGINE_RESTART_COUNT");
  EXPECT_NO_THROW(launch::check_inputs(config));
}

TEST(RunFolder, EveryOutputPathIsCreatedOrRefusedBeforeAnyStep) {
  TempDir dir("run_paths");
  write_corpus(dir);
  launch::TrainConfig config = tiny_config(dir, 2);
  config.save_model = dir / "models/deeper/final.bin";
  config.run_dir = dir / "runs/mine";
  config.resolve(test_cuda_devices(), 1);
  launch::check_inputs(config);
  EXPECT_TRUE(fs::is_directory(dir / "models/deeper"));
  EXPECT_TRUE(fs::is_directory(dir / "runs/mine/checkpoints"));

  std::ofstream(dir / "a_file") << "not a folder";
  launch::TrainConfig bad = tiny_config(dir, 2);
  bad.save_model = dir / "a_file/final.bin";
  bad.resolve(test_cuda_devices(), 1);
  try {
    launch::check_inputs(bad);
    FAIL() << "a model file under a regular file was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("--save-model"), std::string::npos) << e.what();
  }
}

TEST(Validation, ScoresTheSameTokensForEveryMicroBatch) {
  TempDir dir("val_tokens");
  write_corpus(dir);
  launch::TrainConfig config = tiny_config(dir, 1);
  config.save_model = dir / "model.bin";
  train_one_process(config);

  // 37 sequences: no micro-batch below divides them.
  double reference = -1;
  for (std::int64_t micro_batch : {1, 3, 4, 8}) {
    launch::TrainConfig eval = tiny_config(dir, 1);
    eval.eval_only = true;
    eval.init_from = dir / "model.bin";
    eval.train_data.clear();
    eval.micro_batch = micro_batch;
    eval.seq_len = 16;
    eval.batch_tokens = 0;
    eval.val_tokens = 37 * 16 + 5;  // whole sequences only: 37
    std::string printed;
    const double loss = train_one_process(eval, &printed).final_val_loss;
    EXPECT_NE(printed.find("over 592 tokens (37 sequences of 16)"), std::string::npos) << printed;
    if (reference < 0) reference = loss;
    EXPECT_NEAR(loss, reference, 1e-6 * reference) << "micro-batch " << micro_batch;
  }
  // More than the set holds: all of it, and said so.
  launch::TrainConfig all = tiny_config(dir, 1);
  all.eval_only = true;
  all.init_from = dir / "model.bin";
  all.val_tokens = 1 << 30;
  std::string printed;
  train_one_process(all, &printed);
  EXPECT_NE(printed.find("all it holds"), std::string::npos) << printed;
}

TEST(EvalOnly, ScoresAModelFileOrACheckpointAndWritesNothing) {
  TempDir dir("eval_only");
  write_corpus(dir);
  launch::TrainConfig config = folder_config(dir, 3);
  config.save_model = dir / "model.bin";
  const launch::RunSummary trained = train_one_process(config);
  const std::string metrics_before = read_text(dir / "run/metrics.jsonl");
  const std::string log_before = read_text(dir / "run/train.log");

  launch::TrainConfig from_file = folder_config(dir, 3);
  from_file.eval_only = true;
  from_file.run_dir.clear();
  from_file.init_from = dir / "model.bin";
  std::string scored;
  EXPECT_NEAR(train_one_process(from_file, &scored).final_val_loss, trained.final_val_loss,
              1e-6 * trained.final_val_loss);
  // Only what an evaluation uses is described (issue 36): no "train ," with an empty path, no optimizer, steps,
  // recomputation or outputs.
  EXPECT_NE(scored.find("data       val " + from_file.val_data + "\n"), std::string::npos) << scored;
  EXPECT_NE(scored.find("scoring    the model file " + from_file.init_from), std::string::npos) << scored;
  for (const char* training_only :
       {"data       train", "train ,", "\noptimizer  ", "\nrecompute  ", " steps\n", "\noutputs    ", "\ncheckpoint ",
        "\nflops      "})
    EXPECT_EQ(scored.find(training_only), std::string::npos) << "'" << training_only << "' in\n" << scored;

  launch::TrainConfig from_checkpoint = folder_config(dir, 3);
  from_checkpoint.eval_only = true;
  from_checkpoint.resume = "latest";
  from_checkpoint.steps = 1;  // a checkpoint past --steps is still scored
  std::string printed;
  EXPECT_EQ(train_one_process(from_checkpoint, &printed).final_val_loss, trained.final_val_loss);
  EXPECT_NE(printed.find("the checkpoint of step 3"), std::string::npos) << printed;
  EXPECT_NE(printed.find("scoring    the latest checkpoint in " + from_checkpoint.run_dir + "/checkpoints\n"),
            std::string::npos)
      << printed;
  EXPECT_EQ(printed.find("data       train"), std::string::npos) << printed;
  EXPECT_EQ(read_text(dir / "run/metrics.jsonl"), metrics_before);
  EXPECT_EQ(read_text(dir / "run/train.log"), log_before);

  launch::TrainConfig no_model = folder_config(dir, 3);
  no_model.eval_only = true;
  EXPECT_THROW(no_model.resolve(test_cuda_devices(), 1), std::exception);
}

TEST(LogInterval, PrintsEveryKthStepAndTheJsonlKeepsAll) {
  TempDir dir("log_interval");
  write_corpus(dir);
  launch::TrainConfig config = tiny_config(dir, 7);
  config.val_data.clear();
  config.log_interval = 3;
  config.log_file = dir / "metrics.jsonl";
  std::string printed;
  train_one_process(config, &printed);
  for (int step = 1; step <= 7; ++step) {
    const bool shown = step == 1 || step % 3 == 0 || step == 7;
    EXPECT_EQ(printed.find("step " + std::to_string(step) + "/7 |") != std::string::npos, shown) << step;
  }
  int step_records = 0;
  for (const nlohmann::json& r : read_jsonl(config.log_file)) step_records += r.contains("loss") ? 1 : 0;
  EXPECT_EQ(step_records, 7);
}
