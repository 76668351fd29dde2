// End-to-end training on the CPU: learning, determinism and exact resume.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <sstream>

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
