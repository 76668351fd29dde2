// Pipeline schedules: exact action lists for small cases (written out by
// hand from Narayanan et al. 2021 Fig. 4), and invariants for many (pp, m).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <string>
#include <tuple>
#include <vector>

#include "engine/check.h"
#include "parallel/pipeline_schedule.h"

using namespace parallel;

namespace {

std::vector<std::vector<Action>> whole_pipeline(ScheduleKind kind, int pp, int m, int v = 1) {
  std::vector<std::vector<Action>> out;
  for (int s = 0; s < pp; ++s) out.push_back(make_schedule(kind, pp, s, m, v));
  return out;
}

std::vector<Action> parse(const std::string& text) {  // "F0 SF0 RB0" -> actions
  std::vector<Action> out;
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t j = text.find(' ', i);
    if (j == std::string::npos) j = text.size();
    const std::string tok = text.substr(i, j - i);
    std::size_t digits = tok.find_first_of("0123456789");
    const std::string kind = tok.substr(0, digits);
    const int micro = std::stoi(tok.substr(digits));
    const ActionKind k = kind == "RF" ? ActionKind::kRecvForward
                         : kind == "F" ? ActionKind::kForward
                         : kind == "SF" ? ActionKind::kSendForward
                         : kind == "RB" ? ActionKind::kRecvBackward
                         : kind == "B" ? ActionKind::kBackward
                         : kind == "W" ? ActionKind::kWeight
                                       : ActionKind::kSendBackward;
    out.push_back({k, micro});
    i = j + 1;
  }
  return out;
}

}  // namespace

TEST(OneFOneB, FourStagesEightMicroBatches) {
  // Stage 0 warms up with pp - 1 = 3 forwards, the last stage with none.
  EXPECT_EQ(format_compute(one_f_one_b(4, 0, 8)), "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  EXPECT_EQ(format_compute(one_f_one_b(4, 1, 8)), "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7");
  EXPECT_EQ(format_compute(one_f_one_b(4, 2, 8)), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
  EXPECT_EQ(format_compute(one_f_one_b(4, 3, 8)), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");

  EXPECT_EQ(format_actions(one_f_one_b(4, 0, 8)),
            "F0 SF0 F1 SF1 F2 SF2 F3 SF3 RB0 B0 F4 SF4 RB1 B1 F5 SF5 RB2 B2 F6 SF6 RB3 B3 "
            "F7 SF7 RB4 B4 RB5 B5 RB6 B6 RB7 B7");
  EXPECT_EQ(format_actions(one_f_one_b(4, 3, 8)),
            "RF0 F0 B0 SB0 RF1 F1 B1 SB1 RF2 F2 B2 SB2 RF3 F3 B3 SB3 "
            "RF4 F4 B4 SB4 RF5 F5 B5 SB5 RF6 F6 B6 SB6 RF7 F7 B7 SB7");
  // The parser used below agrees with the formatter.
  EXPECT_EQ(parse(format_actions(one_f_one_b(4, 1, 8))), one_f_one_b(4, 1, 8));
}

TEST(OneFOneB, FewerMicroBatchesThanStages) {
  // pp = 4, m = 2: warm-up is capped at m, so early stages run F0 F1 B0 B1.
  EXPECT_EQ(format_actions(one_f_one_b(4, 0, 2)), "F0 SF0 F1 SF1 RB0 B0 RB1 B1");
  EXPECT_EQ(format_actions(one_f_one_b(4, 1, 2)), "RF0 F0 SF0 RF1 F1 SF1 RB0 B0 SB0 RB1 B1 SB1");
  EXPECT_EQ(format_actions(one_f_one_b(4, 2, 2)), "RF0 F0 SF0 RF1 F1 SF1 RB0 B0 SB0 RB1 B1 SB1");
  EXPECT_EQ(format_actions(one_f_one_b(4, 3, 2)), "RF0 F0 B0 SB0 RF1 F1 B1 SB1");
  // One micro-batch: a plain forward then backward through the chain.
  EXPECT_EQ(format_actions(one_f_one_b(3, 1, 1)), "RF0 F0 SF0 RB0 B0 SB0");
  // One stage: no communication at all.
  EXPECT_EQ(format_actions(one_f_one_b(1, 0, 3)), "F0 B0 F1 B1 F2 B2");
}

TEST(AllForwardAllBackward, ExactOrder) {
  EXPECT_EQ(format_actions(all_forward_all_backward(2, 0, 3)), "F0 SF0 F1 SF1 F2 SF2 RB0 B0 RB1 B1 RB2 B2");
  EXPECT_EQ(format_actions(all_forward_all_backward(2, 1, 3)), "RF0 F0 RF1 F1 RF2 F2 B0 SB0 B1 SB1 B2 SB2");
  EXPECT_EQ(format_compute(all_forward_all_backward(4, 2, 8)),
            "F0 F1 F2 F3 F4 F5 F6 F7 B0 B1 B2 B3 B4 B5 B6 B7");
}

TEST(Schedules, InvariantsForManyShapes) {
  for (int pp = 1; pp <= 8; ++pp) {
    for (int m = 1; m <= 16; ++m) {
      SCOPED_TRACE("pp " + std::to_string(pp) + " m " + std::to_string(m));
      for (ScheduleKind kind : {ScheduleKind::kOneFOneB, ScheduleKind::kAllForwardAllBackward}) {
        SCOPED_TRACE(schedule_name(kind));
        const auto stages = whole_pipeline(kind, pp, m);
        // Every F and B once, F before B, communication in place, matching
        // sends/receives, and no deadlock under rendezvous sends.
        ASSERT_EQ(check_schedules(stages, m), "");
        for (int s = 0; s < pp; ++s) {
          const int expected_peak = kind == ScheduleKind::kOneFOneB ? std::min(pp - s, m) : m;
          ASSERT_EQ(peak_in_flight(stages[s]), expected_peak) << "stage " << s;
          if (kind == ScheduleKind::kOneFOneB) ASSERT_LE(peak_in_flight(stages[s]), pp - s);
          // 2 compute + up to 4 communication actions per micro-batch.
          const int comm = (s > 0 ? 2 : 0) + (s < pp - 1 ? 2 : 0);
          ASSERT_EQ(static_cast<int>(stages[s].size()), m * (2 + comm));
        }
      }
    }
  }
}

TEST(Schedules, CheckerFindsDeadlocksAndMismatches) {
  // Stage 0 waits for a gradient before sending the activation it comes from.
  std::vector<std::vector<Action>> bad = {parse("F0 RB0 B0 SF0"), parse("RF0 F0 B0 SB0")};
  const std::string dead = check_schedules(bad, 1);
  EXPECT_NE(dead.find("deadlock"), std::string::npos) << dead;
  EXPECT_NE(dead.find("stage 0 [RB0]"), std::string::npos) << dead;

  // Messages sent in another order than received.
  bad = {parse("F0 F1 SF1 SF0 RB0 B0 RB1 B1"), parse("RF0 F0 RF1 F1 B0 SB0 B1 SB1")};
  const std::string order = check_schedules(bad, 2);
  EXPECT_NE(order.find("is SF1 but stage 1 receives it as RF0"), std::string::npos) << order;

  // Local mistakes.
  EXPECT_NE(check_schedules({parse("B0 F0")}, 1).find("F0 must come before B0"), std::string::npos);
  EXPECT_NE(check_schedules({parse("F0 B0 F0 B0")}, 1).find("appears twice"), std::string::npos);
  EXPECT_NE(check_schedules({parse("F0 B0")}, 2).find("F1 is missing"), std::string::npos);
  EXPECT_NE(check_schedules({parse("F0 SF0 B0")}, 1).find("must not appear"), std::string::npos);
}

// Megatron-LM's interleaved order, written out by hand for p 3, v 2, m 6:
// micro-batches in groups of 3, chunk 0 of a group then chunk 1 ("F0.1" is
// micro-batch 0 in chunk 1); rank 0 warms up with 2 (p - 1) + (v - 1) p = 7
// forwards, the last rank with p = 3.
TEST(Interleaved, ThreeRanksTwoChunksSixMicroBatches) {
  EXPECT_EQ(format_compute(interleaved_one_f_one_b(3, 0, 6, 2)),
            "F0 F1 F2 F0.1 F1.1 F2.1 F3 F4 B0.1 F5 B1.1 F3.1 B2.1 F4.1 B0 F5.1 B1 B2 B3.1 B4.1 B5.1 B3 B4 B5");
  EXPECT_EQ(format_compute(interleaved_one_f_one_b(3, 2, 6, 2)),
            "F0 F1 F2 F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3 B0 F4 B1 F5 B2 F3.1 B3.1 F4.1 B4.1 F5.1 B5.1 B3 B4 B5");
  // The last rank hands chunk 0's output to rank 0's chunk 1, and rank 0
  // hands chunk 1's input gradient back to the last rank's chunk 0.
  const std::vector<Action> last = interleaved_one_f_one_b(3, 2, 6, 2);
  EXPECT_EQ(format_actions(std::vector<Action>(last.begin(), last.begin() + 3)), "RF0 F0 SF0");
  EXPECT_EQ(pipeline_peer({ActionKind::kSendForward, 0, 0}, 3, 2), 0);
  EXPECT_EQ(pipeline_peer({ActionKind::kSendBackward, 0, 1}, 3, 0), 2);
  EXPECT_EQ(pipeline_peer({ActionKind::kRecvForward, 0, 1}, 3, 0), 2);
  EXPECT_EQ(pipeline_peer({ActionKind::kRecvBackward, 0, 0}, 3, 1), 2);
  // m = p: every forward first (Megatron's all-warm-up case).
  EXPECT_EQ(format_compute(interleaved_one_f_one_b(3, 1, 3, 2)), "F0 F1 F2 F0.1 F1.1 F2.1 B0.1 B1.1 B2.1 B0 B1 B2");
  // v = 1 with make_schedule's other kinds only.
  EXPECT_THROW(make_schedule(ScheduleKind::kOneFOneB, 4, 0, 8, 2), engine::Error);
}

TEST(Interleaved, RefusesWhatMegatronRefuses) {
  EXPECT_EQ(interleaved_refusal(4, 8, 2, 16), "");
  EXPECT_NE(interleaved_refusal(2, 8, 2).find("needs pp > 2"), std::string::npos);
  EXPECT_NE(interleaved_refusal(4, 6, 2).find("must be a multiple of pp (pp 4, 6 micro-batches, 2 virtual stages)"),
            std::string::npos);
  EXPECT_NE(interleaved_refusal(4, 8, 1).find("at least 2 virtual stages"), std::string::npos);
  EXPECT_NE(interleaved_refusal(4, 8, 2, 12).find("the 12 layers into pp x virtual stages = 8 equal chunks"),
            std::string::npos);
  EXPECT_THROW(interleaved_one_f_one_b(4, 0, 6, 2), engine::Error);
}

// Every (p, v, m) Megatron accepts up to p 8, v 4, m 4p: each (chunk,
// micro-batch) runs F then B once, messages match on every pair of ranks in
// posting order (the last rank's hand-over to rank 0 included), no deadlock
// under rendezvous sends, and the activation sets held at once are
// Megatron's warm-up plus one.
TEST(Interleaved, InvariantsForManyShapes) {
  for (int pp = 3; pp <= 8; ++pp)
    for (int v = 2; v <= 4; ++v)
      for (int m = pp; m <= 4 * pp; m += pp) {
        SCOPED_TRACE("pp " + std::to_string(pp) + " v " + std::to_string(v) + " m " + std::to_string(m));
        const auto stages = whole_pipeline(ScheduleKind::kInterleaved, pp, m, v);
        ASSERT_EQ(check_schedules(stages, m, v), "");
        for (int s = 0; s < pp; ++s) {
          const int warmup = m == pp ? m * v : std::min(2 * (pp - s - 1) + (v - 1) * pp, m * v);
          ASSERT_EQ(peak_in_flight(stages[s]), std::min(warmup + 1, m * v)) << "stage " << s;
          // 2 compute actions per (chunk, micro-batch); 4 messages but at the two ends of the virtual pipeline.
          const int ends = (s == 0 ? 2 * m : 0) + (s == pp - 1 ? 2 * m : 0);
          ASSERT_EQ(static_cast<int>(stages[s].size()), 6 * m * v - ends) << "stage " << s;
        }
      }
}

// The bubble each schedule really has, run by the runner's rules with every
// stage's forward + backward of a micro-batch taking 1 (a chunk's 1/v):
// 1F1B and GPipe take m + p - 1, the interleaved schedule m + (p - 1) / v,
// so the idle fraction is bubble_fraction's (p - 1) / (v m + p - 1)
// (Narayanan et al. 2021 §2.2). Backward twice the forward, as in a
// transformer, changes nothing for these schedules.
TEST(Schedules, SimulatedBubbleMatchesTheory) {
  for (const double forward_share : {0.5, 1.0 / 3.0})
    for (int pp = 1; pp <= 8; ++pp)
      for (int m = 1; m <= 16; ++m) {
        SCOPED_TRACE("pp " + std::to_string(pp) + " m " + std::to_string(m));
        for (ScheduleKind kind : {ScheduleKind::kOneFOneB, ScheduleKind::kAllForwardAllBackward}) {
          const double t =
              simulated_step_seconds(whole_pipeline(kind, pp, m), m, 1, forward_share, 1.0 - forward_share);
          EXPECT_NEAR(t, m + pp - 1, 1e-9) << schedule_name(kind);
          EXPECT_NEAR((t - m) / t, bubble_fraction(pp, m), 1e-12) << schedule_name(kind);
        }
        if (pp < 3 || m % pp != 0) continue;
        for (int v = 2; v <= 4; ++v) {
          const double t = simulated_step_seconds(whole_pipeline(ScheduleKind::kInterleaved, pp, m, v), m, v,
                                                  forward_share / v, (1.0 - forward_share) / v);
          EXPECT_NEAR(t, m + static_cast<double>(pp - 1) / v, 1e-9) << "interleaved v " << v;
          EXPECT_NEAR((t - m) / t, interleaved_bubble_fraction(pp, m, v), 1e-12) << "interleaved v " << v;
        }
      }
}

TEST(Schedules, CheckerFollowsMessagesRoundTheInterleavedPipeline) {
  // p 3, v 2, m 3: rank 2 sends chunk 0's outputs round to rank 0 in micro-batch
  // order; rank 0 posting the receive for micro-batch 1 first (still before
  // its forward) takes micro-batch 0's activation as 1's: the checker names
  // both ends.
  auto stages = whole_pipeline(ScheduleKind::kInterleaved, 3, 3, 2);
  std::vector<Action>& first = stages[0];
  auto rf = [&](int micro) {
    return std::find(first.begin(), first.end(), Action{ActionKind::kRecvForward, micro, 1});
  };
  first.erase(rf(1));
  first.insert(rf(0), Action{ActionKind::kRecvForward, 1, 1});
  const std::string error = check_schedules(stages, 3, 2);
  EXPECT_NE(error.find("stage 2's message 0 is SF0 but stage 0 receives it as RF1.1"), std::string::npos) << error;
  EXPECT_NE(check_schedules(whole_pipeline(ScheduleKind::kInterleaved, 3, 3, 2), 3, 1).find("outside chunks"),
            std::string::npos);
}

TEST(Schedules, BubbleAndNames) {
  EXPECT_DOUBLE_EQ(interleaved_bubble_fraction(4, 8, 2), 3.0 / 19.0);
  EXPECT_EQ(parse_schedule("interleaved"), ScheduleKind::kInterleaved);
  EXPECT_DOUBLE_EQ(bubble_fraction(4, 8), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(bubble_fraction(1, 8), 0.0);
  EXPECT_DOUBLE_EQ(bubble_fraction(8, 1), 7.0 / 8.0);
  EXPECT_EQ(parse_schedule("1f1b"), ScheduleKind::kOneFOneB);
  EXPECT_EQ(parse_schedule("gpipe"), ScheduleKind::kAllForwardAllBackward);
  EXPECT_EQ(parse_schedule("afab"), ScheduleKind::kAllForwardAllBackward);
  EXPECT_THROW(parse_schedule("zero-bubble"), engine::Error);
  EXPECT_EQ(parse_schedule("zb-h1"), ScheduleKind::kZeroBubbleH1);
  EXPECT_STREQ(schedule_name(ScheduleKind::kZeroBubbleH1), "zb-h1");
  EXPECT_THROW(one_f_one_b(4, 4, 8), engine::Error);
  EXPECT_THROW(one_f_one_b(4, 0, 0), engine::Error);
}

// ZB-H1 (Qi et al. 2024, section 3.1), written out for p 4, m 8: 1F1B's
// forwards and (input-gradient) backwards, stage s starting its weight
// passes after s backwards, the rest at the end; the last stage is left
// with four W's to fill the time stage 0 spends on the last backwards.
TEST(ZeroBubbleH1, FourStagesEightMicroBatches) {
  EXPECT_EQ(format_compute(zero_bubble_h1(4, 0, 8)),
            "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7");
  EXPECT_EQ(format_compute(zero_bubble_h1(4, 1, 8)),
            "F0 F1 F2 B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 F6 B4 W3 F7 B5 W4 B6 W5 B7 W6 W7");
  EXPECT_EQ(format_compute(zero_bubble_h1(4, 3, 8)),
            "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7");
  // The messages of 1F1B, each W after the batch that follows its B: stage 1's
  // [SB1 RF4] meets stage 0's [SF4 RB1] as in 1F1B.
  const std::string stage1 = format_actions(zero_bubble_h1(4, 1, 8));
  EXPECT_NE(stage1.find("RB1 B1 SB1 RF4 W0 F4 SF4 RB2 B2 SB2 RF5 W1 F5"), std::string::npos) << stage1;
  EXPECT_NE(format_actions(zero_bubble_h1(4, 0, 8)).find("F4 SF4 RB1 B1 W1 F5"), std::string::npos);
  EXPECT_EQ(format_actions(zero_bubble_h1(1, 0, 2)), "F0 B0 W0 F1 B1 W1");
  EXPECT_EQ(parse(format_actions(zero_bubble_h1(4, 2, 8))), zero_bubble_h1(4, 2, 8));
  EXPECT_EQ(make_schedule(ScheduleKind::kZeroBubbleH1, 4, 2, 8), zero_bubble_h1(4, 2, 8));
  EXPECT_THROW(make_schedule(ScheduleKind::kZeroBubbleH1, 4, 2, 8, 2), engine::Error);  // one chunk per rank
}

TEST(ZeroBubbleH1, InvariantsForManyShapes) {
  for (int pp = 1; pp <= 8; ++pp)
    for (int m = 1; m <= 16; ++m) {
      SCOPED_TRACE("pp " + std::to_string(pp) + " m " + std::to_string(m));
      const auto stages = whole_pipeline(ScheduleKind::kZeroBubbleH1, pp, m);
      ASSERT_EQ(check_schedules(stages, m), "");
      for (int s = 0; s < pp; ++s) {
        ASSERT_TRUE(splits_backward(stages[s]));
        // Without its W's a ZB-H1 list is the 1F1B list: it posts 1F1B's
        // batches in 1F1B's order (the deadlock argument at the top of
        // pipeline_schedule.h).
        std::vector<Action> without_weights;
        for (const Action& a : stages[s])
          if (a.kind != ActionKind::kWeight) without_weights.push_back(a);
        ASSERT_EQ(without_weights, one_f_one_b(pp, s, m)) << "stage " << s;
        // F..B as 1F1B (p - s); B..W up to s + 1; F..W at most p on any stage.
        ASSERT_EQ(peak_in_flight(stages[s]), std::min(pp - s, m)) << "stage " << s;
        ASSERT_EQ(peak_awaiting_weight(stages[s]), std::min(s + 1, m)) << "stage " << s;
        ASSERT_EQ(peak_until_weight(stages[s]), std::min(pp, m)) << "stage " << s;
        const int comm = (s > 0 ? 2 : 0) + (s < pp - 1 ? 2 : 0);
        ASSERT_EQ(static_cast<int>(stages[s].size()), m * (3 + comm));
      }
    }
  EXPECT_FALSE(splits_backward(one_f_one_b(4, 0, 8)));
  EXPECT_EQ(peak_awaiting_weight(one_f_one_b(4, 0, 8)), 0);
  EXPECT_EQ(peak_until_weight(one_f_one_b(4, 0, 8)), 0);
}

TEST(ZeroBubbleH1, SimulatedBubbleMatchesThePaper) {
  // With equal pass times the step is m (F + B + W) + (p - 1)(F + B - W) for
  // m >= p, against 1F1B's (m + p - 1)(F + B + W) with the same backward.
  for (const auto& [f, b, w] : {std::tuple{1.0, 1.0, 1.0}, std::tuple{1.0, 1.2, 0.8}, std::tuple{1.0, 1.0, 0.5}})
    for (int pp = 1; pp <= 8; ++pp)
      for (int m = pp; m <= 16; ++m) {
        SCOPED_TRACE("pp " + std::to_string(pp) + " m " + std::to_string(m) + " F B W " + std::to_string(f) + " " +
                     std::to_string(b) + " " + std::to_string(w));
        const double zb = simulated_step_seconds(whole_pipeline(ScheduleKind::kZeroBubbleH1, pp, m), m, 1, f, b, w);
        const double ideal = m * (f + b + w);
        EXPECT_NEAR(zb, ideal + (pp - 1) * (f + b - w), 1e-9);
        EXPECT_NEAR((zb - ideal) / zb, zero_bubble_h1_bubble_fraction(pp, m, f, b, w), 1e-12);
        const double one_f_one_b_time = simulated_step_seconds(whole_pipeline(ScheduleKind::kOneFOneB, pp, m), m, 1, f, b + w);
        if (pp > 1) EXPECT_LT(zb, one_f_one_b_time);
      }
  // Outside the paper's regime (fewer micro-batches than stages; a W longer
  // than F or B) the general form holds.
  for (const auto& [f, b, w] : {std::tuple{1.0, 1.0, 1.0}, std::tuple{1.0, 0.7, 1.3}, std::tuple{0.6, 1.0, 2.0}})
    for (int pp = 2; pp <= 8; ++pp)
      for (int m = 1; m <= 12; ++m) {
        const double zb = simulated_step_seconds(whole_pipeline(ScheduleKind::kZeroBubbleH1, pp, m), m, 1, f, b, w);
        const double ideal = m * (f + b + w);
        EXPECT_NEAR((zb - ideal) / zb, zero_bubble_h1_bubble_fraction(pp, m, f, b, w), 1e-12)
            << "pp " << pp << " m " << m << " F B W " << f << " " << b << " " << w;
      }
  // The numbers the documentation quotes: p 4, m 8 at F = B = W = 1.
  EXPECT_DOUBLE_EQ(simulated_step_seconds(whole_pipeline(ScheduleKind::kOneFOneB, 4, 8), 8, 1, 1.0, 2.0), 33.0);
  EXPECT_DOUBLE_EQ(simulated_step_seconds(whole_pipeline(ScheduleKind::kZeroBubbleH1, 4, 8), 8, 1, 1.0, 1.0, 1.0), 27.0);
  EXPECT_DOUBLE_EQ(zero_bubble_h1_bubble_fraction(4, 8, 1, 1, 1), 3.0 / 27.0);
}

TEST(ZeroBubbleH1, CheckerRefusesMisplacedWeightPasses) {
  EXPECT_NE(check_schedules({parse("F0 W0 B0")}, 1).find("B0 must come before W0"), std::string::npos);
  EXPECT_NE(check_schedules({parse("F0 B0 W0 F1 B1")}, 2).find("W1 is missing"), std::string::npos);
  // A message after a W waits for it for nothing and breaks 1F1B's pairing.
  const std::string late = check_schedules({parse("F0 SF0 RB0 B0 W0"), parse("RF0 F0 B0 W0 SB0")}, 1);
  EXPECT_NE(late.find("SB0 follows a W"), std::string::npos) << late;
}

// ZB-V (Qi et al. 2024, section 6): two chunks per rank in a V.
TEST(ZeroBubbleV, PlacementIsAV) {
  // p 4: rank r runs virtual stages r and 7 - r; rank 3 turns round itself.
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(virtual_stage(StagePlacement::kVShape, 4, r, 0), r);
    EXPECT_EQ(virtual_stage(StagePlacement::kVShape, 4, r, 1), 7 - r);
    for (int c = 0; c < 2; ++c) {
      const StageHome home = stage_home(StagePlacement::kVShape, 4, virtual_stage(StagePlacement::kVShape, 4, r, c));
      EXPECT_EQ(home.rank, r);
      EXPECT_EQ(home.chunk, c);
    }
  }
  EXPECT_EQ(pipeline_peer({ActionKind::kSendForward, 0, 0}, 4, 3, StagePlacement::kVShape), 3);  // the turn
  EXPECT_EQ(pipeline_peer_chunk({ActionKind::kSendForward, 0, 0}, 4, 3, StagePlacement::kVShape), 1);
  EXPECT_EQ(pipeline_peer({ActionKind::kSendForward, 0, 1}, 4, 2, StagePlacement::kVShape), 1);  // back up
  EXPECT_EQ(pipeline_peer({ActionKind::kSendBackward, 0, 1}, 4, 3, StagePlacement::kVShape), 3);
  EXPECT_EQ(pipeline_peer_chunk({ActionKind::kSendBackward, 0, 1}, 4, 3, StagePlacement::kVShape), 0);
  EXPECT_EQ(schedule_chunks(ScheduleKind::kZeroBubbleV, 1), 2);
  EXPECT_EQ(stage_placement(ScheduleKind::kZeroBubbleV), StagePlacement::kVShape);
  EXPECT_EQ(stage_placement(ScheduleKind::kInterleaved), StagePlacement::kLooped);
}

// PyTorch's ScheduleZBVZeroBubble rank order, p 4, m 8 (= 2p).
TEST(ZeroBubbleV, FourStagesEightMicroBatches) {
  EXPECT_TRUE(format_compute(zero_bubble_v(4, 0, 8))
                  .starts_with("F0 F1 F2 F3 F4 F5 F6 F0.1 B0.1 W0.1 F1.1 B1.1 W1.1 F2.1 B2.1 W2.1 F3.1 B3.1 W3.1 "));
  EXPECT_TRUE(format_compute(zero_bubble_v(4, 3, 8))
                  .starts_with("F0 F0.1 F1 F1.1 F2 F2.1 F3 F3.1 B0.1 W0.1 F4 B0 W0 F4.1 B1.1 W1.1 "));
  // Rank 3 turns the V round itself: its chunk 0 "sends" to its chunk 1,
  // which "receives" before its forward.
  const std::vector<Action> turn = zero_bubble_v(4, 3, 8);
  const auto at = [&](const Action& a) { return std::find(turn.begin(), turn.end(), a) - turn.begin(); };
  EXPECT_LT(at({ActionKind::kForward, 0, 0}), at({ActionKind::kSendForward, 0, 0}));
  EXPECT_LT(at({ActionKind::kSendForward, 0, 0}), at({ActionKind::kRecvForward, 0, 1}));
  EXPECT_LT(at({ActionKind::kRecvForward, 0, 1}), at({ActionKind::kForward, 0, 1}));
  EXPECT_EQ(pipeline_peer({ActionKind::kSendForward, 0, 0}, 4, 3, StagePlacement::kVShape), 3);
  EXPECT_EQ(make_schedule(ScheduleKind::kZeroBubbleV, 4, 2, 8, 2), zero_bubble_v(4, 2, 8));
  EXPECT_THROW(make_schedule(ScheduleKind::kZeroBubbleV, 4, 2, 8, 1), engine::Error);  // two chunks per rank
  EXPECT_EQ(parse_schedule("zb-v"), ScheduleKind::kZeroBubbleV);
  EXPECT_EQ(zero_bubble_v_refusal(4, 8), "");
  EXPECT_NE(zero_bubble_v_refusal(4, 7).find("7 layers cannot fill 2 x pp = 8 chunks"), std::string::npos);
}

TEST(ZeroBubbleV, InvariantsForManyShapes) {
  for (int pp = 1; pp <= 8; ++pp)
    for (int m = 1; m <= 16; ++m) {
      SCOPED_TRACE("pp " + std::to_string(pp) + " m " + std::to_string(m));
      const auto stages = whole_pipeline(ScheduleKind::kZeroBubbleV, pp, m, 2);
      // Every pass once, messages matched in order on every channel, no
      // deadlock under rendezvous batches.
      ASSERT_EQ(check_schedules(stages, m, 2, StagePlacement::kVShape), "");
      for (int s = 0; s < pp; ++s) {
        ASSERT_TRUE(splits_backward(stages[s]));
        // 1F1B's activation memory: at most 2p + 1 half-rank sets (p
        // micro-batches of the whole rank, and one half), on every rank.
        const int sets = peak_in_flight(stages[s], 0) + peak_in_flight(stages[s], 1);
        ASSERT_LE(sets, std::min(2 * pp + 1, 2 * m)) << "stage " << s;
        ASSERT_LE(peak_in_flight(stages[s]), 2 * pp + 1) << "stage " << s;
        // Each chunk retires its micro-batches in order (F, B and W each
        // increasing), so round-robin slots, stashes and weight-input sets
        // of its peaks' sizes never collide (launch/run/training_stage.h).
        for (int c = 0; c < 2; ++c) {
          std::array<int, 7> last;
          last.fill(-1);
          for (const Action& a : stages[s]) {
            if (a.chunk != c || is_communication(a.kind)) continue;
            ASSERT_GT(a.micro, last[static_cast<int>(a.kind)]) << "stage " << s << " " << to_string(a);
            last[static_cast<int>(a.kind)] = a.micro;
          }
          ASSERT_LE(peak_awaiting_weight(stages[s], c), peak_until_weight(stages[s], c));
        }
      }
    }
  // The looped placement's lists do not check as a V.
  EXPECT_NE(check_schedules(whole_pipeline(ScheduleKind::kInterleaved, 4, 4, 2), 4, 2, StagePlacement::kVShape), "");
}

TEST(ZeroBubbleV, SimulatedBubble) {
  // Equal pass times (each chunk's F = B = W = t, half the rank's): the step
  // is the work plus the first forward's trip down and back up the V,
  // m (F + B + W) + (p - 1) t, for every m >= 2p -- below ZB-H1's
  // (p - 1)(F + B - W) = (p - 1) 2t.
  for (int pp = 1; pp <= 8; ++pp)
    for (int m = 2 * pp; m <= 16; ++m) {
      const double t = 0.5, ideal = m * 6 * t;
      const double zbv = simulated_step_seconds(ScheduleKind::kZeroBubbleV, pp, m, 2, t, t, t);
      EXPECT_NEAR(zbv, ideal + (pp - 1) * t, 1e-9) << "pp " << pp << " m " << m;
      EXPECT_NEAR(zero_bubble_v_bubble_fraction(pp, m, 2 * t, 2 * t, 2 * t), (zbv - ideal) / zbv, 1e-12);
      if (pp > 1) EXPECT_LT(zbv, simulated_step_seconds(ScheduleKind::kZeroBubbleH1, pp, m, 1, 2 * t, 2 * t, 2 * t));
    }
  // What train logs: every schedule's formula, or ZB-V's simulated list
  // where it is not full, equals its own list simulated at equal passes.
  for (const auto& [kind, v] : {std::pair{ScheduleKind::kOneFOneB, 1}, std::pair{ScheduleKind::kZeroBubbleH1, 1},
                                std::pair{ScheduleKind::kInterleaved, 2}, std::pair{ScheduleKind::kZeroBubbleV, 2}})
    for (int pp = 3; pp <= 6; ++pp)
      for (int m : {pp, 2 * pp, 3 * pp}) {
        const bool split = splits_backward(kind, pp);
        ASSERT_EQ(split, splits_backward(make_schedule(kind, pp, 0, m, v))) << schedule_name(kind);
        const double chunk = 1.0 / v;  // each of v chunks does 1/v of a rank's passes
        const double step = simulated_step_seconds(kind, pp, m, v, chunk, (split ? 1.0 : 2.0) * chunk,
                                                   split ? chunk : 0.0);
        EXPECT_NEAR(equal_pass_bubble_fraction(kind, pp, m, v), (step - 3.0 * m) / step, 1e-12)
            << schedule_name(kind) << " pp " << pp << " m " << m;
      }
  // As PyTorch's, the fixed order is zero-bubble only at equal times: a W
  // shorter than B leaves gaps every round (the planner simulates the list).
  const double uneven = simulated_step_seconds(ScheduleKind::kZeroBubbleV, 4, 16, 2, 0.5, 0.5, 0.25);
  EXPECT_GT(uneven - 16 * 2 * 1.25, 3 * 0.5 + 1.0);
}
