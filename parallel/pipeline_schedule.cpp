#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <array>
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

bool is_communication(ActionKind kind) { return kind != ActionKind::kForward && kind != ActionKind::kBackward; }

std::string to_string(const Action& action) {
  static const char* const kNames[] = {"RF", "F", "SF", "RB", "B", "SB"};
  return kNames[static_cast<int>(action.kind)] + std::to_string(action.micro);
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
  return kind == ScheduleKind::kOneFOneB ? "1f1b" : "afab";
}

ScheduleKind parse_schedule(const std::string& name) {
  if (name == "1f1b") return ScheduleKind::kOneFOneB;
  if (name == "afab" || name == "gpipe") return ScheduleKind::kAllForwardAllBackward;
  ENGINE_FAIL("unknown pipeline schedule '", name, "'; expected 1f1b, afab or gpipe");
}

// ---- schedules -----------------------------------------------------------------

std::vector<Action> with_communication(const std::vector<Action>& compute, int pp_size, int stage) {
  const bool first = stage == 0, last = stage == pp_size - 1;
  std::vector<Action> out;
  for (const Action& a : compute) {
    ENGINE_CHECK(!is_communication(a.kind), "with_communication takes compute actions only, got ",
                 to_string(a));
    if (a.kind == ActionKind::kForward) {
      if (!first) out.push_back({ActionKind::kRecvForward, a.micro});
      out.push_back(a);
      if (!last) out.push_back({ActionKind::kSendForward, a.micro});
    } else {
      if (!last) out.push_back({ActionKind::kRecvBackward, a.micro});
      out.push_back(a);
      if (!first) out.push_back({ActionKind::kSendBackward, a.micro});
    }
  }
  return out;
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

std::vector<Action> all_forward_all_backward(int pp_size, int stage, int micro_batches) {
  check_args(pp_size, stage, micro_batches);
  std::vector<Action> compute;
  for (int i = 0; i < micro_batches; ++i) compute.push_back({ActionKind::kForward, i});
  for (int i = 0; i < micro_batches; ++i) compute.push_back({ActionKind::kBackward, i});
  return with_communication(compute, pp_size, stage);
}

std::vector<Action> make_schedule(ScheduleKind kind, int pp_size, int stage, int micro_batches) {
  return kind == ScheduleKind::kOneFOneB ? one_f_one_b(pp_size, stage, micro_batches)
                                         : all_forward_all_backward(pp_size, stage, micro_batches);
}

int peak_in_flight(const std::vector<Action>& actions) {
  int now = 0, peak = 0;
  for (const Action& a : actions) {
    if (a.kind == ActionKind::kForward) peak = std::max(peak, ++now);
    if (a.kind == ActionKind::kBackward) --now;
  }
  return peak;
}

double bubble_fraction(int pp_size, int micro_batches) {
  ENGINE_CHECK(pp_size >= 1 && micro_batches >= 1, "bubble_fraction needs pp_size >= 1 and micro_batches >= 1; got ",
               pp_size, " and ", micro_batches);
  return static_cast<double>(pp_size - 1) / static_cast<double>(micro_batches + pp_size - 1);
}

// ---- checking ------------------------------------------------------------------

namespace {

// Where each (kind, micro) sits in one stage's list; -1 when absent.
std::string check_one_stage(const std::vector<Action>& actions, int stage, int pp_size, int m,
                            std::vector<std::array<int, 6>>& at) {
  const std::string where = "stage " + std::to_string(stage) + ": ";
  at.assign(m, {-1, -1, -1, -1, -1, -1});
  for (int i = 0; i < static_cast<int>(actions.size()); ++i) {
    const Action& a = actions[i];
    if (a.micro < 0 || a.micro >= m) return where + to_string(a) + " is outside micro-batches [0, " + std::to_string(m) + ")";
    int& slot = at[a.micro][static_cast<int>(a.kind)];
    if (slot >= 0) return where + to_string(a) + " appears twice";
    slot = i;
  }
  const bool first = stage == 0, last = stage == pp_size - 1;
  for (int i = 0; i < m; ++i) {
    auto pos = [&](ActionKind k) { return at[i][static_cast<int>(k)]; };
    auto name = [&](ActionKind k) { return to_string({k, i}); };
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
          before(ActionKind::kForward, ActionKind::kBackward), before(ActionKind::kRecvForward, ActionKind::kForward),
          before(ActionKind::kForward, ActionKind::kSendForward), before(ActionKind::kRecvBackward, ActionKind::kBackward),
          before(ActionKind::kBackward, ActionKind::kSendBackward)})
      if (!e.empty()) return e;
  }
  return "";
}

}  // namespace

std::string check_schedules(const std::vector<std::vector<Action>>& per_stage, int micro_batches) {
  const int p = static_cast<int>(per_stage.size());
  const int m = micro_batches;
  if (p < 1 || m < 1) return "need at least one stage and one micro-batch";
  for (int s = 0; s < p; ++s) {
    std::vector<std::array<int, 6>> at;
    const std::string e = check_one_stage(per_stage[s], s, p, m, at);
    if (!e.empty()) return e;
  }

  // Pair every send with its receive. Channel c carries stage c -> c+1
  // activations (SF at c, RF at c+1) and stage c+1 -> c gradients (SB at c+1,
  // RB at c); the k-th send of a channel and direction meets the k-th receive.
  struct Ref {
    int stage, index;
  };
  std::vector<std::vector<Ref>> partner(p);  // [stage][index] -> the other end of a message
  std::vector<std::vector<Ref>> sf(p), rf(p), sb(p), rb(p);
  for (int s = 0; s < p; ++s) {
    partner[s].assign(per_stage[s].size(), Ref{-1, -1});
    for (int i = 0; i < static_cast<int>(per_stage[s].size()); ++i) {
      switch (per_stage[s][i].kind) {
        case ActionKind::kSendForward: sf[s].push_back({s, i}); break;
        case ActionKind::kRecvForward: rf[s].push_back({s, i}); break;
        case ActionKind::kSendBackward: sb[s].push_back({s, i}); break;
        case ActionKind::kRecvBackward: rb[s].push_back({s, i}); break;
        default: break;
      }
    }
  }
  auto pair_up = [&](const std::vector<Ref>& sends, const std::vector<Ref>& recvs) -> std::string {
    for (std::size_t k = 0; k < sends.size(); ++k) {
      const Action& a = per_stage[sends[k].stage][sends[k].index];
      const Action& b = per_stage[recvs[k].stage][recvs[k].index];
      if (a.micro != b.micro)
        return "stage " + std::to_string(sends[k].stage) + "'s message " + std::to_string(k) + " is " +
               to_string(a) + " but stage " + std::to_string(recvs[k].stage) + " receives it as " + to_string(b);
      partner[sends[k].stage][sends[k].index] = recvs[k];
      partner[recvs[k].stage][recvs[k].index] = sends[k];
    }
    return "";
  };
  for (int c = 0; c + 1 < p; ++c) {
    // Counts match: check_one_stage saw every micro-batch's SF/RF/SB/RB once.
    for (const std::string& e : {pair_up(sf[c], rf[c + 1]), pair_up(sb[c + 1], rb[c])})
      if (!e.empty()) return e;
  }

  // Execute with rendezvous semantics: an op completes only when its partner
  // is posted too (in the partner stage's current batch).
  std::vector<int> pos(p, 0);
  std::vector<std::vector<bool>> done(p);
  for (int s = 0; s < p; ++s) done[s].assign(per_stage[s].size(), false);
  auto size_of = [&](int s) { return static_cast<int>(per_stage[s].size()); };
  auto batch_end = [&](int s) {
    int e = pos[s];
    while (e < size_of(s) && is_communication(per_stage[s][e].kind)) ++e;
    return e;
  };
  for (;;) {
    bool progress = false, finished = true;
    for (int s = 0; s < p; ++s) {
      while (pos[s] < size_of(s) && !is_communication(per_stage[s][pos[s]].kind)) {
        ++pos[s];
        progress = true;
      }
      if (pos[s] == size_of(s)) continue;
      finished = false;
      const int end = batch_end(s);
      bool all = true;
      for (int i = pos[s]; i < end; ++i) {
        if (!done[s][i]) {
          const Ref q = partner[s][i];
          if (q.index >= pos[q.stage] && q.index < batch_end(q.stage)) {
            done[s][i] = done[q.stage][q.index] = true;
            progress = true;
          }
        }
        all = all && done[s][i];
      }
      if (all) {
        pos[s] = end;
        progress = true;
      }
    }
    if (finished) return "";
    if (!progress) {
      std::ostringstream msg;
      msg << "deadlock: every stage waits:";
      for (int s = 0; s < p; ++s) {
        std::vector<Action> batch(per_stage[s].begin() + pos[s], per_stage[s].begin() + batch_end(s));
        msg << " stage " << s << " [" << (batch.empty() ? "done" : format_actions(batch)) << "]";
      }
      return msg.str();
    }
  }
}

}  // namespace parallel
