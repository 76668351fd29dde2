// Checkpoints that can be trusted (launch/checkpoint/checkpoint.h): every damage an
// operator meets (flipped bytes, truncation, a deleted state file, an edited
// state file, garbage in `latest`) is refused with a message naming the file
// and the tensor, and `--resume latest|auto` falls back to the newest intact
// checkpoint and continues bit for bit; retention keeps exactly K; an
// asynchronous save writes the same bytes as a synchronous one; a state
// holding a NaN is never written; slices re-cut under another
// tensor-parallel size equal the registry's own slicing.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <functional>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <vector>

#include "engine/rng.h"
#include "launch/checkpoint/checkpoint.h"
#include "launch/checkpoint/checkpoint_files.h"
#include "launch/checkpoint/checkpoint_saver.h"
#include "launch/checkpoint/tensor_slices.h"
#include "launch/formats/llmc_model.h"
#include "launch/resilience/job_error.h"
#include "launch/run/trainer.h"
#include "model/gpt_params.h"
#include "parallel/mpi_communicator.h"
#include "tests/launch/training_fixture.h"

using namespace test_support;
namespace fs = std::filesystem;

namespace {

std::vector<float> random_values(std::int64_t n, std::uint64_t seed) {
  std::vector<float> v(static_cast<std::size_t>(n));
  engine::fill_normal(v.data(), n, engine::rng_key(seed, "integrity"), 0, 0.0, 1.0);
  return v;
}

std::string file_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

void flip_bytes(const fs::path& path, std::size_t at, std::size_t count) {
  std::string bytes = file_text(path);
  ASSERT_LE(at + count, bytes.size()) << path;
  for (std::size_t i = at; i < at + count; ++i) bytes[i] = static_cast<char>(bytes[i] ^ 0x5a);
  write_text(path, bytes);
}

// A whole-model checkpoint of random state, written synchronously.
struct SavedState {
  model::GptConfig config = model::gpt_preset("gpt-micro");
  model::ParamRegistry registry = model::build_gpt_registry(config);
  std::vector<float> p, m, v;
  launch::TrainingState state;
  SavedState() {
    p = random_values(registry.total_numel(), 1);
    m = random_values(registry.total_numel(), 2);
    v = random_values(registry.total_numel(), 3);
    state.step = 10;
    state.run = {{"seed", 1}};
  }
  launch::HostState host() { return {p.data(), m.data(), v.data()}; }
};

// The message of the DamagedCheckpoint loading `dir` throws ("" if it loads).
std::string damage_of(SavedState& s, const std::string& dir) {
  std::vector<float> p(s.p.size()), m(s.p.size()), v(s.p.size());
  try {
    launch::load_checkpoint(dir, s.state.run, s.registry, {p.data(), m.data(), v.data()});
  } catch (const launch::DamagedCheckpoint& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_MENTIONS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

}  // namespace

TEST(CheckpointIntegrity, EachKindOfDamageIsRefusedByName) {
  TempDir dir("integrity_damage");
  SavedState s;
  parallel::MpiCommunicator self(MPI_COMM_SELF, "self");
  const std::string saved = launch::save_checkpoint(dir / "ckpt", s.state, s.config, s.registry, s.host(),
                                                    launch::ShardRole{}, self);
  EXPECT_EQ(damage_of(s, saved), "");
  auto copy = [&](const std::string& name) {
    const fs::path to = dir.path() / name;
    fs::copy(saved, to, fs::copy_options::recursive);
    return to;
  };
  // 64 flipped bytes inside a tensor's data: the tensor is named.
  const fs::path flipped = copy("flipped");
  const nlohmann::json index = nlohmann::json::parse(file_text(flipped / "rank_00000.json"));
  const nlohmann::json& record = index.at("tensors").at(5);
  flip_bytes(flipped / "rank_00000.bin", record.at("byte_offset").get<std::size_t>() + 8, 64);
  const std::string flipped_error = damage_of(s, flipped.string());
  EXPECT_MENTIONS(flipped_error, "fails its checksum");
  EXPECT_MENTIONS(flipped_error, record.at("name").get<std::string>());
  EXPECT_MENTIONS(flipped_error, "rank_00000.bin");
  // Truncated data.
  const fs::path truncated = copy("truncated");
  fs::resize_file(truncated / "rank_00000.bin", fs::file_size(truncated / "rank_00000.bin") / 2);
  EXPECT_MENTIONS(damage_of(s, truncated.string()), "is truncated");
  // A deleted state file.
  const fs::path stateless = copy("stateless");
  fs::remove(stateless / "state.json");
  EXPECT_MENTIONS(damage_of(s, stateless.string()), "has no state.json");
  // An edited state file that is still valid JSON: its own checksum fails.
  const fs::path edited = copy("edited");
  nlohmann::json state = nlohmann::json::parse(file_text(edited / "state.json"));
  state["step"] = 11;
  write_text(edited / "state.json", state.dump(1));
  EXPECT_MENTIONS(damage_of(s, edited.string()), "state.json' fails its checksum");
  // A damaged shard index.
  const fs::path bad_index = copy("bad_index");
  flip_bytes(bad_index / "rank_00000.json", 100, 4);
  EXPECT_MENTIONS(damage_of(s, bad_index.string()), "rank_00000.json' fails its checksum");
  // A deleted data file.
  const fs::path no_data = copy("no_data");
  fs::remove(no_data / "rank_00000.bin");
  EXPECT_MENTIONS(damage_of(s, no_data.string()), "missing or unreadable");
}

TEST(CheckpointIntegrity, CandidatesFollowLatestThenOlderAndSurviveGarbageInLatest) {
  TempDir dir("integrity_candidates");
  SavedState s;
  parallel::MpiCommunicator self(MPI_COMM_SELF, "self");
  for (std::int64_t step : {2, 4, 6}) {
    s.state.step = step;
    launch::save_checkpoint(dir / "ckpt", s.state, s.config, s.registry, s.host(), launch::ShardRole{}, self);
  }
  std::vector<std::string> notes;
  std::vector<std::string> c = launch::resume_candidates("latest", dir / "ckpt", notes);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_MENTIONS(c[0], "step_00000006");
  EXPECT_MENTIONS(c[2], "step_00000002");
  EXPECT_TRUE(notes.empty());
  write_text(dir.path() / "ckpt" / "latest", "\x01\x02garbage\xff\n");
  c = launch::resume_candidates("auto", dir / "ckpt", notes);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_MENTIONS(c[0], "step_00000006");
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_MENTIONS(notes[0], "not a checkpoint directory");
  // A directory named explicitly is the only candidate.
  c = launch::resume_candidates(dir / "ckpt/step_00000004", dir / "ckpt", notes);
  ASSERT_EQ(c.size(), 1u);
}

TEST(CheckpointIntegrity, RetentionKeepsExactlyTheNewestK) {
  TempDir dir("integrity_keep");
  SavedState s;
  parallel::MpiCommunicator self(MPI_COMM_SELF, "self");
  fs::create_directories(dir.path() / "ckpt" / "step_00000001.tmp");  // a crashed save's leftover
  for (std::int64_t step = 2; step <= 12; step += 2) {
    s.state.step = step;
    launch::save_checkpoint(dir / "ckpt", s.state, s.config, s.registry, s.host(), launch::ShardRole{}, self,
                            nullptr, /*keep=*/2);
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir.path() / "ckpt")) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    std::vector<std::string> expected;
    if (step > 2) expected.push_back(launch::checkpoint_files::step_dir_name(step - 2));
    expected.push_back("latest");
    expected.push_back(launch::checkpoint_files::step_dir_name(step));
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(names, expected) << "after the save of step " << step;
  }
  // A run resumed from an older checkpoint: the newer ones of the abandoned
  // timeline are left alone and do not push out the ones it can go back to.
  s.state.step = 3;
  launch::save_checkpoint(dir / "ckpt", s.state, s.config, s.registry, s.host(), launch::ShardRole{}, self, nullptr,
                          /*keep=*/2);
  for (std::int64_t step : {3, 10, 12})
    EXPECT_TRUE(fs::exists(dir.path() / "ckpt" / launch::checkpoint_files::step_dir_name(step))) << step;
}

TEST(CheckpointIntegrity, AsynchronousSaveWritesTheSameBytesAsASynchronousOne) {
  TempDir dir("integrity_async");
  SavedState s;
  parallel::MpiCommunicator self(MPI_COMM_SELF, "self");
  launch::RankExtra extra{"onebit", {{"layout", "x"}}, {{"worker", random_values(100, 9)}}};
  for (bool async : {true, false}) {
    launch::CheckpointSaver saver({(dir / (async ? "async" : "sync")), 0, async}, s.config, s.registry, self,
                                  engine::DeviceType::kCpu);
    const launch::HostState host = saver.snapshot_buffers();
    std::copy(s.p.begin(), s.p.end(), host.master);
    std::copy(s.m.begin(), s.m.end(), host.adam_m);
    std::copy(s.v.begin(), s.v.end(), host.adam_v);
    saver.start(s.state, launch::ShardRole{}, extra, 0.0);
    EXPECT_TRUE(saver.in_flight());
    const launch::CheckpointSaver::Committed c = saver.finish();
    EXPECT_FALSE(saver.in_flight());
    EXPECT_EQ(c.step, s.state.step);
  }
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir.path() / "sync" / "step_00000010"))
    files.push_back(e.path().filename().string());
  EXPECT_EQ(files.size(), 6u);  // state.json, the shard's .bin and .json, model.bin, the onebit .bin and .json
  for (const std::string& f : files)
    EXPECT_EQ(file_text(dir.path() / "async" / "step_00000010" / f), file_text(dir.path() / "sync" / "step_00000010" / f))
        << f;
}

TEST(CheckpointIntegrity, AStateWithANaNIsNeverWritten) {
  TempDir dir("integrity_nan");
  SavedState s;
  parallel::MpiCommunicator self(MPI_COMM_SELF, "self");
  s.state.step = 2;
  const std::string first =
      launch::save_checkpoint(dir / "ckpt", s.state, s.config, s.registry, s.host(), launch::ShardRole{}, self);
  s.v[s.registry.find("h.1.mlp.fc.weight").offset + 3] = std::numeric_limits<float>::quiet_NaN();
  s.state.step = 4;
  try {
    launch::save_checkpoint(dir / "ckpt", s.state, s.config, s.registry, s.host(), launch::ShardRole{}, self);
    FAIL() << "a NaN was written";
  } catch (const launch::NonFiniteStateError& e) {
    EXPECT_MENTIONS(e.what(), "adam_v of 'h.1.mlp.fc.weight'");
  }
  EXPECT_FALSE(fs::exists(dir.path() / "ckpt" / "step_00000004"));
  EXPECT_FALSE(fs::exists(dir.path() / "ckpt" / "step_00000004.tmp"));
  EXPECT_EQ(file_text(dir.path() / "ckpt" / "latest"), "step_00000002\n");
}

TEST(CheckpointIntegrity, AnLlmcModelFileWithANaNIsRefusedNamingTheTensor) {
  TempDir dir("integrity_llmc");
  SavedState s;
  launch::write_llmc_model(dir / "model.bin", s.config, s.registry, s.p.data());
  // wpe follows wte (padded vocab x C floats) after the 256-int header.
  const std::size_t wpe_at = 1024 + static_cast<std::size_t>(s.config.padded_vocab() * s.config.n_embd) * 4;
  std::string bytes = file_text(dir.path() / "model.bin");
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(bytes.data() + wpe_at + 4 * 7, &nan, 4);
  write_text(dir.path() / "model.bin", bytes);
  std::vector<float> back(s.p.size());
  try {
    launch::read_llmc_model(dir / "model.bin", s.config, s.registry, back.data());
    FAIL() << "a NaN was read";
  } catch (const engine::Error& e) {
    EXPECT_MENTIONS(e.what(), "tensor 'wpe'");
    EXPECT_MENTIONS(e.what(), "element 7");
  }
}

TEST(TensorSlices, ReCutSlicesEqualTheRegistrysOwnSlicing) {
  // Every tensor of a whole model, cut for tp 2, put back together and cut
  // for tp 4 (and for one process), equals cutting the whole for tp 4.
  model::GptConfig config = model::gpt_preset("gpt-micro");
  config.n_head = 4;
  const model::ParamRegistry whole = model::build_gpt_registry(config);
  const std::vector<float> values = random_values(whole.total_numel(), 5);
  auto slices_for = [&](int tp_size) {
    std::vector<model::ParamRegistry> regs;
    for (int r = 0; r < tp_size; ++r)
      regs.push_back(model::build_gpt_registry(config, model::whole_model(config), model::TensorParallel{r, tp_size}));
    return regs;
  };
  auto cut = [&](const model::ParamInfo& p) {  // the registry's own slicing of `values`
    std::vector<float> out(static_cast<std::size_t>(p.numel()));
    const float* src = values.data() + whole.find(p.name).offset;
    model::for_each_run(p, [&](std::int64_t local, std::int64_t global, std::int64_t count) {
      std::copy_n(src + global, count, out.data() + local);
    });
    return out;
  };
  const std::vector<model::ParamRegistry> tp2 = slices_for(2);
  for (int target_tp : {4, 1}) {
    for (const model::ParamRegistry& target : slices_for(target_tp)) {
      for (const model::ParamInfo& p : target.entries()) {
        std::vector<launch::SliceRecord> pieces;
        std::vector<std::vector<float>> data;
        for (const model::ParamRegistry& from : tp2) {
          const model::ParamInfo& q = from.find(p.name);
          pieces.push_back({q.name, "param", q.global_shape, q.shape, q.split});
          data.push_back(cut(q));
        }
        std::vector<float> got(static_cast<std::size_t>(p.numel()));
        launch::cut_slice(p, "param", pieces, [&](std::size_t i, float* out) { std::copy(data[i].begin(), data[i].end(), out); },
                          got.data());
        EXPECT_EQ(got, cut(p)) << p.name << " for tp " << target_tp;
      }
    }
  }
}

// ---- the trainer's fallback, end to end ---------------------------------------------

TEST(CheckpointIntegrity, ResumeFallsBackPastDamagedCheckpointsAndContinuesBitForBit) {
  TempDir dir("integrity_fallback");
  write_corpus(dir);
  launch::TrainConfig config = tiny_config(dir, 6);
  config.checkpoint_dir = dir / "ckpt";
  config.checkpoint_interval = 2;
  config.keep_checkpoints = 0;
  const launch::RunSummary uninterrupted = train_one_process(config);
  ASSERT_EQ(uninterrupted.losses.size(), 6u);

  struct Damage {
    const char* name;
    std::function<void(const fs::path& newest)> apply;
  };
  const Damage damages[] = {
      {"flipped", [](const fs::path& d) { flip_bytes(d / "rank_00000.bin", 4096, 64); }},
      {"truncated", [](const fs::path& d) { fs::resize_file(d / "rank_00000.bin", 1000); }},
      {"stateless", [](const fs::path& d) { fs::remove(d / "state.json"); }},
  };
  for (const Damage& damage : damages) {
    const fs::path ckpt = dir.path() / (std::string("ckpt_") + damage.name);
    fs::copy(dir.path() / "ckpt", ckpt, fs::copy_options::recursive);
    damage.apply(ckpt / "step_00000006");
    launch::TrainConfig again = config;
    again.checkpoint_dir = ckpt.string();
    again.resume = "latest";
    std::string log;
    const launch::RunSummary resumed = train_one_process(again, &log);
    EXPECT_EQ(resumed.first_step, 4) << damage.name;
    ASSERT_EQ(resumed.losses.size(), 2u) << damage.name;
    EXPECT_EQ(resumed.losses[0], uninterrupted.losses[4]) << damage.name;
    EXPECT_EQ(resumed.losses[1], uninterrupted.losses[5]) << damage.name;
    EXPECT_MENTIONS(log, "after 1 damaged newer checkpoint");
    EXPECT_TRUE(fs::exists(ckpt / "step_00000006.damaged")) << damage.name;
    // The run wrote step 6 again, intact.
    launch::TrainConfig third = again;
    third.steps = 6;
    third.reset_schedule = true;  // a shorter run over the same checkpoints (launch/run: schedules are recorded)
    EXPECT_EQ(train_one_process(third).first_step, 6) << damage.name;

    // Named explicitly, a damaged checkpoint is an error, not a fallback.
    const fs::path named = dir.path() / (std::string("named_") + damage.name);
    fs::copy(dir.path() / "ckpt/step_00000006", named, fs::copy_options::recursive);
    damage.apply(named);
    again.resume = named.string();
    try {
      train_one_process(again);
      ADD_FAILURE() << damage.name << ": a damaged checkpoint named by --resume was loaded";
    } catch (const launch::JobError& e) {
      EXPECT_MENTIONS(e.what(), "no other checkpoint is tried");
    }
  }
  // Garbage in `latest`: the newest intact step directory is used.
  const fs::path garbage = dir.path() / "ckpt_garbage";
  fs::copy(dir.path() / "ckpt", garbage, fs::copy_options::recursive);
  write_text(garbage / "latest", "no such thing\n");
  launch::TrainConfig again = config;
  again.checkpoint_dir = garbage.string();
  again.resume = "auto";
  again.steps = 8;
  again.reset_schedule = true;  // its step 6 was written by the 6-step run above
  const launch::RunSummary resumed = train_one_process(again);
  EXPECT_EQ(resumed.first_step, 6);
  // Every checkpoint damaged: a clear error, not a fresh start.
  const fs::path all_bad = dir.path() / "ckpt_all_bad";
  fs::copy(dir.path() / "ckpt", all_bad, fs::copy_options::recursive);
  for (const char* step : {"step_00000002", "step_00000004", "step_00000006"}) fs::remove(all_bad / step / "state.json");
  again.checkpoint_dir = all_bad.string();
  try {
    train_one_process(again);
    ADD_FAILURE() << "a run with only damaged checkpoints started";
  } catch (const launch::JobError& e) {
    EXPECT_MENTIONS(e.what(), "no intact checkpoint to resume from");
  }
  // Restarted again (as launch/supervise would), --resume auto must not
  // take the set-aside checkpoints for "nothing saved yet" and start over.
  try {
    train_one_process(again);
    ADD_FAILURE() << "--resume auto started fresh over damaged checkpoints";
  } catch (const launch::JobError& e) {
    EXPECT_MENTIONS(e.what(), "refusing to start fresh");
  }
}
