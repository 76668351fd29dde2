// A checkpoint's JSON files (`train --resume`): state.json, the shard index
// rank_00000.json and the 1-bit Adam rank extra rank_00000_onebit.json, in a
// step folder a real save wrote (tests/launch/checkpoint/hostile_checkpoint.h's
// small state). The first byte picks the file, the rest is its text; the
// other files stay as saved. The file is signed as an attacker who
// recomputes every checksum would sign it (its size and XXH3 in state.json,
// state.json's own checksum; state.json only when it parses as an object),
// so that the reader's validation of every field is reached, not just a
// failed checksum. Then the checkpoint and the rank extra are loaded.
//
// ENGINE_FUZZ_WRITE_SEEDS=DIR writes the saved files, each with its picking
// byte, into DIR (how corpus/fuzz_checkpoint/ was made).
#include <mpi.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "launch/checkpoint/checkpoint.h"
#include "tests/fuzz/fuzz_target.h"
#include "tests/launch/checkpoint/hostile_checkpoint.h"

namespace fs = std::filesystem;

namespace {

const std::array<std::string, 3> kFiles = {"state.json", "rank_00000.json", "rank_00000_onebit.json"};

struct Saved {
  hostile::SmallState state;
  fs::path step;
  std::map<std::string, std::string> pristine;
};

Saved& saved() {
  static Saved* s = [] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      MPI_Init(nullptr, nullptr);  // a singleton: the save's communicator is MPI_COMM_SELF
      std::atexit([] { MPI_Finalize(); });
    }
    auto* out = new Saved;
    const launch::RankExtra extra{"onebit", {{"layout", "x"}}, {{"worker", std::vector<float>(10, 1.5f)}}};
    out->step = out->state.save((fs::path(fuzz::scratch_folder()) / "ckpt").string(), &extra);
    for (const std::string& name : kFiles) out->pristine[name] = hostile::read_file(out->step / name);
    if (const char* dir = std::getenv("ENGINE_FUZZ_WRITE_SEEDS")) {
      fs::create_directories(dir);
      for (std::size_t i = 0; i < kFiles.size(); ++i)
        hostile::write_file(fs::path(dir) / ("seed_" + kFiles[i]), std::string(1, static_cast<char>(i)) +
                                                                        out->pristine[kFiles[i]]);
    }
    return out;
  }();
  return *s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  Saved& s = saved();
  for (const std::string& name : kFiles) hostile::write_file(s.step / name, s.pristine[name]);
  const std::string& name = kFiles[data[0] % kFiles.size()];
  const std::string text(fuzz::as_text(data + 1, size - 1));
  if (name != "state.json") {
    hostile::write_signed(s.step, name, text);
  } else {
    nlohmann::json state = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (state.is_object()) hostile::write_signed_state(s.step, state);
    else hostile::write_file(s.step / name, text);
  }
  std::vector<float> p(s.state.p.size()), m(s.state.p.size()), v(s.state.p.size());
  fuzz::accepts([&] {
    launch::load_checkpoint(s.step.string(), s.state.state.run, s.state.registry, {p.data(), m.data(), v.data()});
    (void)launch::load_rank_extra(s.step.string(), "onebit", 0);
  });
  return 0;
}
