// ProcessGrid: rank <-> coordinate arithmetic, groups, neighbours, validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "engine/check.h"
#include "parallel/process_grid.h"

using parallel::Axis;
using parallel::Coords;
using parallel::ProcessGrid;

namespace {

// Every layout of up to 16 ranks: (world, tp, pp, dp) with tp*pp*dp = world.
std::vector<std::tuple<int, int, int, int>> all_layouts() {
  std::vector<std::tuple<int, int, int, int>> out;
  for (int world : {1, 2, 3, 4, 6, 8, 12, 16})
    for (int tp = 1; tp <= world; ++tp)
      for (int pp = 1; pp <= world; ++pp)
        if (world % (tp * pp) == 0) out.emplace_back(world, tp, pp, world / (tp * pp));
  return out;
}

}  // namespace

TEST(ProcessGrid, MegatronRankOrder) {
  // tp 2 x dp 2 x pp 2: tp varies fastest, then dp, then pp.
  const int expected[8][3] = {{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {1, 1, 0},
                              {0, 0, 1}, {1, 0, 1}, {0, 1, 1}, {1, 1, 1}};
  for (int r = 0; r < 8; ++r) {
    ProcessGrid g(8, r, /*tp=*/2, /*pp=*/2, /*dp=*/2);
    EXPECT_EQ(g.tp_rank(), expected[r][0]) << r;
    EXPECT_EQ(g.dp_rank(), expected[r][1]) << r;
    EXPECT_EQ(g.pp_rank(), expected[r][2]) << r;
  }
  ProcessGrid g(8, 5, 2, 2, 2);  // (tp 1, dp 0, pp 1)
  EXPECT_EQ(g.tp_group_ranks(), (std::vector<int>{4, 5}));
  EXPECT_EQ(g.dp_group_ranks(), (std::vector<int>{5, 7}));
  EXPECT_EQ(g.pp_group_ranks(), (std::vector<int>{1, 5}));
  EXPECT_EQ(g.pp_prev_rank(), 1);
  EXPECT_EQ(g.pp_next_rank(), -1);
  EXPECT_FALSE(g.is_first_stage());
  EXPECT_TRUE(g.is_last_stage());
  EXPECT_EQ(g.describe(), "world 8 = tp 2 x dp 2 x pp 2; rank 5 at (tp 1, dp 0, pp 1)");
}

TEST(ProcessGrid, InfersDataParallelSize) {
  ProcessGrid g(16, 3, /*tp=*/2, /*pp=*/4);  // dp = 0: infer
  EXPECT_EQ(g.dp_size(), 2);
  ProcessGrid one(1, 0, 1, 1);
  EXPECT_EQ(one.dp_size(), 1);
  EXPECT_TRUE(one.is_first_stage() && one.is_last_stage());
  EXPECT_EQ(one.pp_prev_rank(), -1);
  EXPECT_EQ(one.pp_next_rank(), -1);
}

TEST(ProcessGrid, EveryLayoutMapsRanksAndGroupsConsistently) {
  for (auto [world, tp, pp, dp] : all_layouts()) {
    SCOPED_TRACE("world " + std::to_string(world) + " tp " + std::to_string(tp) + " pp " +
                 std::to_string(pp) + " dp " + std::to_string(dp));
    std::set<std::pair<int, int>> colors[3];  // (axis color, rank in axis) must be unique per axis
    for (int r = 0; r < world; ++r) {
      ProcessGrid g(world, r, tp, pp, dp);
      ASSERT_EQ(g.dp_size(), dp);
      const Coords c = g.coords();
      // The formula of the header, both ways.
      ASSERT_EQ(r, c.tp + tp * (c.dp + dp * c.pp));
      ASSERT_EQ(g.rank_of(c), r);
      for (int q = 0; q < world; ++q) ASSERT_EQ(g.rank_of(g.coords_of(q)), q);

      for (Axis a : {Axis::kTp, Axis::kDp, Axis::kPp}) {
        const std::vector<int>& members = g.group_ranks(a);
        ASSERT_EQ(static_cast<int>(members.size()), g.size(a));
        // Ordered by the axis coordinate, I am at my coordinate, and every
        // member shares my other two coordinates.
        ASSERT_EQ(members[g.rank(a)], r);
        for (int i = 0; i < g.size(a); ++i) {
          const Coords m = g.coords_of(members[i]);
          const int along = a == Axis::kTp ? m.tp : a == Axis::kDp ? m.dp : m.pp;
          ASSERT_EQ(along, i);
          if (a != Axis::kTp) ASSERT_EQ(m.tp, c.tp);
          if (a != Axis::kDp) ASSERT_EQ(m.dp, c.dp);
          if (a != Axis::kPp) ASSERT_EQ(m.pp, c.pp);
          // All members agree on the group's colour (what MPI_Comm_split uses).
          ASSERT_EQ(ProcessGrid(world, members[i], tp, pp, dp).group_color(a), g.group_color(a));
        }
        ASSERT_GE(g.group_color(a), 0);
        ASSERT_LT(g.group_color(a), world / g.size(a));
        ASSERT_TRUE(colors[static_cast<int>(a)].insert({g.group_color(a), g.rank(a)}).second);
      }
      // tp groups are consecutive ranks (the same node).
      const std::vector<int>& tpg = g.tp_group_ranks();
      for (int i = 1; i < tp; ++i) ASSERT_EQ(tpg[i], tpg[0] + i);

      // Neighbours: the pp group's entries next to mine.
      ASSERT_EQ(g.is_first_stage(), c.pp == 0);
      ASSERT_EQ(g.is_last_stage(), c.pp == pp - 1);
      ASSERT_EQ(g.pp_prev_rank(), c.pp == 0 ? -1 : g.rank_of({c.tp, c.dp, c.pp - 1}));
      ASSERT_EQ(g.pp_next_rank(), c.pp == pp - 1 ? -1 : g.rank_of({c.tp, c.dp, c.pp + 1}));
    }
  }
}

TEST(ProcessGrid, BadGridsGiveOneCompleteMessage) {
  auto message = [](int world, int rank, int tp, int pp, int dp) -> std::string {
    try {
      ProcessGrid g(world, rank, tp, pp, dp);
    } catch (const engine::Error& e) {
      return e.what();
    }
    return "";
  };
  // Sizes do not multiply to the world: every value is named.
  std::string m = message(8, 3, 2, 2, 3);
  EXPECT_NE(m.find("world_size=8"), std::string::npos) << m;
  EXPECT_NE(m.find("world_rank=3"), std::string::npos) << m;
  EXPECT_NE(m.find("tp=2"), std::string::npos) << m;
  EXPECT_NE(m.find("pp=2"), std::string::npos) << m;
  EXPECT_NE(m.find("dp=3"), std::string::npos) << m;
  EXPECT_NE(m.find("tp * dp * pp = 12 but world_size is 8"), std::string::npos) << m;
  EXPECT_NE(m.find("process_grid.cpp:"), std::string::npos) << m;  // file:line from ENGINE_CHECK

  m = message(8, 0, 3, 1, 0);
  EXPECT_NE(m.find("tp * pp = 3 does not divide world_size 8"), std::string::npos) << m;

  // Several problems at once are all reported.
  m = message(4, 7, 0, -1, 0);
  EXPECT_NE(m.find("tp must be >= 1"), std::string::npos) << m;
  EXPECT_NE(m.find("pp must be >= 1"), std::string::npos) << m;
  EXPECT_NE(m.find("world_rank must be in [0, 4)"), std::string::npos) << m;

  EXPECT_NE(message(0, 0, 1, 1, 1).find("world_size must be >= 1"), std::string::npos);
  EXPECT_NE(message(4, 0, 1, 1, -2).find("dp must be >= 1"), std::string::npos);
  EXPECT_EQ(message(4, 3, 2, 2, 1), "");
  // check() says the same without throwing.
  EXPECT_EQ(ProcessGrid::check(8, 0, 2, 2, 2), "");
  EXPECT_NE(ProcessGrid::check(8, 0, 2, 2, 3), "");
}

TEST(ProcessGrid, CoordinatesOutsideTheGridThrow) {
  ProcessGrid g(8, 0, 2, 2, 2);
  EXPECT_THROW(g.rank_of({2, 0, 0}), engine::Error);
  EXPECT_THROW(g.coords_of(8), engine::Error);
  EXPECT_THROW(g.coords_of(-1), engine::Error);
}
