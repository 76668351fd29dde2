#include "launch/checkpoint/checkpoint_records.h"

#include <limits>

#include "launch/checkpoint/checkpoint_files.h"
#include "launch/formats/untrusted_files.h"

namespace launch::checkpoint_records {

namespace {

constexpr std::int64_t kMax64 = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kMax32 = std::numeric_limits<std::int32_t>::max();

std::string integer_range(std::int64_t lo, std::int64_t hi) {
  if (hi == kMax64) return lo == 0 ? "a non-negative integer" : "an integer of at least " + std::to_string(lo);
  return "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
}

// The fields of one JSON object of a checkpoint file, each read with its
// type and range checked; `where` ("checkpoint 'DIR': 'rank_00000.json'
// record 3") begins every complaint.
class Fields {
 public:
  Fields(const nlohmann::json& object, std::string where) : object_(object), where_(std::move(where)) {
    if (!object_.is_object()) damaged(where_, " is ", json_excerpt(object_), ", expected a JSON object");
  }
  const std::string& where() const { return where_; }
  void set_where(std::string where) { where_ = std::move(where); }
  bool has(const char* key) const { return object_.contains(key); }
  const nlohmann::json& at(const char* key) const {
    if (!object_.contains(key)) damaged(where_, " has no \"", key, "\"");
    return object_[key];
  }
  std::int64_t integer(const char* key, std::int64_t lo, std::int64_t hi) const {
    const nlohmann::json& value = at(key);
    const std::optional<std::int64_t> n = json_integer(value, lo, hi);
    if (!n) damaged(where_, ": \"", key, "\" is ", json_excerpt(value), ", expected ", integer_range(lo, hi));
    return *n;
  }
  std::string string(const char* key) const {
    const nlohmann::json& value = at(key);
    if (!value.is_string()) damaged(where_, ": \"", key, "\" is ", json_excerpt(value), ", expected a string");
    return value.get<std::string>();
  }
  // 1 to 4 non-negative dimensions whose product fits an int64.
  engine::Shape shape(const char* key) const {
    const nlohmann::json& value = at(key);
    std::vector<std::int64_t> dims;
    bool integers = value.is_array() && !value.empty() && value.size() <= engine::Shape::kMaxDims;
    for (std::size_t i = 0; integers && i < value.size(); ++i) {
      const std::optional<std::int64_t> d = json_integer(value[i], 0, kMax64);
      integers = d.has_value();
      if (d) dims.push_back(*d);
    }
    if (!integers)
      damaged(where_, ": \"", key, "\" is ", json_excerpt(value), ", expected 1 to ", engine::Shape::kMaxDims,
              " non-negative integers");
    if (!checked_product(dims))
      damaged(where_, ": \"", key, "\" ", json_excerpt(value), " has more elements than a 64-bit integer counts");
    return shape_from_json(value);
  }
  // An array of strings.
  std::vector<std::string> strings(const nlohmann::json& value, const char* key) const {
    std::vector<std::string> out;
    bool ok = value.is_array();
    for (std::size_t i = 0; ok && i < value.size(); ++i) {
      ok = value[i].is_string();
      if (ok) out.push_back(value[i].get<std::string>());
    }
    if (!ok) damaged(where_, ": \"", key, "\" is ", json_excerpt(value), ", expected an array of file names");
    return out;
  }

 private:
  const nlohmann::json& object_;
  std::string where_;
};

// `count` elements of 4 bytes at `byte_offset` of `file` lie within the
// bytes state.json says were written to it (fstat checks the file has them).
void check_inside(const Fields& record, const std::string& file, const FileEntry& entry, std::int64_t byte_offset,
                  std::int64_t count, const std::string& what) {
  std::int64_t bytes = 0, end = 0;
  if (__builtin_mul_overflow(count, std::int64_t{4}, &bytes) || __builtin_add_overflow(byte_offset, bytes, &end) ||
      static_cast<std::uint64_t>(end) > entry.bytes)
    damaged(record.where(), ": ", what, " at \"byte_offset\" ", byte_offset, " lie past the end of '", file, "' (",
            entry.bytes, " bytes written)");
}

}  // namespace

const FileEntry& StateRecord::file(const std::string& name, const std::string& where) const {
  const std::string outside = outside_folder_problem(step_dir, name);
  if (!outside.empty()) damaged(where, ": names '", name, "', which ", outside);
  const auto it = files.find(name);
  if (it == files.end())
    damaged(where, ": names '", name, "', which is not among the files ", checkpoint_files::kStateFile, " lists");
  return it->second;
}

StateRecord parse_state(const nlohmann::json& state, const std::string& step_dir) {
  Fields fields(state, "checkpoint '" + step_dir + "': '" + checkpoint_files::kStateFile + "'");
  StateRecord out;
  out.step_dir = step_dir;
  out.step = fields.integer("step", 0, kMax64);
  out.optimizer_steps = fields.has("optimizer_steps") ? fields.integer("optimizer_steps", -1, kMax64) : -1;
  out.sampler_rng = fields.has("sampler_rng") ? fields.string("sampler_rng") : "";
  out.run = fields.at("run");
  if (!out.run.is_object())
    damaged(fields.where(), ": \"run\" is ", json_excerpt(out.run), ", expected an object (the run's identity)");
  out.layout = state.value("layout", nlohmann::json());
  out.optimizer = state.value("optimizer", nlohmann::json());
  out.lr_schedule = state.value("lr_schedule", nlohmann::json());  // checked field by field where it is compared
  // Every file the checkpoint lists, each name inside the folder: names
  // come from the file, and a '..', an absolute path or a link leading out
  // would have the reader open any file the user can.
  const nlohmann::json& files = fields.at("files");
  if (!files.is_object()) damaged(fields.where(), ": \"files\" is ", json_excerpt(files), ", expected an object");
  for (const auto& [name, value] : files.items()) {
    const std::string outside = outside_folder_problem(step_dir, name);
    if (!outside.empty()) damaged(fields.where(), " lists '", name, "', which ", outside);
    const Fields entry(value, fields.where() + " entry '" + name + "'");
    out.files[name] = {static_cast<std::uint64_t>(entry.integer("bytes", 0, kMax64)), entry.string("xxh3")};
  }
  out.shards = fields.strings(fields.at("shards"), "shards");
  if (fields.has("rank_extras")) {
    const nlohmann::json& extras = fields.at("rank_extras");
    if (!extras.is_object())
      damaged(fields.where(), ": \"rank_extras\" is ", json_excerpt(extras), ", expected an object");
    for (const auto& [tag, names] : extras.items()) out.rank_extras[tag] = fields.strings(names, "rank_extras");
  }
  return out;
}

std::vector<TensorRecord> parse_shard_index(const nlohmann::json& index, const std::string& index_name,
                                            const StateRecord& state, const std::string& step_dir) {
  const Fields top(index, "checkpoint '" + step_dir + "': '" + index_name + "'");
  const nlohmann::json& tensors = top.at("tensors");
  if (!tensors.is_array())
    damaged(top.where(), ": \"tensors\" is ", json_excerpt(tensors), ", expected an array of records");
  std::vector<TensorRecord> out;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    Fields r(tensors[i], top.where() + " record " + std::to_string(i));
    TensorRecord t;
    t.slice.name = r.string("name");
    t.slice.kind = r.string("kind");
    r.set_where(r.where() + " ('" + t.slice.name + "' " + t.slice.kind + ")");
    if (t.slice.kind != "param" && t.slice.kind != "adam_m" && t.slice.kind != "adam_v")
      damaged(r.where(), ": \"kind\" is not one of param, adam_m, adam_v");
    t.slice.global_shape = r.shape("global_shape");
    t.slice.shape = r.shape("shape");
    // The split's numbers, each in range before any is used: a rank at or
    // past its count, a dim out of range or zero parts would index or
    // divide out of bounds in the re-cutting (tensor_slices.h).
    const Fields split(r.at("split"), r.where() + " split");
    model::Split& s = t.slice.split;
    s.dim = static_cast<int>(split.integer("dim", -1, t.slice.global_shape.ndim() - 1));
    s.parts = static_cast<int>(split.integer("parts", 1, kMax32));
    s.count = static_cast<int>(split.integer("count", 1, kMax32));
    s.rank = static_cast<int>(split.integer("rank", 0, s.count - 1));
    if (r.at("split").contains("first_block"))
      s.first_block = split.integer("first_block", 0, t.slice.global_shape.ndim() > 0 && s.dim >= 0
                                                          ? t.slice.global_shape[s.dim] : 0);
    const std::string problem = split_problem(t.slice.global_shape, t.slice.shape, s);
    if (!problem.empty()) damaged(r.where(), ": ", problem);
    const std::string dtype = r.string("dtype");
    if (dtype != "f32") damaged(r.where(), ": \"dtype\" is '", dtype, "', expected 'f32' (checkpoints hold fp32)");
    t.file = r.string("file");
    t.byte_offset = r.integer("byte_offset", 0, kMax64);
    check_inside(r, t.file, state.file(t.file, r.where()), t.byte_offset, t.slice.shape.numel(),
                 "its " + t.slice.shape.str() + " floats");
    t.xxh3 = r.string("xxh3");
    out.push_back(std::move(t));
  }
  return out;
}

ExtraIndex parse_extra_index(const nlohmann::json& index, const std::string& index_name, const StateRecord& state,
                             const std::string& step_dir) {
  const Fields top(index, "checkpoint '" + step_dir + "': '" + index_name + "'");
  ExtraIndex out;
  out.rank = top.integer("rank", 0, kMax32);
  out.tag = top.string("tag");
  out.file = top.string("file");
  const FileEntry& entry = state.file(out.file, top.where());
  out.meta = top.at("meta");
  const nlohmann::json& arrays = top.at("arrays");
  if (!arrays.is_array()) damaged(top.where(), ": \"arrays\" is ", json_excerpt(arrays), ", expected an array");
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    Fields a(arrays[i], top.where() + " array " + std::to_string(i));
    ArrayRecord array;
    array.name = a.string("name");
    a.set_where(a.where() + " ('" + array.name + "')");
    array.count = a.integer("count", 0, kMax64);
    const std::string dtype = a.string("dtype");
    if (dtype != "f32") damaged(a.where(), ": \"dtype\" is '", dtype, "', expected 'f32'");
    array.byte_offset = a.integer("byte_offset", 0, kMax64);
    // Before the reader allocates `count` floats for it.
    check_inside(a, out.file, entry, array.byte_offset, array.count,
                 "its \"count\" of " + std::to_string(array.count) + " floats");
    array.xxh3 = a.string("xxh3");
    out.arrays.push_back(std::move(array));
  }
  return out;
}

}  // namespace launch::checkpoint_records
