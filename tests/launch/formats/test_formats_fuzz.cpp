// The safetensors parsers fed generated hostile variants of valid files
// (launch/formats/safetensors.h, launch/formats/safetensors_shards.h): a
// file's header length and header, and a sharded index, each truncated at
// many offsets, with bytes changed (a fixed seed), and with each JSON value
// replaced by values of the wrong type, huge, negative, overflowing or deeply
// nested. Each variant is accepted (and then every tensor it lists reads) or
// refused with an engine::Error of one line of valid UTF-8; none crashes,
// hangs, asks for more memory than the file could hold, or throws anything
// else.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "launch/formats/safetensors.h"
#include "launch/formats/safetensors_shards.h"
#include "tests/launch/formats/hostile_model.h"
#include "tests/launch/training_fixture.h"

using namespace hostile;
using namespace launch;
namespace fs = std::filesystem;

namespace {

// Every tensor of `file` read in full (what a reader of an accepted file does).
template <typename File>
void read_all(const File& file) {
  std::vector<float> values;
  for (const auto& [name, entry] : file.entries()) {
    values.resize(static_cast<std::size_t>(entry.numel()));
    file.read_f32(name, values.data());
  }
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST(FormatsFuzz, HostileSafetensorsHeadersAreAcceptedOrRefusedOnOneLine) {
  const auto start = std::chrono::steady_clock::now();
  test_support::TempDir dir("safetensors_fuzz");
  // Three tensors of the three dtypes, and metadata.
  const nlohmann::json header = {
      {"__metadata__", {{"format", "pt"}}},
      {"w", {{"dtype", "F32"}, {"shape", {3, 4}}, {"data_offsets", {0, 48}}}},
      {"b", {{"dtype", "BF16"}, {"shape", {5}}, {"data_offsets", {48, 58}}}},
      {"h", {{"dtype", "F16"}, {"shape", {2, 2}}, {"data_offsets", {58, 66}}}}};
  std::string data(66, '\0');
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 37 + 11);
  const std::string valid = safetensors_bytes(header.dump(), data);
  const fs::path path = dir.path() / "model.safetensors";
  write_file(path, valid);
  ASSERT_NO_THROW(read_all(SafetensorsFile(path.string())));

  std::vector<Variant> variants;
  for (Variant& v : typed_variants(header)) {  // the header edited, the data kept
    v.text = safetensors_bytes(v.text, data);
    variants.push_back(std::move(v));
  }
  for (Variant& v : truncations(valid, 64)) variants.push_back(std::move(v));
  for (Variant& v : byte_flips(valid, 300, 20261125, 8)) variants.push_back(std::move(v));
  for (const std::uint64_t length : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{7}, header.dump().size() - 1,
                                     header.dump().size() + 1, std::uint64_t{100'000'001}, std::uint64_t{1} << 63,
                                     ~std::uint64_t{0}}) {
    std::string t = valid;
    std::memcpy(t.data(), &length, 8);
    variants.push_back({"header length " + std::to_string(length), t});
  }
  for (const std::string& text : {std::string(100, '['), std::string("[]"), std::string("{\"w\": 1}"),
                                  std::string("{\"w\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [0, 4]}}")})
    variants.push_back({"header " + text.substr(0, 20), safetensors_bytes(text, data)});
  std::size_t accepted = 0;
  for (const Variant& v : variants) {
    write_file(path, v.text);
    bool ok = false;
    expect_accepted_or_refused(
        [&] {
          read_all(SafetensorsFile(path.string()));
          ok = true;
        },
        v.what);
    accepted += ok;
  }
  std::printf("%zu variants, %zu accepted, %.1f s\n", variants.size(), accepted, seconds_since(start));
  EXPECT_GT(variants.size(), 500u);
  EXPECT_LT(seconds_since(start), 20.0);
}

TEST(FormatsFuzz, HostileSafetensorsIndexesAreAcceptedOrRefusedOnOneLine) {
  const auto start = std::chrono::steady_clock::now();
  test_support::TempDir dir("safetensors_index_fuzz");
  // Two shards of two tensors each, and the index mapping them.
  const fs::path folder = dir.path() / "sharded";
  fs::create_directories(folder);
  nlohmann::json index = {{"metadata", {{"total_size", 64}}}, {"weight_map", nlohmann::json::object()}};
  for (int s = 0; s < 2; ++s) {
    const std::string file = "model-0000" + std::to_string(s + 1) + "-of-00002.safetensors";
    std::vector<SafetensorsOutput> outputs;
    for (int t = 0; t < 2; ++t) {
      const std::string name = "t" + std::to_string(2 * s + t);
      outputs.push_back({name, {2, 2}, [](float* out) { std::fill(out, out + 4, 0.5f); }});
      index["weight_map"][name] = file;
    }
    write_safetensors((folder / file).string(), outputs, SafetensorsDType::kF32, {});
  }
  const std::string valid = index.dump(1);
  const fs::path path = folder / "model.safetensors.index.json";
  write_file(path, valid);
  ASSERT_NO_THROW(read_all(SafetensorsShards(path.string())));

  std::vector<Variant> variants = typed_variants(index);
  for (Variant& v : truncations(valid, 48)) variants.push_back(std::move(v));
  for (Variant& v : byte_flips(valid, 300, 20261125)) variants.push_back(std::move(v));
  for (const char* name : {"../sharded/model-00001-of-00002.safetensors", "./model-00001-of-00002.safetensors",
                           "sub/../model-00001-of-00002.safetensors", ".", "..", "/", "", "/dev/zero",
                           "model-00001-of-00002.safetensors/", "model.safetensors.index.json"}) {
    nlohmann::json edited = index;
    edited["weight_map"]["t0"] = name;
    variants.push_back({std::string("t0 mapped to '") + name + "'", edited.dump(1)});
  }
  std::size_t accepted = 0;
  for (const Variant& v : variants) {
    write_file(path, v.text);
    bool ok = false;
    expect_accepted_or_refused(
        [&] {
          read_all(SafetensorsShards(path.string()));
          ok = true;
        },
        v.what);
    accepted += ok;
  }
  std::printf("%zu variants, %zu accepted, %.1f s\n", variants.size(), accepted, seconds_since(start));
  EXPECT_GT(variants.size(), 300u);
  EXPECT_LT(seconds_since(start), 20.0);
}
