// A CLI11 config formatter for JSON files, so `--config run.json` feeds the
// same options (and the same validation) as the command line, and any flag
// given on the command line overrides the file.
//
// Keys are flag names without the leading dashes. Objects may group keys for
// readability ({"optimizer": {"lr": 1e-3}}); the group names are ignored.
#pragma once

#include <CLI/CLI.hpp>
#include <istream>
#include <string>
#include <vector>

namespace launch {

class JsonConfig : public CLI::Config {
 public:
  // Writes every option that has a value (and, if default_also, the defaults).
  std::string to_config(const CLI::App* app, bool default_also, bool write_description,
                        std::string prefix) const override;
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override;
};

}  // namespace launch
