// How the `train` program reports an error after start-up
// (launch/resilience/failure_agreement.h): when every rank reaches it, once for the job,
// on one line, without Open MPI's MPI_ABORT banner, and with a non-zero exit;
// when one rank fails alone, with its rank, by aborting the job within the
// agreement's bound. The real program, alone and under mpirun, as child
// processes; every wait is bounded (process_harness.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>

#include "launch/formats/llmc_model.h"
#include "launch/resilience/exit_codes.h"
#include "launch/resilience/failure_agreement.h"
#include "model/gpt_params.h"
#include "tests/launch/process_harness.h"
#include "tests/launch/training_fixture.h"

using namespace test_support;

namespace {

const std::vector<std::string> kMpiEnv = {"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
                                          "OMPI_MCA_rmaps_base_oversubscribe=1", "OMP_NUM_THREADS=1"};

// mpirun -np N train <args> (np 0: train alone, no mpirun).
std::vector<std::string> train_command(int np, const std::string& args) {
  std::vector<std::string> argv;
  if (np > 0) argv = {MPIEXEC, "--oversubscribe", "-np", std::to_string(np)};
  argv.push_back(TRAIN_BIN);
  std::istringstream in(args);
  for (std::string w; in >> w;) argv.push_back(w);
  return argv;
}

int count_lines_with(const std::string& text, const std::string& needle) {
  std::istringstream in(text);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line.find(needle) != std::string::npos;
  return n;
}

// The line holding `needle`, or "".
std::string line_with(const std::string& text, const std::string& needle) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.find(needle) != std::string::npos) return line;
  return "";
}

// What Open MPI prints when a rank calls MPI_Abort or leaves without
// MPI_Finalize.
void expect_no_mpi_banner(const std::string& err) {
  for (const char* banner : {"MPI_ABORT", "MPI_Abort", "mpirun has exited"})
    EXPECT_EQ(err.find(banner), std::string::npos) << "found '" << banner << "' in:\n" << err;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

class ErrorReporting : public ::testing::Test {
 protected:
  void SetUp() override { write_corpus(dir_); }

  std::string args(std::int64_t steps) const {
    return "--model gpt-micro --micro-batch 4 --seq-len 32 --batch-tokens 256 --device cpu --peak-tflops 1 "
           "--lr 3e-3 --steps " +
           std::to_string(steps) + " --train-data " + (dir_ / "train_*.bin");
  }

  // A gpt-micro model file in llm.c's format with one NaN in it: its header
  // passes the start-up check (launch::check_inputs reads only the shape), and
  // every rank refuses it in the Trainer's constructor, without agreeing first.
  std::string damaged_model() const {
    launch::TrainConfig config = tiny_config(dir_, 1);
    config.resolve(test_cuda_devices(), 1);
    const model::ParamRegistry registry = model::build_gpt_registry(config.model);
    std::vector<float> weights(static_cast<std::size_t>(registry.total_numel()), 0.01f);
    weights[registry.find("wpe").offset + 5] = std::nanf("");
    const std::string path = dir_ / "nan_model.bin";
    launch::write_llmc_model(path, config.model, registry, weights.data());
    return path;
  }

  Child run(int np, const std::string& args, const std::string& tag, std::vector<std::string> env = {}) const {
    if (np > 0) env.insert(env.end(), kMpiEnv.begin(), kMpiEnv.end());
    return Child(train_command(np, args), dir_ / (tag + ".out"), dir_ / (tag + ".err"), env);
  }

  TempDir dir_{"error_reporting"};
};

TEST(OneLine, JoinsLinesAndDropsTheirIndentation) {
  EXPECT_EQ(launch::one_line("plain"), "plain");
  EXPECT_EQ(launch::one_line("first\nsecond\n"), "first; second");
  EXPECT_EQ(launch::one_line("different run:\n  n_layer: 2 vs 3\n  seed: 1 vs 2"),
            "different run: n_layer: 2 vs 3; seed: 1 vs 2");
  EXPECT_EQ(launch::one_line("a\r\n\n\n  b  \n"), "a; b");
  EXPECT_EQ(launch::one_line(""), "");
}

// (a) One process: the error is every rank's, so no abort and no banner.
TEST_F(ErrorReporting, OneProcessErrorAfterStartUpIsOneLineWithoutBanner) {
  Child job = run(0, args(2) + " --init-from " + damaged_model(), "alone");
  ASSERT_EQ(job.wait(120), launch::kExitFailed) << job.err();
  EXPECT_EQ(count_lines_with(job.err(), "error:"), 1) << job.err();
  EXPECT_EQ(line_with(job.err(), "error:").rfind("error: model file '", 0), 0u) << job.err();
  EXPECT_NE(job.err().find("tensor 'wpe' holds nan at element 5"), std::string::npos) << job.err();
  EXPECT_EQ(job.err().find("[rank"), std::string::npos) << job.err();
  expect_no_mpi_banner(job.err());
  EXPECT_EQ(job.out().find("step 1/"), std::string::npos) << job.out();
}

// (b) Every rank reaches the same error: printed once, no banner.
TEST_F(ErrorReporting, EveryRankReachingTheErrorPrintsItOnceWithoutBanner) {
  Child job = run(2, args(2) + " --init-from " + damaged_model(), "both");
  ASSERT_EQ(job.wait(120), launch::kExitFailed) << job.err();
  EXPECT_EQ(count_lines_with(job.err(), "error:"), 1) << job.err();
  EXPECT_NE(job.err().find("tensor 'wpe' holds nan at element 5"), std::string::npos) << job.err();
  EXPECT_EQ(job.err().find("[rank"), std::string::npos) << job.err();
  expect_no_mpi_banner(job.err());
}

// The same mid-run, with ZeRO-3's gathers and an asynchronous checkpoint
// write that may be in flight: the trainer is destroyed on every rank after
// they agree, and the job still ends cleanly.
TEST_F(ErrorReporting, EveryRankFailingMidRunEndsCleanly) {
  const auto t0 = std::chrono::steady_clock::now();
  Child job = run(2, args(6) + " --zero 3 --checkpoint-interval 1 --checkpoint-dir " + (dir_ / "ck"), "midrun",
                  {"ENGINE_TEST_THROW=all@4"});
  ASSERT_EQ(job.wait(120), launch::kExitFailed) << job.err();
  // Far sooner than a rank failing alone would take to give up.
  EXPECT_LT(seconds_since(t0), launch::kFailureAgreementSeconds) << job.err();
  EXPECT_EQ(count_lines_with(job.err(), "error:"), 1) << job.err();
  EXPECT_EQ(line_with(job.err(), "error:").rfind("error: ENGINE_TEST_THROW: rank 0 fails as step 4 begins", 0), 0u)
      << job.err();
  expect_no_mpi_banner(job.err());
  EXPECT_NE(job.out().find("step 3/6"), std::string::npos) << job.out();
  EXPECT_EQ(job.out().find("step 4/6"), std::string::npos) << job.out();
}

// A job-wide error whose message spans lines (a checkpoint of another run
// lists each difference on its own line) is still one line.
TEST_F(ErrorReporting, MultiLineMessageIsPrintedAsOneLine) {
  const std::string ck = " --checkpoint-dir " + (dir_ / "ck");
  Child first = run(0, args(2) + ck, "first");
  ASSERT_EQ(first.wait(120), 0) << first.err();
  Child job = run(0, args(4) + ck + " --n-layer 3 --seed 7 --resume latest", "other_run");
  // Bad input: no restart with these flags could load it (launch/supervise does not retry).
  ASSERT_EQ(job.wait(120), launch::kExitBadInput) << job.err();
  const std::string err = job.err();
  EXPECT_EQ(err.find(".cpp:"), std::string::npos) << "a source location in a bad-input error: " << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_EQ(err.rfind("error: checkpoint '", 0), 0u) << err;
  EXPECT_NE(err.find("was written by a different run: model: checkpoint has"), std::string::npos) << err;
  EXPECT_NE(err.find("; seed: checkpoint has 1337, this run has 7"), std::string::npos) << err;
}

// (c) One rank fails alone while the other waits for it in a collective: the
// agreement times out, the rank names itself and aborts the job.
TEST_F(ErrorReporting, RankFailingAloneAbortsTheJobNamingItself) {
  const auto t0 = std::chrono::steady_clock::now();
  Child job = run(2, args(1000000), "one", {"ENGINE_TEST_THROW=1@3"});
  const int code = job.wait(launch::kFailureAgreementSeconds + 60);
  const double seconds = seconds_since(t0);
  ASSERT_NE(code, -1) << "still running after " << seconds << " s:\n" << job.err();
  EXPECT_EQ(code, launch::kExitFailed) << job.err();
  EXPECT_EQ(count_lines_with(job.err(), "error:"), 1) << job.err();
  EXPECT_NE(job.err().find("[rank 1] error: ENGINE_TEST_THROW: rank 1 fails as step 3 begins"), std::string::npos)
      << job.err();
  // The other rank was given its chance to report the same error.
  EXPECT_GE(seconds, launch::kFailureAgreementSeconds) << job.err();
  EXPECT_EQ(job.err().find("collective timeout"), std::string::npos) << job.err();
}

// With a --collective-timeout shorter than the agreement's bound, the waiting
// rank's watchdog roll call tells the failed rank at once that it is alone: its
// own message ends the job, not "rank 1 did not arrive".
TEST_F(ErrorReporting, RankFailingAloneIsReportedBeforeTheWatchdogBlamesIt) {
  const auto t0 = std::chrono::steady_clock::now();
  Child job = run(2, args(1000000) + " --collective-timeout 2", "rollcall", {"ENGINE_TEST_THROW=1@3"});
  const int code = job.wait(60);
  const double seconds = seconds_since(t0);
  ASSERT_NE(code, -1) << "still running after " << seconds << " s:\n" << job.err();
  EXPECT_EQ(code, launch::kExitFailed) << job.err();
  EXPECT_LT(seconds, launch::kFailureAgreementSeconds) << job.err();
  EXPECT_EQ(count_lines_with(job.err(), "error:"), 1) << job.err();
  EXPECT_NE(job.err().find("[rank 1] error: ENGINE_TEST_THROW: rank 1 fails as step 3 begins"), std::string::npos)
      << job.err();
  EXPECT_EQ(job.err().find("collective timeout"), std::string::npos) << job.err();
}

}  // namespace
