#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <sstream>
#include <tuple>
#include <utility>

#include "engine/check.h"

namespace parallel {

namespace {

void check_args(int pp_size, int stage, int micro_batches) {
  ENGINE_CHECK(pp_size >= 1 && stage >= 0 && stage < pp_size && micro_batches >= 1,
               "pipeline schedule needs pp_size >= 1, 0 <= stage < pp_size and micro_batches >= 1; got pp_size ",
               pp_size, ", stage ", stage, ", micro_batches ", micro_batches);
}

}  // namespace

bool is_communication(ActionKind kind) {
  return kind != ActionKind::kForward && kind != ActionKind::kBackward && kind != ActionKind::kWeight;
}

std::string to_string(const Action& action) {
  static const char* const kNames[] = {"RF", "F", "SF", "RB", "B", "SB", "W"};
  std::string out = kNames[static_cast<int>(action.kind)];
  out += std::to_string(action.micro);
  if (action.chunk != 0) {
    out += '.';
    out += std::to_string(action.chunk);
  }
  return out;
}

std::string format_actions(const std::vector<Action>& actions) {
  std::string out;
  for (const Action& a : actions) {
    if (!out.empty()) out += ' ';
    out += to_string(a);
  }
  return out;
}

std::string format_compute(const std::vector<Action>& actions) {
  std::string out;
  for (const Action& a : actions) {
    if (is_communication(a.kind)) continue;
    if (!out.empty()) out += ' ';
    out += to_string(a);
  }
  return out;
}

const char* schedule_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kOneFOneB: return "1f1b";
    case ScheduleKind::kAllForwardAllBackward: return "afab";
    case ScheduleKind::kInterleaved: return "interleaved";
    case ScheduleKind::kZeroBubbleH1: return "zb-h1";
    case ScheduleKind::kZeroBubbleV: return "zb-v";
  }
  return "?";
}

ScheduleKind parse_schedule(const std::string& name) {
  if (name == "1f1b") return ScheduleKind::kOneFOneB;
  if (name == "afab" || name == "gpipe") return ScheduleKind::kAllForwardAllBackward;
  if (name == "interleaved") return ScheduleKind::kInterleaved;
  if (name == "zb-h1") return ScheduleKind::kZeroBubbleH1;
  if (name == "zb-v") return ScheduleKind::kZeroBubbleV;
  ENGINE_FAIL("unknown pipeline schedule '", name, "'; expected 1f1b, afab, gpipe, interleaved, zb-h1 or zb-v");
}

StagePlacement stage_placement(ScheduleKind kind) {
  return kind == ScheduleKind::kZeroBubbleV ? StagePlacement::kVShape : StagePlacement::kLooped;
}

int schedule_chunks(ScheduleKind kind, int virtual_stages) {
  if (kind == ScheduleKind::kZeroBubbleV) return 2;
  return kind == ScheduleKind::kInterleaved ? virtual_stages : 1;
}

int virtual_stage(StagePlacement placement, int pp_size, int rank, int chunk) {
  if (placement == StagePlacement::kVShape) {
    ENGINE_CHECK(chunk == 0 || chunk == 1, "a V-shaped pipeline has two chunks per rank; got chunk ", chunk);
    return chunk == 0 ? rank : 2 * pp_size - 1 - rank;
  }
  return chunk * pp_size + rank;
}

StageHome stage_home(StagePlacement placement, int pp_size, int stage) {
  if (placement == StagePlacement::kVShape)
    return stage < pp_size ? StageHome{stage, 0} : StageHome{2 * pp_size - 1 - stage, 1};
  return StageHome{stage % pp_size, stage / pp_size};
}

// ---- schedules -----------------------------------------------------------------

std::vector<Action> with_communication(const std::vector<Action>& compute, int pp_size, int stage,
                                       int virtual_stages, StagePlacement placement) {
  std::vector<Action> out;
  for (const Action& a : compute) {
    ENGINE_CHECK(!is_communication(a.kind), "with_communication takes compute actions only, got ",
                 to_string(a));
    ENGINE_CHECK(a.chunk >= 0 && a.chunk < virtual_stages, "with_communication: ", to_string(a), " is outside chunks [0, ",
                 virtual_stages, ")");
    // The ends of the virtual pipeline of v p stages.
    const int k = virtual_stage(placement, pp_size, stage, a.chunk);
    const bool first = k == 0, last = k == virtual_stages * pp_size - 1;
    if (a.kind == ActionKind::kWeight) {
      out.push_back(a);  // no messages
    } else if (a.kind == ActionKind::kForward) {
      if (!first) out.push_back({ActionKind::kRecvForward, a.micro, a.chunk});
      out.push_back(a);
      if (!last) out.push_back({ActionKind::kSendForward, a.micro, a.chunk});
    } else {
      if (!last) out.push_back({ActionKind::kRecvBackward, a.micro, a.chunk});
      out.push_back(a);
      if (!first) out.push_back({ActionKind::kSendBackward, a.micro, a.chunk});
    }
  }
  return out;
}

namespace {
// The virtual stage at the other end of message `a`.
int peer_virtual_stage(const Action& a, int pp_size, int stage, StagePlacement placement) {
  ENGINE_CHECK(is_communication(a.kind), "pipeline_peer: ", to_string(a), " is not a message");
  const bool towards_next = a.kind == ActionKind::kSendForward || a.kind == ActionKind::kRecvBackward;
  return virtual_stage(placement, pp_size, stage, a.chunk) + (towards_next ? 1 : -1);
}
}  // namespace

int pipeline_peer(const Action& a, int pp_size, int stage, StagePlacement placement) {
  const int k = peer_virtual_stage(a, pp_size, stage, placement);
  // Past either end of the virtual pipeline there is no peer (the runner
  // and the checker refuse such a message); answer as a looped pipeline
  // would wrap round.
  if (k < 0) return (stage + pp_size - 1) % pp_size;
  if (placement == StagePlacement::kVShape && k >= 2 * pp_size) return (stage + 1) % pp_size;
  return stage_home(placement, pp_size, k).rank;
}

int pipeline_peer_chunk(const Action& a, int pp_size, int stage, StagePlacement placement) {
  const int k = peer_virtual_stage(a, pp_size, stage, placement);
  ENGINE_CHECK(k >= 0, "pipeline_peer_chunk: ", to_string(a), " on stage ", stage, " has no previous stage");
  return stage_home(placement, pp_size, k).chunk;
}

std::vector<Action> one_f_one_b(int pp_size, int stage, int micro_batches) {
  check_args(pp_size, stage, micro_batches);
  // Stage s runs ahead by the number of stages after it, so that its first
  // backward's gradient arrives just as its warm-up forwards are done.
  const int m = micro_batches;
  const int warmup = std::min(pp_size - stage - 1, m);
  std::vector<Action> compute;
  for (int i = 0; i < warmup; ++i) compute.push_back({ActionKind::kForward, i});
  for (int i = warmup; i < m; ++i) {  // steady state: one forward, one backward
    compute.push_back({ActionKind::kForward, i});
    compute.push_back({ActionKind::kBackward, i - warmup});
  }
  for (int i = m - warmup; i < m; ++i) compute.push_back({ActionKind::kBackward, i});  // cool-down
  return with_communication(compute, pp_size, stage);
}

namespace {
// Each W goes after the messages that follow the compute before it, so that
// a batch holds what 1F1B's holds ("B2 SB2 RF6 W0 F6", not
// "B2 SB2 W0 RF6 F6"): neighbours then post matching batches, and W runs
// while the batch is in flight.
std::vector<Action> weights_after_messages(std::vector<Action> out) {
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i].kind != ActionKind::kWeight) continue;
    std::size_t j = i;
    while (j + 1 < out.size() && (is_communication(out[j + 1].kind) || out[j + 1].kind == ActionKind::kWeight)) ++j;
    // out[i..j] is W's and messages: the messages first, the W's after, each in order.
    std::stable_partition(out.begin() + static_cast<std::ptrdiff_t>(i), out.begin() + static_cast<std::ptrdiff_t>(j) + 1,
                          [](const Action& a) { return is_communication(a.kind); });
    i = j;
  }
  return out;
}
}  // namespace

std::vector<Action> zero_bubble_h1(int pp_size, int stage, int micro_batches) {
  check_args(pp_size, stage, micro_batches);
  // 1F1B's warm-up and forward/backward pairs with B the input-gradient
  // pass; stage s starts its W's once s B's have run (one W, of the oldest
  // micro-batch still waiting for it, after each B from then on) and runs
  // the rest at the end. The last stages, which would otherwise idle while
  // the final backwards travel back to stage 0, are left with most W's to
  // do then (Qi et al. 2024, Fig. 3; PyTorch's zero-bubble rank ops).
  const int m = micro_batches, deferred = stage;
  const int warmup = std::min(pp_size - stage - 1, m);
  std::vector<Action> compute;
  int backwards = 0, weights = 0;
  const auto backward_then_weight = [&] {
    compute.push_back({ActionKind::kBackward, backwards++});
    if (backwards > deferred) compute.push_back({ActionKind::kWeight, weights++});
  };
  for (int i = 0; i < warmup; ++i) compute.push_back({ActionKind::kForward, i});
  for (int i = warmup; i < m; ++i) {
    compute.push_back({ActionKind::kForward, i});
    backward_then_weight();
  }
  while (backwards < m) backward_then_weight();
  while (weights < m) compute.push_back({ActionKind::kWeight, weights++});
  return weights_after_messages(with_communication(compute, pp_size, stage));
}

namespace {

// The messages of a whole pipeline's compute orders, placed so that they
// cannot deadlock under the runner's rendezvous batches and every channel
// carries its messages in the order both ends take them (messages between
// two ranks match in posting order).
//
// In a V both neighbours send each other activations and gradients at once
// (chunk 0's activations and chunk 1's gradients going down, the others up),
// so placing each message next to its compute, as with_communication does,
// deadlocks: two neighbours each post a batch of sends the other does not
// receive yet. Instead the compute orders are run as a dataflow (each pass
// starting when its rank is free and its input exists; equal pass times,
// instant messages), each message is stamped with the time its data is made,
// and every rank posts its messages in the one global order of the stamps
// (ties by sender, receiver, kind, chunk, micro-batch): a send after its
// compute (the stamp is that compute's end), a receive before the compute
// that needs it (the stamp is no later than that compute's start). Each
// rank's messages are thus in one global order, so the first unfinished
// message in it has both ends posted (everything before it on either rank is
// finished) and completes: by induction, every message does. Messages are
// placed right after the last F or B that precedes them, before any W (the
// runner posts them before the W's, which run while they travel).
std::vector<std::vector<Action>> place_messages(const std::vector<std::vector<Action>>& compute, int virtual_stages,
                                                StagePlacement placement) {
  const int p = static_cast<int>(compute.size()), v = virtual_stages, last = v * p - 1;
  // Dataflow: when each (kind, chunk, micro) ends, per rank.
  std::vector<std::map<std::tuple<int, int, int>, std::pair<double, double>>> span(p);  // -> (start, end)
  const auto key = [](ActionKind k, int chunk, int micro) { return std::tuple{static_cast<int>(k), chunk, micro}; };
  std::vector<std::size_t> next(p, 0);
  std::vector<double> clock(p, 0.0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r)
      while (next[r] < compute[r].size()) {
        const Action& a = compute[r][next[r]];
        const int k = virtual_stage(placement, p, r, a.chunk);
        double ready = 0.0;
        const bool needs_input = (a.kind == ActionKind::kForward && k > 0) || (a.kind == ActionKind::kBackward && k < last);
        if (needs_input) {
          const StageHome from = stage_home(placement, p, a.kind == ActionKind::kForward ? k - 1 : k + 1);
          const auto it = span[from.rank].find(key(a.kind, from.chunk, a.micro));
          if (it == span[from.rank].end()) break;  // not made yet
          ready = it->second.second;
        }
        const double start = std::max(clock[r], ready);
        clock[r] = start + 1.0;
        span[r][key(a.kind, a.chunk, a.micro)] = {start, clock[r]};
        ++next[r];
        progress = true;
      }
  }
  for (int r = 0; r < p; ++r)
    ENGINE_CHECK(next[r] == compute[r].size(), "place_messages: the compute orders wait on each other (stage ", r,
                 " cannot run ", to_string(compute[r][next[r]]), ")");

  // Every message, stamped, in the global order.
  struct Message {
    double at;
    int from, to;
    Action send, receive;
  };
  std::vector<Message> messages;
  for (int r = 0; r < p; ++r)
    for (const Action& a : compute[r]) {
      if (a.kind == ActionKind::kWeight) continue;
      const int k = virtual_stage(placement, p, r, a.chunk);
      const bool forward = a.kind == ActionKind::kForward;
      if ((forward && k == last) || (!forward && k == 0)) continue;
      const StageHome to = stage_home(placement, p, forward ? k + 1 : k - 1);
      messages.push_back({span[r][key(a.kind, a.chunk, a.micro)].second, r, to.rank,
                          {forward ? ActionKind::kSendForward : ActionKind::kSendBackward, a.micro, a.chunk},
                          {forward ? ActionKind::kRecvForward : ActionKind::kRecvBackward, a.micro, to.chunk}});
    }
  std::sort(messages.begin(), messages.end(), [](const Message& x, const Message& y) {
    return std::tuple{x.at, x.from, x.to, static_cast<int>(x.send.kind), x.send.chunk, x.send.micro} <
           std::tuple{y.at, y.from, y.to, static_cast<int>(y.send.kind), y.send.chunk, y.send.micro};
  });

  std::vector<std::vector<Action>> out(p);
  for (int r = 0; r < p; ++r) {
    std::vector<std::pair<double, Action>> mine;  // this rank's ends of the messages, in the global order
    for (const Message& m : messages) {
      if (m.from == r) mine.push_back({m.at, m.send});
      if (m.to == r) mine.push_back({m.at, m.receive});
    }
    std::size_t placed = 0, after_last_pass = 0;  // where the next messages go: after the last F or B
    const auto place_until = [&](double t) {
      std::vector<Action> batch;
      for (; placed < mine.size() && mine[placed].first <= t; ++placed) batch.push_back(mine[placed].second);
      out[r].insert(out[r].begin() + static_cast<std::ptrdiff_t>(after_last_pass), batch.begin(), batch.end());
    };
    for (const Action& a : compute[r]) {
      if (a.kind != ActionKind::kWeight) place_until(span[r][key(a.kind, a.chunk, a.micro)].first);
      out[r].push_back(a);
      if (a.kind != ActionKind::kWeight) after_last_pass = out[r].size();
    }
    place_until(std::numeric_limits<double>::infinity());
  }
  return out;
}

}  // namespace

std::string zero_bubble_v_refusal(int pp_size, std::int64_t layers) {
  if (layers < 2 * static_cast<std::int64_t>(pp_size))
    return "zb-v runs two chunks of layers per rank, at least one layer each: " + std::to_string(layers) +
           " layers cannot fill 2 x pp = " + std::to_string(2 * pp_size) + " chunks";
  return "";
}

namespace {
std::vector<Action> zero_bubble_v_compute(int pp_size, int stage, int micro_batches) {
  // PyTorch's ScheduleZBVZeroBubble rank order (Qi et al. 2024, section 6),
  // written for n = max(m, 2p - 1) micro-batches so that every phase is
  // full; with fewer, the missing micro-batches' actions are dropped.
  const int p = pp_size, r = stage, m = micro_batches, n = std::max(m, 2 * p - 1);
  std::array<int, 2> forwards{0, 0}, backwards{0, 0}, weights{0, 0};  // per chunk: how many issued
  std::vector<Action> compute;
  const auto add = [&](ActionKind kind, int chunk, std::array<int, 2>& count) {
    compute.push_back({kind, count[chunk]++, chunk});
  };
  const auto forward = [&](int c) { add(ActionKind::kForward, c, forwards); };
  const auto backward = [&](int c) { add(ActionKind::kBackward, c, backwards); };
  const auto weight = [&](int c) { add(ActionKind::kWeight, c, weights); };
  for (int i = 0; i < 2 * (p - r) - 1; ++i) forward(0);  // chunk 0 fills the ranks below
  for (int i = 0; i < r; ++i) {  // chunk 1's first forwards come back up
    forward(1);
    forward(0);
  }
  for (int i = 0; i < p - r; ++i) {  // chunk 1's first backwards, weight passes at once
    forward(1);
    backward(1);
    weight(1);
  }
  while (forwards[1] < forwards[0] || forwards[0] < n) {  // steady state
    if (forwards[0] < n) forward(0);
    backward(0);
    weight(0);
    forward(1);
    backward(1);
    weight(1);
  }
  for (int i = 0; i < r; ++i) {  // cool-down: the backwards first, W's deferred into the drain
    backward(0);
    backward(1);
  }
  for (int i = 0; i < p - r; ++i) {
    backward(0);
    weight(0);
  }
  while (weights[1] < backwards[1]) weight(1);
  while (weights[0] < backwards[0]) weight(0);
  ENGINE_CHECK(forwards == backwards && backwards == weights && forwards[0] == n && forwards[1] == n,
               "zero_bubble_v: the phases do not add up for pp ", p, ", stage ", r, ", ", n, " micro-batches");
  std::erase_if(compute, [&](const Action& a) { return a.micro >= m; });
  return compute;
}
}  // namespace

std::vector<Action> zero_bubble_v(int pp_size, int stage, int micro_batches) {
  check_args(pp_size, stage, micro_batches);
  std::vector<std::vector<Action>> compute;
  for (int r = 0; r < pp_size; ++r) compute.push_back(zero_bubble_v_compute(pp_size, r, micro_batches));
  return place_messages(compute, 2, StagePlacement::kVShape)[stage];
}

std::vector<Action> all_forward_all_backward(int pp_size, int stage, int micro_batches) {
  check_args(pp_size, stage, micro_batches);
  std::vector<Action> compute;
  for (int i = 0; i < micro_batches; ++i) compute.push_back({ActionKind::kForward, i});
  for (int i = 0; i < micro_batches; ++i) compute.push_back({ActionKind::kBackward, i});
  return with_communication(compute, pp_size, stage);
}

std::string interleaved_refusal(int pp_size, int micro_batches, int virtual_stages, std::int64_t layers) {
  const std::string numbers = " (pp " + std::to_string(pp_size) + ", " + std::to_string(micro_batches) +
                              " micro-batches, " + std::to_string(virtual_stages) + " virtual stages)";
  if (virtual_stages < 2) return "the interleaved schedule needs at least 2 virtual stages per rank" + numbers;
  // As Megatron-LM (arguments.py): with 2 ranks the last rank's hand-over to
  // rank 0 would share the pair's channels with the gradients going back.
  if (pp_size < 3) return "the interleaved schedule needs pp > 2, as Megatron-LM's" + numbers;
  if (micro_batches % pp_size != 0)
    return "the interleaved schedule runs micro-batches in groups of pp: their number must be a multiple of pp" +
           numbers;
  if (layers > 0 && layers % (static_cast<std::int64_t>(pp_size) * virtual_stages) != 0)
    return "the interleaved schedule splits the " + std::to_string(layers) + " layers into pp x virtual stages = " +
           std::to_string(pp_size * virtual_stages) + " equal chunks: they do not divide" + numbers;
  return "";
}

std::vector<Action> interleaved_one_f_one_b(int pp_size, int stage, int micro_batches, int virtual_stages) {
  check_args(pp_size, stage, micro_batches);
  const std::string refusal = interleaved_refusal(pp_size, micro_batches, virtual_stages);
  ENGINE_CHECK(refusal.empty(), refusal);
  // Megatron-LM's forward_backward_pipelining_with_interleaving: the k-th
  // forward (or backward) of this rank runs chunk c of micro-batch i, taken
  // in groups of p micro-batches per chunk.
  const int p = pp_size, v = virtual_stages, m = micro_batches, total = m * v;
  auto forward_of = [&](int k) {
    const int in_group = k % (p * v);
    return Action{ActionKind::kForward, (k / (p * v)) * p + in_group % p, in_group / p};
  };
  auto backward_of = [&](int k) {
    const int in_group = k % (p * v);
    return Action{ActionKind::kBackward, (k / (p * v)) * p + in_group % p, v - 1 - in_group / p};
  };
  // Rank r runs ahead by two forwards per rank after it (a chunk's output
  // comes back round to it) plus one group per extra chunk.
  const int warmup = m == p ? total : std::min(2 * (p - stage - 1) + (v - 1) * p, total);

  // The messages go as Megatron posts them, not next to their compute as
  // with_communication places them: after each compute (in the steady state,
  // after each forward-backward pair) one batch sends what was computed and
  // receives the inputs of the next forward and the next backward. Placed
  // next to their compute, the hand-over from the last rank to rank 0 closes
  // a cycle of waits (rank 0 sending a gradient round to the last rank, which
  // waits for rank 1, which waits for rank 0: check_schedules finds it).
  const auto is_first = [&](const Action& a) { return stage == 0 && a.chunk == 0; };
  const auto is_last = [&](const Action& a) { return stage == p - 1 && a.chunk == v - 1; };
  std::vector<Action> out;
  const auto recv_input = [&](const Action& f) {
    if (!is_first(f)) out.push_back({ActionKind::kRecvForward, f.micro, f.chunk});
  };
  const auto send_output = [&](const Action& f) {
    if (!is_last(f)) out.push_back({ActionKind::kSendForward, f.micro, f.chunk});
  };
  const auto recv_grad = [&](const Action& b) {
    if (!is_last(b)) out.push_back({ActionKind::kRecvBackward, b.micro, b.chunk});
  };
  const auto send_grad = [&](const Action& b) {
    if (!is_first(b)) out.push_back({ActionKind::kSendBackward, b.micro, b.chunk});
  };
  recv_input(forward_of(0));
  for (int k = 0; k < warmup; ++k) {
    out.push_back(forward_of(k));
    send_output(forward_of(k));
    if (k + 1 < total) recv_input(forward_of(k + 1));
    if (k == warmup - 1) recv_grad(backward_of(0));
  }
  for (int k = 0; k < total - warmup; ++k) {  // steady state: one forward, one backward, one batch
    const int f = k + warmup;
    out.push_back(forward_of(f));
    out.push_back(backward_of(k));
    send_output(forward_of(f));
    send_grad(backward_of(k));
    if (f + 1 < total) recv_input(forward_of(f + 1));
    recv_grad(backward_of(k + 1));
  }
  for (int k = total - warmup; k < total; ++k) {  // cool-down
    out.push_back(backward_of(k));
    send_grad(backward_of(k));
    if (k + 1 < total) recv_grad(backward_of(k + 1));
  }
  return out;
}

std::vector<Action> make_schedule(ScheduleKind kind, int pp_size, int stage, int micro_batches, int virtual_stages) {
  if (kind == ScheduleKind::kZeroBubbleV)
    ENGINE_CHECK(virtual_stages == 2, "pipeline schedule zb-v runs two chunks of layers per rank, not ",
                 virtual_stages);
  else
    ENGINE_CHECK(kind == ScheduleKind::kInterleaved || virtual_stages == 1, "pipeline schedule ",
                 schedule_name(kind), " runs one chunk of layers per rank, not ", virtual_stages,
                 " virtual stages; use the interleaved schedule");
  switch (kind) {
    case ScheduleKind::kOneFOneB: return one_f_one_b(pp_size, stage, micro_batches);
    case ScheduleKind::kAllForwardAllBackward: return all_forward_all_backward(pp_size, stage, micro_batches);
    case ScheduleKind::kInterleaved: return interleaved_one_f_one_b(pp_size, stage, micro_batches, virtual_stages);
    case ScheduleKind::kZeroBubbleH1: return zero_bubble_h1(pp_size, stage, micro_batches);
    case ScheduleKind::kZeroBubbleV: return zero_bubble_v(pp_size, stage, micro_batches);
  }
  ENGINE_FAIL("unknown schedule kind");
}

bool splits_backward(ScheduleKind kind, int pp_size) {
  return pp_size > 1 && (kind == ScheduleKind::kZeroBubbleH1 || kind == ScheduleKind::kZeroBubbleV);
}

bool splits_backward(const std::vector<Action>& actions) {
  return std::any_of(actions.begin(), actions.end(), [](const Action& a) { return a.kind == ActionKind::kWeight; });
}

namespace {
// Most micro-batches between an action of kind `from` and one of kind `to`.
int peak_between(const std::vector<Action>& actions, ActionKind from, ActionKind to) {
  int now = 0, peak = 0;
  for (const Action& a : actions) {
    if (a.kind == from) peak = std::max(peak, ++now);
    if (a.kind == to) --now;
  }
  return peak;
}
}  // namespace

int peak_in_flight(const std::vector<Action>& actions) {
  // A micro-batch's activation set is taken by its receive, when that comes
  // first (a ZB-V list may post it before the compute ahead of F), or its F.
  std::vector<std::pair<int, int>> taken;  // (chunk, micro)
  int peak = 0;
  for (const Action& a : actions) {
    const std::pair<int, int> set{a.chunk, a.micro};
    const bool held = std::find(taken.begin(), taken.end(), set) != taken.end();
    if ((a.kind == ActionKind::kRecvForward || a.kind == ActionKind::kForward) && !held) {
      taken.push_back(set);
      peak = std::max(peak, static_cast<int>(taken.size()));
    }
    if (a.kind == ActionKind::kBackward) std::erase(taken, set);
  }
  return peak;
}

int peak_awaiting_weight(const std::vector<Action>& actions) {
  return splits_backward(actions) ? peak_between(actions, ActionKind::kBackward, ActionKind::kWeight) : 0;
}

int peak_until_weight(const std::vector<Action>& actions) {
  return splits_backward(actions) ? peak_between(actions, ActionKind::kForward, ActionKind::kWeight) : 0;
}

namespace {
std::vector<Action> of_chunk(const std::vector<Action>& actions, int chunk) {
  std::vector<Action> mine;
  for (const Action& a : actions)
    if (a.chunk == chunk) mine.push_back(a);
  return mine;
}
}  // namespace

int peak_in_flight(const std::vector<Action>& actions, int chunk) { return peak_in_flight(of_chunk(actions, chunk)); }
int peak_awaiting_weight(const std::vector<Action>& actions, int chunk) {
  return peak_awaiting_weight(of_chunk(actions, chunk));
}
int peak_until_weight(const std::vector<Action>& actions, int chunk) {
  return peak_until_weight(of_chunk(actions, chunk));
}

double bubble_fraction(int pp_size, int micro_batches) {
  ENGINE_CHECK(pp_size >= 1 && micro_batches >= 1, "bubble_fraction needs pp_size >= 1 and micro_batches >= 1; got ",
               pp_size, " and ", micro_batches);
  return static_cast<double>(pp_size - 1) / static_cast<double>(micro_batches + pp_size - 1);
}

double interleaved_bubble_fraction(int pp_size, int micro_batches, int virtual_stages) {
  ENGINE_CHECK(virtual_stages >= 1, "interleaved_bubble_fraction needs virtual_stages >= 1; got ", virtual_stages);
  return bubble_fraction(pp_size, micro_batches * virtual_stages);
}

double zero_bubble_h1_bubble_fraction(int pp_size, int micro_batches, double forward_seconds,
                                      double backward_input_seconds, double weight_seconds) {
  ENGINE_CHECK(pp_size >= 1 && micro_batches >= 1 && forward_seconds >= 0 && backward_input_seconds >= 0 &&
                   weight_seconds >= 0 && forward_seconds + backward_input_seconds + weight_seconds > 0,
               "zero_bubble_h1_bubble_fraction needs pp_size >= 1, micro_batches >= 1 and non-negative pass times "
               "that are not all 0; got pp_size ", pp_size, ", ", micro_batches, " micro-batches and ", forward_seconds,
               ", ", backward_input_seconds, ", ", weight_seconds, " s");
  // Qi et al. 2024, section 3.1: (p - 1)(T_F + T_B - T_W), when m >= p and
  // a W fits the gap it fills (T_W <= T_F, T_B). The general form is what
  // the schedule does (simulated_step_seconds, over pp 1..8, m 1..16 and
  // many ratios): each of the first min(m, p) - 1 gaps hides one W, at most
  // as long as the shorter of F and B.
  const double p = pp_size, m = micro_batches;
  const double hidden = std::min({weight_seconds, forward_seconds, backward_input_seconds});
  const double bubble = (p - 1) * (forward_seconds + backward_input_seconds) - (std::min(m, p) - 1) * hidden;
  const double work = micro_batches * (forward_seconds + backward_input_seconds + weight_seconds);
  return bubble / (work + bubble);
}

double zero_bubble_v_bubble_fraction(int pp_size, int micro_batches, double forward_seconds,
                                     double backward_input_seconds, double weight_seconds) {
  ENGINE_CHECK(pp_size >= 1 && micro_batches >= 1 && forward_seconds >= 0 && backward_input_seconds >= 0 &&
                   weight_seconds >= 0 && forward_seconds + backward_input_seconds + weight_seconds > 0,
               "zero_bubble_v_bubble_fraction needs pp_size >= 1, micro_batches >= 1 and non-negative pass times "
               "that are not all 0");
  const double bubble = (pp_size - 1) * forward_seconds / 2;
  const double work = micro_batches * (forward_seconds + backward_input_seconds + weight_seconds);
  return bubble / (work + bubble);
}

double equal_pass_bubble_fraction(ScheduleKind kind, int pp_size, int micro_batches, int virtual_stages) {
  switch (kind) {
    case ScheduleKind::kOneFOneB:
    case ScheduleKind::kAllForwardAllBackward: return bubble_fraction(pp_size, micro_batches);
    case ScheduleKind::kInterleaved: return interleaved_bubble_fraction(pp_size, micro_batches, virtual_stages);
    case ScheduleKind::kZeroBubbleH1: return zero_bubble_h1_bubble_fraction(pp_size, micro_batches, 1.0, 1.0, 1.0);
    case ScheduleKind::kZeroBubbleV: {
      if (micro_batches >= 2 * pp_size) return zero_bubble_v_bubble_fraction(pp_size, micro_batches, 1.0, 1.0, 1.0);
      const double step = simulated_step_seconds(kind, pp_size, micro_batches, 2, 0.5, 0.5, 0.5);
      return (step - 3.0 * micro_batches) / step;
    }
  }
  ENGINE_FAIL("unknown schedule kind");
}

// ---- checking ------------------------------------------------------------------

namespace {

// Where each (kind, chunk, micro) sits in one stage's list, at [chunk * m +
// micro][kind]; -1 when absent.
std::string check_one_stage(const std::vector<Action>& actions, int stage, int pp_size, int m, int v,
                            StagePlacement placement, std::vector<std::array<int, 7>>& at) {
  const std::string where = "stage " + std::to_string(stage) + ": ";
  at.assign(static_cast<std::size_t>(m) * v, {-1, -1, -1, -1, -1, -1, -1});
  const bool split = splits_backward(actions);
  // A W sends nothing: the messages after it would wait for it for nothing,
  // and the runner posts them before it (see zero_bubble_h1).
  bool after_weight = false;
  for (std::size_t i = 0; i < actions.size(); ++i) {
    const ActionKind k = actions[i].kind;
    if (k == ActionKind::kWeight) after_weight = true;
    if (k == ActionKind::kForward || k == ActionKind::kBackward) after_weight = false;
    if (is_communication(k) && after_weight)
      return where + to_string(actions[i]) + " follows a W with no F or B between: messages go before the W's";
  }
  for (int i = 0; i < static_cast<int>(actions.size()); ++i) {
    const Action& a = actions[i];
    if (a.micro < 0 || a.micro >= m) return where + to_string(a) + " is outside micro-batches [0, " + std::to_string(m) + ")";
    if (a.chunk < 0 || a.chunk >= v) return where + to_string(a) + " is outside chunks [0, " + std::to_string(v) + ")";
    int& slot = at[a.chunk * m + a.micro][static_cast<int>(a.kind)];
    if (slot >= 0) return where + to_string(a) + " appears twice";
    slot = i;
  }
  for (int c = 0; c < v; ++c) {
    const int k = virtual_stage(placement, pp_size, stage, c);
    const bool first = k == 0, last = k == v * pp_size - 1;
    for (int i = 0; i < m; ++i) {
      auto pos = [&](ActionKind k) { return at[c * m + i][static_cast<int>(k)]; };
      auto name = [&](ActionKind k) { return to_string({k, i, c}); };
      auto expect = [&](ActionKind k, bool wanted) -> std::string {
        if ((pos(k) >= 0) != wanted)
          return where + name(k) + (wanted ? " is missing" : " must not appear (end of the pipeline)");
        return "";
      };
      auto before = [&](ActionKind a, ActionKind b) -> std::string {
        if (pos(a) >= 0 && pos(b) >= 0 && pos(a) > pos(b)) return where + name(a) + " must come before " + name(b);
        return "";
      };
      for (const std::string& e :
           {expect(ActionKind::kForward, true), expect(ActionKind::kBackward, true),
            expect(ActionKind::kRecvForward, !first), expect(ActionKind::kSendBackward, !first),
            expect(ActionKind::kSendForward, !last), expect(ActionKind::kRecvBackward, !last),
            expect(ActionKind::kWeight, split), before(ActionKind::kBackward, ActionKind::kWeight),
            before(ActionKind::kForward, ActionKind::kBackward), before(ActionKind::kRecvForward, ActionKind::kForward),
            before(ActionKind::kForward, ActionKind::kSendForward),
            before(ActionKind::kRecvBackward, ActionKind::kBackward),
            before(ActionKind::kBackward, ActionKind::kSendBackward)})
        if (!e.empty()) return e;
    }
  }
  return "";
}

// The receive that a send on `stage` must meet on its peer: the same
// micro-batch, in the chunk of the next (activations) or previous (gradients)
// virtual stage.
Action expected_receive(const Action& send, int pp_size, int stage, StagePlacement placement) {
  const ActionKind kind = send.kind == ActionKind::kSendForward ? ActionKind::kRecvForward : ActionKind::kRecvBackward;
  return {kind, send.micro, pipeline_peer_chunk(send, pp_size, stage, placement)};
}

}  // namespace

namespace {

// check_schedules and simulated_step_seconds: checks the lists and runs them
// as the runner does, each compute action taking its cost; *step_seconds
// receives the time the slowest stage finishes.
std::string check_and_time(const std::vector<std::vector<Action>>& per_stage, int micro_batches, int virtual_stages,
                           StagePlacement placement, double forward_seconds, double backward_seconds,
                           double weight_seconds, double* step_seconds) {
  const int p = static_cast<int>(per_stage.size());
  const int m = micro_batches, v = virtual_stages;
  if (p < 1 || m < 1 || v < 1) return "need at least one stage, one micro-batch and one chunk per stage";
  if (placement == StagePlacement::kVShape && v != 2) return "a V-shaped pipeline has two chunks per stage";
  for (int s = 0; s < p; ++s) {
    std::vector<std::array<int, 7>> at;
    const std::string e = check_one_stage(per_stage[s], s, p, m, v, placement, at);
    if (!e.empty()) return e;
  }

  // Pair every send with its receive. Messages from rank a to rank b match in
  // posting order whatever they carry (MPI's and NCCL's rule), so the k-th
  // send on channel (a, b) meets the k-th receive on b from a, and must be
  // the message that receive expects.
  struct Ref {
    int stage, index;
  };
  std::vector<std::vector<Ref>> partner(p);  // [stage][index] -> the other end of a message
  std::map<std::pair<int, int>, std::vector<Ref>> sends, recvs;  // by (from, to)
  for (int s = 0; s < p; ++s) {
    partner[s].assign(per_stage[s].size(), Ref{-1, -1});
    for (int i = 0; i < static_cast<int>(per_stage[s].size()); ++i) {
      const Action& a = per_stage[s][i];
      if (!is_communication(a.kind)) continue;
      const int peer = pipeline_peer(a, p, s, placement);
      const bool send = a.kind == ActionKind::kSendForward || a.kind == ActionKind::kSendBackward;
      if (send) sends[{s, peer}].push_back({s, i});
      else recvs[{peer, s}].push_back({s, i});
    }
  }
  for (const auto& [channel, channel_sends] : sends) {
    std::vector<Ref>& channel_recvs = recvs[channel];
    for (std::size_t k = 0; k < channel_sends.size(); ++k) {
      const Ref from = channel_sends[k];
      const Action& a = per_stage[from.stage][from.index];
      if (channel.first == channel.second) {
        // A message to itself is a copy, made where the runner makes it
        // (pipeline_runner.h), whatever the order: pair it with its receive.
        const auto it = std::find_if(channel_recvs.begin() + static_cast<std::ptrdiff_t>(k), channel_recvs.end(),
                                     [&](const Ref& r) {
                                       return per_stage[r.stage][r.index] == expected_receive(a, p, from.stage, placement);
                                     });
        if (it != channel_recvs.end()) std::iter_swap(channel_recvs.begin() + static_cast<std::ptrdiff_t>(k), it);
      }
      if (k >= channel_recvs.size())
        return "stage " + std::to_string(from.stage) + "'s message " + std::to_string(k) + " (" + to_string(a) +
               ") to stage " + std::to_string(channel.second) + " is never received";
      const Ref to = channel_recvs[k];
      const Action& b = per_stage[to.stage][to.index];
      if (!(b == expected_receive(a, p, from.stage, placement)))
        return "stage " + std::to_string(from.stage) + "'s message " + std::to_string(k) + " is " + to_string(a) +
               " but stage " + std::to_string(to.stage) + " receives it as " + to_string(b);
      if (to.stage == from.stage && to.index < from.index)  // a copy to itself: the data must exist first
        return "stage " + std::to_string(from.stage) + " receives " + to_string(b) + " from itself before sending " +
               to_string(a);
      partner[from.stage][from.index] = to;
      partner[to.stage][to.index] = from;
    }
  }
  for (const auto& [channel, channel_recvs] : recvs)
    if (channel_recvs.size() > sends[channel].size())
      return "stage " + std::to_string(channel.second) + " receives " + std::to_string(channel_recvs.size()) +
             " messages from stage " + std::to_string(channel.first) + ", which sends " +
             std::to_string(sends[channel].size());

  // Execute as the runner does, with rendezvous semantics. A stage posts
  // each run of messages as one batch when it reaches it, may run the W's
  // that follow while the batch is in flight, and waits for it to complete
  // before its next F or B (or its end). An op completes only when its
  // partner is posted too (in the partner stage's posted batch). Time: a
  // compute action advances its stage's clock by its cost; a batch
  // completes at the latest time either end of any of its messages was
  // posted, and the stage's clock waits for that before its next F or B.
  std::vector<int> pos(p, 0), posted_begin(p, 0), posted_end(p, 0);  // posted batch: [begin, end), empty if equal
  std::vector<std::vector<bool>> done(p);
  for (int s = 0; s < p; ++s) done[s].assign(per_stage[s].size(), false);
  std::vector<double> clock(p, 0.0), posted_at(p, 0.0), batch_done(p, 0.0);
  auto size_of = [&](int s) { return static_cast<int>(per_stage[s].size()); };
  auto batch_end = [&](int s, int from) {
    int e = from;
    while (e < size_of(s) && is_communication(per_stage[s][e].kind)) ++e;
    return e;
  };
  auto in_flight = [&](int s) { return posted_begin[s] < posted_end[s]; };
  for (;;) {
    bool progress = false, finished = true;
    for (int s = 0; s < p; ++s) {
      // Match what this stage's posted batch can match now.
      if (in_flight(s)) {
        bool all = true;
        for (int i = posted_begin[s]; i < posted_end[s]; ++i) {
          if (!done[s][i]) {
            const Ref q = partner[s][i];
            // A message to the stage itself is a copy: done when posted
            // (its send, checked above, is posted no later).
            if (q.stage == s || (q.index >= posted_begin[q.stage] && q.index < posted_end[q.stage])) {
              done[s][i] = done[q.stage][q.index] = true;
              const double at = q.stage == s ? posted_at[s] : std::max(posted_at[s], posted_at[q.stage]);
              batch_done[s] = std::max(batch_done[s], at);
              batch_done[q.stage] = std::max(batch_done[q.stage], at);
              progress = true;
            }
          }
          all = all && done[s][i];
        }
        if (all) {  // complete: what waits for it may go on at batch_done[s]
          posted_begin[s] = posted_end[s] = 0;
          progress = true;
        }
      }
      while (pos[s] < size_of(s)) {
        const ActionKind k = per_stage[s][pos[s]].kind;
        if (k == ActionKind::kWeight) {  // runs while a batch is in flight
          clock[s] += weight_seconds;
          ++pos[s];
          progress = true;
          continue;
        }
        if (is_communication(k)) {
          if (in_flight(s)) break;  // the checker refuses messages after a W, so not reached
          posted_begin[s] = pos[s];
          posted_end[s] = pos[s] = batch_end(s, pos[s]);
          posted_at[s] = clock[s];
          batch_done[s] = clock[s];
          progress = true;
          break;  // its matches are made on the next sweep
        }
        if (in_flight(s)) break;  // F or B waits for the batch
        clock[s] = std::max(clock[s], batch_done[s]) + (k == ActionKind::kForward ? forward_seconds : backward_seconds);
        batch_done[s] = 0;
        ++pos[s];
        progress = true;
      }
      if (pos[s] < size_of(s) || in_flight(s)) finished = false;
    }
    if (finished) {
      for (int s = 0; s < p; ++s) clock[s] = std::max(clock[s], batch_done[s]);  // the last batch
      if (step_seconds) *step_seconds = *std::max_element(clock.begin(), clock.end());
      return "";
    }
    if (!progress) {
      std::ostringstream msg;
      msg << "deadlock: every stage waits:";
      for (int s = 0; s < p; ++s) {
        const int from = in_flight(s) ? posted_begin[s] : pos[s], to = in_flight(s) ? posted_end[s] : batch_end(s, pos[s]);
        std::vector<Action> batch(per_stage[s].begin() + from, per_stage[s].begin() + to);
        msg << " stage " << s << " [" << (batch.empty() ? "done" : format_actions(batch)) << "]";
      }
      return msg.str();
    }
  }
}

}  // namespace

std::string check_schedules(const std::vector<std::vector<Action>>& per_stage, int micro_batches, int virtual_stages,
                            StagePlacement placement) {
  return check_and_time(per_stage, micro_batches, virtual_stages, placement, 0.0, 0.0, 0.0, nullptr);
}

double simulated_step_seconds(const std::vector<std::vector<Action>>& per_stage, int micro_batches,
                              int virtual_stages, double forward_seconds, double backward_seconds,
                              double weight_seconds, StagePlacement placement) {
  double seconds = 0;
  const std::string error = check_and_time(per_stage, micro_batches, virtual_stages, placement, forward_seconds,
                                           backward_seconds, weight_seconds, &seconds);
  ENGINE_CHECK(error.empty(), "simulated_step_seconds: ", error);
  return seconds;
}

double simulated_step_seconds(ScheduleKind kind, int pp_size, int micro_batches, int virtual_stages,
                              double forward_seconds, double backward_seconds, double weight_seconds) {
  const int v = schedule_chunks(kind, virtual_stages);
  std::vector<std::vector<Action>> per_stage;
  for (int s = 0; s < pp_size; ++s) per_stage.push_back(make_schedule(kind, pp_size, s, micro_batches, v));
  return simulated_step_seconds(per_stage, micro_batches, v, forward_seconds, backward_seconds, weight_seconds,
                                stage_placement(kind));
}

}  // namespace parallel
