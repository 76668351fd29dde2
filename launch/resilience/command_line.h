// The command line of the three programs (train, prepare, plan), read and
// refused alike:
//   - every boolean flag works as a bare switch (`--sequence-parallel`, as
//     Megatron-LM users type it), as `--flag=true|false` and `--flag
//     true|false`, and as `--no-flag`: CLI11 takes the first three forms of a
//     flag declared "--flag,!--no-flag" but not `--flag false`, which is
//     joined into `--flag=false` before parsing;
//   - a refused command line is one line on stderr with the `error:` prefix
//     every other error has, unknown arguments in the order given (CLI11
//     lists them reversed), and the usage exit code.
// Errors in what the user gave carry no source location: `[file:line]`
// belongs to internal errors only (without_source_location).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace launch {

// argv[1..argc) with `--flag value` joined into `--flag=value` where --flag
// is one of `app`'s flags and value a boolean word (true, false, on, off,
// yes, no, 1, 0; any case).
std::vector<std::string> join_switch_values(const CLI::App& app, int argc, const char* const* argv);

// Parses the joined command line; throws CLI::ParseError as app.parse does.
void parse_command_line(CLI::App& app, int argc, const char* const* argv);

// For a ParseError from parse_command_line: --help and --version print
// and return 0; anything else prints one "error: ..." line (when `speak`)
// and returns kExitUsage.
int report_command_line_error(const CLI::App& app, const CLI::ParseError& error,
                              bool speak = true);

// `message` without the " [path/file.cpp:123]" that ENGINE_CHECK appends
// (engine/check.h): for errors in the user's input.
std::string without_source_location(const std::string& message);

}  // namespace launch
