// The checkpoint reader's parsers fed generated hostile variants of a valid
// checkpoint (launch/checkpoint/checkpoint.h): state.json, the shard index
// rank_00000.json and the rank extra index rank_00000_onebit.json, each
// truncated at many offsets, with bytes changed (a fixed seed), and with each
// JSON value replaced by values of the wrong type, huge, negative, overflowing
// or deeply nested. The index variants are signed as an attacker would sign
// them (their size and checksum in state.json, state.json's own checksum), so
// they reach the validation of every field, not just a failed checksum. Each
// variant is accepted or refused with an engine::Error of one line; none
// crashes, hangs or throws anything else.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "launch/checkpoint/checkpoint.h"
#include "tests/launch/checkpoint/hostile_checkpoint.h"
#include "tests/launch/training_fixture.h"

using namespace hostile;
namespace fs = std::filesystem;

TEST(CheckpointFuzz, HostileVariantsOfEveryJsonFileAreAcceptedOrRefusedOnOneLine) {
  const auto start = std::chrono::steady_clock::now();
  test_support::TempDir dir("checkpoint_fuzz");
  SmallState s;
  const launch::RankExtra extra{"onebit", {{"layout", "x"}}, {{"worker", std::vector<float>(10, 1.5f)}}};
  const fs::path step = s.save(dir / "ckpt", &extra);
  const std::vector<std::string> names = {"state.json", "rank_00000.json", "rank_00000_onebit.json"};
  std::map<std::string, std::string> pristine;
  for (const std::string& name : names) pristine[name] = read_file(step / name);

  // Records alike are tried once each, to keep the test within seconds on
  // two shared cores: of the shard index's six records (two tensors, three
  // kinds), the first two (a matrix and a vector); of state.json's five
  // file entries, one.
  const auto one_of_alike = [](const std::string& pointer) {
    if (pointer.starts_with("/tensors/")) return pointer.starts_with("/tensors/0") || pointer.starts_with("/tensors/1");
    if (pointer.starts_with("/files/")) return pointer.starts_with("/files/rank_00000.bin");
    return true;
  };
  std::size_t tried = 0, accepted = 0;
  for (const std::string& name : names) {
    const bool is_state = name == "state.json";
    std::vector<Variant> variants = typed_variants(nlohmann::json::parse(pristine[name]), one_of_alike);
    for (Variant& v : truncations(pristine[name], 32)) variants.push_back(std::move(v));
    for (Variant& v : byte_flips(pristine[name], 80, 20261125)) variants.push_back(std::move(v));
    for (const Variant& v : variants) {
      write_file(step / "state.json", pristine["state.json"]);  // the variant before may have signed it
      write_file(step / name, pristine[name]);
      if (!is_state) {
        write_signed(step, name, v.text);
      } else {
        // Signed when it still parses as an object (else it cannot be).
        nlohmann::json state = nlohmann::json::parse(v.text, nullptr, false);
        if (state.is_object()) write_signed_state(step, state);
        else write_file(step / name, v.text);
      }
      const std::string label = name + ": " + v.what;
      bool loaded = true;
      expect_accepted_or_refused(
          [&] {
            loaded = false;
            std::vector<float> p(s.p.size()), m(s.p.size()), v2(s.p.size());
            launch::load_checkpoint(step.string(), s.state.run, s.registry, {p.data(), m.data(), v2.data()});
            launch::load_rank_extra(step.string(), "onebit", 0);
            loaded = true;
          },
          label);
      ++tried;
      accepted += loaded;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%zu variants, %zu accepted, %.1f s\n", tried, accepted, seconds);
  EXPECT_GT(tried, 1000u);
  EXPECT_LT(seconds, 20.0);
}
