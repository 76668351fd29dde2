#include "launch/json_config.h"

#include <nlohmann/json.hpp>

namespace launch {
namespace {

// Flattens one JSON value into CLI11 items; objects only group keys.
void flatten(const std::string& key, const nlohmann::json& value, std::vector<CLI::ConfigItem>& items) {
  if (value.is_object()) {
    for (const auto& [k, v] : value.items()) flatten(k, v, items);
    return;
  }
  CLI::ConfigItem item;
  item.name = key;
  auto text = [](const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
  if (value.is_array()) {
    for (const auto& v : value) item.inputs.push_back(text(v));
  } else {
    item.inputs.push_back(text(value));
  }
  items.push_back(item);
}

}  // namespace

std::string JsonConfig::to_config(const CLI::App* app, bool default_also, bool, std::string) const {
  nlohmann::ordered_json out;
  for (const CLI::Option* opt : app->get_options()) {
    if (opt->get_lnames().empty() || !opt->get_configurable()) continue;
    const std::string name = opt->get_lnames().front();
    if (name == "help" || name == "config") continue;
    std::vector<std::string> values = opt->reduced_results();
    if (values.empty() && default_also && !opt->get_default_str().empty()) values = {opt->get_default_str()};
    if (values.empty()) continue;
    // Numbers and booleans stay numbers and booleans when they parse as JSON.
    auto value_of = [](const std::string& s) {
      nlohmann::ordered_json v = nlohmann::ordered_json::parse(s, nullptr, false);
      return v.is_discarded() || v.is_object() || v.is_array() ? nlohmann::ordered_json(s) : v;
    };
    if (values.size() == 1) {
      out[name] = value_of(values.front());
    } else {
      for (const std::string& v : values) out[name].push_back(value_of(v));
    }
  }
  return out.dump(2) + "\n";
}

std::vector<CLI::ConfigItem> JsonConfig::from_config(std::istream& input) const {
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(input);
  } catch (const nlohmann::json::parse_error& e) {
    throw CLI::ConversionError(std::string("config file is not valid JSON: ") + e.what());
  }
  if (!root.is_object()) throw CLI::ConversionError("config file must hold a JSON object of flag names to values");
  std::vector<CLI::ConfigItem> items;
  for (const auto& [k, v] : root.items()) flatten(k, v, items);
  return items;
}

}  // namespace launch
