#include "launch/run/json_config.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "launch/files/untrusted_json.h"

namespace launch {
namespace {

// Ordered, so that "given twice" names the two places in the order the file
// has them and the items reach CLI11 in file order.
using Json = nlohmann::ordered_json;

// The JSON a flag's value must be, from the type CLI11 records for its option.
enum class Kind { kInteger, kUnsigned, kNumber, kBoolean, kText, kAny };

Kind kind_of(const CLI::Option& option) {
  // A flag takes no value on the command line (--sequence-parallel): in a
  // file it is on or off. CLI11 tells flags apart the same way.
  if (option.get_expected_min() == 0) return Kind::kBoolean;
  // CLI11 appends each validator's description to the type ("TEXT:{cosine,constant}").
  const std::string type = option.get_type_name();
  const std::string base = type.substr(0, type.find(':'));
  if (base == "INT") return Kind::kInteger;
  if (base == "UINT") return Kind::kUnsigned;
  if (base == "FLOAT") return Kind::kNumber;
  if (base == "BOOLEAN") return Kind::kBoolean;
  if (base == "TEXT") return Kind::kText;
  return Kind::kAny;  // a type this file does not know: CLI11's own conversion checks it
}

bool fits(Kind kind, const Json& value) {
  switch (kind) {
    case Kind::kInteger: return value.is_number_integer();  // 8, -1; not 8.5, 8.0 or "8"
    case Kind::kUnsigned: return value.is_number_unsigned();
    case Kind::kNumber: return value.is_number();
    case Kind::kBoolean: return value.is_boolean();
    case Kind::kText: return value.is_string();
    case Kind::kAny: return !value.is_structured();
  }
  return false;
}

std::string expectation(Kind kind, bool several) {
  struct Words {
    const char* one;
    const char* many;
  };
  static const std::map<Kind, Words> words = {
      {Kind::kInteger, {"an integer", "integers"}},
      {Kind::kUnsigned, {"a non-negative integer", "non-negative integers"}},
      {Kind::kNumber, {"a number", "numbers"}},
      {Kind::kBoolean, {"true or false", "true or false values"}},
      {Kind::kText, {"a string", "strings"}},
      {Kind::kAny, {"a single value", "single values"}},
  };
  const Words& w = words.at(kind);
  return several ? std::string(w.one) + " or an array of " + w.many : std::string(w.one);
}

// A value as the file has it, short enough for a one-line message.
std::string shown(const Json& value) {
  constexpr std::size_t kMax = 60;
  // One line: dump() escapes newlines in strings; bytes that are not UTF-8
  // are replaced rather than thrown about (the file is untrusted).
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() <= kMax) return text;
  std::size_t cut = kMax - 3;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 character
  return text.substr(0, cut) + "...";
}

std::string joined(const std::string& group, const std::string& key) { return group.empty() ? key : group + "." + key; }

// Parses the file, refusing a key given twice in one object: nlohmann, like
// most JSON parsers, keeps the last one silently, so only the parser
// callback, which sees every key as it is read, can tell.
Json parse_refusing_duplicates(std::istream& input, const std::string& where) {
  struct Level {
    bool object;
    std::string path;  // of the enclosing keys, "optimizer.adam"
    std::set<std::string> keys;
    std::string last_key;
  };
  std::vector<Level> levels;
  std::string duplicate;  // the first one; the parse goes on so a syntax error still wins
  const Json::parser_callback_t note = [&](int, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start: {
        std::string path;
        if (!levels.empty()) path = levels.back().object ? joined(levels.back().path, levels.back().last_key)
                                                         : levels.back().path;
        levels.push_back({event == Json::parse_event_t::object_start, path, {}, {}});
        break;
      }
      case Json::parse_event_t::object_end:
      case Json::parse_event_t::array_end:
        levels.pop_back();
        break;
      case Json::parse_event_t::key: {
        Level& level = levels.back();
        level.last_key = parsed.get<std::string>();
        if (!level.keys.insert(level.last_key).second && duplicate.empty())
          duplicate = "key '" + level.last_key + "' is given twice" +
                      (level.path.empty() ? std::string() : " in '" + level.path + "'");
        break;
      }
      case Json::parse_event_t::value:
        break;
    }
    return true;  // keep everything: the callback only watches
  };
  // Untrusted text: bounded in size and nesting before the parser sees it
  // (launch/files/untrusted_json.h); any parse failure, a number too large
  // for a double included, is one line naming the file.
  const std::string text(std::istreambuf_iterator<char>(input), {});
  Json root;
  try {
    check_json_text(text, where, kMaxConfigJsonBytes);
    root = Json::parse(text, note);
  } catch (const Json::exception& e) {
    throw CLI::ConfigError(where + " is not valid JSON: " + e.what());
  } catch (const std::runtime_error& e) {
    throw CLI::ConfigError(e.what());
  }
  if (!duplicate.empty()) throw CLI::ConfigError(where + ": " + duplicate);
  return root;
}

// The option CLI11 will give `key` to, found the way CLI11's
// App::_parse_single_config finds it.
const CLI::Option* option_for(const CLI::App& app, const std::string& key) {
  const CLI::Option* option = app.get_option_no_throw("--" + key);
  if (option == nullptr && key.size() == 1) option = app.get_option_no_throw("-" + key);
  if (option == nullptr) option = app.get_option_no_throw(key);
  return option;
}

// `micro_batch` for `micro-batch`: the spelling `plan --json` and the sweep's
// layout files use (Python and JSON keys cannot easily hold dashes).
std::string dashed(std::string key) {
  std::replace(key.begin(), key.end(), '_', '-');
  return key;
}

// Levenshtein distance, for "did you mean".
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// The configurable flag nearest to `key`, when it is near enough to be a typo
// (at most a third of the key's letters apart), else "".
std::string nearest_flag(const CLI::App& app, const std::string& key) {
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(2, key.size() / 3) + 1;
  for (const CLI::Option* option : app.get_options()) {
    if (!option->get_configurable()) continue;
    for (const std::string& name : option->get_lnames()) {
      const std::size_t d = edit_distance(key, name);
      if (d < best_distance) best_distance = d, best = name;
    }
  }
  return best;
}

// Turns the parsed file into CLI11 items, one per flag, checking each key
// against the app's options on the way.
class Flattener {
 public:
  Flattener(const CLI::App& app, std::string where) : app_(app), where_(std::move(where)) {}

  // `group` is the path of the enclosing objects, `group_key` the innermost
  // one's key ("" at the top level).
  void add(const Json& object, const std::string& group, const std::string& group_key) {
    for (const auto& [key, value] : object.items()) {
      // Objects only group keys, at any depth.
      if (value.is_object()) {
        add(value, joined(group, key), key);
        continue;
      }
      const std::string name = option_for(app_, key) == nullptr ? dashed(key) : key;
      const CLI::Option* option = option_for(app_, name);
      if (option == nullptr) {
        // With extras allowed CLI11 keeps or drops the key itself.
        if (app_.get_allow_config_extras() == CLI::config_extras_mode::error) {
          std::string what = "key '" + key + "'" + (group.empty() ? "" : " in '" + group + "'") + " is not a known flag";
          // {"lr": {"value": 1}} reads as a group "lr": most likely a value
          // for --lr was meant, so say what that takes. Not refused as a
          // wrong type, as a group may share a flag's name ("optimizer").
          const CLI::Option* flag = option_for(app_, dashed(group_key));
          if (!group.empty() && flag != nullptr && flag->get_configurable())
            what += "; '" + group_key + "' itself is a flag, which takes " + expected_for(*flag) + ", not an object";
          else if (const std::string near = nearest_flag(app_, name); !near.empty())
            what += " (did you mean '" + near + "'?)";
          unknown_.push_back(what);
        }
        items_.push_back(item(name, value));
        continue;
      } else if (!option->get_configurable()) {
        // --help, --config: CLI11 refuses these too (unless told to ignore
        // them), but without the file's name.
        if (app_.get_allow_config_extras() != CLI::config_extras_mode::ignore_all)
          refuse("key '" + key + "' cannot be set in a config file");
      } else {
        const std::string place = joined(group, key);
        const auto [first, inserted] = seen_.emplace(option, place);
        // Groups are flattened: two keys in different groups, or spelt with
        // and without dashes, set one flag, and CLI11 would keep one quietly.
        if (!inserted)
          refuse("key '" + key + "' is given twice ('" + first->second + "' and '" + place + "' set the same flag)");
        const Kind kind = kind_of(*option);
        const bool several = option->get_items_expected_max() > 1;
        bool ok = value.is_array() ? several && !value.empty() : fits(kind, value);
        if (value.is_array()) {
          for (const Json& element : value) ok = ok && fits(kind, element);
        }
        if (!ok) refuse_type(key, *option, value);
      }
      items_.push_back(item(name, value));
    }
  }

  // Every key that is no flag, named in one line, each with the nearest
  // flag: a file is fixed in one go, not one key per attempt.
  std::vector<CLI::ConfigItem> items() && {
    if (!unknown_.empty()) {
      std::string what;
      for (std::size_t i = 0; i < unknown_.size(); ++i) what += (i ? "; " : "") + unknown_[i];
      refuse(what);
    }
    return std::move(items_);
  }

 private:
  static CLI::ConfigItem item(const std::string& key, const Json& value) {
    CLI::ConfigItem item;
    item.name = key;
    // CLI11 converts text; a JSON string is its content, anything else its JSON spelling.
    auto text = [](const Json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
    if (value.is_array()) {
      for (const Json& v : value) item.inputs.push_back(text(v));
    } else {
      item.inputs.push_back(text(value));
    }
    return item;
  }

  [[noreturn]] void refuse(const std::string& what) const { throw CLI::ConfigError(where_ + ": " + what); }

  static std::string expected_for(const CLI::Option& option) {
    return expectation(kind_of(option), option.get_items_expected_max() > 1);
  }

  [[noreturn]] void refuse_type(const std::string& key, const CLI::Option& option, const Json& value) const {
    refuse("key '" + key + "' must be " + expected_for(option) + ", got " + shown(value));
  }

  const CLI::App& app_;
  std::string where_;
  std::map<const CLI::Option*, std::string> seen_;  // flag -> where the file set it
  std::vector<CLI::ConfigItem> items_;
  std::vector<std::string> unknown_;  // keys that are no flag, as they will be named
};

}  // namespace

std::string JsonConfig::to_config(const CLI::App* app, bool default_also, bool, std::string) const {
  nlohmann::ordered_json out;
  for (const CLI::Option* opt : app->get_options()) {
    if (opt->get_lnames().empty() || !opt->get_configurable()) continue;
    const std::string name = opt->get_lnames().front();
    if (name == "help" || name == "config") continue;
    std::vector<std::string> values = opt->reduced_results();
    const Kind kind = kind_of(*opt);
    // An empty text is a value too (--sample-prompt ""); an empty default of
    // another kind means the option has none to write.
    if (values.empty() && default_also && (!opt->get_default_str().empty() || kind == Kind::kText))
      values = {opt->get_default_str()};
    if (values.empty()) continue;
    // Each value as the JSON type from_config wants for this flag, so the
    // file reads back: a text flag stays a string even when it looks like a
    // number ("--sample-prompt 42"). A value that has no such JSON spelling
    // (--lr nan) is written as a string, which reading back refuses.
    auto value_of = [kind](const std::string& s) -> Json {
      if (kind == Kind::kText) return Json(s);
      if (kind == Kind::kBoolean) {
        try {
          return Json(CLI::detail::to_flag_value(s) > 0);  // CLI11's spellings: true, 1, on, yes, ...
        } catch (const std::exception&) {
          return Json(s);
        }
      }
      const Json v = Json::parse(s, nullptr, false);
      return v.is_discarded() || v.is_structured() || !fits(kind, v) ? Json(s) : v;
    };
    if (values.size() == 1) {
      out[name] = value_of(values.front());
    } else {
      for (const std::string& v : values) out[name].push_back(value_of(v));
    }
  }
  // Text that is not UTF-8 (a byte-level --sample-prompt, a path) is
  // written with U+FFFD rather than failing.
  return out.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

// Its refusals quote the file (keys, values, nlohmann-json's "last read: ..."), so each is made printable on
// the way out (launch/files/untrusted_json.h): `train` prints it as one line whatever the bytes.
std::vector<CLI::ConfigItem> JsonConfig::from_config(std::istream& input) const try {
  // CLI11 gives the formatter a stream, not the file's name; the --config
  // option already holds the name when the file is read. With several files
  // their order is CLI11's, so then no name is given rather than a wrong one.
  std::string where = "config file";
  if (const CLI::Option* config = app_->get_config_ptr(); config != nullptr) {
    const auto files = config->as<std::vector<std::string>>();
    if (files.size() == 1 && !files.front().empty()) where += " '" + files.front() + "'";
  }
  const Json root = parse_refusing_duplicates(input, where);
  if (!root.is_object())
    throw CLI::ConfigError(where + " must hold a JSON object of flag names to values, got " + shown(root));
  Flattener flattener(*app_, where);
  flattener.add(root, "", "");
  return std::move(flattener).items();
} catch (const CLI::ConfigError& e) {
  throw CLI::ConfigError(printable_text(e.what()));
}

}  // namespace launch
