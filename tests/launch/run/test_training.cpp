// End-to-end training on the CPU: learning, determinism and exact resume.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "launch/checkpoint/checkpoint_files.h"
#include "launch/resilience/exit_codes.h"
#include "launch/resilience/job_error.h"
#include "launch/run/trainer.h"
#include "tests/launch/training_fixture.h"

using namespace test_support;

namespace {

launch::RunSummary train(const launch::TrainConfig& config, std::string* log = nullptr) {
  return train_one_process(config, log);
}

// Entropy (nats) of the byte distribution: the loss of the best model that
// ignores context.
double unigram_entropy(const std::vector<std::uint16_t>& tokens) {
  std::map<std::uint16_t, double> counts;
  for (auto t : tokens) counts[t] += 1;
  double h = 0;
  for (const auto& [token, count] : counts) {
    const double p = count / static_cast<double>(tokens.size());
    h -= p * std::log(p);
  }
  return h;
}

// The learning rate of each step of a JSONL metrics file (the last record of
// a step wins).
std::map<std::int64_t, double> lr_by_step(const std::string& path) {
  std::map<std::int64_t, double> lrs;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json r = nlohmann::json::parse(line, nullptr, false);
    if (r.is_object() && r.contains("step") && r.contains("lr")) lrs[r["step"].get<std::int64_t>()] = r["lr"].get<double>();
  }
  return lrs;
}

}  // namespace

TEST(Training, LossFallsWellBelowUnigramEntropyDeterministically) {
  TempDir dir("train_learns");
  write_corpus(dir);
  const launch::TrainConfig config = tiny_config(dir, 600);
  std::string log;
  const launch::RunSummary a = train(config, &log);
  const launch::RunSummary b = train(config);
  ASSERT_EQ(a.losses.size(), 600u);
  EXPECT_EQ(a.losses, b.losses) << "same seed and data must give bit-identical losses";
  const double entropy = unigram_entropy(corpus_tokens(40));
  EXPECT_NEAR(a.losses.front(), std::log(256.0), 0.3) << "an untrained model is near uniform over 256 bytes";
  // The corpus repeats, so context makes the next byte nearly certain; half the
  // unigram entropy is a bar any working model clears by a wide margin.
  EXPECT_LT(a.losses.back(), 0.5 * entropy) << log;
  EXPECT_LT(a.final_val_loss, 0.5 * entropy);
  EXPECT_NE(log.find("MFU"), std::string::npos);
}

TEST(Training, ResumeContinuesBitForBit) {
  TempDir dir("train_resume");
  write_corpus(dir);
  launch::TrainConfig config = tiny_config(dir, 12);
  config.checkpoint_dir = dir / "ckpt";
  config.checkpoint_interval = 6;
  const launch::RunSummary uninterrupted = train(config);

  // A second run picks up from the step-6 checkpoint the first one left.
  launch::TrainConfig resumed_config = config;
  resumed_config.checkpoint_dir = dir / "ckpt2";
  resumed_config.resume = dir / "ckpt/step_00000006";
  const launch::RunSummary resumed = train(resumed_config);
  EXPECT_EQ(resumed.first_step, 6);
  ASSERT_EQ(resumed.losses.size(), 6u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(resumed.losses[i], uninterrupted.losses[6 + i]) << "step " << 7 + i;
}

TEST(Training, ResumeRefusesADifferentRun) {
  TempDir dir("train_resume_other");
  write_corpus(dir);
  launch::TrainConfig config = tiny_config(dir, 3);
  config.checkpoint_dir = dir / "ckpt";
  train(config);
  launch::TrainConfig other = tiny_config(dir, 6);
  other.checkpoint_dir = dir / "ckpt";
  other.resume = "latest";
  other.seq_len = 16;
  try {
    train(other);
    FAIL() << "expected an error";
  } catch (const engine::Error& e) {
    EXPECT_NE(std::string(e.what()).find("seq_len"), std::string::npos) << e.what();
  }
}

// A checkpoint records its learning-rate schedule: a resume under another
// --steps is refused naming both values (it would reshape the cosine), the
// same --steps continues it exactly, --reset-schedule follows the new one,
// and a checkpoint from before the schedule was recorded keeps today's
// behaviour (this run's schedule) with a warning (issue 36, item 5).
TEST(Training, ResumeUnderAnotherScheduleIsRefusedUnlessReset) {
  TempDir dir("train_resume_schedule");
  write_corpus(dir);
  launch::TrainConfig config = tiny_config(dir, 10);
  config.checkpoint_dir = dir / "ckpt";
  config.checkpoint_interval = 6;  // past the 5 warm-up steps
  config.log_file = dir / "whole.jsonl";
  train(config);
  const std::map<std::int64_t, double> whole = lr_by_step(dir / "whole.jsonl");
  ASSERT_EQ(whole.size(), 10u);
  const std::string checkpoint = dir / "ckpt/step_00000006";

  launch::TrainConfig longer = tiny_config(dir, 16);
  longer.resume = checkpoint;
  longer.checkpoint_dir = dir / "ckpt_longer";
  longer.log_file = dir / "longer.jsonl";
  try {
    train(longer);
    FAIL() << "a resume under another --steps must be refused";
  } catch (const launch::JobError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.exit_code(), launch::kExitUsage);
    EXPECT_NE(what.find("--steps 10 (checkpoint) vs 16 (this run)"), std::string::npos) << what;
    EXPECT_NE(what.find("--reset-schedule"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }

  // The same schedule: step 7's learning rate is the uninterrupted run's.
  launch::TrainConfig same = config;
  same.resume = checkpoint;
  same.checkpoint_dir = dir / "ckpt_same";
  same.log_file = dir / "same.jsonl";
  train(same);
  const std::map<std::int64_t, double> continued = lr_by_step(dir / "same.jsonl");
  for (std::int64_t step = 7; step <= 10; ++step) EXPECT_EQ(continued.at(step), whole.at(step)) << "step " << step;

  // --reset-schedule: this run's schedule from the checkpoint's step on, said once.
  launch::TrainConfig reset = longer;
  reset.reset_schedule = true;
  std::string log;
  train(reset, &log);
  launch::TrainConfig resolved = reset;
  resolved.resolve(0, 1);
  const std::map<std::int64_t, double> after_reset = lr_by_step(dir / "longer.jsonl");
  EXPECT_EQ(after_reset.at(7), resolved.lr_schedule.at(6));
  EXPECT_NE(after_reset.at(7), whole.at(7));
  EXPECT_NE(log.find("--reset-schedule: from step 6"), std::string::npos) << log;

  // A checkpoint without the record (written before it existed): this run's
  // schedule, as before, with one warning.
  const std::string state_path = checkpoint + "/" + launch::checkpoint_files::kStateFile;
  nlohmann::json state = nlohmann::json::parse(std::ifstream(state_path));
  ASSERT_TRUE(state.contains("lr_schedule"));
  state.erase("lr_schedule");
  state["checksum"] = launch::checkpoint_files::state_checksum(state);
  std::ofstream(state_path) << state.dump(1);
  launch::TrainConfig old = longer;
  old.checkpoint_dir = dir / "ckpt_old";
  old.log_file = dir / "old.jsonl";
  testing::internal::CaptureStderr();
  train(old);
  const std::string warnings = testing::internal::GetCapturedStderr();
  EXPECT_NE(warnings.find("does not record its learning-rate schedule"), std::string::npos) << warnings;
  EXPECT_EQ(lr_by_step(dir / "old.jsonl").at(7), resolved.lr_schedule.at(6));
}
