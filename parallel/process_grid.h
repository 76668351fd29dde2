// ProcessGrid: where this rank sits in the tp x dp x pp layout.
//
// Three named axes (torchtitan's "device mesh", picotron's process group
// manager), with Megatron-LM's rank order: tensor parallel varies fastest,
// then data parallel, then pipeline parallel:
//
//     world_rank = tp_rank + tp * (dp_rank + dp * pp_rank)
//
// Tensor-parallel groups therefore hold consecutive ranks (the same node when
// tp <= GPUs per node, so the chattiest axis rides NVLink), and pipeline
// neighbours are the farthest apart (they exchange the least traffic).
// Shoeybi et al. 2019 (Megatron-LM) §3, Narayanan et al. 2021 §3.
//
// This is pure arithmetic with no MPI inside: every rank builds the same grid
// from (world_size, world_rank, tp, pp, dp), validates it identically before
// anything is allocated, and unit tests need no mpirun. Neighbour ranks and
// the member list of each group are computed once, here.
#pragma once

#include <string>
#include <vector>

namespace parallel {

// A grid axis ("axis" for the grid, "dim" for a tensor dimension).
enum class Axis { kTp, kDp, kPp };
const char* axis_name(Axis axis);  // "tp", "dp", "pp"

// A rank's position on the three axes.
struct Coords {
  int tp = 0;
  int dp = 0;
  int pp = 0;
  bool operator==(const Coords&) const = default;
};

class ProcessGrid {
 public:
  // dp = 0 infers the data-parallel size as world_size / (tp * pp).
  // Throws engine::Error with one message naming every value when the sizes
  // are not all >= 1, do not multiply to world_size, or world_rank is outside
  // [0, world_size).
  ProcessGrid(int world_size, int world_rank, int tp, int pp, int dp = 0);

  // Same checks without building a grid: "" when valid, else the message the
  // constructor would throw (without file:line). Lets a launcher report a bad
  // layout before MPI starts anything.
  static std::string check(int world_size, int world_rank, int tp, int pp, int dp);

  int world_size() const { return world_size_; }
  int world_rank() const { return world_rank_; }

  int tp_size() const { return tp_; }
  int dp_size() const { return dp_; }
  int pp_size() const { return pp_; }
  int tp_rank() const { return coords_.tp; }
  int dp_rank() const { return coords_.dp; }
  int pp_rank() const { return coords_.pp; }
  const Coords& coords() const { return coords_; }

  int size(Axis axis) const;
  int rank(Axis axis) const;  // my coordinate on `axis` = my rank inside that axis' group

  // Coordinates <-> world rank, for any rank of the grid.
  int rank_of(const Coords& c) const;
  Coords coords_of(int world_rank) const;

  // World ranks of my group along `axis`: the ranks that share my other two
  // coordinates, ordered by their coordinate on `axis` (so entry i is the
  // group member whose group rank is i).
  const std::vector<int>& group_ranks(Axis axis) const;
  const std::vector<int>& tp_group_ranks() const { return group_ranks(Axis::kTp); }
  const std::vector<int>& dp_group_ranks() const { return group_ranks(Axis::kDp); }
  const std::vector<int>& pp_group_ranks() const { return group_ranks(Axis::kPp); }

  // Identifies my group along `axis` among all groups of that axis, in
  // [0, world_size / size(axis)): the row-major index of my other two
  // coordinates. With key = rank(axis) it is exactly what MPI_Comm_split needs.
  int group_color(Axis axis) const;

  // Pipeline position. The prev/next stage ranks are world ranks of the stage
  // before/after mine in my pipeline group, -1 at the ends. Inside the pp
  // group (whose ranks are stage indices) they are pp_rank() -/+ 1.
  bool is_first_stage() const { return coords_.pp == 0; }
  bool is_last_stage() const { return coords_.pp == pp_ - 1; }
  int pp_prev_rank() const { return pp_prev_rank_; }
  int pp_next_rank() const { return pp_next_rank_; }

  // "world 8 = tp 2 x dp 2 x pp 2; rank 5 at (tp 1, dp 0, pp 1)"
  std::string describe() const;

 private:
  int world_size_, world_rank_;
  int tp_, dp_, pp_;
  Coords coords_;
  std::vector<int> tp_group_, dp_group_, pp_group_;
  int pp_prev_rank_ = -1, pp_next_rank_ = -1;
};

}  // namespace parallel
