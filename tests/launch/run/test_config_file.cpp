// `train --config FILE.json` (launch/run/json_config.h) through the real flag set
// (add_train_options): a good file sets flags and the command line overrides
// it; a key given twice, a value of the wrong JSON type or a key that is no
// flag is refused with one line that names the file and the key.
#include <gtest/gtest.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "launch/resilience/command_line.h"
#include "launch/run/train_config.h"
#include "tests/support/hostile_json.h"

namespace launch {
namespace {

namespace fs = std::filesystem;

class ConfigFile : public ::testing::Test {
 protected:
  ConfigFile() : dir_(fs::temp_directory_path() / ("test_config_file_" + std::to_string(::getpid()))) {
    fs::create_directories(dir_);
  }
  ~ConfigFile() override { fs::remove_all(dir_); }

  std::string path(const std::string& name = "run.json") const { return (dir_ / name).string(); }

  // Parses `args` (after the program name) with a fresh app and config; returns
  // the parse error's message, "" if there was none.
  std::string parse(const std::vector<std::string>& args) {
    config_ = TrainConfig{};
    app_ = std::make_unique<CLI::App>();
    add_train_options(*app_, config_);
    std::vector<const char*> argv = {"train"};
    for (const std::string& a : args) argv.push_back(a.c_str());
    try {
      parse_command_line(*app_, static_cast<int>(argv.size()), argv.data());  // as `train` parses
    } catch (const CLI::ParseError& e) {
      // A usage error: CLI11 prints it and `train` exits with its code.
      EXPECT_NE(e.get_exit_code(), 0) << e.what();
      return e.what();
    }
    return "";
  }

  // Writes `json` to run.json and parses `--config run.json` plus `args`.
  std::string parse_file(const std::string& json, const std::vector<std::string>& args = {}) {
    std::ofstream(path()) << json;
    std::vector<std::string> all = {"--config", path()};
    all.insert(all.end(), args.begin(), args.end());
    return parse(all);
  }

  // The message for run.json, as every refusal starts.
  std::string about(const std::string& what) const { return "config file '" + path() + "': " + what; }

  fs::path dir_;
  TrainConfig config_;
  std::unique_ptr<CLI::App> app_;
};

// The checks read CLI11's type names for the options; if a CLI11 update
// renamed them, every flag would silently fall back to "any scalar".
TEST_F(ConfigFile, OptionTypesAreTheNamesTheCheckReads) {
  ASSERT_EQ(parse({}), "");
  auto type = [&](const std::string& flag) { return app_->get_option(flag)->get_type_name(); };
  EXPECT_EQ(type("--micro-batch"), "INT");
  EXPECT_EQ(type("--tp"), "INT");
  EXPECT_EQ(type("--seed"), "UINT");
  EXPECT_EQ(type("--lr"), "FLOAT");
  EXPECT_EQ(app_->get_option("--shuffle")->get_expected_min(), 0) << "a switch, like every boolean";
  EXPECT_EQ(type("--train-data"), "TEXT");
  EXPECT_EQ(type("--lr-schedule").rfind("TEXT:", 0), 0u) << type("--lr-schedule");  // with IsMember's list
  EXPECT_EQ(app_->get_option("--sequence-parallel")->get_expected_min(), 0) << "a flag";
  // --config is read from the option while the file is parsed.
  ASSERT_EQ(parse_file(R"({"steps": 3})"), "");
  EXPECT_EQ(app_->get_config_ptr()->as<std::string>(), path());
}

TEST_F(ConfigFile, GoodFileSetsFlagsAndTheCommandLineOverridesIt) {
  const std::string json = R"({
    "model": "gpt-micro",
    "batch": {"micro-batch": 4, "seq-len": 16},
    "optimizer": {"lr": 0.5, "beta1": 1, "lr-schedule": "constant", "deep": {"warmup-steps": 2}},
    "shuffle": false,
    "sequence-parallel": true,
    "seed": 7,
    "--steps": 11,
    "train-data": "data/train_*.bin"
  })";
  ASSERT_EQ(parse_file(json), "");
  EXPECT_EQ(config_.preset, "gpt-micro");
  EXPECT_EQ(config_.micro_batch, 4);
  EXPECT_EQ(config_.seq_len, 16);
  EXPECT_DOUBLE_EQ(config_.lr, 0.5);
  EXPECT_DOUBLE_EQ(config_.beta1, 1.0) << "an integer is a number";
  EXPECT_EQ(config_.schedule, "constant");
  EXPECT_EQ(config_.warmup_steps, 2);
  EXPECT_FALSE(config_.shuffle);
  EXPECT_TRUE(config_.sequence_parallel);
  EXPECT_EQ(config_.seed, 7u);
  EXPECT_EQ(config_.steps, 11);
  EXPECT_EQ(config_.train_data, "data/train_*.bin");

  ASSERT_EQ(parse_file(json, {"--lr", "0.25", "--micro-batch", "2", "--shuffle", "true"}), "");
  EXPECT_DOUBLE_EQ(config_.lr, 0.25);
  EXPECT_EQ(config_.micro_batch, 2);
  EXPECT_TRUE(config_.shuffle);
  EXPECT_EQ(config_.seq_len, 16) << "keys the command line does not give still come from the file";

  // A flag set to false in the file stays off.
  ASSERT_EQ(parse_file(R"({"sequence-parallel": false})"), "");
  EXPECT_FALSE(config_.sequence_parallel);
}

TEST_F(ConfigFile, KeyGivenTwiceAtTheTopLevel) {
  EXPECT_EQ(parse_file(R"({"lr": 1, "steps": 2, "lr": 2})"), about("key 'lr' is given twice"));
  EXPECT_EQ(parse_file(R"({"lr": 1, "lr": 1})"), about("key 'lr' is given twice")) << "even with one value";
  // The command line does not make the file's mistake go away.
  EXPECT_EQ(parse_file(R"({"lr": 1, "lr": 2})", {"--lr", "3"}), about("key 'lr' is given twice"));
}

TEST_F(ConfigFile, KeyGivenTwiceInDifferentGroups) {
  EXPECT_EQ(parse_file(R"({"lr": 1, "optimizer": {"lr": 2}})"),
            about("key 'lr' is given twice ('lr' and 'optimizer.lr' set the same flag)"));
  EXPECT_EQ(parse_file(R"({"run": {"seed": 1}, "more": {"deeper": {"seed": 2}}})"),
            about("key 'seed' is given twice ('run.seed' and 'more.deeper.seed' set the same flag)"));
  // Spelt with and without dashes it is still one flag.
  EXPECT_EQ(parse_file(R"({"steps": 1, "--steps": 2})"),
            about("key '--steps' is given twice ('steps' and '--steps' set the same flag)"));
}

TEST_F(ConfigFile, KeyGivenTwiceInsideAGroup) {
  EXPECT_EQ(parse_file(R"({"optimizer": {"lr": 1, "lr": 2}})"), about("key 'lr' is given twice in 'optimizer'"));
  EXPECT_EQ(parse_file(R"({"a": {"b": {"steps": 1, "steps": 1}}})"), about("key 'steps' is given twice in 'a.b'"));
  // Two groups of one name: the parser would keep only the second.
  EXPECT_EQ(parse_file(R"({"optimizer": {"lr": 1}, "optimizer": {"beta1": 0.8}})"),
            about("key 'optimizer' is given twice"));
}

TEST_F(ConfigFile, ValueOfTheWrongType) {
  const std::pair<std::string, std::string> cases[] = {
      {R"({"micro-batch": "eight"})", R"(key 'micro-batch' must be an integer, got "eight")"},
      {R"({"micro-batch": "8"})", R"(key 'micro-batch' must be an integer, got "8")"},
      {R"({"micro-batch": 8.5})", "key 'micro-batch' must be an integer, got 8.5"},
      {R"({"tp": true})", "key 'tp' must be an integer, got true"},
      {R"({"steps": null})", "key 'steps' must be an integer, got null"},
      {R"({"seed": -1})", "key 'seed' must be a non-negative integer, got -1"},
      {R"({"lr": "0.1"})", R"(key 'lr' must be a number, got "0.1")"},
      {R"({"shuffle": "yes"})", R"(key 'shuffle' must be true or false, got "yes")"},
      {R"({"shuffle": 1})", "key 'shuffle' must be true or false, got 1"},
      {R"({"sequence-parallel": "true"})", R"(key 'sequence-parallel' must be true or false, got "true")"},
      {R"({"train-data": 5})", "key 'train-data' must be a string, got 5"},
      {R"({"lr-schedule": false})", "key 'lr-schedule' must be a string, got false"},
      // Arrays only for flags that take several values; none of train's does.
      {R"({"lr": [0.1, 0.2]})", "key 'lr' must be a number, got [0.1,0.2]"},
      {R"({"train-data": ["a.bin"]})", R"(key 'train-data' must be a string, got ["a.bin"])"},
      {R"({"run": {"sequence-parallel": []}})", "key 'sequence-parallel' must be true or false, got []"},
  };
  for (const auto& [json, message] : cases) EXPECT_EQ(parse_file(json), about(message)) << json;
  // An object is a group of flags; one named after a flag was most likely
  // meant as that flag's value, and the message says what the flag takes.
  EXPECT_EQ(parse_file(R"({"lr": {"value": 0.1}})"),
            about("key 'value' in 'lr' is not a known flag; 'lr' itself is a flag, which takes a number, not an object"));
  EXPECT_EQ(parse_file(R"({"run": {"seed": {"value": 1}}})"),
            about("key 'value' in 'run.seed' is not a known flag; 'seed' itself is a flag, which takes a "
                  "non-negative integer, not an object"));
  // A long value is cut so the message stays one readable line.
  const std::string long_text(200, 'x');
  const std::string error = parse_file(R"({"steps": ")" + long_text + R"("})");
  EXPECT_EQ(error, about("key 'steps' must be an integer, got \"" + std::string(56, 'x') + "..."));
}

TEST_F(ConfigFile, UnknownKeysFlagsNotForFilesRootThatIsNoObjectAndInvalidJson) {
  EXPECT_EQ(parse_file(R"({"modle": "gpt-micro"})"), about("key 'modle' is not a known flag (did you mean 'model'?)"));
  EXPECT_EQ(parse_file(R"({"batch": {"micro-bach": 2}})"),
            about("key 'micro-bach' in 'batch' is not a known flag (did you mean 'micro-batch'?)"));
  EXPECT_EQ(parse_file(R"({"config": "other.json"})"), about("key 'config' cannot be set in a config file"));
  EXPECT_EQ(parse_file("[1, 2]"),
            "config file '" + path() + "' must hold a JSON object of flag names to values, got [1,2]");
  const std::string bad = parse_file(R"({"lr": })");
  EXPECT_EQ(bad.rfind("config file '" + path() + "' is not valid JSON: ", 0), 0u) << bad;
  // A syntax error after a duplicate is still reported as the syntax error.
  EXPECT_NE(parse_file(R"({"lr": 1, "lr": 2,)").find("is not valid JSON"), std::string::npos);
}

// What `train` prints for a refused file: CLI11's app.exit, as train_main.cpp
// calls it. The first line is the whole message; the exit code is non-zero.
TEST_F(ConfigFile, RefusalPrintsOneLineNamingFileAndKey) {
  std::ofstream(path()) << R"({"lr": 1, "lr": 2})";
  TrainConfig config;
  CLI::App app;
  add_train_options(app, config);
  const std::string config_flag = path();
  const char* argv[] = {"train", "--config", config_flag.c_str()};
  try {
    app.parse(3, argv);
    FAIL() << "the duplicate was not refused";
  } catch (const CLI::ParseError& e) {
    std::ostringstream out, err;
    EXPECT_NE(app.exit(e, out, err), 0);
    const std::string printed = err.str();
    EXPECT_EQ(printed.substr(0, printed.find('\n')), about("key 'lr' is given twice")) << printed;
    EXPECT_EQ(out.str(), "");
  }
}

// The formatter writes what it reads: each flag as the JSON type its check
// wants, a text flag that looks like a number included.
TEST_F(ConfigFile, WrittenConfigReadsBack) {
  ASSERT_EQ(parse({"--model", "gpt-micro", "--sample-prompt", "42", "--resume", "true", "--lr", "0.125", "--shuffle",
                   "false", "--sequence-parallel", "--seed", "9", "--micro-batch", "3", "--lr-schedule", "constant"}),
            "");
  const std::string written = app_->config_to_str(false, false);
  EXPECT_NE(written.find(R"("sample-prompt": "42")"), std::string::npos) << written;
  EXPECT_NE(written.find(R"("resume": "true")"), std::string::npos) << written;
  EXPECT_NE(written.find(R"("shuffle": false)"), std::string::npos) << written;
  EXPECT_NE(written.find(R"("sequence-parallel": true)"), std::string::npos) << written;
  ASSERT_EQ(parse_file(written), "") << written;
  EXPECT_EQ(config_.preset, "gpt-micro");
  EXPECT_EQ(config_.sample_prompt, "42");
  EXPECT_EQ(config_.resume, "true");
  EXPECT_DOUBLE_EQ(config_.lr, 0.125);
  EXPECT_FALSE(config_.shuffle);
  EXPECT_TRUE(config_.sequence_parallel);
  EXPECT_EQ(config_.seed, 9u);
  EXPECT_EQ(config_.micro_batch, 3);
  EXPECT_EQ(config_.schedule, "constant");

  // With the defaults too, the file still reads back.
  const std::string with_defaults = app_->config_to_str(true, false);
  EXPECT_EQ(parse_file(with_defaults), "") << with_defaults;
  EXPECT_EQ(config_.micro_batch, 3);
  EXPECT_DOUBLE_EQ(config_.beta2, 0.95);
}

// Every key that is no flag is named at once, each with the nearest flag;
// `plan --json`'s and the sweep's underscore spellings set the dashed flags.
TEST_F(ConfigFile, EveryUnknownKeyNamedWithTheNearestFlagAndUnderscoresAccepted) {
  EXPECT_EQ(parse_file(R"({"lrr": 1e-3, "steps": 5, "stepz": 3, "xyzzy-plugh": 1})"),
            about("key 'lrr' is not a known flag (did you mean 'lr'?); key 'stepz' is not a known flag (did you mean "
                  "'steps'?); key 'xyzzy-plugh' is not a known flag"));
  ASSERT_EQ(parse_file(R"({"micro_batch": 2, "batch_tokens": 512, "seq_len": 64, "warmup_steps": 7})"), "");
  EXPECT_EQ(config_.micro_batch, 2);
  EXPECT_EQ(config_.batch_tokens, 512);
  EXPECT_EQ(config_.seq_len, 64);
  EXPECT_EQ(config_.warmup_steps, 7);
  EXPECT_EQ(parse_file(R"({"micro_batch": 2, "micro-batch": 3})"),
            about("key 'micro-batch' is given twice ('micro_batch' and 'micro-batch' set the same flag)"));
}

// Hostile files (tests/support/hostile_json.h: nesting 100000 deep, 1e400,
// integers past int64, wrong types, truncations, flipped bytes) are each read
// or refused in one line, none crashes: before the bounds a 100000-deep file
// overflowed the stack and 1e400 aborted on an uncaught exception.
TEST_F(ConfigFile, HostileFilesAreReadOrRefusedInOneLine) {
  const std::string valid = R"({
  "model": "gpt-demo",
  "batch": {"micro-batch": 16, "seq-len": 128, "batch-tokens": 2048, "steps": 1500},
  "optimizer": {"lr": 2e-3, "warmup-steps": 50, "lr-schedule": "cosine", "weight-decay": 0.1},
  "data": {"val-interval": 250, "val-tokens": 32768},
  "sample-prompt": "\n",
  "seed": 1337
})";
  ASSERT_EQ(parse_file(valid), "");
  const auto variants = engine_test::hostile_json_variants(valid);
  const std::size_t refused = engine_test::expect_accepted_or_one_line(variants, [&](const std::string& text) {
    const std::string message = parse_file(text);
    if (!message.empty()) throw std::runtime_error(message);
  });
  EXPECT_GT(refused, variants.size() / 2);
  EXPECT_NE(parse_file(engine_test::nested(100000, '{')).find("nested more than 128 levels"), std::string::npos);
  EXPECT_NE(parse_file(R"({"lr": 1e400})").find("number overflow"), std::string::npos);
}

}  // namespace
}  // namespace launch
