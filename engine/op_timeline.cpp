#include "engine/op_timeline.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>

#include "engine/check.h"

namespace engine {

TimelineSummary summarise_timeline(const std::vector<TimelineOp>& timeline) {
  TimelineSummary s;
  if (timeline.empty()) return s;
  std::map<std::string, TimelineOpTotal> ops;
  std::map<std::pair<std::string, std::string>, TimelineGap> gaps;
  // Marks are read on the device's clock with about half a microsecond of
  // resolution: a next op may appear to start that much before the last
  // one's end.
  constexpr double kClockSlackMs = 1e-3;
  for (std::size_t i = 0; i < timeline.size(); ++i) {
    const TimelineOp& op = timeline[i];
    ENGINE_CHECK(op.end_ms >= op.start_ms, "timeline: op ", i, " (", op.op, ") ends at ", op.end_ms,
                 " ms, before its start at ", op.start_ms, " ms");
    TimelineOpTotal& total = ops[op.op];
    total.op = op.op;
    total.ms += op.end_ms - op.start_ms;
    total.calls += 1;
    s.busy_ms += op.end_ms - op.start_ms;
    if (i == 0) continue;
    const TimelineOp& last = timeline[i - 1];
    const double gap = op.start_ms - last.end_ms;
    ENGINE_CHECK(gap >= -kClockSlackMs, "timeline: op ", i, " (", op.op, ") starts at ", op.start_ms,
                 " ms, before op ", i - 1, " (", last.op, ") ends at ", last.end_ms, " ms");
    if (gap <= 0) continue;
    TimelineGap& g = gaps[{last.op, op.op}];
    g.after = last.op;
    g.before = op.op;
    g.ms += gap;
    g.count += 1;
    g.largest_ms = std::max(g.largest_ms, gap);
  }
  s.span_ms = timeline.back().end_ms - timeline.front().start_ms;
  s.gap_ms = s.span_ms - s.busy_ms;
  for (auto& [name, total] : ops) s.ops.push_back(total);
  for (auto& [pair, gap] : gaps) s.gaps.push_back(gap);
  std::sort(s.ops.begin(), s.ops.end(), [](const auto& a, const auto& b) { return a.ms > b.ms; });
  std::sort(s.gaps.begin(), s.gaps.end(), [](const auto& a, const auto& b) { return a.ms > b.ms; });
  return s;
}

std::string format_timeline_summary(const TimelineSummary& s, int top_gaps) {
  std::string out;
  char line[256];
  const double span = s.span_ms > 0 ? s.span_ms : 1;
  std::snprintf(line, sizeof line, "    span %.2f ms: ops %.2f ms (%.1f%%), gaps %.2f ms (%.1f%%)\n", s.span_ms,
                s.busy_ms, 100 * s.busy_ms / span, s.gap_ms, 100 * s.gap_ms / span);
  out += line;
  for (const TimelineOpTotal& op : s.ops) {
    std::snprintf(line, sizeof line, "    %-22s %9.2f ms %5.1f%%  (%lld calls, %.1f us each)\n", op.op.c_str(), op.ms,
                  100 * op.ms / span, op.calls, 1e3 * op.ms / static_cast<double>(op.calls));
    out += line;
  }
  const int shown = std::min<int>(top_gaps, static_cast<int>(s.gaps.size()));
  if (shown > 0) out += "    largest gaps, by the ops either side (summed over the step):\n";
  for (int i = 0; i < shown; ++i) {
    const TimelineGap& g = s.gaps[i];
    std::snprintf(line, sizeof line, "    %-22s -> %-22s %9.3f ms in %lld gaps (largest %.3f ms)\n", g.after.c_str(),
                  g.before.c_str(), g.ms, g.count, g.largest_ms);
    out += line;
  }
  return out;
}

}  // namespace engine
