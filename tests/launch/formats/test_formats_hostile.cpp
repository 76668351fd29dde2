// Hostile model files (launch/formats/): a model folder is untrusted input.
// A sharded index's weight_map naming a file outside its folder ('..', an
// absolute path, a symbolic link leading out) is refused; a tensor whose
// element count overflows, or whose offsets or numbers are not what the
// format allows, is refused; config.json's integers must be integers; a
// FIFO, a directory or a device where a model file belongs is refused at
// once instead of blocking. Each refusal is one line naming the file and
// the problem.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "launch/formats/hf_gpt2.h"
#include "launch/formats/llmc_model.h"
#include "launch/formats/model_files.h"
#include "launch/formats/safetensors.h"
#include "launch/formats/safetensors_shards.h"
#include "tests/launch/formats/hostile_model.h"
#include "tests/launch/training_fixture.h"

using namespace hostile;
using namespace launch;
using test_support::TempDir;
namespace fs = std::filesystem;

namespace {

// DIR/<name>/ as a sharded folder: the model's tensors in one shard file
// named `shard` (a path relative to the folder, or absolute) and an index
// whose weight_map names it for every tensor.
fs::path sharded_folder(const SmallModel& model, const TempDir& dir, const std::string& name, const std::string& shard) {
  const fs::path folder = dir.path() / name;
  model.write(folder.string());
  const fs::path target = fs::path(shard).is_absolute() ? fs::path(shard) : folder / shard;
  fs::create_directories(target.parent_path());
  fs::rename(folder / "model.safetensors", target);
  nlohmann::json index = {{"metadata", nlohmann::json::object()}, {"weight_map", nlohmann::json::object()}};
  const SafetensorsFile file(target.string());
  for (const auto& [tensor, entry] : file.entries()) index["weight_map"][tensor] = shard;
  write_file(folder / "model.safetensors.index.json", index.dump(1));
  return folder;
}

}  // namespace

// ---- 1. weight_map naming files outside the folder -------------------------------------

TEST(FormatsHostile, AnIndexNamingFilesOutsideItsFolderIsRefused) {
  TempDir dir("formats_outside");
  const SmallModel model;
  // A shard in a subfolder is fine.
  EXPECT_EQ(error_of([&] { check_init_model(sharded_folder(model, dir, "inner", "shards/model.safetensors"), model.config); }),
            "");
  const fs::path dotdot = sharded_folder(model, dir, "dotdot", "../elsewhere/model.safetensors");
  std::string e = error_of([&] { check_init_model(dotdot.string(), model.config); });
  EXPECT_MENTIONS(e, "'../elsewhere/model.safetensors'");
  EXPECT_MENTIONS(e, "'..'");
  EXPECT_MENTIONS(e, "model.safetensors.index.json");
  EXPECT_ONE_LINE(e);

  const std::string absolute = (dir.path() / "far" / "model.safetensors").string();
  e = error_of([&] { check_init_model(sharded_folder(model, dir, "absolute", absolute).string(), model.config); });
  EXPECT_MENTIONS(e, absolute);
  EXPECT_MENTIONS(e, "absolute");
  EXPECT_ONE_LINE(e);

  // /etc/passwd: refused before it is opened (no "not a safetensors file").
  const fs::path passwd = sharded_folder(model, dir, "passwd", "model.safetensors");
  write_file(passwd / "model.safetensors.index.json", R"({"weight_map": {"transformer.wte.weight": "/etc/passwd"}})");
  e = error_of([&] { SafetensorsShards s((passwd / "model.safetensors.index.json").string()); });
  EXPECT_MENTIONS(e, "absolute");
  EXPECT_EQ(e.find("truncated"), std::string::npos) << e;

  const fs::path link = sharded_folder(model, dir, "link", "model-00001-of-00001.safetensors");
  fs::create_directories(dir.path() / "outside");
  fs::rename(link / "model-00001-of-00001.safetensors", dir.path() / "outside" / "model.safetensors");
  fs::create_symlink(dir.path() / "outside" / "model.safetensors", link / "model-00001-of-00001.safetensors");
  e = error_of([&] { check_init_model(link.string(), model.config); });
  EXPECT_MENTIONS(e, "model-00001-of-00001.safetensors");
  EXPECT_MENTIONS(e, "symbolic link");
  EXPECT_ONE_LINE(e);
}

// ---- 4. sizes that overflow, offsets that do not fit ------------------------------------

TEST(FormatsHostile, TensorSizesAreComputedWithOverflowChecksAndOffsetsChecked) {
  TempDir dir("formats_sizes");
  const std::int64_t big = std::int64_t{1} << 32;
  struct Case {
    const char* name;
    std::string header;
    std::size_t data;
    const char* mentions;
  };
  const std::vector<Case> cases = {
      // 2^32 * 2^32 * 4 elements: the product wrapped to 0 and 0 bytes matched [0, 0).
      {"overflow", nlohmann::json{{"w", {{"dtype", "F32"}, {"shape", {big, big, 4}}, {"data_offsets", {0, 0}}}}}.dump(), 0,
       "overflows"},
      // 2^62 elements fit an int64, their 2^64 bytes do not.
      {"bytes_overflow",
       nlohmann::json{{"w", {{"dtype", "F32"}, {"shape", {std::int64_t{1} << 62}}, {"data_offsets", {0, 0}}}}}.dump(), 0,
       "overflows"},
      {"fractional_dim", R"({"w": {"dtype": "F32", "shape": [2.5], "data_offsets": [0, 8]}})", 8, "shape"},
      {"dim_2_pow_64", R"({"w": {"dtype": "F32", "shape": [18446744073709551615], "data_offsets": [0, 8]}})", 8, "shape"},
      {"fractional_offset", R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0.5, 8]}})", 8, "data_offsets"},
      {"negative_offset", R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [-8, 0]}})", 8, "data_offsets"},
      {"begin_after_end", R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", 8, "spans"},
      {"past_the_data", R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8, "spans"},
      {"shape_not_an_array", R"({"w": {"dtype": "F32", "shape": 2, "data_offsets": [0, 8]}})", 8, "shape"},
      {"overlapping", R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                           "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12, "overlap"},
      {"metadata_not_an_object", R"({"__metadata__": [1], "w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 8,
       "__metadata__"},
  };
  for (const Case& c : cases) {
    const fs::path path = dir.path() / (std::string(c.name) + ".safetensors");
    write_file(path, safetensors_bytes(c.header, std::string(c.data, '\0')));
    const std::string e = error_of([&] { SafetensorsFile f(path.string()); });
    EXPECT_NE(e, "") << c.name << ": accepted";
    EXPECT_EQ(e.find("NOT AN engine::Error"), std::string::npos) << c.name << ": " << e;
    EXPECT_MENTIONS(e, c.mentions);
    EXPECT_MENTIONS(e, path.string());
    EXPECT_ONE_LINE(e);
  }
  // In a model, under a name the reader ignores (an attention mask buffer):
  // refused all the same, on one line.
  const SmallModel model;
  model.write(dir / "hf");
  edit_header(dir.path() / "hf" / "model.safetensors", [&](nlohmann::json& header) {
    header["transformer.h.0.attn.bias"] = {{"dtype", "F32"}, {"shape", {big, big, 4}}, {"data_offsets", {0, 0}}};
  });
  const std::string e = error_of([&] { check_init_model(dir / "hf", model.config); });
  EXPECT_MENTIONS(e, "transformer.h.0.attn.bias");
  EXPECT_MENTIONS(e, "overflows");
  EXPECT_ONE_LINE(e);
}

// ---- 5. config.json's integers ----------------------------------------------------------

TEST(FormatsHostile, ConfigIntegersThatAreNotPositiveIntegersAreRefused) {
  TempDir dir("formats_config");
  const SmallModel model;
  model.write(dir / "hf");
  const std::string good = read_file(dir.path() / "hf" / "config.json");
  struct Case {
    const char* key;
    const char* value;  // JSON text
  };
  const Case cases[] = {
      {"n_head", "2.0"},                  // the right number, as a float
      {"n_head", "9223372036854775808"},  // 2^63: read as -2^63 before
      {"n_layer", "-1"},
      {"n_embd", "\"32\""},
      {"vocab_size", "0"},
      {"n_positions", "1e300"},
  };
  for (const Case& c : cases) {
    nlohmann::json config = nlohmann::json::parse(good);
    config[c.key] = nlohmann::json::parse(c.value);
    write_file(dir.path() / "hf" / "config.json", config.dump(2));
    const std::string e = error_of([&] { check_init_model(dir / "hf", model.config); });
    EXPECT_NE(e, "") << c.key << " " << c.value << ": accepted";
    EXPECT_EQ(e.find("NOT AN engine::Error"), std::string::npos) << e;
    EXPECT_MENTIONS(e, std::string(c.key) + " " + config[c.key].dump());
    EXPECT_MENTIONS(e, "config.json");
    EXPECT_ONE_LINE(e);
  }
  write_file(dir.path() / "hf" / "config.json", good);
  EXPECT_EQ(error_of([&] { check_init_model(dir / "hf", model.config); }), "");
}

// ---- 6. a FIFO, a directory or a device where a model file belongs ---------------------

TEST(FormatsHostile, AFifoOrADirectoryWhereAModelFileBelongsIsRefusedAtOnce) {
  TempDir dir("formats_fifo");
  const SmallModel model;
  // (A directory given as the model is a Hugging Face folder, not an llm.c file.)
  for (const std::string name : {"llmc_fifo", "safetensors_fifo", "safetensors_dir", "config_fifo", "index_fifo",
                                 "shard_fifo", "shard_dir"}) {
    const fs::path folder = dir.path() / name;
    fs::path given, special;
    const bool fifo = name.ends_with("_fifo");
    if (name.starts_with("llmc")) {
      fs::create_directories(folder);
      given = special = folder / "model.bin";
    } else if (name.starts_with("safetensors")) {
      model.write(folder.string());
      given = folder;
      special = folder / "model.safetensors";
    } else if (name.starts_with("config")) {
      model.write(folder.string());
      given = folder;
      special = folder / "config.json";
    } else if (name.starts_with("index")) {
      sharded_folder(model, dir, name, "model-00001-of-00001.safetensors");
      given = special = folder / "model.safetensors.index.json";
    } else {
      sharded_folder(model, dir, name, "model-00001-of-00001.safetensors");
      given = folder;
      special = folder / "model-00001-of-00001.safetensors";
    }
    if (fifo) {
      make_fifo(special);
    } else {
      fs::remove_all(special);
      fs::create_directories(special);
    }
    const std::optional<std::string> e =
        error_within(10, [&] { check_init_model(given.string(), model.config); }, [&] { release_fifo(special); });
    ASSERT_TRUE(e.has_value()) << name << ": the reader blocked";
    EXPECT_MENTIONS(*e, special.filename().string());
    EXPECT_MENTIONS(*e, fifo ? "FIFO" : "directory");
    EXPECT_MENTIONS(*e, "not a regular file");
    EXPECT_ONE_LINE(*e);
  }
  // A character device given as the model file.
  const std::optional<std::string> e = error_within(10, [&] { check_init_model("/dev/zero", model.config); });
  ASSERT_TRUE(e.has_value()) << "/dev/zero: the reader did not finish";
  EXPECT_MENTIONS(*e, "/dev/zero");
  EXPECT_MENTIONS(*e, "not a regular file");
}
