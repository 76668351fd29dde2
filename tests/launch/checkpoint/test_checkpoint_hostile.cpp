// Hostile checkpoints (launch/checkpoint/checkpoint.h): a checkpoint folder
// is untrusted input, and whoever wrote it may have recomputed every
// checksum. Files named outside the folder (a '..', an absolute path, a
// symbolic link leading out) are refused; every field of every index record
// is validated before a byte is copied (a rank past its count wrote past a
// heap buffer, `parts: 0` divided by zero); a damaged state.json holding
// invalid UTF-8 is set aside and the fallback goes on; a FIFO, a directory
// or a device where a file belongs is refused at once instead of blocking.
// Each refusal is one line naming the folder, the file and the problem.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "launch/checkpoint/checkpoint.h"
#include "launch/resilience/job_error.h"
#include "tests/launch/checkpoint/hostile_checkpoint.h"
#include "tests/launch/training_fixture.h"

using namespace hostile;
using test_support::TempDir;
namespace fs = std::filesystem;

namespace {

// The checksum of `count` floats at `byte_offset` of the file at `path`.
std::string checksum_at(const fs::path& path, std::int64_t byte_offset, std::int64_t count) {
  const std::string bytes = read_file(path);
  return launch::checksum_of(bytes.data() + byte_offset, static_cast<std::size_t>(count) * sizeof(float));
}

// The index record of `name`'s parameter in the shard index `index`.
nlohmann::json& param_record(nlohmann::json& index, const std::string& name) {
  for (nlohmann::json& t : index.at("tensors"))
    if (t.at("name") == name && t.at("kind") == "param") return t;
  throw std::runtime_error("no record of " + name);
}

// A copy of the step directory `saved` at `to`.
fs::path copy_of(const std::string& saved, const fs::path& to) {
  fs::create_directories(to.parent_path());
  fs::copy(saved, to, fs::copy_options::recursive);
  return to;
}

}  // namespace

// ---- 1. files named outside the folder ------------------------------------------------

TEST(CheckpointHostile, FilesNamedOutsideTheFolderAreRefused) {
  TempDir dir("hostile_outside");
  SmallState s;
  const std::string saved = s.save(dir / "ckpt");
  ASSERT_EQ(s.load_error(saved), "");
  // Each case: a copy of the checkpoint at <case>/step, and copies of its
  // shard files at <case>/outside that the edited checkpoint points at.
  auto make_case = [&](const std::string& name) {
    const fs::path step = copy_of(saved, dir.path() / name / "step");
    fs::create_directories(dir.path() / name / "outside");
    for (const char* f : {"rank_00000.json", "rank_00000.bin"}) fs::copy(step / f, dir.path() / name / "outside" / f);
    return step;
  };

  // The shard index and its data named through '..'.
  {
    const fs::path step = make_case("dotdot");
    nlohmann::json index = read_json(step / "rank_00000.json");
    for (nlohmann::json& t : index.at("tensors")) t["file"] = "../outside/rank_00000.bin";
    edit_state(step, [&](nlohmann::json& st) {
      st["shards"] = {"../outside/rank_00000.json"};
      st["files"]["../outside/rank_00000.bin"] = st["files"]["rank_00000.bin"];
      st["files"].erase("rank_00000.bin");
      st["files"].erase("rank_00000.json");
    });
    write_signed(step, "../outside/rank_00000.json", index.dump(1));
    fs::remove(step / "rank_00000.json");
    fs::remove(step / "rank_00000.bin");
    const std::string error = s.load_error(step.string());
    EXPECT_MENTIONS(error, "'../outside/rank_00000.");  // the index or its data, whichever is checked first
    EXPECT_MENTIONS(error, "'..'");
    EXPECT_MENTIONS(error, step.string());
    EXPECT_ONE_LINE(error);
  }
  // The data file named by an absolute path.
  {
    const fs::path step = make_case("absolute");
    const std::string outside = (dir.path() / "absolute" / "outside" / "rank_00000.bin").string();
    edit_state(step, [&](nlohmann::json& st) { st["files"][outside] = st["files"]["rank_00000.bin"]; });
    edit_signed(step, "rank_00000.json", [&](nlohmann::json& index) {
      for (nlohmann::json& t : index.at("tensors")) t["file"] = outside;
    });
    fs::remove(step / "rank_00000.bin");
    const std::string error = s.load_error(step.string());
    EXPECT_MENTIONS(error, outside);
    EXPECT_MENTIONS(error, "absolute");
    EXPECT_ONE_LINE(error);
  }
  // /etc/passwd as a data file: refused before it is opened, so no
  // checksum or size of it is compared.
  {
    const fs::path step = make_case("passwd");
    edit_state(step, [&](nlohmann::json& st) { st["files"]["/etc/passwd"] = {{"bytes", 1}, {"xxh3", "0"}}; });
    edit_signed(step, "rank_00000.json", [&](nlohmann::json& index) { index["tensors"][0]["file"] = "/etc/passwd"; });
    const std::string error = s.load_error(step.string());
    EXPECT_MENTIONS(error, "/etc/passwd");
    EXPECT_MENTIONS(error, "absolute");
    EXPECT_EQ(error.find("checksum"), std::string::npos) << error;
    EXPECT_EQ(error.find("truncated"), std::string::npos) << error;
  }
  // The data file a symbolic link leading out of the folder.
  {
    const fs::path step = make_case("symlink");
    fs::remove(step / "rank_00000.bin");
    fs::create_symlink(dir.path() / "symlink" / "outside" / "rank_00000.bin", step / "rank_00000.bin");
    const std::string error = s.load_error(step.string());
    EXPECT_MENTIONS(error, "rank_00000.bin");
    EXPECT_MENTIONS(error, "symbolic link");
    EXPECT_ONE_LINE(error);
  }
  // state.json itself a link out of the folder (to another checkpoint's).
  {
    const fs::path step = make_case("state_link");
    fs::copy(step / "state.json", dir.path() / "state_link" / "outside" / "state.json");
    fs::remove(step / "state.json");
    fs::create_symlink(dir.path() / "state_link" / "outside" / "state.json", step / "state.json");
    const std::string error = s.load_error(step.string());
    EXPECT_MENTIONS(error, "state.json");
    EXPECT_MENTIONS(error, "symbolic link");
  }
  // A relative link that stays inside the folder is fine.
  {
    const fs::path step = make_case("inner_link");
    fs::rename(step / "rank_00000.bin", step / "data.real");
    fs::create_symlink("data.real", step / "rank_00000.bin");
    EXPECT_EQ(s.load_error(step.string()), "");
  }
}

// ---- 2. index records validated before any byte is copied ------------------------------

TEST(CheckpointHostile, EveryFieldOfAnIndexRecordIsValidated) {
  TempDir dir("hostile_records");
  SmallState s;
  const std::string saved = s.save(dir / "ckpt");
  // `a.weight` (4, 6) recorded as two row slices of (2, 6) with the given
  // splits, both checksummed so that only validation can refuse them.
  auto two_slices = [](const nlohmann::json& split0, const nlohmann::json& split1) {
    return [=](const fs::path& step, nlohmann::json& index) {
      nlohmann::json& whole = param_record(index, "a.weight");
      const std::int64_t offset = whole.at("byte_offset").get<std::int64_t>();
      nlohmann::json first = whole, second = whole;
      first["shape"] = {2, 6};
      first["split"] = split0;
      first["xxh3"] = checksum_at(step / "rank_00000.bin", offset, 12);
      second["shape"] = {2, 6};
      second["split"] = split1;
      second["byte_offset"] = offset + 48;
      second["xxh3"] = checksum_at(step / "rank_00000.bin", offset + 48, 12);
      whole = first;
      index["tensors"].push_back(second);
    };
  };
  auto field = [](const char* key, nlohmann::json value) {
    return [=](const fs::path&, nlohmann::json& index) { param_record(index, "a.weight")[key] = value; };
  };
  auto split_field = [](const char* key, nlohmann::json value) {
    return [=](const fs::path&, nlohmann::json& index) { param_record(index, "a.weight")["split"][key] = value; };
  };
  const nlohmann::json rank1 = {{"dim", 0}, {"parts", 1}, {"rank", 1}, {"count", 2}};
  struct Case {
    const char* name;
    std::function<void(const fs::path&, nlohmann::json&)> edit;
    const char* mentions;
  };
  const Case cases[] = {
      // ASan: a 16 kB write past the reassembly buffer; release: exit 0.
      {"rank_past_count", two_slices(rank1, {{"dim", 0}, {"parts", 1}, {"rank", 2}, {"count", 2}}), "rank"},
      {"negative_rank", two_slices(rank1, {{"dim", 0}, {"parts", 1}, {"rank", -1}, {"count", 2}}), "rank"},
      // SIGFPE: a block of extent / 0.
      {"parts_zero", two_slices({{"dim", 0}, {"parts", 0}, {"rank", 0}, {"count", 2}},
                                {{"dim", 0}, {"parts", 0}, {"rank", 1}, {"count", 2}}), "parts"},
      {"dim_out_of_range", two_slices({{"dim", 3}, {"parts", 1}, {"rank", 0}, {"count", 2}},
                                      {{"dim", 3}, {"parts", 1}, {"rank", 1}, {"count", 2}}), "dim"},
      {"rank_2_pow_32", two_slices(rank1, {{"dim", 0}, {"parts", 1}, {"rank", 4294967296LL}, {"count", 2}}), "rank"},
      {"fractional_rank", two_slices(rank1, {{"dim", 0}, {"parts", 1}, {"rank", 0.5}, {"count", 2}}), "rank"},
      {"count_zero", split_field("count", 0), "count"},
      {"dtype_f16", field("dtype", "f16"), "dtype"},
      {"dtype_missing", [](const fs::path&, nlohmann::json& index) { param_record(index, "a.weight").erase("dtype"); },
       "dtype"},
      {"name_a_number", field("name", 7), "name"},
      {"global_shape_overflows", field("global_shape", {std::int64_t{1} << 62, std::int64_t{1} << 62}), "global_shape"},
      {"shape_negative", field("shape", {-4, -6}), "shape"},
      {"shape_fractional", field("shape", {4.0, 6}), "shape"},
      {"byte_offset_past_the_file", field("byte_offset", 1 << 20), "byte_offset"},
      {"byte_offset_negative", field("byte_offset", -48), "byte_offset"},
      {"byte_offset_huge", field("byte_offset", std::uint64_t{1} << 63), "byte_offset"},
      {"file_not_listed", field("file", "rank_00001.bin"), "rank_00001.bin"},
      {"tensors_not_an_array", [](const fs::path&, nlohmann::json& index) { index["tensors"] = "all"; }, "tensors"},
  };
  for (const Case& c : cases) {
    const fs::path step = copy_of(saved, dir.path() / c.name);
    edit_signed(step, "rank_00000.json", [&](nlohmann::json& index) { c.edit(step, index); });
    const std::string error = s.load_error(step.string());
    EXPECT_NE(error, "") << c.name << ": accepted";
    EXPECT_EQ(error.find("NOT AN engine::Error"), std::string::npos) << c.name << ": " << error;
    EXPECT_MENTIONS(error, c.mentions);
    EXPECT_MENTIONS(error, "rank_00000.json");
    EXPECT_ONE_LINE(error);
  }
}

TEST(CheckpointHostile, EveryFieldOfStateJsonIsValidated) {
  TempDir dir("hostile_state");
  SmallState s;
  const std::string saved = s.save(dir / "ckpt");
  struct Case {
    const char* name;
    std::function<void(nlohmann::json&)> edit;
    const char* mentions;
  };
  const Case cases[] = {
      {"step_fractional", [](nlohmann::json& st) { st["step"] = 10.5; }, "step"},
      {"step_negative", [](nlohmann::json& st) { st["step"] = -3; }, "step"},
      {"step_string", [](nlohmann::json& st) { st["step"] = "10"; }, "step"},
      {"run_missing", [](nlohmann::json& st) { st.erase("run"); }, "run"},
      {"shards_a_string", [](nlohmann::json& st) { st["shards"] = "rank_00000.json"; }, "shards"},
      {"shard_a_number", [](nlohmann::json& st) { st["shards"] = {5}; }, "shards"},
      {"files_missing", [](nlohmann::json& st) { st.erase("files"); }, "files"},
      {"bytes_negative", [](nlohmann::json& st) { st["files"]["rank_00000.bin"]["bytes"] = -1; }, "bytes"},
      {"bytes_string", [](nlohmann::json& st) { st["files"]["rank_00000.bin"]["bytes"] = "many"; }, "bytes"},
      {"xxh3_a_number", [](nlohmann::json& st) { st["files"]["rank_00000.json"]["xxh3"] = 12; }, "xxh3"},
      {"format_a_number", [](nlohmann::json& st) { st["format"] = 2; }, "state.json"},
      {"sampler_rng_a_number", [](nlohmann::json& st) { st["sampler_rng"] = 2; }, "sampler_rng"},
      {"optimizer_steps_too_small", [](nlohmann::json& st) { st["optimizer_steps"] = -2; }, "optimizer_steps"},
  };
  for (const Case& c : cases) {
    const fs::path step = copy_of(saved, dir.path() / c.name);
    edit_state(step, c.edit);
    const std::string error = s.load_error(step.string());
    EXPECT_NE(error, "") << c.name << ": accepted";
    EXPECT_EQ(error.find("NOT AN engine::Error"), std::string::npos) << c.name << ": " << error;
    EXPECT_MENTIONS(error, c.mentions);
    EXPECT_MENTIONS(error, step.string());
    EXPECT_ONE_LINE(error);
  }
}

TEST(CheckpointHostile, RankExtraRecordsAreValidatedBeforeAllocating) {
  TempDir dir("hostile_extra");
  SmallState s;
  const launch::RankExtra extra{"onebit", {{"layout", "x"}}, {{"worker", std::vector<float>(10, 1.5f)}}};
  const std::string saved = s.save(dir / "ckpt", &extra);
  ASSERT_TRUE(launch::load_rank_extra(saved, "onebit", 0).has_value());
  struct Case {
    const char* name;
    std::function<void(nlohmann::json&)> edit;
    const char* mentions;
  };
  const Case cases[] = {
      {"count_huge", [](nlohmann::json& x) { x["arrays"][0]["count"] = std::int64_t{1} << 60; }, "count"},
      {"count_negative", [](nlohmann::json& x) { x["arrays"][0]["count"] = -1; }, "count"},
      {"count_fractional", [](nlohmann::json& x) { x["arrays"][0]["count"] = 2.5; }, "count"},
      {"byte_offset_past_the_file", [](nlohmann::json& x) { x["arrays"][0]["byte_offset"] = 400; }, "byte_offset"},
      {"file_outside", [](nlohmann::json& x) { x["file"] = "../ckpt/x.bin"; }, "'..'"},
      {"rank_fractional", [](nlohmann::json& x) { x["rank"] = 0.25; }, "rank"},
      {"arrays_an_object", [](nlohmann::json& x) { x["arrays"] = nlohmann::json::object(); }, "arrays"},
  };
  for (const Case& c : cases) {
    const fs::path step = copy_of(saved, dir.path() / c.name);
    edit_signed(step, "rank_00000_onebit.json", c.edit);
    std::string error;
    try {
      launch::load_rank_extra(step.string(), "onebit", 0);
    } catch (const engine::Error& e) {
      error = e.what();
    } catch (const std::exception& e) {
      error = std::string("NOT AN engine::Error: ") + e.what();
    }
    EXPECT_NE(error, "") << c.name << ": accepted";
    EXPECT_EQ(error.find("NOT AN engine::Error"), std::string::npos) << c.name << ": " << error;
    EXPECT_MENTIONS(error, c.mentions);
    EXPECT_MENTIONS(error, "rank_00000_onebit.json");
    EXPECT_ONE_LINE(error);
  }
}

// ---- 6. a FIFO, a directory or a device where a file belongs ---------------------------

TEST(CheckpointHostile, AFifoOrADirectoryWhereAFileBelongsIsRefusedAtOnce) {
  TempDir dir("hostile_fifo");
  SmallState s;
  const std::string saved = s.save(dir / "ckpt");
  for (const char* name : {"state.json", "rank_00000.json", "rank_00000.bin"}) {
    for (const bool fifo : {true, false}) {
      const fs::path step = copy_of(saved, dir.path() / (std::string(fifo ? "fifo_" : "dir_") + name));
      if (fifo) {
        make_fifo(step / name);
      } else {
        fs::remove(step / name);
        fs::create_directory(step / name);
      }
      const std::optional<std::string> error =
          error_within(10, [&] { s.load_error(step.string()); }, [&] { release_fifo(step / name); });
      ASSERT_TRUE(error.has_value()) << name << (fifo ? " as a FIFO" : " as a directory") << ": the reader blocked";
      const std::string message = s.load_error(step.string());
      EXPECT_MENTIONS(message, name);
      EXPECT_MENTIONS(message, fifo ? "FIFO" : "directory");
      EXPECT_MENTIONS(message, "not a regular file");
      EXPECT_ONE_LINE(message);
    }
  }
  // A device, through a link: refused as leading out of the folder, never opened.
  const fs::path step = copy_of(saved, dir.path() / "device");
  fs::remove(step / "rank_00000.bin");
  fs::create_symlink("/dev/zero", step / "rank_00000.bin");
  const std::optional<std::string> error = error_within(10, [&] { s.load_error(step.string()); });
  ASSERT_TRUE(error.has_value()) << "/dev/zero as a data file: the reader did not finish";
  EXPECT_MENTIONS(s.load_error(step.string()), "symbolic link");
}

TEST(CheckpointHostile, AFifoAsLatestDoesNotBlockTheSearchForACheckpoint) {
  TempDir dir("hostile_latest");
  SmallState s;
  s.save(dir / "ckpt");
  make_fifo(dir.path() / "ckpt" / "latest");
  std::vector<std::string> candidates, notes;
  const std::optional<std::string> error = error_within(
      10, [&] { candidates = launch::resume_candidates("latest", dir / "ckpt", notes); },
      [&] { release_fifo(dir.path() / "ckpt" / "latest"); });
  ASSERT_TRUE(error.has_value()) << "reading a FIFO as 'latest' blocked";
  EXPECT_EQ(*error, "");
  ASSERT_EQ(candidates.size(), 1u);
  EXPECT_MENTIONS(candidates[0], "step_00000010");
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_MENTIONS(notes[0], "not a regular file");
}

// ---- 3. a damaged state.json with invalid UTF-8: set aside, the fallback goes on ------

TEST(CheckpointHostile, AStateJsonOfInvalidUtf8IsSetAsideAndTheResumeFallsBack) {
  TempDir dir("hostile_utf8");
  test_support::write_corpus(dir);
  launch::TrainConfig config = test_support::tiny_config(dir, 4);
  config.checkpoint_dir = dir / "ckpt";
  config.checkpoint_interval = 2;
  config.log_file = dir / "metrics.jsonl";  // the damage is recorded there as JSON
  test_support::train_one_process(config);
  // Invalid UTF-8 where the JSON parser stops: its message quotes the bytes.
  write_file(dir.path() / "ckpt" / "step_00000004" / "state.json", "{\"format\": \"\xff\xfe\x80 gpt\", \"step\": 4}");
  launch::TrainConfig again = config;
  again.resume = "latest";
  std::string log;
  launch::RunSummary resumed;
  try {
    resumed = test_support::train_one_process(again, &log);
  } catch (const std::exception& e) {
    FAIL() << "the resume failed instead of falling back: " << e.what();
  }
  EXPECT_EQ(resumed.first_step, 2);
  EXPECT_TRUE(fs::exists(dir.path() / "ckpt" / "step_00000004.damaged"));
  // The metrics file stays valid JSON, one object a line, the event included.
  std::istringstream lines(read_file(dir.path() / "metrics.jsonl"));
  bool recorded = false;
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json event = nlohmann::json::parse(line);
    if (event.value("event", "") == "damaged_checkpoint") {
      recorded = true;
      EXPECT_MENTIONS(event.at("error").get<std::string>(), "state.json");
      EXPECT_ONE_LINE(event.at("error").get<std::string>());
    }
  }
  EXPECT_TRUE(recorded);
}
