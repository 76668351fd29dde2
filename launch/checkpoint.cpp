#include "launch/checkpoint.h"


#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "engine/check.h"
#include "launch/atomic_file.h"
#include "model/gpt_params.h"

namespace launch {

namespace fs = std::filesystem;
using model::GptConfig;
using model::ParamInfo;
using model::ParamRegistry;

namespace {

constexpr int kHeaderInts = 256;
constexpr const char* kStateFormat = "gpt-engine-training-state";
constexpr int kStateVersion = 1;

// The per-layer tensors of llm.c's file, in its order.
constexpr std::array<const char*, 12> kLlmcLayerTensors = {
    "ln_1.weight",      "ln_1.bias",      "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight", "attn.proj.bias",
    "ln_2.weight",      "ln_2.bias",      "mlp.fc.weight",   "mlp.fc.bias",   "mlp.proj.weight",  "mlp.proj.bias"};

// Every registry entry in llm.c's file order.
std::vector<const ParamInfo*> llmc_order(const GptConfig& config, const ParamRegistry& registry) {
  std::vector<const ParamInfo*> order{&registry.find("wte"), &registry.find("wpe")};
  for (const char* suffix : kLlmcLayerTensors)
    for (std::int64_t l = 0; l < config.n_layer; ++l) order.push_back(&registry.find(model::block_param_name(l, suffix)));
  order.push_back(&registry.find("ln_f.weight"));
  order.push_back(&registry.find("ln_f.bias"));
  return order;
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

File open_for_reading(const std::string& path, const char* what) {
  File f(std::fopen(path.c_str(), "rb"));
  ENGINE_CHECK(f != nullptr, "cannot open ", what, " '", path, "': ", std::strerror(errno));
  return f;
}

void read_exact(std::FILE* f, void* out, std::size_t bytes, const std::string& path, const char* what) {
  ENGINE_CHECK(std::fread(out, 1, bytes, f) == bytes, what, " '", path, "' is truncated: expected ", bytes,
               " more bytes");
}

std::string describe_shape(const GptConfig& c) { return c.describe(); }

std::string step_dir_name(std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%08lld", static_cast<long long>(step));
  return name;
}

nlohmann::json shape_json(const engine::Shape& s) {
  nlohmann::json out = nlohmann::json::array();
  for (int i = 0; i < s.ndim(); ++i) out.push_back(s[i]);
  return out;
}

}  // namespace

// ---- llm.c model files -------------------------------------------------------

GptConfig read_llmc_config(const std::string& path) {
  File f = open_for_reading(path, "model file");
  std::array<std::int32_t, kHeaderInts> header{};
  read_exact(f.get(), header.data(), sizeof header, path, "model file");
  ENGINE_CHECK(header[0] == kLlmcModelMagic, "model file '", path, "' has magic ", header[0], ", expected ",
               kLlmcModelMagic, " (an llm.c GPT-2 checkpoint)");
  ENGINE_CHECK(header[1] == kLlmcModelVersionFp32, "model file '", path, "' has version ", header[1],
               ", expected ", kLlmcModelVersionFp32, " (fp32; llm.c's bf16 version 5 is not read)");
  GptConfig c;
  c.max_seq_len = header[2];
  c.vocab_size = header[3];
  c.n_layer = header[4];
  c.n_head = header[5];
  c.n_embd = header[6];
  c.validate();
  ENGINE_CHECK(header[7] == c.padded_vocab(), "model file '", path, "' pads the vocabulary to ", header[7],
               ", this engine pads ", c.vocab_size, " to ", c.padded_vocab());
  return c;
}

void write_llmc_model(const std::string& path, const GptConfig& config, const ParamRegistry& registry,
                      const float* master) {
  std::array<std::int32_t, kHeaderInts> header{};
  header[0] = kLlmcModelMagic;
  header[1] = kLlmcModelVersionFp32;
  header[2] = static_cast<std::int32_t>(config.max_seq_len);
  header[3] = static_cast<std::int32_t>(config.vocab_size);
  header[4] = static_cast<std::int32_t>(config.n_layer);
  header[5] = static_cast<std::int32_t>(config.n_head);
  header[6] = static_cast<std::int32_t>(config.n_embd);
  header[7] = static_cast<std::int32_t>(config.padded_vocab());
  AtomicFile file(path);
  file.write(header.data(), sizeof header);
  for (const ParamInfo* p : llmc_order(config, registry)) {
    ENGINE_CHECK(p->shape == p->global_shape, "write_llmc_model needs the whole model; '", p->name,
                 "' is a slice");
    file.write(master + p->offset, static_cast<std::size_t>(p->numel()) * sizeof(float));
  }
  file.commit();
}

void read_llmc_model(const std::string& path, const GptConfig& expected, const ParamRegistry& registry, float* master) {
  const GptConfig found = read_llmc_config(path);
  ENGINE_CHECK(found == expected, "model file '", path, "' holds a model of another shape: ", describe_shape(found),
               "; this run's model is ", describe_shape(expected));
  File f = open_for_reading(path, "model file");
  ENGINE_CHECK(std::fseek(f.get(), kHeaderInts * sizeof(std::int32_t), SEEK_SET) == 0, "seek in '", path, "' failed");
  for (const ParamInfo* p : llmc_order(expected, registry))
    read_exact(f.get(), master + p->offset, static_cast<std::size_t>(p->numel()) * sizeof(float), path, "model file");
  char extra;
  ENGINE_CHECK(std::fread(&extra, 1, 1, f.get()) == 0, "model file '", path,
               "' is longer than its header's model needs (trailing bytes)");
}

// ---- training state ----------------------------------------------------------

namespace {

std::string shard_name(int rank, const char* extension) {
  char name[32];
  std::snprintf(name, sizeof name, "rank_%05d.%s", rank, extension);
  return name;
}

nlohmann::json split_json(const model::Split& s) {
  return {{"dim", s.dim}, {"parts", s.parts}, {"rank", s.rank}, {"count", s.count}};
}

// Writes this rank's slices and their index into `dir`.
void write_shard(const std::string& dir, const ParamRegistry& registry, const HostState& host, int rank) {
  const std::string data_name = shard_name(rank, "bin");
  AtomicFile data((fs::path(dir) / data_name).string());
  nlohmann::json tensors = nlohmann::json::array();
  const std::pair<const char*, const float*> kinds[] = {
      {"param", host.master}, {"adam_m", host.adam_m}, {"adam_v", host.adam_v}};
  for (const auto& [kind, buffer] : kinds) {
    for (const ParamInfo& p : registry.entries()) {
      tensors.push_back({{"name", p.name},
                         {"kind", kind},
                         {"global_shape", shape_json(p.global_shape)},
                         {"split", split_json(p.split)},
                         {"shape", shape_json(p.shape)},
                         {"dtype", "f32"},
                         {"file", data_name},
                         {"byte_offset", data.bytes_written()}});
      data.write(buffer + p.offset, static_cast<std::size_t>(p.numel()) * sizeof(float));
    }
  }
  data.commit();
  AtomicFile index((fs::path(dir) / shard_name(rank, "json")).string());
  index.write(nlohmann::json{{"rank", rank}, {"tensors", tensors}}.dump(1));
  index.commit();
}

std::string extra_name(int rank, const std::string& tag, const char* extension) {
  char name[32];
  std::snprintf(name, sizeof name, "rank_%05d_", rank);
  return name + tag + "." + extension;
}

void write_rank_extra(const std::string& dir, const RankExtra& extra, int rank) {
  const std::string data_name = extra_name(rank, extra.tag, "bin");
  AtomicFile data((fs::path(dir) / data_name).string());
  nlohmann::json arrays = nlohmann::json::array();
  for (const RankArray& a : extra.arrays) {
    arrays.push_back({{"name", a.name}, {"count", a.count}, {"dtype", "f32"}, {"byte_offset", data.bytes_written()}});
    if (a.count > 0) data.write(a.data, static_cast<std::size_t>(a.count) * sizeof(float));
  }
  data.commit();
  AtomicFile index((fs::path(dir) / extra_name(rank, extra.tag, "json")).string());
  index.write(nlohmann::json{{"rank", rank}, {"tag", extra.tag}, {"file", data_name}, {"meta", extra.meta},
                             {"arrays", arrays}}
                  .dump(1));
  index.commit();
}


}  // namespace

bool all_ranks_ok(parallel::Communicator& world, bool ok) {
  std::int32_t failed = ok ? 0 : 1;
  world.all_reduce(engine::Tensor(&failed, engine::Shape{1}, engine::DType::kI32, engine::DeviceType::kCpu),
                   parallel::ReduceOp::kMax);
  return failed == 0;
}

std::string broadcast_string(parallel::Communicator& world, const std::string& text, int root) {
  std::int32_t size = static_cast<std::int32_t>(text.size());
  world.broadcast(engine::Tensor(&size, engine::Shape{1}, engine::DType::kI32, engine::DeviceType::kCpu), root);
  // Sent as i32 words (the communicators move numbers, not bytes).
  std::vector<std::int32_t> words(static_cast<std::size_t>((size + 3) / 4), 0);
  if (world.rank() == root) std::memcpy(words.data(), text.data(), text.size());
  if (!words.empty())
    world.broadcast(engine::Tensor(words.data(), engine::Shape{static_cast<std::int64_t>(words.size())},
                                   engine::DType::kI32, engine::DeviceType::kCpu),
                    root);
  return std::string(reinterpret_cast<const char*>(words.data()), static_cast<std::size_t>(size));
}

std::string first_error(parallel::Communicator& world, const std::string& error) {
  // The maximum of (size - rank) over failing ranks picks the lowest one.
  std::int32_t first = error.empty() ? 0 : world.size() - world.rank();
  world.all_reduce(engine::Tensor(&first, engine::Shape{1}, engine::DType::kI32, engine::DeviceType::kCpu),
                   parallel::ReduceOp::kMax);
  if (first == 0) return "";
  return broadcast_string(world, error, world.size() - first);
}

std::string save_checkpoint(const std::string& checkpoint_dir, const TrainingState& state, const GptConfig& config,
                            const ParamRegistry& registry, const HostState& host, const ShardRole& role,
                            parallel::Communicator& world, const RankExtra* extra) {
  const std::string name = step_dir_name(state.step);
  const std::string final_dir = (fs::path(checkpoint_dir) / name).string();
  const std::string temp_dir = final_dir + ".tmp";
  std::string error;
  if (world.rank() == 0) {
    std::error_code ec;
    fs::create_directories(checkpoint_dir, ec);
    if (!ec) fs::remove_all(temp_dir, ec);  // left by a crash
    if (!ec) fs::create_directory(temp_dir, ec);
    if (ec) error = "cannot create checkpoint directory '" + temp_dir + "': " + ec.message();
  }
  error = first_error(world, error);
  if (!error.empty())
    throw CheckpointError("checkpoint at step " + std::to_string(state.step) +
                          " not started (the previous one is intact): " + error);

  // Every rank writes its part; a failure anywhere abandons the temporary
  // directory and leaves the previous checkpoint as it was.
  try {
    ENGINE_CHECK(!role.fail_writes, "cannot write '", temp_dir, "': No space left on device (injected by "
                 "ENGINE_TEST_FAIL_SAVES)");
    if (role.writes_shard) write_shard(temp_dir, registry, host, role.rank);
    if (role.writes_llmc) write_llmc_model((fs::path(temp_dir) / "model.bin").string(), config, registry, host.master);
    if (extra) write_rank_extra(temp_dir, *extra, role.rank);
  } catch (const std::exception& e) {
    error = e.what();
  }
  error = first_error(world, error);
  if (!error.empty()) {
    if (world.rank() == 0) {
      std::error_code ec;
      fs::remove_all(temp_dir, ec);
    }
    throw CheckpointError("checkpoint at step " + std::to_string(state.step) +
                          " abandoned (the previous one is intact): " + error);
  }

  // Who wrote a shard (data-parallel rank 0 of each position), for the index.
  std::vector<std::int32_t> writers(static_cast<std::size_t>(world.size()), 0);
  std::int32_t mine = role.writes_shard ? 1 : 0;
  world.all_gather(engine::Tensor(&mine, engine::Shape{1}, engine::DType::kI32, engine::DeviceType::kCpu),
                   engine::Tensor(writers.data(), engine::Shape{world.size()}, engine::DType::kI32,
                                  engine::DeviceType::kCpu));
  if (world.rank() == 0) {
    try {
      // The file names come from what each rank said it wrote, not from a
      // directory listing, which a network file system may serve stale.
      nlohmann::json shards = nlohmann::json::array();
      nlohmann::json extras = nlohmann::json::array();
      for (int r = 0; r < world.size(); ++r) {
        std::vector<std::string> files;
        if (writers[r]) files.push_back(shard_name(r, "json"));
        if (extra) files.push_back(extra_name(r, extra->tag, "json"));
        for (const std::string& file : files)
          ENGINE_CHECK(fs::exists(fs::path(temp_dir) / file), "rank ", r, " wrote '", file,
                       "' but rank 0 does not see it in '", temp_dir, "' (is the directory on a shared file system?)");
        if (writers[r]) shards.push_back(shard_name(r, "json"));
        if (extra) extras.push_back(extra_name(r, extra->tag, "json"));
      }
      nlohmann::json index = {{"format", kStateFormat},
                              {"version", kStateVersion},
                              {"step", state.step},
                              {"optimizer_steps", state.optimizer_steps},
                              {"run", state.run},
                              {"layout", state.layout},
                              {"sampler_rng", state.sampler_rng},
                              {"shards", shards}};
      if (!state.optimizer.is_null()) index["optimizer"] = state.optimizer;
      if (extra) index["rank_extras"] = {{extra->tag, extras}};
      AtomicFile state_file((fs::path(temp_dir) / "state.json").string());
      state_file.write(index.dump(1));
      state_file.commit();
      commit_directory(temp_dir, final_dir);
      AtomicFile latest((fs::path(checkpoint_dir) / "latest").string());
      latest.write(name + "\n");
      latest.commit();
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  error = first_error(world, error);
  if (!error.empty())
    throw CheckpointError("checkpoint at step " + std::to_string(state.step) + " not committed: " + error);
  return final_dir;
}

std::string resolve_checkpoint(const std::string& resume, const std::string& checkpoint_dir) {
  if (resume != "latest" && resume != "auto") {
    ENGINE_CHECK(fs::is_directory(resume), "--resume '", resume, "' is not a checkpoint directory");
    return resume;
  }
  const fs::path latest = fs::path(checkpoint_dir) / "latest";
  std::ifstream in(latest);
  if (!in.good() && resume == "auto") return "";  // nothing yet: start fresh
  ENGINE_CHECK(in.good(), "--resume latest: no checkpoint to resume from ('", latest.string(), "' does not exist)");
  std::string name;
  std::getline(in, name);
  const fs::path dir = fs::path(checkpoint_dir) / name;
  ENGINE_CHECK(!name.empty() && fs::is_directory(dir), "'", latest.string(), "' names '", name,
               "', which is not a checkpoint directory");
  return dir.string();
}

TrainingState load_checkpoint(const std::string& step_dir, const nlohmann::json& expected_run,
                              const ParamRegistry& registry, const HostState& host) {
  const std::string index_path = (fs::path(step_dir) / "state.json").string();
  std::ifstream in(index_path);
  ENGINE_CHECK(in.good(), "checkpoint '", step_dir, "' has no state.json (incomplete or not a checkpoint)");
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    ENGINE_FAIL("checkpoint index '", index_path, "' is not valid JSON: ", e.what());
  }
  ENGINE_CHECK(index.value("format", "") == kStateFormat && index.value("version", 0) == kStateVersion,
               "'", index_path, "' is not a version ", kStateVersion, " ", kStateFormat, " file");

  // The run's identity must match, or "resume" would silently train something else.
  const nlohmann::json& found_run = index.at("run");
  std::string differences;
  for (const auto& [key, value] : expected_run.items()) {
    const nlohmann::json found = found_run.contains(key) ? found_run.at(key) : nlohmann::json();
    if (found != value) differences += "\n  " + key + ": checkpoint has " + found.dump() + ", this run has " + value.dump();
  }
  ENGINE_CHECK(differences.empty(), "checkpoint '", step_dir, "' was written by a different run:", differences);

  // Every shard's records, from every rank that wrote one.
  std::vector<nlohmann::json> records;
  for (const nlohmann::json& shard : index.at("shards")) {
    const std::string path = (fs::path(step_dir) / shard.get<std::string>()).string();
    std::ifstream shard_in(path);
    ENGINE_CHECK(shard_in.good(), "checkpoint '", step_dir, "' lists shard index '", path, "', which is missing");
    nlohmann::json shard_index = nlohmann::json::parse(shard_in);
    for (nlohmann::json& t : shard_index.at("tensors")) records.push_back(std::move(t));
  }
  const std::pair<const char*, float*> kinds[] = {{"param", host.master}, {"adam_m", host.adam_m}, {"adam_v", host.adam_v}};
  for (const auto& [kind, buffer] : kinds) {
    for (const ParamInfo& p : registry.entries()) {
      const nlohmann::json* record = nullptr;
      const nlohmann::json* other_split = nullptr;
      for (const nlohmann::json& t : records) {
        if (t.at("name") != p.name || t.at("kind") != kind) continue;
        if (t.at("split") == split_json(p.split)) record = &t;
        else other_split = &t;
      }
      ENGINE_CHECK(record != nullptr || other_split == nullptr, "checkpoint '", step_dir, "' holds '", p.name,
                   "' split as ", other_split ? other_split->at("split").dump() : "", " but this run needs ",
                   split_json(p.split).dump(), " (resuming under another tensor-parallel size is not supported yet)");
      ENGINE_CHECK(record != nullptr, "checkpoint '", step_dir, "' has no ", kind, " for '", p.name, "'");
      ENGINE_CHECK(record->at("global_shape") == shape_json(p.global_shape) && record->at("shape") == shape_json(p.shape),
                   "checkpoint '", step_dir, "': ", kind, " '", p.name, "' has global shape ",
                   record->at("global_shape").dump(), " and slice ", record->at("shape").dump(), ", this run expects ",
                   p.global_shape.str(), " and ", p.shape.str());
      const std::string path = (fs::path(step_dir) / record->at("file").get<std::string>()).string();
      File f = open_for_reading(path, "checkpoint data");
      ENGINE_CHECK(std::fseek(f.get(), record->at("byte_offset").get<long>(), SEEK_SET) == 0, "seek in '", path, "' failed");
      read_exact(f.get(), buffer + p.offset, static_cast<std::size_t>(p.numel()) * sizeof(float), path, "checkpoint data");
    }
  }
  TrainingState state;
  state.step = index.at("step").get<std::int64_t>();
  state.optimizer_steps = index.value("optimizer_steps", std::int64_t{-1});
  state.sampler_rng = index.value("sampler_rng", "");
  state.run = found_run;
  state.layout = index.value("layout", nlohmann::json());
  state.optimizer = index.value("optimizer", nlohmann::json());
  return state;
}

const std::vector<float>* LoadedRankExtra::find(const std::string& name) const {
  for (const auto& [n, values] : arrays)
    if (n == name) return &values;
  return nullptr;
}

std::optional<LoadedRankExtra> load_rank_extra(const std::string& step_dir, const std::string& tag, int rank) {
  std::ifstream state_in((fs::path(step_dir) / "state.json").string());
  ENGINE_CHECK(state_in.good(), "checkpoint '", step_dir, "' has no state.json (incomplete or not a checkpoint)");
  const nlohmann::json state = nlohmann::json::parse(state_in);
  const std::string wanted = extra_name(rank, tag, "json");
  bool listed = false;
  if (state.contains("rank_extras") && state.at("rank_extras").contains(tag))
    for (const nlohmann::json& f : state.at("rank_extras").at(tag)) listed = listed || f == wanted;
  if (!listed) return std::nullopt;
  const std::string index_path = (fs::path(step_dir) / wanted).string();
  std::ifstream in(index_path);
  ENGINE_CHECK(in.good(), "checkpoint '", step_dir, "' lists '", wanted, "', which is missing");
  const nlohmann::json index = nlohmann::json::parse(in);
  ENGINE_CHECK(index.at("rank").get<int>() == rank && index.at("tag") == tag, "'", index_path,
               "' is not rank ", rank, "'s ", tag, " state");
  LoadedRankExtra out;
  out.meta = index.at("meta");
  const std::string path = (fs::path(step_dir) / index.at("file").get<std::string>()).string();
  File f = open_for_reading(path, "checkpoint data");
  for (const nlohmann::json& a : index.at("arrays")) {
    std::vector<float> values(a.at("count").get<std::size_t>());
    ENGINE_CHECK(std::fseek(f.get(), a.at("byte_offset").get<long>(), SEEK_SET) == 0, "seek in '", path, "' failed");
    if (!values.empty()) read_exact(f.get(), values.data(), values.size() * sizeof(float), path, "checkpoint data");
    out.arrays.emplace_back(a.at("name").get<std::string>(), std::move(values));
  }
  return out;
}

}  // namespace launch
