// The per-op profiler's two modes and the timeline summary (engine/profiler.h,
// engine/op_timeline.h). On the CPU, timeline marks are host clock readings,
// so the timeline of real ops can be checked against the host's own clock.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "engine/op_timeline.h"
#include "engine/ops.h"
#include "engine/profiler.h"
#include "engine/tensor.h"

namespace engine {
namespace {

class ProfilerTest : public ::testing::Test {
 protected:
  void TearDown() override {
    OpProfiler::set_mode(ProfileMode::kOff);
    OpProfiler::reset();
  }
};

TEST_F(ProfilerTest, TimelineListsTopLevelOpsInOrderWithTheirGaps) {
  std::vector<float> a_data(256 * 64), b_data(256 * 64);
  Tensor a(a_data.data(), Shape{256, 64}, DType::kF32, DeviceType::kCpu);
  Tensor b(b_data.data(), Shape{256, 64}, DType::kF32, DeviceType::kCpu);
  OpProfiler::set_mode(ProfileMode::kTimeline);
  OpProfiler::reset();
  ops::fill(a, 1.0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the host keeps the device waiting
  ops::fill(b, 2.0);
  ops::add(a, a, b);
  OpProfiler::set_mode(ProfileMode::kOff);
  ops::fill(a, 0.0);  // after the timeline: not recorded

  const std::vector<TimelineOp> timeline = OpProfiler::timeline();
  ASSERT_EQ(timeline.size(), 3u);
  EXPECT_EQ(timeline[0].op, "fill");
  EXPECT_EQ(timeline[1].op, "fill");
  EXPECT_EQ(timeline[2].op, "add");
  EXPECT_DOUBLE_EQ(timeline[0].start_ms, 0.0);
  for (const TimelineOp& op : timeline) EXPECT_GE(op.end_ms, op.start_ms);
  EXPECT_GE(timeline[1].start_ms - timeline[0].end_ms, 19.0);

  const TimelineSummary s = summarise_timeline(timeline);
  EXPECT_NEAR(s.span_ms, timeline[2].end_ms, 1e-9);
  EXPECT_NEAR(s.busy_ms + s.gap_ms, s.span_ms, 1e-9);
  ASSERT_FALSE(s.gaps.empty());
  EXPECT_EQ(s.gaps[0].after, "fill");  // the sleep is the largest gap, between the two fills
  EXPECT_EQ(s.gaps[0].before, "fill");
  EXPECT_GE(s.gaps[0].ms, 19.0);
  // The synchronised table is not filled in timeline mode.
  EXPECT_TRUE(OpProfiler::snapshot().empty());
}

TEST_F(ProfilerTest, NestedOpsAreTheirCallersTime) {
  OpProfiler::set_mode(ProfileMode::kTimeline);
  OpProfiler::reset();
  {
    ScopedOpTimer outer("outer");
    ScopedOpTimer inner("inner");
  }
  { ScopedOpTimer next("next"); }
  const std::vector<TimelineOp> timeline = OpProfiler::timeline();
  ASSERT_EQ(timeline.size(), 2u);
  EXPECT_EQ(timeline[0].op, "outer");
  EXPECT_EQ(timeline[1].op, "next");
}

TEST_F(ProfilerTest, SynchronisedModeCountsCalls) {
  std::vector<float> a_data(16);
  Tensor a(a_data.data(), Shape{16}, DType::kF32, DeviceType::kCpu);
  OpProfiler::enable(true);
  OpProfiler::reset();
  ops::fill(a, 1.0);
  ops::fill(a, 2.0);
  OpProfiler::enable(false);
  const auto table = OpProfiler::snapshot();
  ASSERT_EQ(table.count("fill"), 1u);
  EXPECT_EQ(table.at("fill").calls, 2);
  EXPECT_TRUE(OpProfiler::timeline().empty());
}

TEST(TimelineSummary, SumsOpsAndGapsByPair) {
  const std::vector<TimelineOp> timeline = {
      {"matmul", 0.0, 4.0}, {"add", 5.0, 6.0}, {"matmul", 6.0, 10.0}, {"add", 12.0, 13.0}, {"adamw", 13.5, 14.0}};
  const TimelineSummary s = summarise_timeline(timeline);
  EXPECT_DOUBLE_EQ(s.span_ms, 14.0);
  EXPECT_DOUBLE_EQ(s.busy_ms, 10.5);
  EXPECT_DOUBLE_EQ(s.gap_ms, 3.5);
  ASSERT_EQ(s.ops.size(), 3u);
  EXPECT_EQ(s.ops[0].op, "matmul");
  EXPECT_DOUBLE_EQ(s.ops[0].ms, 8.0);
  EXPECT_EQ(s.ops[0].calls, 2);
  ASSERT_EQ(s.gaps.size(), 2u);  // matmul -> add twice (1 + 2 ms), add -> adamw once; add -> matmul touches
  EXPECT_EQ(s.gaps[0].after, "matmul");
  EXPECT_EQ(s.gaps[0].before, "add");
  EXPECT_DOUBLE_EQ(s.gaps[0].ms, 3.0);
  EXPECT_EQ(s.gaps[0].count, 2);
  EXPECT_DOUBLE_EQ(s.gaps[0].largest_ms, 2.0);
  EXPECT_DOUBLE_EQ(s.gaps[1].ms, 0.5);
  const std::string text = format_timeline_summary(s, 1);
  EXPECT_NE(text.find("span 14.00 ms"), std::string::npos) << text;
  EXPECT_NE(text.find("gaps 3.50 ms (25.0%)"), std::string::npos) << text;
  EXPECT_EQ(text.find("adamw ->"), std::string::npos) << "only the largest gap pair is listed:\n" << text;
}

TEST(TimelineSummary, RefusesOverlappingOrBackwardOps) {
  EXPECT_THROW(summarise_timeline({{"a", 0.0, 2.0}, {"b", 1.0, 3.0}}), Error);
  EXPECT_THROW(summarise_timeline({{"a", 2.0, 1.0}}), Error);
  EXPECT_NO_THROW(summarise_timeline({{"a", 0.0, 1.0}, {"b", 0.9995, 2.0}}));  // within the clock's resolution
  EXPECT_EQ(summarise_timeline({}).span_ms, 0.0);
}

}  // namespace
}  // namespace engine
