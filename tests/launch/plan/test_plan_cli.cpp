// The `plan` program on hostile numbers: each refused in one line naming the
// value, with the bad-input exit code, instead of a plan printed from NaN.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace {

struct Outcome {
  int exit_code;
  std::string output;
};

Outcome run_plan(const std::string& args) {
  const std::string log = testing::TempDir() + "plan_cli.log";
  const std::string command = "timeout 60 " + std::string(PLAN_BIN) + " " + args + " > " + log + " 2>&1";
  const int status = std::system(command.c_str());
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, text.str()};
}

const std::string kBase = std::string("--model gpt2-124m --seq-len 1024 --global-batch 8 --devices 8 --cluster ") +
                          ENGINE_SOURCE_DIR + "/examples/scaling/clusters/selene_a100.json";

TEST(PlanCli, RefusesNonFiniteAndNegativeFailureRates) {
  for (const char* bad : {"nan", "-1", "inf", "1e300"}) {
    SCOPED_TRACE(bad);
    const Outcome out = run_plan(kBase + " --failure-rate " + bad);
    EXPECT_EQ(out.exit_code, 65) << out.output;
    EXPECT_NE(out.output.find("--failure-rate"), std::string::npos) << out.output;
    EXPECT_EQ(std::count(out.output.begin(), out.output.end(), '\n'), 1) << out.output;
  }
  const Outcome ok = run_plan(kBase + " --failure-rate 0.01 --save-seconds 30");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
}

// The communication column is the exposed time (issue 36): named so, since
// ZeRO-3 would otherwise look like the layout that sends least.
TEST(PlanCli, TableNamesTheCommunicationColumnExposed) {
  const Outcome out = run_plan(kBase + " --all");
  ASSERT_EQ(out.exit_code, 0) << out.output;
  const std::size_t header = out.output.find("\nrank ");
  ASSERT_NE(header, std::string::npos) << out.output;
  const std::string line = out.output.substr(header + 1, out.output.find('\n', header + 1) - header - 1);
  EXPECT_NE(line.find("compute  exposed comm     bubble"), std::string::npos) << line;
  EXPECT_NE(out.output.find("comm       exposed: "), std::string::npos) << out.output;
  const Outcome json = run_plan(kBase + " --json");
  ASSERT_EQ(json.exit_code, 0) << json.output;
  EXPECT_NE(json.output.find("\"exposed_comm_seconds\""), std::string::npos) << json.output;
}

}  // namespace
