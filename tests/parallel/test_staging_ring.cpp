// StagingRing (parallel/staging_ring.h), the NCCL test double's staging: ranges
// in order, never split across the end (the skipped tail handed back with the
// range), reused once given back, refused by name when they cannot fit beside
// what is in flight; give_back from another thread, as a CUDA host function does.
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "engine/check.h"
#include "parallel/staging_ring.h"

using parallel::StagingRing;

TEST(StagingRing, HandsOutRangesInOrderAndNeverSplitsOne) {
  StagingRing ring(1024, "test ring");
  const StagingRing::Range a = ring.take(512), b = ring.take(256);
  EXPECT_EQ(a.offset, 0u);
  EXPECT_EQ(a.consumed, 512u);
  EXPECT_EQ(b.offset, 512u);
  EXPECT_EQ(ring.in_flight(), 768u);
  ring.give_back(a.consumed);
  // 384 bytes do not fit in the 256 left before the end: the tail is skipped,
  // the range starts at 0 (where a was) and the skip is handed back with it.
  const StagingRing::Range c = ring.take(384);
  EXPECT_EQ(c.offset, 0u);
  EXPECT_EQ(c.consumed, 256u + 384u);
  EXPECT_EQ(ring.in_flight(), b.consumed + c.consumed);
  ring.give_back(b.consumed);
  ring.give_back(c.consumed);
  EXPECT_EQ(ring.in_flight(), 0u);
  // A range that exactly reaches the end is neither split nor padded.
  const StagingRing::Range d = ring.take(640);
  EXPECT_EQ(d.offset, 384u);
  EXPECT_EQ(d.consumed, 640u);
  ring.give_back(d.consumed);
  EXPECT_EQ(ring.take(1024).offset, 0u) << "a whole-ring range starts at the beginning";
}

TEST(StagingRing, RefusesWhatCannotFitBesideWhatIsInFlight) {
  StagingRing ring(1024, "the tp communicator's staging (raise ENGINE_NCCL_DOUBLE_STAGING_MB)");
  const StagingRing::Range a = ring.take(768);
  try {
    (void)ring.take(512);
    FAIL() << "512 bytes were handed out beside 768 in flight in a ring of 1024";
  } catch (const engine::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("the tp communicator's staging (raise ENGINE_NCCL_DOUBLE_STAGING_MB): needs 512 bytes with "
                        "768 of its 1024 in flight"),
              std::string::npos)
        << what;
  }
  EXPECT_EQ(ring.in_flight(), 768u) << "a refused take hands out nothing";
  EXPECT_THROW((void)ring.take(2048), engine::Error);
  ring.give_back(a.consumed);
  const StagingRing::Range b = ring.take(512);
  EXPECT_EQ(b.offset, 0u) << "the tail of 256 after a is skipped";
  EXPECT_EQ(b.consumed, 768u);
}

TEST(StagingRing, GivesBackFromAnotherThreadInOrder) {
  StagingRing ring(4096, "test ring");
  std::uint64_t handed = 0;
  for (int round = 0; round < 200; ++round) {
    const StagingRing::Range r = ring.take(static_cast<std::uint64_t>(256 * (1 + round % 7)));
    handed += r.consumed;
    std::thread([&ring, r] { ring.give_back(r.consumed); }).join();
  }
  EXPECT_EQ(ring.in_flight(), 0u);
  EXPECT_GT(handed, 4096u * 10) << "the ring went round many times";
}
