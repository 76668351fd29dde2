// Checkpoint formats: llm.c model files and the engine's training state.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <fstream>
#include <vector>

#include "engine/rng.h"
#include "launch/checkpoint/checkpoint.h"
#include "launch/formats/llmc_model.h"
#include "model/gpt_params.h"
#include "parallel/mpi_communicator.h"
#include "tests/launch/training_fixture.h"

using namespace test_support;

namespace {

std::vector<float> random_params(const model::ParamRegistry& reg, std::uint64_t seed) {
  std::vector<float> p(reg.total_numel());
  engine::fill_normal(p.data(), reg.total_numel(), engine::rng_key(seed, "ckpt"), 0, 0.0, 1.0);
  return p;
}

// The checkpoint `--resume latest` would try first.
std::string latest(const std::string& checkpoint_dir) {
  std::vector<std::string> notes;
  return launch::resume_candidates("latest", checkpoint_dir, notes).front();
}

std::vector<char> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST(LlmcModel, WriteThenReadIsBitExact) {
  TempDir dir("llmc");
  const model::GptConfig config = model::gpt_preset("gpt-micro");
  const model::ParamRegistry reg = model::build_gpt_registry(config);
  std::vector<float> params = random_params(reg, 1);
  for (const model::ParamInfo& p : reg.entries())  // padding is not part of any tensor
    for (std::int64_t i = p.offset + p.numel(); i < p.offset + (p.numel() + 63) / 64 * 64 && i < reg.total_numel(); ++i)
      params[i] = 0;
  launch::write_llmc_model(dir / "model.bin", config, reg, params.data());

  EXPECT_EQ(launch::read_llmc_config(dir / "model.bin"), config);
  std::vector<float> back(reg.total_numel(), -1.0f);
  launch::read_llmc_model(dir / "model.bin", config, reg, back.data());
  for (const model::ParamInfo& p : reg.entries())
    EXPECT_EQ(std::memcmp(back.data() + p.offset, params.data() + p.offset, p.numel() * sizeof(float)), 0) << p.name;

  // The header and the order are llm.c's: wte first, then wpe, then ln1w of every layer.
  const std::vector<char> bytes = file_bytes(dir / "model.bin");
  std::array<std::int32_t, 8> header;
  std::memcpy(header.data(), bytes.data(), sizeof header);
  EXPECT_EQ(header, (std::array<std::int32_t, 8>{20240326, 3, 64, 256, 2, 2, 32, 256}));
  const std::int64_t C = config.n_embd, Vp = config.padded_vocab(), T = config.max_seq_len;
  EXPECT_EQ(bytes.size(), 1024 + 4 * static_cast<std::size_t>(config.num_parameters()));
  const float* body = reinterpret_cast<const float*>(bytes.data() + 1024);
  EXPECT_EQ(body[0], params[reg.find("wte").offset]);
  EXPECT_EQ(body[Vp * C], params[reg.find("wpe").offset]);
  EXPECT_EQ(body[Vp * C + T * C + C], params[reg.find("h.1.ln_1.weight").offset]);  // stacked over layers
}

TEST(LlmcModel, RefusesAnotherShapeOrAForeignFile) {
  TempDir dir("llmc_bad");
  const model::GptConfig config = model::gpt_preset("gpt-micro");
  const model::ParamRegistry reg = model::build_gpt_registry(config);
  std::vector<float> params = random_params(reg, 2);
  launch::write_llmc_model(dir / "model.bin", config, reg, params.data());
  model::GptConfig other = config;
  other.n_layer = 3;
  const model::ParamRegistry other_reg = model::build_gpt_registry(other);
  std::vector<float> out(other_reg.total_numel());
  try {
    launch::read_llmc_model(dir / "model.bin", other, other_reg, out.data());
    FAIL();
  } catch (const engine::Error& e) {
    EXPECT_NE(std::string(e.what()).find("another shape"), std::string::npos) << e.what();
  }
  std::ofstream(dir / "junk.bin") << "not a model";
  EXPECT_THROW(launch::read_llmc_config(dir / "junk.bin"), engine::Error);
}

TEST(TrainingState, SaveLoadRoundTripAndAtomicLatest) {
  TempDir dir("state");
  const model::GptConfig config = model::gpt_preset("gpt-micro");
  const model::ParamRegistry reg = model::build_gpt_registry(config);
  std::vector<float> p = random_params(reg, 3), m = random_params(reg, 4), v = random_params(reg, 5);
  launch::TrainingState state;
  state.step = 42;
  state.run = {{"seed", 7}, {"model", config.describe()}};
  state.sampler_rng = "123 456";
  parallel::MpiCommunicator self(MPI_COMM_SELF, "self");
  const std::string saved =
      launch::save_checkpoint(dir / "ckpt", state, config, reg, {p.data(), m.data(), v.data()}, launch::ShardRole{}, self);
  EXPECT_EQ(latest(dir / "ckpt"), saved);

  std::vector<float> p2(p.size()), m2(p.size()), v2(p.size());
  const launch::TrainingState back = launch::load_checkpoint(saved, state.run, reg, {p2.data(), m2.data(), v2.data()});
  EXPECT_EQ(back.step, 42);
  EXPECT_EQ(back.sampler_rng, "123 456");
  for (const model::ParamInfo& e : reg.entries()) {
    EXPECT_EQ(std::memcmp(p2.data() + e.offset, p.data() + e.offset, e.numel() * 4), 0) << e.name;
    EXPECT_EQ(std::memcmp(m2.data() + e.offset, m.data() + e.offset, e.numel() * 4), 0) << e.name;
    EXPECT_EQ(std::memcmp(v2.data() + e.offset, v.data() + e.offset, e.numel() * 4), 0) << e.name;
  }
  // No temporary names are left behind.
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir.path()))
    EXPECT_EQ(entry.path().string().find(".tmp"), std::string::npos) << entry.path();

  // Another run's identity is refused, naming the difference.
  nlohmann::json other = state.run;
  other["seed"] = 8;
  try {
    launch::load_checkpoint(saved, other, reg, {p2.data(), m2.data(), v2.data()});
    FAIL();
  } catch (const engine::Error& e) {
    EXPECT_NE(std::string(e.what()).find("seed"), std::string::npos) << e.what();
  }
}

TEST(TrainingState, ResumeLatestWithoutCheckpointIsAClearError) {
  TempDir dir("state_none");
  try {
    std::vector<std::string> notes;
    launch::resume_candidates("latest", dir / "nothing", notes);
    FAIL();
  } catch (const engine::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no checkpoint to resume from"), std::string::npos) << e.what();
  }
}

TEST(TrainingState, SavingTheSameStepAgainReplacesItWhole) {
  TempDir dir("state_again");
  const model::GptConfig config = model::gpt_preset("gpt-micro");
  const model::ParamRegistry reg = model::build_gpt_registry(config);
  parallel::MpiCommunicator self(MPI_COMM_SELF, "self");
  launch::TrainingState state;
  state.step = 7;
  state.run = {{"seed", 1}};
  std::vector<float> first = random_params(reg, 10), second = random_params(reg, 11);
  for (std::vector<float>* p : {&first, &second})
    launch::save_checkpoint(dir / "ckpt", state, config, reg, {p->data(), p->data(), p->data()}, launch::ShardRole{},
                            self);
  std::vector<float> back(first.size()), m(first.size()), v(first.size());
  launch::load_checkpoint(latest(dir / "ckpt"), state.run, reg,
                          {back.data(), m.data(), v.data()});
  for (const model::ParamInfo& e : reg.entries())
    EXPECT_EQ(std::memcmp(back.data() + e.offset, second.data() + e.offset, e.numel() * 4), 0) << e.name;
  int entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir / "ckpt")) {
    (void)entry;
    ++entries;
  }
  EXPECT_EQ(entries, 2) << "step_00000007 and latest, nothing set aside";
}
