// Pipeline schedules: for each stage, the ordered list of what it does.
//
// A schedule is a list of Actions per stage. Compute actions (F, B) run one
// micro-batch through the stage; communication actions move an activation to
// the next stage (SF/RF) or its gradient to the previous one (SB/RB). The
// communication is written out so that a schedule is readable and checkable
// on its own ("RF3 F3 SF3 RB1 B1 SB1"), and the runner (pipeline_runner.h)
// just executes the list.
//
// Every schedule here is a "flush" schedule: all micro-batches of a step go
// through before the optimizer step, so the weights every micro-batch sees are
// the same as in one process (synchronous semantics, exact parity).
//
// - all_forward_all_backward (GPipe, Huang et al. 2019): every forward, then
//   every backward. Holds the activations of all m micro-batches.
// - one_f_one_b (PipeDream-Flush, Narayanan et al. 2021 §2.2, Fig. 4 top;
//   Megatron-LM's default): stage s first runs min(p - s - 1, m) warm-up
//   forwards, then alternates one forward and one backward, then drains the
//   remaining backwards. Same bubble as GPipe, but stage s holds at most
//   min(p - s, m) micro-batches' activations instead of m.
// - interleaved_one_f_one_b (Narayanan et al. 2021 §2.2, Fig. 4 bottom;
//   Megatron-LM's --num-layers-per-virtual-pipeline-stage): each rank holds v
//   chunks of layers, chunk c of rank r being virtual stage k = c p + r of a
//   pipeline of v p stages, so an activation visits every rank v times and
//   the last rank hands chunk c's output to rank 0's chunk c + 1. Micro-batches
//   go in groups of p: forwards of chunk 0 for the group, then chunk 1, ...;
//   backwards the same from the last chunk. Warm-up on rank r: 2 (p - r - 1)
//   + (v - 1) p forwards (all of them when m = p). Each device then idles
//   (p - 1) / v of a stage's forward+backward time at either end instead of
//   p - 1: the bubble shrinks by v, for v times the pipeline messages.
//   Megatron's conditions (m a multiple of p, p > 2) are required.
// - zero_bubble_h1 (ZB-H1, Qi et al. 2024, "Zero Bubble Pipeline
//   Parallelism", section 3.1): each backward is split into B, the gradient
//   of the stage's input (what the previous stage waits for), and W, the
//   gradient of its weights (what nothing waits for). Warm-up and steady
//   state are 1F1B's with B for the backward; stage s defers each W by s
//   micro-batches (W of the oldest pending micro-batch after each B once s
//   B's have run; the rest at the end), the order of PyTorch's
//   torch.distributed.pipelining zero-bubble schedules for one chunk per
//   rank. The late stages' deferred W's fill the time they would idle while
//   the last backwards travel to stage 0: with equal times T_F = T_B = T_W
//   the step takes m (F + B + W) + (p - 1)(F + B - W), so the bubble is
//   (p - 1)(T_F + T_B - T_W) against 1F1B's (p - 1)(T_F + T_B + T_W), a
//   third (simulated_step_seconds reproduces it for every m >= p). Memory:
//   stage s holds at most p - s micro-batches between F and B, as 1F1B, and
//   up to s + 1 between B and W, for which only what W reads is kept (the
//   matmuls' inputs and output gradients; model::GptStage).
//   Messages: W's need none. The list places each W after the
//   communication that follows the preceding F or B ("B2 SB2 RF6 W0 F6"), so
//   the batches pair up across neighbours exactly as in 1F1B, and the runner
//   lets W run while that batch is in flight (see below).
//
// - zero_bubble_v (ZB-V, Qi et al. 2024, section 6; torchtitan's and
//   PyTorch's ScheduleZBVZeroBubble): two chunks per rank placed in a V
//   (StagePlacement::kVShape): rank r runs virtual stages r and 2p - 1 - r of
//   2p, so an activation goes down the ranks through chunk 0 and back up
//   through chunk 1, rank p - 1 turning it round itself (a message to itself:
//   a copy) and rank 0 holding both the embedding and the head (a tied
//   embedding's two uses are one copy: nothing to sum between ranks). The
//   backward is split as in ZB-H1. Rank r runs 2(p - r) - 1 forwards of
//   chunk 0, then r pairs of forwards (chunk 1, chunk 0), then p - r times F
//   B W of chunk 1, then the steady state F B W of chunk 0 then of chunk 1,
//   and the cool-down: r pairs of B (chunk 0, chunk 1), p - r times B W of
//   chunk 0, the W's left. With T_F = T_B = T_W and m >= 2p its bubble is
//   zero but for the first forward's trip down and up the V; activation
//   memory is 1F1B's: rank r holds at most 2p chunk-sets of half its layers
//   (p micro-batches of the whole rank), every rank alike.
//
// Deadlock freedom. The runner posts every maximal run of consecutive
// communication actions as one batch (all its sends and receives progress
// together, like Megatron's send_forward_recv_backward / NCCL groups) and
// waits for the batch before the next compute action. Messages between two
// neighbours match in posting order, one channel per direction. With that:
//   1. The per-channel sequences match: stage s sends F0..F(m-1) forward in
//      micro-batch order and stage s+1 receives them in the same order (both
//      follow their compute order of forwards, which is increasing); the same
//      for gradients going back (backwards run in increasing order too).
//   2. No cycle of waits. In 1F1B's steady state each batch talks to one
//      neighbour, and that neighbour's batch holds exactly the complementary
//      pair: stage s's [SF(i) RB(i-w)] meets stage s+1's [SB(i-w) RF(i)]
//      (w = warm-up of s), so both complete together. In warm-up only
//      activations move (downstream) and in cool-down only gradients
//      (upstream), so a stage waits on a neighbour that is itself waiting
//      further along the same direction: a chain ending at a pipeline end.
//      GPipe is warm-up then cool-down.
//   3. A zero-bubble list has the batches of the 1F1B list of the same
//      F/B order (its W's sit between a batch and the next F or B and send
//      nothing), and the runner waits for a batch before the next F or B,
//      as before: W's only run while it is in flight, so they delay no
//      message and add no wait.
// Rather than trust the argument, check_schedules() executes any set of
// per-stage lists under the strictest semantics (unbuffered, rendezvous
// sends) and reports a deadlock; the unit tests run it over pp 1..8,
// m 1..16 for every schedule.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace parallel {

enum class ActionKind : std::uint8_t {
  kRecvForward,   // RF: receive the activation of micro-batch i from the previous stage
  kForward,       // F:  forward of micro-batch i
  kSendForward,   // SF: send the activation of micro-batch i to the next stage
  kRecvBackward,  // RB: receive the gradient of my output for micro-batch i from the next stage
  kBackward,      // B:  backward of micro-batch i
  kSendBackward,  // SB: send the gradient of my input for micro-batch i to the previous stage
  kWeight,        // W:  weight-gradient pass of micro-batch i (zero-bubble schedules: B is then the input gradient only)
};

struct Action {
  ActionKind kind;
  int micro;      // micro-batch index in [0, m)
  int chunk = 0;  // the rank's chunk of layers (interleaved schedules), in [0, v)
  bool operator==(const Action&) const = default;
};

bool is_communication(ActionKind kind);
std::string to_string(const Action& action);               // "RF3"; chunk 1: "RF3.1"
std::string format_actions(const std::vector<Action>& a);  // "RF0 F0 SF0 ..."
std::string format_compute(const std::vector<Action>& a);  // only F, B and W: "F0 F1 B0 W0 ..."

enum class ScheduleKind { kOneFOneB, kAllForwardAllBackward, kInterleaved, kZeroBubbleH1, kZeroBubbleV };
const char* schedule_name(ScheduleKind kind);  // "1f1b", "afab", "interleaved", "zb-h1", "zb-v"
// Accepts "1f1b", "afab", "gpipe", "interleaved", "zb-h1" and "zb-v"; throws engine::Error naming the choices.
ScheduleKind parse_schedule(const std::string& name);

// Which virtual stage of the v p stages each (rank, chunk) runs.
// kLooped (Megatron's interleaving): chunk c of rank r is stage c p + r.
// kVShape (ZB-V, v = 2): chunk 0 of rank r is stage r, chunk 1 is 2p - 1 - r.
enum class StagePlacement : std::uint8_t { kLooped, kVShape };
StagePlacement stage_placement(ScheduleKind kind);
// Chunks per rank a schedule runs: 2 for zb-v, `virtual_stages` for the
// interleaved schedule, else 1.
int schedule_chunks(ScheduleKind kind, int virtual_stages);
int virtual_stage(StagePlacement placement, int pp_size, int rank, int chunk);
struct StageHome {
  int rank;
  int chunk;
};
// The inverse: where virtual stage k of a pipeline of pp_size ranks runs.
StageHome stage_home(StagePlacement placement, int pp_size, int stage);

// The actions of `stage` in a pipeline of `pp_size` stages running
// `micro_batches` micro-batches (any m >= 1, also m < pp_size).
std::vector<Action> one_f_one_b(int pp_size, int stage, int micro_batches);
std::vector<Action> all_forward_all_backward(int pp_size, int stage, int micro_batches);
// Megatron's interleaved 1F1B with `virtual_stages` chunks per rank (v = 1 is
// one_f_one_b). Throws engine::Error with interleaved_refusal()'s reason.
std::vector<Action> interleaved_one_f_one_b(int pp_size, int stage, int micro_batches, int virtual_stages);
// "" when an interleaved pipeline of v chunks per rank can run m
// micro-batches over p ranks (and, with layers > 0, split the layers into
// v p equal chunks), else why not, naming the numbers.
std::string interleaved_refusal(int pp_size, int micro_batches, int virtual_stages, std::int64_t layers = 0);
// ZB-H1 (see the top of this file): any m >= 1, also m < pp_size.
std::vector<Action> zero_bubble_h1(int pp_size, int stage, int micro_batches);
// ZB-V (see the top of this file): two chunks per rank in a V; any
// m >= 1 (with m < 2p - 1 the schedule is PyTorch's with the missing
// micro-batches' actions left out).
std::vector<Action> zero_bubble_v(int pp_size, int stage, int micro_batches);
// "" when ZB-V can split `layers` (> 0) into 2 pp chunks of at least one
// layer each, else why not, naming the numbers.
std::string zero_bubble_v_refusal(int pp_size, std::int64_t layers);
// virtual_stages is used by kInterleaved only (2 for kZeroBubbleV, 1 otherwise).
std::vector<Action> make_schedule(ScheduleKind kind, int pp_size, int stage, int micro_batches,
                                  int virtual_stages = 1);

// Adds the communication implied by a compute order: RF before and SF after
// each forward, RB before and SB after each backward, except at the ends of
// the (virtual) pipeline: virtual stage 0 receives no activation, the last
// virtual stage sends none.
std::vector<Action> with_communication(const std::vector<Action>& compute, int pp_size, int stage,
                                       int virtual_stages = 1,
                                       StagePlacement placement = StagePlacement::kLooped);

// The rank that the message of communication action `a` on `stage` goes to
// or comes from: the rank running the next (SF, RB) or previous (RF, SB)
// virtual stage. Looped: the neighbouring rank, wrapping from the last rank
// to rank 0 (and back) between chunks of an interleaved pipeline. V: the
// stage itself at the turn of the V (rank p - 1, between its chunks).
int pipeline_peer(const Action& a, int pp_size, int stage, StagePlacement placement = StagePlacement::kLooped);
// The chunk, on pipeline_peer's rank, that the message of `a` is for.
int pipeline_peer_chunk(const Action& a, int pp_size, int stage,
                        StagePlacement placement = StagePlacement::kLooped);

// Most micro-batches whose forward has run and backward (B) has not, at any
// point of the list: the number of activation sets the stage must hold at
// once for its backwards.
// 1F1B: min(pp_size - stage, m). GPipe: m. Interleaved: counted over
// (chunk, micro-batch) pairs, each a set of 1/v of the rank's layers.
// ZB-H1: as 1F1B.
int peak_in_flight(const std::vector<Action>& actions);
// True when the list has W actions: its B's are input-gradient passes.
bool splits_backward(const std::vector<Action>& actions);
// True for the schedules whose lists have them (zb-h1, zb-v) on more than one stage.
bool splits_backward(ScheduleKind kind, int pp_size);
// Most micro-batches whose B has run and W has not, at any point (0 without
// W's): what the weight passes must keep for later (model::GptStage's
// stashes). ZB-H1: min(stage + 1, m).
int peak_awaiting_weight(const std::vector<Action>& actions);
// Most micro-batches whose F has run and W has not (0 without W's): the
// matmul inputs a forward keeps for its weight pass. ZB-H1: min(pp_size, m).
int peak_until_weight(const std::vector<Action>& actions);
// The same for one chunk of a schedule of several chunks per rank: the sets
// of that chunk's layers held at once.
int peak_in_flight(const std::vector<Action>& actions, int chunk);
int peak_awaiting_weight(const std::vector<Action>& actions, int chunk);
int peak_until_weight(const std::vector<Action>& actions, int chunk);

// Fraction of a step's time each stage idles in the pipeline bubble, with
// equal forward+backward time per micro-batch: (p - 1) / (m + p - 1)
// (Huang et al. 2019 §2.3; Narayanan et al. 2021 §2.2 write the same bubble
// as (p - 1) / m of the ideal time). Same for 1F1B and GPipe.
double bubble_fraction(int pp_size, int micro_batches);
// The same for the interleaved schedule, whose fill and drain take 1/v as
// long (Narayanan et al. 2021 §2.2.2): (p - 1) / (v m + p - 1).
double interleaved_bubble_fraction(int pp_size, int micro_batches, int virtual_stages);
// ZB-H1's (Qi et al. 2024, section 3.1): bubble (p - 1)(T_F + T_B - T_W)
// beside m (T_F + T_B + T_W) of work, as a fraction of the step; T_B is the
// input-gradient pass, T_W the weight-gradient pass. That is the paper's
// regime (m >= p, T_W <= T_F, T_B); in general the schedule's bubble is
// (p - 1)(T_F + T_B) - (min(m, p) - 1) min(T_W, T_F, T_B), which this returns.
// Any m >= 1.
double zero_bubble_h1_bubble_fraction(int pp_size, int micro_batches, double forward_seconds,
                                      double backward_input_seconds, double weight_seconds);

// ZB-V's, with the rank's pass times (each chunk taking half): exact where
// the fixed order is zero-bubble, T_F = T_B = T_W and m >= 2p, where the
// only idle time is the first forward's trip down and back up the V,
// (p - 1) T_F / 2 beside m (T_F + T_B + T_W) of work. Elsewhere the list
// idles more every round (as PyTorch's ScheduleZBVZeroBubble): use
// simulated_step_seconds.
double zero_bubble_v_bubble_fraction(int pp_size, int micro_batches, double forward_seconds,
                                     double backward_input_seconds, double weight_seconds);
// The bubble fraction of `kind`'s lists with equal forward, input-gradient
// and weight-gradient times (each pass's matmuls have the same FLOPs): the
// formulas above, and ZB-V's own list simulated where it is not full (m <
// 2p). What `train` logs beside the measured bubble.
double equal_pass_bubble_fraction(ScheduleKind kind, int pp_size, int micro_batches, int virtual_stages = 1);

// Checks a whole pipeline's schedules (index = stage, i.e. rank): every
// micro-batch runs F then B exactly once per stage and chunk (and then W,
// on a stage whose list has any W), no message follows a W before the next
// F or B (see zero_bubble_h1), receives come
// before the compute that needs them and sends after the compute that
// produces them, every send has the matching receive on its peer
// (pipeline_peer) in the same order -- messages between two ranks match in
// posting order, whatever they carry, as MPI and NCCL match them -- and
// running the lists as the runner does (batches of consecutive communication,
// rendezvous sends) finishes without deadlock. Returns "" when all holds, else
// what failed first.
// A message a rank sends itself (ZB-V's turn) is a copy: it must come after
// its send in the list and never waits.
std::string check_schedules(const std::vector<std::vector<Action>>& per_stage, int micro_batches,
                            int virtual_stages = 1, StagePlacement placement = StagePlacement::kLooped);

// The step time of a whole pipeline's schedules run as the runner runs them
// (check_schedules' semantics: a batch of messages is posted when the next
// compute action is reached and waited for before the next F or B, W's
// running while it is in flight) when each forward of a chunk takes
// forward_seconds, each backward backward_seconds (the input-gradient pass
// in a split list), each W weight_seconds, and messages take no time: the
// schedule's own bubble, against which the bubble theories are tested.
// Throws engine::Error with check_schedules' reason when the lists are wrong.
double simulated_step_seconds(const std::vector<std::vector<Action>>& per_stage, int micro_batches,
                              int virtual_stages, double forward_seconds, double backward_seconds,
                              double weight_seconds = 0.0,
                              StagePlacement placement = StagePlacement::kLooped);
// The same for the lists make_schedule gives `kind` on every stage.
double simulated_step_seconds(ScheduleKind kind, int pp_size, int micro_batches, int virtual_stages,
                              double forward_seconds, double backward_seconds, double weight_seconds);

}  // namespace parallel
