// Non-finite steps are never applied or saved (issue: surviving failures):
// --on-nonfinite skip and stop, the consecutive-skip limit, checkpoints
// that refuse NaN, non-finite flag values refused at start-up, and
// --resume auto. A test-only switch (ENGINE_TEST_POISON_STEPS) makes chosen
// steps' gradients NaN, as an overflow would.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "launch/run/trainer.h"
#include "tests/launch/training_fixture.h"

using namespace test_support;

namespace {

struct Finished {
  launch::RunSummary summary;
  std::vector<float> params;
  std::int64_t optimizer_steps = 0;
};

// Trains with steps `poison` ("" = none) poisoned; rethrows the run's error.
Finished train(launch::TrainConfig config, const std::string& poison = "") {
  if (poison.empty())
    unsetenv("ENGINE_TEST_POISON_STEPS");
  else
    setenv("ENGINE_TEST_POISON_STEPS", poison.c_str(), 1);
  config.resolve(test_cuda_devices());
  std::ostringstream out;
  Finished f;
  try {
    launch::Trainer trainer(config, out, MPI_COMM_SELF);
    f.summary = trainer.run();
    f.params.resize(static_cast<std::size_t>(trainer.registry().total_numel()));
    trainer.download_master(f.params.data());
    f.optimizer_steps = trainer.optimizer().steps_taken();
  } catch (...) {
    unsetenv("ENGINE_TEST_POISON_STEPS");
    throw;
  }
  unsetenv("ENGINE_TEST_POISON_STEPS");
  return f;
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> records;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) records.push_back(nlohmann::json::parse(line));
  return records;
}

std::string latest_step_dir(const std::string& checkpoint_dir) {
  std::ifstream in(std::filesystem::path(checkpoint_dir) / "latest");
  std::string name;
  std::getline(in, name);
  return name;
}

// Every float of every rank_*.bin of a step directory is finite.
bool checkpoint_finite(const std::filesystem::path& step_dir) {
  for (const auto& entry : std::filesystem::directory_iterator(step_dir)) {
    if (entry.path().extension() != ".bin") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::size_t skip = entry.path().filename() == "model.bin" ? 256 * sizeof(int) : 0;  // llm.c header
    for (std::size_t at = skip; at + sizeof(float) <= bytes.size(); at += sizeof(float)) {
      float x;
      std::memcpy(&x, bytes.data() + at, sizeof x);
      if (!std::isfinite(x)) return false;
    }
  }
  return true;
}

}  // namespace

TEST(NonFinite, SkippedStepLeavesWeightsAndOptimizerUntouched) {
  TempDir dir("nonfinite_skip");
  write_corpus(dir);
  launch::TrainConfig config = tiny_config(dir, 2);
  const Finished one_step = train(tiny_config(dir, 1));
  config.on_nonfinite = "skip";
  config.log_file = dir / "metrics.jsonl";
  const Finished skipped = train(config, "2");
  EXPECT_EQ(skipped.params, one_step.params) << "step 2 was not applied, so the weights are those after step 1";
  EXPECT_EQ(skipped.optimizer_steps, 1);
  const std::vector<nlohmann::json> records = read_jsonl(config.log_file);
  ASSERT_EQ(records.size(), 4u);  // the start-up memory plan, two steps and the summary
  EXPECT_EQ(records[0]["event"], "memory");
  EXPECT_EQ(records[3]["event"], "summary");
  EXPECT_FALSE(records[1].contains("skipped"));
  EXPECT_TRUE(records[2].value("skipped", false)) << records[2].dump();
  EXPECT_TRUE(records[2]["grad_norm"].is_null()) << "a NaN norm is written as null";
}

TEST(NonFinite, SkipGoesOnAndCheckpointsStayFinite) {
  TempDir dir("nonfinite_skip_on");
  write_corpus(dir);
  launch::TrainConfig config = tiny_config(dir, 6);
  config.on_nonfinite = "skip";
  config.checkpoint_dir = dir / "ckpt";
  config.checkpoint_interval = 1;
  config.keep_checkpoints = 0;  // every step's checkpoint is inspected
  const Finished f = train(config, "3-4");
  ASSERT_EQ(f.summary.losses.size(), 6u);
  EXPECT_TRUE(std::isfinite(f.summary.losses.back()));
  EXPECT_EQ(f.optimizer_steps, 4);
  for (int step = 1; step <= 6; ++step) {
    char name[32];
    std::snprintf(name, sizeof name, "step_%08d", step);
    EXPECT_TRUE(checkpoint_finite(std::filesystem::path(config.checkpoint_dir) / name)) << name;
  }
  // The resumed run counts the updates actually applied, so it continues exactly.
  launch::TrainConfig resumed = config;
  resumed.steps = 6;
  resumed.resume = (std::filesystem::path(config.checkpoint_dir) / "step_00000005").string();
  resumed.checkpoint_dir = dir / "ckpt2";
  const Finished r = train(resumed);
  EXPECT_EQ(r.optimizer_steps, 4);
  ASSERT_EQ(r.summary.losses.size(), 1u);
  EXPECT_EQ(r.summary.losses[0], f.summary.losses[5]);
  EXPECT_EQ(r.params, f.params);
}

TEST(NonFinite, StopEndsTheRunWithoutSavingTheBadStep) {
  TempDir dir("nonfinite_stop");
  write_corpus(dir);
  launch::TrainConfig config = tiny_config(dir, 5);
  config.checkpoint_dir = dir / "ckpt";
  config.checkpoint_interval = 1;
  config.keep_checkpoints = 0;  // every step's checkpoint is inspected
  try {
    train(config, "3");
    FAIL() << "expected the run to stop";
  } catch (const engine::Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("step 3"), std::string::npos) << message;
    EXPECT_NE(message.find("--on-nonfinite"), std::string::npos) << message;
  }
  EXPECT_EQ(latest_step_dir(config.checkpoint_dir), "step_00000002");
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(config.checkpoint_dir) / "step_00000003"));
  EXPECT_TRUE(checkpoint_finite(std::filesystem::path(config.checkpoint_dir) / "step_00000002"));
}

TEST(NonFinite, TooManySkipsInARowStopAfterACheckpoint) {
  TempDir dir("nonfinite_limit");
  write_corpus(dir);
  launch::TrainConfig config = tiny_config(dir, 8);
  config.on_nonfinite = "skip";
  config.max_skipped_steps = 2;
  config.checkpoint_dir = dir / "ckpt";
  config.checkpoint_interval = 100;
  try {
    train(config, "2-8");
    FAIL() << "expected the run to stop";
  } catch (const engine::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--max-skipped-steps 2"), std::string::npos) << e.what();
  }
  // Steps 2 and 3 were skipped, step 4 was the third in a row: a checkpoint of
  // the (untouched) state, at step 4 with one update applied.
  const std::string latest = latest_step_dir(config.checkpoint_dir);
  EXPECT_EQ(latest, "step_00000004");
  const std::filesystem::path step_dir = std::filesystem::path(config.checkpoint_dir) / latest;
  EXPECT_TRUE(checkpoint_finite(step_dir));
  std::ifstream state(step_dir / "state.json");
  EXPECT_EQ(nlohmann::json::parse(state).value("optimizer_steps", -1), 1);
}

TEST(NonFinite, NonFiniteFlagValuesAreRefused) {
  TempDir dir("nonfinite_flags");
  write_corpus(dir);
  for (const char* which : {"lr", "grad_clip", "beta2", "weight_decay"}) {
    launch::TrainConfig config = tiny_config(dir, 2);
    const double bad = std::string(which) == "grad_clip" ? INFINITY : NAN;
    if (std::string(which) == "lr") config.lr = bad;
    if (std::string(which) == "grad_clip") config.grad_clip = bad;
    if (std::string(which) == "beta2") config.beta2 = bad;
    if (std::string(which) == "weight_decay") config.weight_decay = bad;
    try {
      config.resolve(test_cuda_devices());
      FAIL() << which << " accepted a non-finite value";
    } catch (const engine::Error& e) {
      EXPECT_NE(std::string(e.what()).find("is not a finite number"), std::string::npos) << e.what();
    }
  }
}

TEST(NonFinite, ResumeAutoStartsFreshThenContinues) {
  TempDir dir("resume_auto");
  write_corpus(dir);
  launch::TrainConfig config = tiny_config(dir, 4);
  config.schedule = "constant";  // the same learning rates whatever --steps says
  config.checkpoint_dir = dir / "ckpt";
  config.resume = "auto";
  const Finished fresh = train(config);  // nothing to resume: starts at step 0
  EXPECT_EQ(fresh.summary.first_step, 0);
  launch::TrainConfig longer = config;
  longer.steps = 6;
  const Finished continued = train(longer);
  EXPECT_EQ(continued.summary.first_step, 4);
  launch::TrainConfig uninterrupted = tiny_config(dir, 6);
  uninterrupted.schedule = "constant";
  const Finished whole = train(uninterrupted);
  EXPECT_EQ(continued.summary.losses.back(), whole.summary.losses.back());
  EXPECT_EQ(continued.params, whole.params);
}
