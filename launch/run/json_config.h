// A CLI11 config formatter for JSON files, so `--config run.json` feeds the
// same options (and the same validation) as the command line, and any flag
// given on the command line overrides the file.
//
// Keys are flag names without the leading dashes. Objects may group keys for
// readability ({"optimizer": {"lr": 1e-3}}); the group names are ignored.
//
// The file is checked more strictly than CLI11 checks one, because a config
// file is written once and trusted for many runs: a mistake in it should stop
// the run, not quietly change it. Refused, each with one line that names the
// file and the key:
//   - a key given twice: in one object (JSON parsers keep the last silently),
//     or in two groups, which set the same flag once flattened;
//   - a value of the wrong JSON type for its flag: integer flags take JSON
//     integers (not 8.5, not "8"), floating flags JSON numbers, boolean flags
//     true or false, text flags strings, and arrays only flags that take
//     several values;
//   - a key that is no flag (when the app refuses config extras, as `train`
//     does), which CLI11 would report as "INI was not able to parse KEY".
#pragma once

#include <CLI/CLI.hpp>
#include <istream>
#include <string>
#include <vector>

namespace launch {

class JsonConfig : public CLI::Config {
 public:
  // `app` is the app this formatter is registered on (it must outlive the
  // formatter, which the app owns): it tells each key's option and type, and
  // the path of the file being read (its --config option), for the messages.
  explicit JsonConfig(const CLI::App* app) : app_(app) {}

  // Writes every option that has a value (and, if default_also, the defaults),
  // each as the JSON type from_config expects for it, so the output reads back.
  std::string to_config(const CLI::App* app, bool default_also, bool write_description,
                        std::string prefix) const override;
  // Throws CLI::ConfigError for invalid JSON and for the mistakes listed above.
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override;

 private:
  const CLI::App* app_;
};

}  // namespace launch
