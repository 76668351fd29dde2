// The `train` program against hostile files and rare faults, as a child
// process (every wait bounded): a shard overwritten under the run, two jobs
// on one run folder, --overwrite beside a file that is not the engine's, a
// refused start that must not rewrite the run's config.json, sizes that
// overflow, a model that cannot fit in host memory.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/launch/process_harness.h"
#include "tests/launch/training_fixture.h"

using namespace test_support;

namespace {

constexpr int kExitUsage = 64;
constexpr int kExitBadInput = 65;
constexpr int kExitStopped = 75;

// gpt-micro on the corpus, quick steps.
std::vector<std::string> train_argv(const std::string& args) {
  std::vector<std::string> argv = {TRAIN_BIN};
  std::istringstream words(args);
  for (std::string w; words >> w;) argv.push_back(w);
  return argv;
}

std::int64_t jsonl_lines(const std::string& path) {
  std::ifstream in(path);
  std::int64_t n = 0;
  for (std::string line; std::getline(in, line);) n += line.find("\"step\"") != std::string::npos;
  return n;
}

int count_lines(const std::string& text) {
  int n = 0;
  for (char c : text) n += c == '\n';
  return n;
}

class HostileRuns : public ::testing::Test {
 protected:
  void SetUp() override { write_corpus(dir_); }
  std::string base(std::int64_t steps) const {
    return "--model gpt-micro --micro-batch 2 --seq-len 16 --device cpu --peak-tflops 1 --steps " +
           std::to_string(steps) + " --train-data " + (dir_ / "train_*.bin");
  }
  std::string out(const std::string& tag) const { return dir_ / (tag + ".out"); }
  std::string err(const std::string& tag) const { return dir_ / (tag + ".err"); }
  // Runs train to its end (at most `seconds`) and returns its exit code.
  int run(const std::string& args, const std::string& tag, double seconds = 120) {
    Child job(train_argv(args), out(tag), err(tag));
    const int code = job.wait(seconds);
    EXPECT_NE(code, -1) << tag << " did not end within " << seconds << " s";
    return code;
  }
  TempDir dir_{"hostile_runs"};
};

// `cp other.bin train_000.bin` during the run truncates the shard in place:
// the run must stop with an error naming the shard and a checkpoint, not die
// of SIGBUS.
TEST_F(HostileRuns, ShardShrinkingDuringTheRunStopsWithACheckpoint) {
  const std::string args = base(1000000) + " --checkpoint-dir " + (dir_ / "ck") + " --log-file " + (dir_ / "m.jsonl");
  Child job(train_argv(args), out("shrink"), err("shrink"));
  ASSERT_TRUE(wait_until([&] { return jsonl_lines(dir_ / "m.jsonl") >= 3; }, 120)) << job.err();
  std::filesystem::resize_file(dir_ / "train_000.bin", 1024 + 64);
  const int code = job.wait(120);
  const std::string text = job.out() + job.err();
  EXPECT_EQ(code, kExitBadInput) << text;
  EXPECT_NE(text.find("train_000.bin"), std::string::npos) << text;
  EXPECT_NE(text.find("shrank"), std::string::npos) << text;
  EXPECT_NE(text.find("checkpoint"), std::string::npos) << text;
  bool saved = false;
  for (const auto& e : std::filesystem::directory_iterator(dir_ / "ck")) saved |= e.path().filename().string().rfind("step_", 0) == 0;
  EXPECT_TRUE(saved) << "no checkpoint was written";
}

// A micro-batch of a billion sequences overflows the activation sizes
// (undefined behaviour under UBSan, a wrapped size otherwise): refused at
// start-up in one line naming the value.
TEST_F(HostileRuns, OverflowingMicroBatchIsRefused) {
  // GPT-2 124M's attention scores alone: 1e9 x 12 heads x 1024 x 1024 x 8 bytes.
  const std::string args = "--model gpt2-124m --micro-batch 1000000000 --seq-len 1024 --device cpu --peak-tflops 1 "
                           "--steps 1 --train-data " + (dir_ / "train_*.bin");
  EXPECT_EQ(run(args, "overflow", 60), kExitUsage);
  const std::string text = read_text(out("overflow")) + read_text(err("overflow"));
  EXPECT_NE(text.find("--micro-batch 1000000000 "), std::string::npos) << text;
  EXPECT_NE(text.find("overflows"), std::string::npos) << text;
  EXPECT_EQ(count_lines(text), 1) << text;
}

// A mistyped --model with --resume auto is refused (the checkpoint holds
// another model); the refused start must not rewrite config.json, so the
// run's saved configuration still describes it and the right command (or
// --config DIR/config.json) continues it.
TEST_F(HostileRuns, RefusedResumeLeavesConfigJsonAlone) {
  const std::string folder = dir_ / "run";
  ASSERT_EQ(run(base(2) + " --run-dir " + folder, "first"), 0) << read_text(err("first"));
  const std::string saved = read_text(folder + "/config.json");
  ASSERT_FALSE(saved.empty());
  const std::string wrong = base(4) + " --n-layer 3 --run-dir " + folder + " --resume auto";
  EXPECT_NE(run(wrong, "wrong"), 0) << read_text(out("wrong"));
  EXPECT_NE(read_text(err("wrong")).find("different run"), std::string::npos) << read_text(err("wrong"));
  EXPECT_EQ(read_text(folder + "/config.json"), saved) << "the refused start rewrote config.json";
  // The saved configuration continues the run as it is (longer: with a new
  // learning-rate schedule, which --reset-schedule accepts).
  const std::string right = "--config " + folder + "/config.json --steps 4 --reset-schedule --resume auto";
  EXPECT_EQ(run(right, "right"), 0) << read_text(err("right"));
  EXPECT_NE(read_text(out("right")).find("resumed    from"), std::string::npos) << read_text(out("right"));
}

// --log-file naming the user's own file: --overwrite deletes only metrics
// this engine can be shown to have written, and --resume (which rewrites
// the file without the steps it will take again) leaves a foreign file
// alone too. Each start is refused in one line naming the file, which is
// kept byte for byte.
TEST_F(HostileRuns, OverwriteKeepsALogFileThatIsNotMetrics) {
  const std::string notes = dir_ / "notes.txt";
  const std::string text = "my notes\n{\"not\": \"a record\"}\nline three without a newline";
  std::ofstream(notes, std::ios::binary) << text;
  for (const char* how : {"--overwrite", "--resume auto"}) {
    const std::string tag = how[2] == 'o' ? "overwrite" : "resume";
    const std::string args = base(2) + " --log-file " + notes + " --checkpoint-dir " + (dir_ / "ck") + " " + how;
    EXPECT_EQ(run(args, tag), kExitBadInput) << how << ": " << read_text(out(tag));
    const std::string said = read_text(out(tag)) + read_text(err(tag));
    EXPECT_NE(said.find("--log-file '" + notes + "'"), std::string::npos) << said;
    EXPECT_EQ(count_lines(said), 1) << said;
    EXPECT_EQ(read_text(notes), text) << how << " changed the file";
  }
  // The engine's own metrics are still deleted by --overwrite.
  const std::string metrics = dir_ / "m.jsonl";
  ASSERT_EQ(run(base(2) + " --log-file " + metrics, "metrics"), 0) << read_text(err("metrics"));
  ASSERT_EQ(run(base(1) + " --log-file " + metrics + " --overwrite", "again"), 0) << read_text(err("again"));
  EXPECT_EQ(jsonl_lines(metrics), 1) << read_text(metrics);
}

// Two identical jobs on one run folder would both write its files: the
// second is refused in one line naming the first's pid, before it writes
// anything, and the first goes on undisturbed. A lock file no process holds
// (its job ended, or was killed) does not block the next run.
TEST_F(HostileRuns, SecondJobOnOneRunFolderIsRefused) {
  const std::string folder = dir_ / "run";
  const std::string args = base(1000000) + " --run-dir " + folder;
  Child first(train_argv(args), out("first"), err("first"));
  ASSERT_TRUE(wait_until([&] { return jsonl_lines(folder + "/metrics.jsonl") >= 2; }, 120)) << first.err();
  const std::string config = read_text(folder + "/config.json");
  EXPECT_EQ(run(args + " --resume auto", "second", 60), kExitBadInput);
  const std::string said = read_text(out("second")) + read_text(err("second"));
  EXPECT_NE(said.find("pid " + std::to_string(first.pid())), std::string::npos) << said;
  EXPECT_NE(said.find(folder), std::string::npos) << said;
  EXPECT_EQ(count_lines(said), 1) << said;
  EXPECT_EQ(read_text(folder + "/config.json"), config);
  // The first job still runs and ends as a stopped run ends, with its checkpoint.
  EXPECT_EQ(first.wait(0), -1) << "the first job ended: " << first.err();
  first.signal(SIGTERM);
  EXPECT_EQ(first.wait(120), kExitStopped) << first.err();
  EXPECT_NE(read_text(folder + "/metrics.jsonl").find("\"event\":\"stopped\""), std::string::npos);
  // Its lock file stays behind, held by no one: the next run goes ahead.
  EXPECT_EQ(run(base(2) + " --run-dir " + folder + " --overwrite", "after"), 0) << read_text(err("after"));
  // A lock file written by hand (a copied folder, a pid long gone) neither.
  const std::string copied = dir_ / "copied";
  std::filesystem::create_directories(copied);
  std::ofstream(copied + "/run.lock") << "host elsewhere pid 1\n";
  EXPECT_EQ(run(base(2) + " --run-dir " + copied, "copied"), 0) << read_text(err("copied"));
}

// Without a run folder, two jobs saving into one --checkpoint-dir would
// overwrite each other's checkpoints: the folder is locked the same way.
TEST_F(HostileRuns, SecondJobOnOneCheckpointFolderIsRefused) {
  const std::string folder = dir_ / "ck_shared";
  const std::string args = base(1000000) + " --checkpoint-dir " + folder + " --checkpoint-interval 1000 --log-file " +
                           (dir_ / "first.jsonl");
  Child first(train_argv(args), out("ck_first"), err("ck_first"));
  ASSERT_TRUE(wait_until([&] { return jsonl_lines(dir_ / "first.jsonl") >= 2; }, 120)) << first.err();
  EXPECT_EQ(run(base(2) + " --checkpoint-dir " + folder + " --resume auto", "ck_second", 60), kExitBadInput);
  const std::string said = read_text(out("ck_second")) + read_text(err("ck_second"));
  EXPECT_NE(said.find("--checkpoint-dir '" + folder + "' is in use by another job"), std::string::npos) << said;
  EXPECT_NE(said.find("pid " + std::to_string(first.pid())), std::string::npos) << said;
  EXPECT_EQ(count_lines(said), 1) << said;
  first.signal(SIGTERM);
  EXPECT_EQ(first.wait(120), kExitStopped) << first.err();
  // Held by no one now: the next job is not refused for the lock (it resumes,
  // or is refused for its own reasons: here --steps 2 is behind the stop's step).
  run(base(2) + " --checkpoint-dir " + folder + " --resume auto", "ck_after");
  const std::string after = read_text(out("ck_after")) + read_text(err("ck_after"));
  EXPECT_EQ(after.find("in use by another job"), std::string::npos) << after;
  EXPECT_NE(after.find("past --steps 2"), std::string::npos) << after;
}

// Without a run folder, two jobs logging into one --log-file would interleave
// their steps in it: the file is locked (FILE.lock beside it) the same way.
TEST_F(HostileRuns, SecondJobOnOneLogFileIsRefused) {
  const std::string log = dir_ / "shared.jsonl";
  Child first(train_argv(base(1000000) + " --log-file " + log), out("log_first"), err("log_first"));
  ASSERT_TRUE(wait_until([&] { return jsonl_lines(log) >= 2; }, 120)) << first.err();
  const std::int64_t lines_before = jsonl_lines(log);
  EXPECT_EQ(run(base(2) + " --log-file " + log + " --overwrite", "log_second", 60), kExitBadInput);
  const std::string said = read_text(out("log_second")) + read_text(err("log_second"));
  EXPECT_NE(said.find("--log-file '" + log + "' is in use by another job"), std::string::npos) << said;
  EXPECT_NE(said.find("pid " + std::to_string(first.pid())), std::string::npos) << said;
  EXPECT_EQ(count_lines(said), 1) << said;
  // --overwrite was refused before it could truncate the first job's file.
  EXPECT_GE(jsonl_lines(log), lines_before);
  first.signal(SIGTERM);
  EXPECT_EQ(first.wait(120), kExitStopped) << first.err();
}

// A model that cannot fit in host memory is refused on the CPU as on a GPU:
// before anything is allocated, within seconds, in one line with the plan's
// bytes. (Under `ulimit -v` as a safety net: an engine without the check
// must not take the test machine's memory. Not in an AddressSanitizer build,
// whose runtime reserves terabytes of address space for its shadow memory
// before main and fails under the limit.)
#if defined(__SANITIZE_ADDRESS__)
const std::string kAddressSpaceLimit = "exec ";
#else
const std::string kAddressSpaceLimit = "ulimit -v 16000000 && exec ";
#endif
TEST_F(HostileRuns, ModelTooBigForHostMemoryIsRefused) {
  const std::string data = dir_ / "train_*.bin";
  const std::pair<const char*, const char*> models[] = {
      {"wide", "--n-embd 262144"},  // 12 x 2^36 parameters: about 13 TB with gradients and AdamW
      {"deep", "--n-layer 20000 --n-embd 4096"},   // 4 x 10^12 parameters in 240,000 tensors
  };
  for (const auto& [tag, shape] : models) {
    const std::string train = std::string(TRAIN_BIN) + " --model gpt-micro " + shape +
                              " --micro-batch 1 --seq-len 16 --device cpu --peak-tflops 1 --steps 1 --train-data " + data;
    const auto t0 = std::chrono::steady_clock::now();
    Child job({"sh", "-c", kAddressSpaceLimit + train}, out(tag), err(tag));
    const int code = job.wait(60);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string said = job.out() + job.err();
    const std::string error = said.substr(std::min(said.size(), said.rfind("error: ")));
    EXPECT_EQ(code, kExitBadInput) << tag << ": " << said;
    EXPECT_LT(seconds, 20) << tag;
    EXPECT_NE(error.find("needs "), std::string::npos) << error;
    EXPECT_NE(error.find(" bytes)"), std::string::npos) << error;
    EXPECT_NE(error.find("host memory"), std::string::npos) << error;
    EXPECT_EQ(count_lines(error), 1) << error;
  }
}

}  // namespace
