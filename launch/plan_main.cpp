// The `plan` program: predicts the memory per device and the step time of
// every parallel layout of a model on a cluster, and prints them ranked
// (launch/plan/planner.h); `plan --calibrate` measures this machine into a
// cluster file (launch/plan/calibrate.h). With --failure-rate it also suggests a
// checkpoint interval (launch/plan/checkpoint_interval.h).
//
//   plan --model gpt2-1558m --seq-len 1024 --global-batch 512 --devices 64
//        --cluster examples/scaling/clusters/selene_a100.json
//   mpirun -np 2 plan --calibrate --out cluster.json
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/buffer.h"
#include "engine/check.h"
#include "launch/plan/calibrate.h"
#include "launch/plan/checkpoint_interval.h"
#include "launch/plan/cluster_file.h"
#include "launch/plan/planner.h"
#include "launch/resilience/command_line.h"
#include "launch/resilience/exit_codes.h"

namespace {

struct Options {
  std::string preset = "gpt2-124m";
  std::int64_t n_layer = 0, n_head = 0, n_embd = 0, vocab_size = 0, max_seq_len = 0;
  std::int64_t seq_len = 0, global_batch = 0, batch_tokens = 0;
  int devices = 0;
  std::string cluster;
  std::vector<int> tp, pp, micro_batch, zero, sequence_parallel;
  std::vector<std::string> recompute, schedule;
  std::string attention = "causal";
  std::string precision = "auto";
  std::string software = "engine";
  int virtual_stages = 1;
  int top = 20;
  bool all = false, json = false;
  double failure_rate = 0, restart_seconds = 60, save_seconds = 0;
  // --calibrate
  bool calibrate = false;
  std::string out, storage_dir, name;
  double calibrate_seconds = 1.0;
  double peak_tflops = 0;
};

std::string seconds_text(double s) {
  std::ostringstream o;
  if (s >= 3600) o << std::fixed << std::setprecision(1) << s / 3600 << " h";
  else o << std::setprecision(3) << (s < 1 ? s * 1e3 : s) << (s < 1 ? " ms" : " s");
  return o.str();
}

std::string layout_text(const launch::Prediction& p) {
  const model::ParallelLayout& l = p.layout;
  std::ostringstream o;
  o << "tp " << l.tp << (l.sequence_parallel ? "+sp" : "") << " pp " << l.pp << " dp " << l.dp << " mb "
    << l.micro_batch << " zero " << l.zero_stage() << " " << model::recompute_name(l.recompute);
  if (l.pp > 1) o << " " << parallel::schedule_name(l.schedule);
  if (p.virtual_stages > 1 && l.schedule != parallel::ScheduleKind::kZeroBubbleV) o << " x" << p.virtual_stages;
  return o.str();
}

launch::PlanRequest make_request(const Options& o) {
  launch::PlanRequest r;
  r.model = model::gpt_preset(o.preset);
  if (o.n_layer) r.model.n_layer = o.n_layer;
  if (o.n_head) r.model.n_head = o.n_head;
  if (o.n_embd) r.model.n_embd = o.n_embd;
  if (o.vocab_size) r.model.vocab_size = o.vocab_size;
  if (o.max_seq_len) r.model.max_seq_len = o.max_seq_len;
  r.seq_len = o.seq_len ? o.seq_len : r.model.max_seq_len;
  ENGINE_CHECK((o.global_batch > 0) != (o.batch_tokens > 0), "give exactly one of --global-batch (sequences) and --batch-tokens");
  if (o.batch_tokens) {
    ENGINE_CHECK(o.batch_tokens % r.seq_len == 0, "--batch-tokens ", o.batch_tokens, " is not a multiple of --seq-len ", r.seq_len);
    r.global_batch = o.batch_tokens / r.seq_len;
  } else {
    r.global_batch = o.global_batch;
  }
  r.devices = o.devices;
  r.cluster = launch::read_cluster_file(o.cluster);
  r.attention = model::parse_attention_flops(o.attention);
  r.precision_flag = o.precision;
  r.nccl_buffers = parallel::NcclBufferSizes::from_environment();
  r.software = o.software;
  r.virtual_stages = o.virtual_stages;
  r.tp = o.tp;
  r.pp = o.pp;
  r.micro_batch = o.micro_batch;
  r.zero = o.zero;
  r.sequence_parallel = o.sequence_parallel;
  for (const std::string& s : o.recompute) r.recompute.push_back(model::parse_recompute(s));
  for (const std::string& s : o.schedule) r.schedule.push_back(parallel::parse_schedule(s));
  const std::string problem = r.check();
  ENGINE_CHECK(problem.empty(), problem);
  return r;
}

// The matmul shapes `plan --calibrate` measures when a model is named: the
// linear layers of its block (width n_embd, whole: no tensor-parallel
// slice) on --micro-batch x --seq-len tokens, or on the device's default
// token count without --micro-batch. One GEMM efficiency then describes this
// model's products rather than a stand-in's.
void set_calibration_shapes(const Options& o, launch::CalibrateOptions& c) {
  model::GptConfig m = model::gpt_preset(o.preset);
  if (o.n_embd) m.n_embd = o.n_embd;
  if (o.max_seq_len) m.max_seq_len = o.max_seq_len;
  c.matmul_channels = m.n_embd;
  if (o.micro_batch.empty()) return;
  ENGINE_CHECK(o.micro_batch.size() == 1 && o.micro_batch.front() > 0,
               "--calibrate measures one micro-batch size: give one positive --micro-batch");
  c.matmul_tokens = static_cast<std::int64_t>(o.micro_batch.front()) * (o.seq_len ? o.seq_len : m.max_seq_len);
}

void print_table(const launch::PlanRequest& r, const std::vector<launch::Prediction>& ranked, const Options& o) {
  std::size_t fitting = 0;
  for (const auto& p : ranked) fitting += p.fits ? 1 : 0;
  std::cout << "plan       " << r.model.describe() << ", " << r.global_batch << " x " << r.seq_len << " tokens per step on "
            << r.devices << " devices of " << r.cluster.name << " running " << r.software << " (" << engine::format_bytes(static_cast<std::size_t>(r.cluster.memory_bytes))
            << " each): " << ranked.size() << " layouts, " << fitting << " fit\n";
  std::cout << "flops      " << model::flops_convention(r.attention, r.model) << "\n";
  // Exposed, not sent: ZeRO-3 sends the most bytes but hides most of them behind compute.
  std::cout << "comm       exposed: seconds of tensor-parallel, pipeline and data-parallel communication not hidden "
               "behind compute, not the bytes sent\n";
  std::cout << std::left << std::setw(6) << "rank" << std::setw(52) << "layout" << std::right << std::setw(11) << "step"
            << std::setw(9) << "MFU" << std::setw(10) << "TFLOP/s" << std::setw(11) << "compute" << std::setw(14) << "exposed comm"
            << std::setw(11) << "bubble" << std::setw(12) << "memory" << "\n";
  int shown = 0;
  for (const auto& p : ranked) {
    if (!p.fits && !o.all) break;
    if (shown >= o.top && !o.all) break;
    ++shown;
    std::ostringstream mfu;
    mfu << std::fixed << std::setprecision(1) << 100 * p.mfu << "%";
    std::ostringstream tf;
    tf << std::fixed << std::setprecision(1) << p.tflops_per_device;
    std::cout << std::left << std::setw(6) << shown << std::setw(52) << layout_text(p) << std::right << std::setw(11)
              << seconds_text(p.step_seconds) << std::setw(9) << mfu.str() << std::setw(10) << tf.str() << std::setw(11)
              << seconds_text(p.compute_seconds) << std::setw(14) << seconds_text(p.exposed_comm_seconds) << std::setw(11)
              << seconds_text(p.bubble_seconds) << std::setw(12) << engine::format_bytes(p.memory_bytes_per_device)
              << (p.fits ? "" : "  does not fit") << "\n";
  }
  if (ranked.empty())
    std::cout << "no layout: no tp x pp x dp of " << r.devices << " devices splits the model (heads, layers, padded vocabulary) "
              << "and the global batch of " << r.global_batch << " sequences, within the restriction flags\n";
  else if (fitting == 0) {
    const auto smallest = std::min_element(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
      return a.memory_bytes_per_device < b.memory_bytes_per_device;
    });
    std::cout << "none fits: the smallest, " << layout_text(*smallest) << ", needs "
              << engine::format_bytes(smallest->memory_bytes_per_device) << " per device\n";
  }
}

void print_checkpoints(const launch::PlanRequest& r, const launch::Prediction& best, const Options& o) {
  // A checkpoint holds the fp32 master weights and both AdamW moments of
  // every parameter (launch/checkpoint/checkpoint.h), written by every node at once.
  const double bytes = 12.0 * static_cast<double>(r.model.num_parameters());
  const double nodes = std::ceil(static_cast<double>(r.devices) / r.cluster.devices_per_node);
  double save = o.save_seconds;
  if (save <= 0) {
    ENGINE_CHECK(r.cluster.storage_write_bandwidth > 0, "--failure-rate needs the time of a checkpoint save: give --save-seconds, or storage_write_gb_per_s in the cluster file");
    save = bytes / nodes / r.cluster.storage_write_bandwidth;
  }
  const launch::CheckpointPlan c = launch::plan_checkpoints(o.failure_rate, r.devices, save, o.restart_seconds);
  std::cout << "checkpoints at " << o.failure_rate << " failures per device-day on " << r.devices
            << " devices: job MTBF " << seconds_text(c.mtbf_seconds) << ", save " << seconds_text(save) << " ("
            << engine::format_bytes(static_cast<std::size_t>(bytes)) << "), restart " << seconds_text(o.restart_seconds)
            << ": save every " << seconds_text(c.interval_seconds) << " of work (Daly 2006) = --checkpoint-interval "
            << launch::interval_in_steps(c.interval_seconds, best.step_seconds) << " steps of the top layout; expected goodput "
            << std::fixed << std::setprecision(1) << 100 * c.goodput << "%\n";
}

int run(int argc, char** argv) {
  CLI::App app{"Predict the memory and step time of every parallel layout of a GPT on a cluster, ranked; or measure this machine (--calibrate)."};
  Options o;
  std::string presets;
  for (const std::string& name : model::gpt_preset_names()) presets += (presets.empty() ? "" : ", ") + name;
  app.add_option("--model", o.preset, "Model preset (" + presets + ")")->capture_default_str();
  app.add_option("--n-layer", o.n_layer, "Override the preset's layers");
  app.add_option("--n-head", o.n_head, "Override the preset's heads");
  app.add_option("--n-embd", o.n_embd, "Override the preset's width");
  app.add_option("--vocab-size", o.vocab_size, "Override the preset's vocabulary");
  app.add_option("--max-seq-len", o.max_seq_len, "Override the preset's position-table length");
  app.add_option("--seq-len", o.seq_len, "Tokens per sequence (default: the model's max)");
  app.add_option("--global-batch", o.global_batch, "Sequences per optimizer step");
  app.add_option("--batch-tokens", o.batch_tokens, "Tokens per optimizer step (instead of --global-batch)");
  app.add_option("--devices", o.devices, "Devices (ranks) of the job");
  app.add_option("--cluster", o.cluster, "Cluster file (JSON; examples/scaling/clusters/, or plan --calibrate)");
  app.add_option("--tp", o.tp, "Only these tensor-parallel sizes")->delimiter(',');
  app.add_option("--pp", o.pp, "Only these pipeline sizes")->delimiter(',');
  app.add_option("--micro-batch", o.micro_batch, "Only these micro-batch sizes")->delimiter(',');
  app.add_option("--zero", o.zero, "Only these ZeRO stages")->delimiter(',');
  app.add_option("--sequence-parallel", o.sequence_parallel, "Only these (0, 1)")->delimiter(',');
  app.add_option("--recompute", o.recompute, "Only these (none, selective, full)")->delimiter(',');
  app.add_option("--schedule", o.schedule, "Only these pipeline schedules (1f1b, afab, zb-h1, zb-v, interleaved with --virtual-stages 0)")->delimiter(',');
  app.add_option("--attention-flops", o.attention, "Attention FLOP convention of MFU: causal or full")->capture_default_str();
  app.add_option("--precision", o.precision,
                 "The run's --precision: auto (bf16 on GPUs, fp32 on CPUs), fp32, bf16, fp8 (the FP8 weight copies, "
                 "the linear layers at the cluster's fp8_gemm_speedup, their casts) or fp8-emulated")->capture_default_str();
  app.add_option("--software", o.software,
                 "Implementation to model: engine (this engine), or megatron-lm-2021 (to check against Narayanan et al. 2021)")
      ->capture_default_str();
  app.add_option("--virtual-stages", o.virtual_stages,
                 "Chunks of layers per device of an interleaved 1F1B pipeline (Megatron-LM's virtual stages, "
                 "the engine's --pipeline-schedule interleaved); 1 = plain; 0 = rank every v each layout allows "
                 "beside the plain layouts")
      ->capture_default_str();
  app.add_option("--top", o.top, "Layouts to print")->capture_default_str();
  app.add_flag("--all", o.all, "Print (or output as JSON) every layout, those that do not fit too");
  app.add_flag("--json", o.json, "Print a JSON array of the layouts instead of the table");
  app.add_option("--failure-rate", o.failure_rate, "Failures per device-day: suggest a checkpoint interval (Young/Daly)");
  app.add_option("--restart-seconds", o.restart_seconds, "Seconds a restart costs (with --failure-rate)")->capture_default_str();
  app.add_option("--save-seconds", o.save_seconds, "Seconds a checkpoint save takes (default: from the cluster's storage bandwidth)");
  app.add_flag("--calibrate", o.calibrate,
               "Measure this machine (run under mpirun with the ranks a job would use) and write --out; with --model "
               "(--n-embd, --micro-batch, --seq-len) its matmul rate is taken at that model's shapes");
  app.add_option("--out", o.out, "Cluster file --calibrate writes");
  app.add_option("--storage-dir", o.storage_dir, "Folder --calibrate times checkpoint-like writes in (default: not measured)");
  app.add_option("--name", o.name, "Name --calibrate gives the cluster");
  app.add_option("--peak-tflops", o.peak_tflops, "Peak TFLOP/s per device --calibrate records (default: the engine's GPU table or the measured CPU peak)");
  app.add_option("--calibrate-seconds", o.calibrate_seconds, "Budget of each --calibrate measurement")->capture_default_str();
  try {
    launch::parse_command_line(app, argc, argv);
  } catch (const CLI::ParseError& e) {
    return launch::report_command_line_error(app, e);
  }

  if (o.calibrate) {
    ENGINE_CHECK(!o.out.empty(), "--calibrate needs --out FILE");
    const bool model_given = app.count("--model") + app.count("--n-embd") + app.count("--micro-batch") > 0;
    launch::CalibrateOptions c;
    c.seconds = o.calibrate_seconds;
    c.output_path = o.out;
    c.storage_dir = o.storage_dir;
    c.name = o.name;
    c.peak_flops = o.peak_tflops * 1e12;
    if (model_given) set_calibration_shapes(o, c);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    c.log = rank == 0 ? &std::cout : nullptr;
    launch::calibrate(MPI_COMM_WORLD, c);
    if (rank == 0) std::cout << "cluster    written to " << o.out << "\n";
    return 0;
  }
  ENGINE_CHECK(o.devices > 0, "--devices is required (the job's device count)");
  // NaN fails every comparison, so `failure_rate > 0` alone would quietly
  // plan no checkpoints; a rate above one failure per device-second is a typo.
  ENGINE_CHECK(std::isfinite(o.failure_rate) && o.failure_rate >= 0 && o.failure_rate <= 86400,
               "--failure-rate ", o.failure_rate, " must be a finite number of failures per device-day in [0, 86400]");
  ENGINE_CHECK(std::isfinite(o.restart_seconds) && o.restart_seconds >= 0 && o.restart_seconds <= 1e7,
               "--restart-seconds ", o.restart_seconds, " must be a finite number of seconds in [0, 1e7]");
  ENGINE_CHECK(std::isfinite(o.save_seconds) && o.save_seconds >= 0 && o.save_seconds <= 1e7, "--save-seconds ",
               o.save_seconds, " must be a finite number of seconds in [0, 1e7]");
  ENGINE_CHECK(!o.cluster.empty(), "--cluster FILE is required (examples/scaling/clusters/, or write one with plan --calibrate)");
  const launch::PlanRequest request = make_request(o);
  const std::vector<launch::Prediction> ranked = launch::plan(request);
  if (o.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& p : ranked)
      if (p.fits || o.all) out.push_back(launch::prediction_json(p));
    std::cout << out.dump(1) << "\n";
    return 0;
  }
  print_table(request, ranked, o);
  if (o.failure_rate > 0 && !ranked.empty() && ranked.front().fits) print_checkpoints(request, ranked.front(), o);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int code = 0;
  try {
    code = run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "error: " << launch::without_source_location(e.what()) << "\n";  // bad input: no source location
    code = launch::kExitBadInput;
  }
  MPI_Finalize();
  return code;
}
