#include "parallel/process_grid.h"

#include <sstream>

#include "engine/check.h"

namespace parallel {

const char* axis_name(Axis axis) {
  switch (axis) {
    case Axis::kTp: return "tp";
    case Axis::kDp: return "dp";
    case Axis::kPp: return "pp";
  }
  return "?";
}

std::string ProcessGrid::check(int world_size, int world_rank, int tp, int pp, int dp) {
  // Gather every problem so the user fixes the layout in one go.
  std::vector<std::string> problems;
  auto add = [&](const std::string& p) { problems.push_back(p); };
  if (world_size < 1) add("world_size must be >= 1");
  if (tp < 1) add("tp must be >= 1");
  if (pp < 1) add("pp must be >= 1");
  if (dp < 0) add("dp must be >= 1, or 0 to infer it from world_size / (tp * pp)");
  if (world_size >= 1 && (world_rank < 0 || world_rank >= world_size))
    add("world_rank must be in [0, " + std::to_string(world_size) + ")");
  if (world_size >= 1 && tp >= 1 && pp >= 1 && dp >= 0) {
    const long long tp_pp = static_cast<long long>(tp) * pp;
    if (dp == 0 && world_size % tp_pp != 0)
      add("tp * pp = " + std::to_string(tp_pp) + " does not divide world_size " +
          std::to_string(world_size) + ", so dp cannot be inferred");
    if (dp > 0 && tp_pp * dp != world_size)
      add("tp * dp * pp = " + std::to_string(tp_pp * dp) + " but world_size is " +
          std::to_string(world_size));
  }
  if (problems.empty()) return "";

  std::ostringstream msg;
  msg << "invalid process grid (world_size=" << world_size << ", world_rank=" << world_rank
      << ", tp=" << tp << ", pp=" << pp << ", dp=" << dp << (dp == 0 ? " meaning infer" : "")
      << "): ";
  for (std::size_t i = 0; i < problems.size(); ++i) msg << (i ? "; " : "") << problems[i];
  msg << ". Expected tp * dp * pp == world_size with every size >= 1.";
  return msg.str();
}

ProcessGrid::ProcessGrid(int world_size, int world_rank, int tp, int pp, int dp)
    : world_size_(world_size), world_rank_(world_rank), tp_(tp), dp_(dp), pp_(pp) {
  const std::string problem = check(world_size, world_rank, tp, pp, dp);
  ENGINE_CHECK(problem.empty(), problem);
  if (dp_ == 0) dp_ = world_size / (tp * pp);
  coords_ = coords_of(world_rank);

  // Each group: vary one coordinate, keep my other two.
  for (int i = 0; i < tp_; ++i) tp_group_.push_back(rank_of({i, coords_.dp, coords_.pp}));
  for (int i = 0; i < dp_; ++i) dp_group_.push_back(rank_of({coords_.tp, i, coords_.pp}));
  for (int i = 0; i < pp_; ++i) pp_group_.push_back(rank_of({coords_.tp, coords_.dp, i}));

  // Computed once; the pipeline runner and the step log read them from here.
  if (!is_first_stage()) pp_prev_rank_ = pp_group_[coords_.pp - 1];
  if (!is_last_stage()) pp_next_rank_ = pp_group_[coords_.pp + 1];
}

int ProcessGrid::size(Axis axis) const {
  switch (axis) {
    case Axis::kTp: return tp_;
    case Axis::kDp: return dp_;
    case Axis::kPp: return pp_;
  }
  ENGINE_FAIL("unknown axis ", static_cast<int>(axis));
}

int ProcessGrid::rank(Axis axis) const {
  switch (axis) {
    case Axis::kTp: return coords_.tp;
    case Axis::kDp: return coords_.dp;
    case Axis::kPp: return coords_.pp;
  }
  ENGINE_FAIL("unknown axis ", static_cast<int>(axis));
}

int ProcessGrid::rank_of(const Coords& c) const {
  ENGINE_CHECK(c.tp >= 0 && c.tp < tp_ && c.dp >= 0 && c.dp < dp_ && c.pp >= 0 && c.pp < pp_,
               "coordinates (tp ", c.tp, ", dp ", c.dp, ", pp ", c.pp, ") are outside the grid tp ",
               tp_, " x dp ", dp_, " x pp ", pp_);
  return c.tp + tp_ * (c.dp + dp_ * c.pp);
}

Coords ProcessGrid::coords_of(int world_rank) const {
  ENGINE_CHECK(world_rank >= 0 && world_rank < world_size_, "rank ", world_rank,
               " is outside the world of size ", world_size_);
  Coords c;
  c.tp = world_rank % tp_;
  c.dp = (world_rank / tp_) % dp_;
  c.pp = world_rank / (tp_ * dp_);
  return c;
}

const std::vector<int>& ProcessGrid::group_ranks(Axis axis) const {
  switch (axis) {
    case Axis::kTp: return tp_group_;
    case Axis::kDp: return dp_group_;
    case Axis::kPp: return pp_group_;
  }
  ENGINE_FAIL("unknown axis ", static_cast<int>(axis));
}

int ProcessGrid::group_color(Axis axis) const {
  switch (axis) {
    case Axis::kTp: return coords_.dp + dp_ * coords_.pp;
    case Axis::kDp: return coords_.tp + tp_ * coords_.pp;
    case Axis::kPp: return coords_.tp + tp_ * coords_.dp;
  }
  ENGINE_FAIL("unknown axis ", static_cast<int>(axis));
}

std::string ProcessGrid::describe() const {
  std::ostringstream out;
  out << "world " << world_size_ << " = tp " << tp_ << " x dp " << dp_ << " x pp " << pp_
      << "; rank " << world_rank_ << " at (tp " << coords_.tp << ", dp " << coords_.dp << ", pp "
      << coords_.pp << ")";
  return out.str();
}

}  // namespace parallel
