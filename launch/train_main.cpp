// The `train` program: flags (or a JSON config) in, a trained GPT out, on one
// process or under mpirun. Exit codes: launch/resilience/exit_codes.h.
//
// Errors never leave ranks waiting (ARCHITECTURE.md), and each is printed once, on
// one line. Everything that can be checked without communicating (flags, the
// layout, the data and model files) is checked by every rank alike; the ranks
// then agree on the outcome, the first failing rank prints its message, and
// all exit non-zero. Later, an error the ranks reach together by agreement
// (launch/resilience/job_error.h) is printed by rank 0 and every rank exits cleanly; any
// other error first asks whether every rank caught one too
// (launch/resilience/failure_agreement.h): if so it ends the job the same way, if not
// the rank prints it with its number and aborts the whole job. A rank that
// stops answering is found by the collective watchdog (parallel/watchdog.h).
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>

#include "engine/check.h"
#include "engine/device.h"
#include "launch/plan/cached_calibration.h"
#include "launch/resilience/command_line.h"
#include "launch/resilience/exit_codes.h"
#include "launch/resilience/failure_agreement.h"
#include "launch/resilience/job_error.h"
#include "launch/resilience/stop_request.h"
#include "launch/run/input_checks.h"
#include "launch/run/auto_layout.h"
#include "launch/run/run_lock.h"
#include "launch/run/train_config.h"
#include "launch/run/trainer.h"
#include "parallel/watchdog.h"

namespace {

// Returns true on every rank if no rank failed; the lowest failing rank
// prints its error.
bool all_ranks_passed(const std::string& error, int rank) {
  int first_failed = error.empty() ? 1 << 30 : rank;
  MPI_Allreduce(MPI_IN_PLACE, &first_failed, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  // Errors of the flags and the inputs they name: no source location.
  if (first_failed == rank) launch::write_stderr_line("error: " + launch::one_line(launch::without_source_location(error)));
  return first_failed == 1 << 30;
}

// Everything between MPI_Init and MPI_Finalize; returns the exit code.
int train(int argc, char** argv) {
  // First, while no rank can have failed yet: it duplicates the world.
  launch::FailureAgreement failures(MPI_COMM_WORLD);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  // Before anything slow: a signal during start-up is honoured between steps.
  launch::install_stop_handlers();

  CLI::App app{"Train a GPT-2 or Llama-family model on token shards (llm.c format), on one process or under mpirun."};
  launch::TrainConfig config;
  launch::add_train_options(app, config);
  try {
    launch::parse_command_line(app, argc, argv);
  } catch (const CLI::ParseError& e) {
    // Every rank parses the same arguments; rank 0 speaks for all. --help
    // (and --version) exit 0; any other parse error is a usage error, which
    // launch/supervise does not retry (CLI11's own codes are 100 and up).
    return launch::report_command_line_error(app, e, /*speak=*/rank == 0);
  }

  // --layout auto chooses the layout flags not given by hand (in a --config file counts as by hand).
  for (const char* flag : launch::kAutoLayoutFlags)
    if (app.count(flag) > 0) config.layout_given.insert(flag);

  // --layout auto without --cluster plans for this job's machine, measured
  // (or read from the cache) by every rank together, between two resolves.
  const launch::TrainConfig as_given = config;
  config.may_calibrate = true;

  // Flags first (a usage error), then the inputs they name (bad input):
  // neither is helped by a restart (launch/resilience/exit_codes.h).
  std::string error;
  int failure = launch::kExitUsage;
  std::optional<std::int64_t> calibration_width;  // set when resolve() asks for the machine's calibration
  // Rank 0 holds the run folder for the whole job (launch/run/run_lock.h).
  // Taken before the input checks, which write probe files there: a second
  // job on the folder is refused before it writes anything, and every rank
  // learns of it through the agreement below.
  std::optional<launch::RunFolderLock> run_folder_lock, checkpoint_folder_lock, log_file_lock;
  const auto prepare = [&] {
    error.clear();
    failure = launch::kExitUsage;
    calibration_width.reset();
    try {
      config.resolve(config.device == "cpu" ? 0 : engine::cuda_device_count(), world);
      failure = launch::kExitBadInput;
      // Before the run folder's lock and the output probes: a resume that
      // finds nothing writes nothing.
      launch::check_resume_source(config);
      // --eval-only writes nothing in the folder: it may score a running job's checkpoints.
      if (rank == 0 && !config.run_dir.empty() && !config.eval_only) run_folder_lock.emplace(config.run_dir);
      launch::check_inputs(config);
      // A checkpoint folder of its own (not the run folder's) is held too, once
      // the inputs passed: a refused start leaves no lock file in it.
      if (rank == 0 && !config.eval_only && !config.checkpoint_dir.empty() && !config.checkpoint_dir_from_run_dir)
        checkpoint_folder_lock.emplace(config.checkpoint_dir, "--checkpoint-dir");
      // So is a metrics file of its own: two jobs appending to it would interleave their steps.
      if (rank == 0 && !config.log_file.empty() && !config.log_file_from_run_dir)
        log_file_lock.emplace(launch::RunFolderLock::for_file(config.log_file, "--log-file"));
    } catch (const launch::MachineCalibrationNeeded& needed) {
      calibration_width = needed.matmul_width;
    } catch (const std::exception& e) {
      error = e.what();
    }
  };
  prepare();

  // The machine is measured only when every rank got that far and asks for
  // it (their arguments are the same, so they do, unless one failed first:
  // then nobody starts the collective, and the failure is reported below).
  int asks[2] = {calibration_width ? 1 : 0, calibration_width ? 1 : 0};  // {min, max}
  MPI_Allreduce(MPI_IN_PLACE, &asks[0], 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &asks[1], 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  int all_clear = error.empty() ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &all_clear, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (asks[0] == 1 && all_clear == 1) {
    // Its waits under the watchdog: a rank that dies while measuring ends the job.
    parallel::install_watchdog(MPI_COMM_WORLD, {config.collective_timeout, launch::kExitCollectiveTimeout});
    std::optional<engine::DeviceType> device;
    if (as_given.device == "cpu") device = engine::DeviceType::kCpu;
    if (as_given.device == "cuda") device = engine::DeviceType::kCuda;
    try {
      const launch::CachedCalibration measured =
          launch::cached_calibration(MPI_COMM_WORLD, *calibration_width, device, as_given.calibrate_seconds);
      config = as_given;
      config.machine_cluster = measured.cluster;
      config.machine_cluster_note = measured.note;
      prepare();
    } catch (const std::exception& e) {
      error = e.what();  // the same on every rank (calibrate agrees on its failures)
      failure = launch::kExitFailed;
    }
  } else if (calibration_width && asks[0] != asks[1] && all_clear == 1) {
    error = "--layout auto: some ranks asked to measure the machine and others did not (do their command lines differ?)";
  }
  // Every rank failed at the same stage or passed it; agree on the code too.
  MPI_Allreduce(MPI_IN_PLACE, &failure, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all_ranks_passed(error, rank)) return failure;
  if (!parallel::watchdog_installed())
    parallel::install_watchdog(MPI_COMM_WORLD, {config.collective_timeout, launch::kExitCollectiveTimeout});

  // The trainer outlives the try block: were it destroyed while unwinding,
  // its pending communication would wait for ranks that will never join,
  // and MPI_Abort would never run. It is destroyed only once every rank is
  // known to be here, and before the watchdog goes: should ranks that failed
  // at different points leave an operation unmatched, its wait ends at
  // --collective-timeout instead of hanging.
  std::optional<launch::Trainer> trainer;
  int exit_code = launch::kExitDone;
  try {
    trainer.emplace(config, std::cout, MPI_COMM_WORLD);
    exit_code = trainer->run().exit_code;
  } catch (const launch::JobError& e) {
    // Every rank is here, with the same message.
    if (rank == 0) launch::write_stderr_line("error: " + launch::one_line(e.what()));
    exit_code = e.exit_code();
  } catch (const std::exception& e) {
    // Returns only if every rank failed too (printed once); else aborts.
    failures.report(e.what());
    exit_code = launch::kExitFailed;
  }
  trainer.reset();
  parallel::uninstall_watchdog();
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  // Each line as it is written, also to a pipe or a file (a log collector,
  // `| tee`): stdout would otherwise hold the start-up lines back in a block
  // until the first step, after any error stderr printed at once.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  const int exit_code = train(argc, argv);
  MPI_Finalize();
  return exit_code;
}
