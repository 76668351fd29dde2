#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <array>
#include <map>
#include <utility>
#include <sstream>

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
  }
  return "?";
}

ScheduleKind parse_schedule(const std::string& name) {
  if (name == "1f1b") return ScheduleKind::kOneFOneB;
  if (name == "afab" || name == "gpipe") return ScheduleKind::kAllForwardAllBackward;
  if (name == "interleaved") return ScheduleKind::kInterleaved;
  if (name == "zb-h1") return ScheduleKind::kZeroBubbleH1;
  ENGINE_FAIL("unknown pipeline schedule '", name, "'; expected 1f1b, afab, gpipe, interleaved or zb-h1");
}

// ---- schedules -----------------------------------------------------------------

std::vector<Action> with_communication(const std::vector<Action>& compute, int pp_size, int stage,
                                       int virtual_stages) {
  std::vector<Action> out;
  for (const Action& a : compute) {
    ENGINE_CHECK(!is_communication(a.kind), "with_communication takes compute actions only, got ",
                 to_string(a));
    ENGINE_CHECK(a.chunk >= 0 && a.chunk < virtual_stages, "with_communication: ", to_string(a), " is outside chunks [0, ",
                 virtual_stages, ")");
    // The ends of the virtual pipeline of v p stages.
    const bool first = stage == 0 && a.chunk == 0, last = stage == pp_size - 1 && a.chunk == virtual_stages - 1;
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

int pipeline_peer(const Action& a, int pp_size, int stage) {
  const bool towards_next = a.kind == ActionKind::kSendForward || a.kind == ActionKind::kRecvBackward;
  ENGINE_CHECK(is_communication(a.kind), "pipeline_peer: ", to_string(a), " is not a message");
  return towards_next ? (stage + 1) % pp_size : (stage + pp_size - 1) % pp_size;
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
  // Each W goes after the messages that follow the compute before it, so
  // that a batch holds what 1F1B's holds ("B2 SB2 RF6 W0 F6", not
  // "B2 SB2 W0 RF6 F6"): neighbours then post matching batches, and W runs
  // while the batch is in flight.
  std::vector<Action> out = with_communication(compute, pp_size, stage);
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
  ENGINE_CHECK(kind == ScheduleKind::kInterleaved || virtual_stages == 1, "pipeline schedule ",
               schedule_name(kind), " runs one chunk of layers per rank, not ", virtual_stages,
               " virtual stages; use the interleaved schedule");
  switch (kind) {
    case ScheduleKind::kOneFOneB: return one_f_one_b(pp_size, stage, micro_batches);
    case ScheduleKind::kAllForwardAllBackward: return all_forward_all_backward(pp_size, stage, micro_batches);
    case ScheduleKind::kInterleaved: return interleaved_one_f_one_b(pp_size, stage, micro_batches, virtual_stages);
    case ScheduleKind::kZeroBubbleH1: return zero_bubble_h1(pp_size, stage, micro_batches);
  }
  ENGINE_FAIL("unknown schedule kind");
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
  return peak_between(actions, ActionKind::kForward, ActionKind::kBackward);
}

int peak_awaiting_weight(const std::vector<Action>& actions) {
  return splits_backward(actions) ? peak_between(actions, ActionKind::kBackward, ActionKind::kWeight) : 0;
}

int peak_until_weight(const std::vector<Action>& actions) {
  return splits_backward(actions) ? peak_between(actions, ActionKind::kForward, ActionKind::kWeight) : 0;
}

int peak_in_flight(const std::vector<Action>& actions, int chunk) {
  std::vector<Action> mine;
  for (const Action& a : actions)
    if (a.chunk == chunk) mine.push_back(a);
  return peak_in_flight(mine);
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

// ---- checking ------------------------------------------------------------------

namespace {

// Where each (kind, chunk, micro) sits in one stage's list, at [chunk * m +
// micro][kind]; -1 when absent.
std::string check_one_stage(const std::vector<Action>& actions, int stage, int pp_size, int m, int v,
                            std::vector<std::array<int, 7>>& at) {
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
    const bool first = stage == 0 && c == 0, last = stage == pp_size - 1 && c == v - 1;
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
Action expected_receive(const Action& send, int pp_size, int stage) {
  if (send.kind == ActionKind::kSendForward)
    return {ActionKind::kRecvForward, send.micro, send.chunk + (stage == pp_size - 1 ? 1 : 0)};
  return {ActionKind::kRecvBackward, send.micro, send.chunk - (stage == 0 ? 1 : 0)};
}

}  // namespace

namespace {

// check_schedules and simulated_step_seconds: checks the lists and runs them
// as the runner does, each compute action taking its cost; *step_seconds
// receives the time the slowest stage finishes.
std::string check_and_time(const std::vector<std::vector<Action>>& per_stage, int micro_batches, int virtual_stages,
                           double forward_seconds, double backward_seconds, double weight_seconds,
                           double* step_seconds) {
  const int p = static_cast<int>(per_stage.size());
  const int m = micro_batches, v = virtual_stages;
  if (p < 1 || m < 1 || v < 1) return "need at least one stage, one micro-batch and one chunk per stage";
  for (int s = 0; s < p; ++s) {
    std::vector<std::array<int, 7>> at;
    const std::string e = check_one_stage(per_stage[s], s, p, m, v, at);
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
      const int peer = pipeline_peer(a, p, s);
      const bool send = a.kind == ActionKind::kSendForward || a.kind == ActionKind::kSendBackward;
      if (send) sends[{s, peer}].push_back({s, i});
      else recvs[{peer, s}].push_back({s, i});
    }
  }
  for (const auto& [channel, channel_sends] : sends) {
    const std::vector<Ref>& channel_recvs = recvs[channel];
    for (std::size_t k = 0; k < channel_sends.size(); ++k) {
      const Ref from = channel_sends[k];
      const Action& a = per_stage[from.stage][from.index];
      if (k >= channel_recvs.size())
        return "stage " + std::to_string(from.stage) + "'s message " + std::to_string(k) + " (" + to_string(a) +
               ") to stage " + std::to_string(channel.second) + " is never received";
      const Ref to = channel_recvs[k];
      const Action& b = per_stage[to.stage][to.index];
      if (!(b == expected_receive(a, p, from.stage)))
        return "stage " + std::to_string(from.stage) + "'s message " + std::to_string(k) + " is " + to_string(a) +
               " but stage " + std::to_string(to.stage) + " receives it as " + to_string(b);
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
            if (q.index >= posted_begin[q.stage] && q.index < posted_end[q.stage]) {
              done[s][i] = done[q.stage][q.index] = true;
              const double at = std::max(posted_at[s], posted_at[q.stage]);  // both ends posted
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

std::string check_schedules(const std::vector<std::vector<Action>>& per_stage, int micro_batches, int virtual_stages) {
  return check_and_time(per_stage, micro_batches, virtual_stages, 0.0, 0.0, 0.0, nullptr);
}

double simulated_step_seconds(const std::vector<std::vector<Action>>& per_stage, int micro_batches,
                              int virtual_stages, double forward_seconds, double backward_seconds,
                              double weight_seconds) {
  double seconds = 0;
  const std::string error = check_and_time(per_stage, micro_batches, virtual_stages, forward_seconds,
                                           backward_seconds, weight_seconds, &seconds);
  ENGINE_CHECK(error.empty(), "simulated_step_seconds: ", error);
  return seconds;
}

}  // namespace parallel
