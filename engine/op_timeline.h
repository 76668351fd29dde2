// What an op timeline (engine/profiler.h, timeline mode) says about a step:
// how long the device ran each op, and where it ran none.
//
// A gap is the time between one op's end mark and the next op's start mark
// on the device's clock. Marks are queued on the stream with the ops, so a
// gap is time the device waited for the host to queue more work: launch
// overhead, a host synchronisation (a loss read back, an allocation's
// cudaFree), host-side work between ops. When the host runs ahead of the
// device, consecutive marks are back to back and the gaps are about zero.
// This is the step's time that a synchronised per-op profile, which idles
// the device around every op, cannot attribute.
#pragma once

#include <string>
#include <vector>

#include "engine/profiler.h"

namespace engine {

struct TimelineOpTotal {
  std::string op;
  double ms = 0;
  long long calls = 0;
};

// The gaps between one op and the next, summed over the step by the pair.
struct TimelineGap {
  std::string after;   // the op that ended
  std::string before;  // the op that started next
  double ms = 0;
  long long count = 0;
  double largest_ms = 0;
};

struct TimelineSummary {
  double span_ms = 0;  // first op's start to last op's end
  double busy_ms = 0;  // the ops' own time
  double gap_ms = 0;   // span_ms - busy_ms
  std::vector<TimelineOpTotal> ops;  // by time, largest first
  std::vector<TimelineGap> gaps;     // by summed time, largest first
};

// Throws when the ops are out of order or overlap (a timeline of one stream
// cannot), so a broken recording is not read as a profile.
TimelineSummary summarise_timeline(const std::vector<TimelineOp>& timeline);

// The summary as the lines a benchmark prints: the span, busy and gap
// totals, the ops, and the `top_gaps` largest gap pairs.
std::string format_timeline_summary(const TimelineSummary& summary, int top_gaps);

}  // namespace engine
