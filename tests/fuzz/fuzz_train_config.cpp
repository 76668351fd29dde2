// A `train --config FILE` (JSON): every key a flag, each value of its flag's
// type, groups, duplicates; then the configuration resolved for a job of 8
// ranks on the CPU, as `train` does before its first step (every value and
// the layout checked). A
// command-line refusal is CLI11's ParseError, printed by `train` as one
// "error:" line; resolve()'s is an engine::Error.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "launch/resilience/command_line.h"
#include "launch/run/train_config.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = fuzz::input_file(data, size, "run.json");
  launch::TrainConfig config;
  CLI::App app;
  launch::add_train_options(app, config);
  const std::vector<const char*> argv = {"train", "--config", path.c_str()};
  try {
    launch::parse_command_line(app, static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    fuzz::check_refusal_message(e.what());
    fuzz::report_verdict(e.what());
    return 0;
  } catch (const std::exception& e) {
    fuzz::finding(std::string("parsing threw something other than CLI::ParseError: ") + e.what());
  }
  try {
    config.resolve(/*cuda_devices=*/0, /*world_size=*/8);
    fuzz::report_verdict(nullptr);
  } catch (const launch::MachineCalibrationNeeded&) {
    // --layout auto without --cluster: train measures the machine first, not a refusal.
  } catch (const engine::Error& e) {
    fuzz::check_refusal_message(e.what());
    fuzz::report_verdict(e.what());
  } catch (const std::exception& e) {
    fuzz::finding(std::string("resolve threw something other than engine::Error: ") + e.what());
  }
  return 0;
}
