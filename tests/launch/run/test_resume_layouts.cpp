// Resume under any layout (ARCHITECTURE.md: names, global shapes and splits are the
// checkpoint contract): a checkpoint written under one tp x pp x dp, ZeRO
// stage and sequence parallelism resumes under another, its tensor-parallel
// slices re-cut and its ZeRO shards gathered or re-sharded, and the
// continuation matches one uninterrupted process within the parity
// tolerance (parity_fixture.h). Also --save-model under tp2 x pp2 x dp2: the
// gathered model equals one process's.
//
// Needs 8 ranks (mpirun --oversubscribe -np 8); fewer skip.
#include <cmath>
#include <fstream>
#include <iterator>

#include "tests/launch/parity_fixture.h"

using namespace test_support;

namespace {

class ResumeLayouts : public ::testing::Test {
 protected:
  static constexpr int kSteps = 6, kSavedAt = 3;

  static void SetUpTestSuite() {
    dir_ = new SharedDir("resume_layouts");
    launch::TrainConfig one = parity_config(*dir_, 1, 1, 1);
    one.steps = kSteps;
    if (world_rank() == 0) one.save_model = *dir_ / "one_process.bin";
    ref_ = new Reference(train_reference(one, kSavedAt));
  }
  static void TearDownTestSuite() {
    delete ref_;
    delete dir_;
  }

  static launch::TrainConfig layout(int tp, int pp, int dp, int zero = 0, bool sequence_parallel = false) {
    launch::TrainConfig c = parity_config(*dir_, tp, pp, dp);
    c.steps = kSteps;
    c.zero = zero;
    c.sequence_parallel = sequence_parallel;
    return c;
  }

  static std::string write_checkpoint(const launch::TrainConfig& source, const std::string& tag) {
    return write_layout_checkpoint(source, *dir_, tag, kSavedAt);
  }
  static void expect_resumes(const std::string& checkpoint, const launch::TrainConfig& target, const std::string& what) {
    test_support::expect_resumes(checkpoint, target, ref_->tail, kSavedAt, what);
  }

  static SharedDir* dir_;
  static Reference* ref_;  // one process: the whole run and its tail after kSavedAt
};
SharedDir* ResumeLayouts::dir_ = nullptr;
Reference* ResumeLayouts::ref_ = nullptr;

std::vector<float> model_file_values(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> values((bytes.size() - 1024) / 4);
  std::memcpy(values.data(), bytes.data() + 1024, values.size() * 4);
  return values;
}

}  // namespace

TEST_F(ResumeLayouts, Tp2Pp2Dp2CheckpointResumesUnderTp4Tp1Pp2AndOneProcess) {
  if (world_size() < 8) GTEST_SKIP() << "needs 8 ranks";
  launch::TrainConfig source = layout(2, 2, 2);
  source.save_model = *dir_ / "tp2pp2dp2.bin";  // on every rank: writing it is collective
  const std::string checkpoint = write_checkpoint(source, "tp2pp2dp2");
  expect_resumes(checkpoint, layout(4, 1, 1), "tp2 pp2 dp2 -> tp4");
  expect_resumes(checkpoint, layout(1, 2, 1), "tp2 pp2 dp2 -> tp1 pp2");
  expect_resumes(checkpoint, layout(1, 1, 1), "tp2 pp2 dp2 -> one process");
  // --save-model under tp2 x pp2 x dp2: rank 0 gathered the whole model.
  if (world_rank() == 0) {
    const std::vector<float> gathered = model_file_values(*dir_ / "tp2pp2dp2.bin");
    const std::vector<float> one = model_file_values(*dir_ / "one_process.bin");
    ASSERT_EQ(gathered.size(), one.size());
    double diff2 = 0, ref2 = 0;
    for (std::size_t i = 0; i < one.size(); ++i) {
      diff2 += (gathered[i] - one[i]) * double(gathered[i] - one[i]);
      ref2 += one[i] * double(one[i]);
    }
    EXPECT_LE(std::sqrt(diff2), 1e-5 * std::sqrt(ref2));
  }
}

TEST_F(ResumeLayouts, Zero3Dp4CheckpointResumesUnderZero1Tp2Dp2WithSequenceParallelism) {
  if (world_size() < 8) GTEST_SKIP() << "needs 8 ranks";
  const std::string checkpoint = write_checkpoint(layout(1, 1, 4, 3), "zero3dp4");
  expect_resumes(checkpoint, layout(2, 1, 2, 1, /*sequence_parallel=*/true), "zero3 dp4 -> zero1 tp2 dp2 sp");
  // And the other way: a tensor-parallel checkpoint under ZeRO-3 with more replicas.
  const std::string tp_checkpoint = write_checkpoint(layout(2, 1, 1), "tp2");
  expect_resumes(tp_checkpoint, layout(1, 1, 8, 3), "tp2 -> zero3 dp8");
}
