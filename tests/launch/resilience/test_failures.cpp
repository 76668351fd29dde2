// Failures, tried as an operator meets them, on the real `train` program under
// mpirun on the CPU: a rank killed at a random step under launch/supervise, a
// rank stopped with SIGSTOP, SIGTERM and SIGUSR1 mid-run, a second signal, a
// bad training or validation shard, a checkpoint folder that fills up.
// Every wait is bounded and every process started is killed at the end
// (process_harness.h). Exit codes: launch/resilience/exit_codes.h.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <sstream>
#include <thread>

#include "launch/resilience/exit_codes.h"
#include "tests/launch/process_harness.h"
#include "tests/launch/training_fixture.h"

using namespace test_support;
namespace fs = std::filesystem;

namespace {

// Every job this suite starts, under mpirun or alone, gets one OpenMP thread
// per process: with the suite's own OMP_NUM_THREADS=2 (tests/CMakeLists.txt)
// a job alone ran two threads, and beside a second copy of the suite (four
// threads on two cores) libgomp's spin-waiting made each step 14x slower
// (37 ms -> 520 ms), so a 1500-step run overran its 300 s wait.
const std::vector<std::string> kMpiEnv = {"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
                                          "OMPI_MCA_rmaps_base_oversubscribe=1", "OMP_NUM_THREADS=1"};

std::vector<std::string> split_words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

// mpirun -np N train <args> (np 0: train alone, no mpirun).
std::vector<std::string> train_command(int np, const std::string& args) {
  std::vector<std::string> argv;
  if (np > 0) argv = {MPIEXEC, "--oversubscribe", "-np", std::to_string(np)};
  argv.push_back(TRAIN_BIN);
  for (const std::string& w : split_words(args)) argv.push_back(w);
  return argv;
}

// The "step" of every JSONL step record (events and validation-only lines
// are left out); a line cut short is skipped.
std::vector<std::int64_t> logged_steps(const std::string& path) {
  std::vector<std::int64_t> steps;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("step_time_s")) steps.push_back(j["step"].get<std::int64_t>());
  }
  return steps;
}

std::int64_t last_logged_step(const std::string& path) {
  const std::vector<std::int64_t> steps = logged_steps(path);
  return steps.empty() ? 0 : steps.back();
}

int count_lines_with(const std::string& text, const std::string& needle) {
  std::istringstream in(text);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line.find(needle) != std::string::npos;
  return n;
}

// The bytes of every file of a checkpoint step directory, by name.
std::map<std::string, std::string> checkpoint_files(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().extension() == ".bin") files[entry.path().filename().string()] = read_text(entry.path().string());
  return files;
}

class Failures : public ::testing::Test {
 protected:
  void SetUp() override { write_corpus(dir_); }

  // gpt-micro on the corpus: 8 sequences of 32 tokens per step.
  std::string args(std::int64_t steps, const std::string& tag) const {
    return "--model gpt-micro --micro-batch 4 --seq-len 32 --batch-tokens 256 --device cpu --peak-tflops 1 "
           "--lr 3e-3 --steps " +
           std::to_string(steps) + " --train-data " + (dir_ / "train_*.bin") + " --checkpoint-dir " +
           (dir_ / ("ck_" + tag)) + " --log-file " + (dir_ / (tag + ".jsonl"));
  }
  std::string out(const std::string& tag) const { return dir_ / (tag + ".out"); }
  std::string err(const std::string& tag) const { return dir_ / (tag + ".err"); }

  // Kills world rank `rank` with SIGKILL at a random step under
  // launch/supervise, and checks the job ends exactly where an uninterrupted
  // run does.
  void kill_under_supervise(int np, const std::string& layout) {
    const std::int64_t steps = 16;
    std::mt19937 rng(std::random_device{}());
    const int victim = std::uniform_int_distribution<int>(0, np - 1)(rng);
    const int kill_step = std::uniform_int_distribution<int>(2, static_cast<int>(steps) - 1)(rng);
    SCOPED_TRACE("rank " + std::to_string(victim) + " killed at step " + std::to_string(kill_step));
    const std::string common = layout + " --checkpoint-interval 3 --collective-timeout 60";

    Child reference(train_command(np, args(steps, "ref") + " " + common), out("ref"), err("ref"), kMpiEnv);
    ASSERT_EQ(reference.wait(300), 0) << reference.err();

    std::vector<std::string> argv = {SUPERVISE, "--backoff", "0.2", "--report", dir_ / "report.json", "--"};
    for (const std::string& a : train_command(np, args(steps, "sup") + " " + common + " --resume auto")) argv.push_back(a);
    std::vector<std::string> env = kMpiEnv;
    env.push_back("ENGINE_TEST_KILL=" + std::to_string(victim) + "@" + std::to_string(kill_step));
    Child supervised(argv, out("sup"), err("sup"), env);
    ASSERT_EQ(supervised.wait(300), 0) << supervised.err();

    EXPECT_EQ(count_lines_with(supervised.err(), "restarting in"), 1) << supervised.err();
    EXPECT_NE(supervised.err().find("killed by SIGKILL"), std::string::npos) << supervised.err();
    EXPECT_NE(supervised.err().find("goodput"), std::string::npos) << supervised.err();
    // Every step once, in order, despite the attempt that died.
    std::vector<std::int64_t> expected(steps);
    std::iota(expected.begin(), expected.end(), 1);
    EXPECT_EQ(logged_steps(dir_ / "sup.jsonl"), expected);
    EXPECT_EQ(count_lines_with(read_text(dir_ / "sup.jsonl"), "\"event\":\"resume\""), 2);  // fresh, then resumed
    // Parameters and optimizer state bit-identical to the uninterrupted run.
    const std::string last = "step_" + std::string(8 - std::to_string(steps).size(), '0') + std::to_string(steps);
    const auto want = checkpoint_files(dir_ / ("ck_ref/" + last));
    const auto got = checkpoint_files(dir_ / ("ck_sup/" + last));
    ASSERT_FALSE(want.empty());
    EXPECT_EQ(got.size(), want.size());
    for (const auto& [name, bytes] : want) EXPECT_TRUE(got.count(name) && got.at(name) == bytes) << name;
  }

  // SIGSTOPs world rank `stopped_rank` of an np-rank job (`layout`) mid-run
  // under --collective-timeout 5: the live ranks sleep rather than spin while
  // they wait, and the job ends with the watchdog's exit code and exactly one
  // line that names the stopped rank, and only it, as missing.
  void expect_stopped_rank_named(int np, const std::string& layout, int stopped_rank, const std::string& tag) {
    SCOPED_TRACE(layout + ", rank " + std::to_string(stopped_rank) + " stopped (" + tag + ")");
    Child job(train_command(np, args(1000000, tag) + " " + layout + " --collective-timeout 5"), out(tag), err(tag),
              kMpiEnv);
    ASSERT_TRUE(wait_until([&] { return last_logged_step(dir_ / (tag + ".jsonl")) >= 3; }, 120)) << job.err();
    const pid_t stopped = find_rank(job.pid(), stopped_rank);
    const pid_t waiting = find_rank(job.pid(), 0);
    ASSERT_GT(stopped, 0);
    ASSERT_GT(waiting, 0);
    ::kill(stopped, SIGSTOP);
    const auto t0 = std::chrono::steady_clock::now();

    // Past the short spinning phase the waiting rank sleeps between polls.
    std::this_thread::sleep_for(std::chrono::seconds(1));
    auto cpu_seconds = [](pid_t pid) {
      const std::string text = read_text("/proc/" + std::to_string(pid) + "/stat");
      std::istringstream stat(text.substr(text.rfind(')') + 2));  // fields from 3 (state) on
      std::string field;
      double ticks = 0;
      for (int i = 3; i <= 15 && stat >> field; ++i)
        if (i == 14 || i == 15) ticks += std::stod(field);  // utime, stime
      return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
    };
    const double cpu0 = cpu_seconds(waiting);
    std::this_thread::sleep_for(std::chrono::seconds(2));
    const double cpu1 = cpu_seconds(waiting);
    EXPECT_LT(cpu1 - cpu0, 1.0) << "the waiting rank used " << cpu1 - cpu0 << " s of CPU in 2 s of waiting";

    const int code = job.wait(60);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ::kill(stopped, SIGKILL);  // in case the job did not end
    EXPECT_EQ(code, launch::kExitCollectiveTimeout) << job.err();
    EXPECT_LT(seconds, 5 + 30) << "the watchdog took " << seconds << " s";
    EXPECT_EQ(count_lines_with(job.err(), "collective timeout"), 1) << job.err();
    EXPECT_NE(job.err().find("rank " + std::to_string(stopped_rank) + " did not arrive"), std::string::npos)
        << job.err();
    EXPECT_NE(job.err().find("; rank 0 in "), std::string::npos) << job.err();  // where the live rank waited
  }

  TempDir dir_{"failures"};
};

TEST_F(Failures, KilledRankUnderSuperviseDataParallelEndsBitIdentical) { kill_under_supervise(2, "--dp 2"); }

TEST_F(Failures, KilledRankUnderSuperviseTp2Pp2EndsBitIdentical) { kill_under_supervise(4, "--tp 2 --pp 2"); }

TEST_F(Failures, StoppedRankEndsTheJobNamingIt) { expect_stopped_rank_named(2, "--dp 2", 1, "stall"); }

// tp2 x pp2, the last rank stopped: its tensor-parallel partner waits in an
// all-reduce with it and the first stage waits for the pipeline's gradients,
// so the live ranks wait in different operations, and the roll call must
// still name rank 3 alone (issue 37: it did not in every run; 8 runs of this
// test in a row named it alone, 16-18 s each).
TEST_F(Failures, StoppedRankOfATp2Pp2GridIsNamedAlone) {
  expect_stopped_rank_named(4, "--tp 2 --pp 2", 3, "stall_grid");
}

TEST_F(Failures, SigtermCheckpointsStopsAndResumesBitIdentically) {
  const std::int64_t steps = 1500;  // far more than the run takes before the signal
  Child job(train_command(0, args(steps, "term")), out("term"), err("term"), kMpiEnv);
  ASSERT_TRUE(wait_until([&] { return last_logged_step(dir_ / "term.jsonl") >= 20; }, 120)) << job.err();
  job.signal(SIGTERM);
  ASSERT_EQ(job.wait(60), launch::kExitStopped) << job.err();
  const std::int64_t stopped_at = last_logged_step(dir_ / "term.jsonl");
  ASSERT_LT(stopped_at, steps);
  EXPECT_EQ(count_lines_with(job.out(), "stopped    on request (SIGTERM) after step " + std::to_string(stopped_at)), 1)
      << job.out();
  EXPECT_TRUE(fs::exists(dir_ / ("ck_term/step_" + std::string(8 - std::to_string(stopped_at).size(), '0') +
                                 std::to_string(stopped_at))));

  Child resumed(train_command(0, args(steps, "term") + " --resume auto"), out("term2"), err("term2"), kMpiEnv);
  ASSERT_EQ(resumed.wait(300), 0) << resumed.err();
  Child reference(train_command(0, args(steps, "ref")), out("ref"), err("ref"), kMpiEnv);
  ASSERT_EQ(reference.wait(300), 0) << reference.err();
  const auto want = checkpoint_files(dir_ / "ck_ref/step_00001500");
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(checkpoint_files(dir_ / "ck_term/step_00001500"), want);
  std::vector<std::int64_t> expected(steps);
  std::iota(expected.begin(), expected.end(), 1);
  EXPECT_EQ(logged_steps(dir_ / "term.jsonl"), expected);
}

// A stop with nothing saved says so and how to keep progress next time;
// it does not advise --resume auto, which would start from scratch.
TEST_F(Failures, SigtermWithNothingSavedDoesNotAdviseResume) {
  std::string no_checkpoints = args(1500, "nock");
  no_checkpoints.replace(no_checkpoints.find(" --checkpoint-dir "),
                         std::string(" --checkpoint-dir ").size() + (dir_ / "ck_nock").size(), "");
  Child job(train_command(0, no_checkpoints), out("nock"), err("nock"), kMpiEnv);
  ASSERT_TRUE(wait_until([&] { return last_logged_step(dir_ / "nock.jsonl") >= 5; }, 120)) << job.err();
  job.signal(SIGTERM);
  ASSERT_EQ(job.wait(60), launch::kExitStopped) << job.err();
  EXPECT_EQ(count_lines_with(job.out(), "nothing saved: rerun with --run-dir or --checkpoint-dir to keep progress"), 1)
      << job.out();
  EXPECT_EQ(job.out().find("--resume auto"), std::string::npos) << job.out();
}

TEST_F(Failures, Sigusr1ToMpirunStopsEveryRankWithACheckpoint) {
  // mpirun forwards SIGUSR1 to every rank (it turns SIGTERM into SIGKILL).
  Child job(train_command(2, args(1000000, "usr1")), out("usr1"), err("usr1"), kMpiEnv);
  ASSERT_TRUE(wait_until([&] { return last_logged_step(dir_ / "usr1.jsonl") >= 5; }, 120)) << job.err();
  job.signal(SIGUSR1);
  ASSERT_EQ(job.wait(60), launch::kExitStopped) << job.err();
  EXPECT_EQ(count_lines_with(job.out(), "stopped    on request (SIGUSR1)"), 1) << job.out();
  EXPECT_EQ(read_text(dir_ / "ck_usr1/latest").find("step_"), 0u);
}

TEST_F(Failures, SecondSignalAbortsAtOnce) {
  Child job(train_command(0, args(1000000, "twice")), out("twice"), err("twice"), kMpiEnv);
  ASSERT_TRUE(wait_until([&] { return last_logged_step(dir_ / "twice.jsonl") >= 3; }, 120)) << job.err();
  // Two different signals: two of the same kind sent at once may merge into
  // one pending signal. Either may be handled first.
  job.signal(SIGTERM);
  job.signal(SIGINT);
  const int code = job.wait(30);
  EXPECT_TRUE(code == 128 + SIGTERM || code == 128 + SIGINT) << code << "\n" << job.err();
  EXPECT_NE(job.err().find("second stop signal"), std::string::npos) << job.err();
}

TEST_F(Failures, BadTrainingShardStopsAfterACheckpointBeforeUsingIt) {
  // Shard 0 holds exactly 5 steps of sequences; shard 1 has a token outside
  // the vocabulary. Unshuffled, step 6 is the first to read shard 1.
  const int T = 32, per_step = 8;
  std::vector<std::uint16_t> good = corpus_tokens(40);
  good.resize(static_cast<std::size_t>(5 * per_step * T + 1));
  std::vector<std::uint16_t> bad = corpus_tokens(10);
  bad[100] = 300;  // gpt-micro's vocabulary has 256 entries
  fs::remove(dir_ / "train_000.bin");
  launch::write_token_shard(dir_ / "train_000.bin", good);
  launch::write_token_shard(dir_ / "train_001.bin", bad);

  Child job(train_command(2, args(20, "shard") + " --shuffle false"), out("shard"), err("shard"), kMpiEnv);
  ASSERT_EQ(job.wait(120), launch::kExitBadInput) << job.err();
  EXPECT_EQ(count_lines_with(job.err(), "error:"), 1) << job.err();
  EXPECT_NE(job.err().find("train_001.bin: token 100 is 300"), std::string::npos) << job.err();
  EXPECT_NE(job.err().find("stopped before step 6"), std::string::npos) << job.err();
  EXPECT_EQ(last_logged_step(dir_ / "shard.jsonl"), 5);
  EXPECT_EQ(read_text(dir_ / "ck_shard/latest"), "step_00000005\n");
}

TEST_F(Failures, BadValidationShardIsRefusedBeforeAnyStep) {
  std::vector<std::uint16_t> val = corpus_tokens(3);
  val[7] = 999;
  fs::remove(dir_ / "val_000.bin");
  launch::write_token_shard(dir_ / "val_000.bin", val);
  Child job(train_command(2, args(20, "val") + " --val-data " + (dir_ / "val_*.bin")), out("val"), err("val"), kMpiEnv);
  ASSERT_EQ(job.wait(120), launch::kExitBadInput) << job.err();
  EXPECT_EQ(count_lines_with(job.err(), "error:"), 1) << job.err();
  EXPECT_NE(job.err().find("val_000.bin: token 7 is 999"), std::string::npos) << job.err();
  EXPECT_EQ(job.out().find("step "), std::string::npos) << job.out();
}

TEST_F(Failures, FailedSaveWarnsKeepsThePreviousCheckpointAndTrainsOn) {
  std::vector<std::string> env = kMpiEnv;
  env.push_back("ENGINE_TEST_FAIL_SAVES=4");
  Child job(train_command(2, args(8, "full") + " --checkpoint-interval 2"), out("full"), err("full"), env);
  ASSERT_EQ(job.wait(120), 0) << job.err();
  EXPECT_EQ(count_lines_with(job.err(), "warning: checkpoint at step 4 abandoned"), 1) << job.err();
  EXPECT_NE(job.err().find("No space left on device"), std::string::npos) << job.err();
  for (const char* step : {"step_00000002", "step_00000006", "step_00000008"})
    EXPECT_TRUE(fs::exists(dir_ / (std::string("ck_full/") + step))) << step;
  EXPECT_FALSE(fs::exists(dir_ / "ck_full/step_00000004"));
  EXPECT_FALSE(fs::exists(dir_ / "ck_full/step_00000004.tmp"));
  EXPECT_EQ(logged_steps(dir_ / "full.jsonl").size(), 8u);
}

TEST_F(Failures, FailedSavesInARowStopTheRunOnce) {
  std::vector<std::string> env = kMpiEnv;
  env.push_back("ENGINE_TEST_FAIL_SAVES=4-8");
  // Synchronous saves, so the step the run stops at is exact (an
  // asynchronous save's failure is learned when its write is committed, a
  // step later or two, as soon as every rank's write is done).
  Child job(train_command(2, args(12, "fuller") + " --checkpoint-interval 2 --max-failed-saves 2 --async-checkpoint false"),
            out("fuller"), err("fuller"), env);
  ASSERT_EQ(job.wait(120), launch::kExitFailed) << job.err();
  EXPECT_EQ(count_lines_with(job.err(), "warning:"), 1) << job.err();
  EXPECT_EQ(count_lines_with(job.err(), "error:"), 1) << job.err();
  EXPECT_NE(job.err().find("2 saves failed in a row"), std::string::npos) << job.err();
  EXPECT_EQ(read_text(dir_ / "ck_fuller/latest"), "step_00000002\n");
  EXPECT_EQ(last_logged_step(dir_ / "fuller.jsonl"), 6);
}

}  // namespace
