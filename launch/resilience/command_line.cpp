#include "launch/resilience/command_line.h"

#include <algorithm>
#include <cctype>
#include <iostream>
#include <regex>
#include <set>
#include <string>

#include "launch/resilience/exit_codes.h"
#include "launch/resilience/failure_agreement.h"

namespace launch {

namespace {

bool is_boolean_word(std::string word) {
  std::transform(word.begin(), word.end(), word.begin(), [](unsigned char c) { return std::tolower(c); });
  static const std::set<std::string> words = {"true", "false", "on", "off", "yes", "no", "1", "0"};
  return words.count(word) > 0;
}

bool is_flag(const CLI::App& app, const std::string& name) {
  if (name.rfind("--", 0) != 0 || name.find('=') != std::string::npos) return false;
  const CLI::Option* option = app.get_option_no_throw(name);
  return option != nullptr && option->get_expected_min() == 0;
}

}  // namespace

std::vector<std::string> join_switch_values(const CLI::App& app, int argc, const char* const* argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 < argc && is_flag(app, arg) && is_boolean_word(argv[i + 1])) {
      args.push_back(arg + "=" + argv[++i]);
    } else {
      args.push_back(arg);
    }
  }
  return args;
}

void parse_command_line(CLI::App& app, int argc, const char* const* argv) {
  std::vector<std::string> args = join_switch_values(app, argc, argv);
  std::reverse(args.begin(), args.end());  // CLI11 takes a vector last argument first
  app.parse(args);
}

int report_command_line_error(const CLI::App& app, const CLI::ParseError& error,
                              bool speak) {
  if (error.get_exit_code() == 0) {  // --help, --version
    if (speak) app.exit(error);
    return 0;
  }
  std::string message = error.what();
  if (dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr) {
    // The arguments nothing took, in the order they were given: remaining()
    // keeps that order, CLI11's own message reverses it.
    const std::vector<std::string> left = app.remaining();
    std::string listed;
    for (const std::string& arg : left) listed += (listed.empty() ? "" : " ") + arg;
    if (!listed.empty()) message = (left.size() == 1 ? "unexpected argument: " : "unexpected arguments: ") + listed;
  }
  if (speak) write_stderr_line("error: " + one_line(message) + " (run with --help for the flags)");
  return kExitUsage;
}

std::string without_source_location(const std::string& message) {
  static const std::regex location(R"( \[[A-Za-z0-9_./-]+\.(cpp|h|cu|cuh):[0-9]+\]$)");
  return std::regex_replace(message, location, "");
}

}  // namespace launch
