#!/usr/bin/env bash
# Installs what is missing, builds everything and runs the whole test suite
# (CTest: labels cpu, mpi, cuda; CUDA tests skip themselves without a GPU),
# then the hostile-input tests of every parser again in a sanitizer build
# (AddressSanitizer + UndefinedBehaviorSanitizer, CUDA off: build-asan/), so a
# bad read, write or overflow that a hostile file provokes fails the suite.
#   tests/run.sh              # everything, then the parsers under the sanitizers
#   tests/run.sh -L cpu       # extra arguments go to ctest (no sanitizer pass)
#   ENGINE_SANITIZER_TESTS=all tests/run.sh   # every cpu-labelled test under the sanitizers
#   ENGINE_SANITIZER_TESTS=0 tests/run.sh     # no sanitizer pass
set -euo pipefail
source "$(dirname "$0")/../launch/setup_env.sh"

engine_install_dependencies
engine_build

# mpirun refuses root unless told; the mpi-labelled tests set these themselves,
# this covers anything run by hand after sourcing.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "$ENGINE_BUILD_DIR"
# Two tests at a time on CI's two cores: the longest ones mostly wait (fault
# tests on their timeouts, the CLI tests on child processes), so the suite
# takes 177 s instead of 251 s (2026-11-29, this VM). Not more: eight-rank MPI
# tests side by side would starve the fault tests' timeouts. ENGINE_TEST_JOBS=N to change it.
ctest --output-on-failure --timeout 600 -j "${ENGINE_TEST_JOBS:-2}" "$@"

# The sanitizer pass: only for the whole suite (a run with ctest arguments is
# someone looking at one thing). By default the hostile-input and fuzz tests
# of every parser (JSON bounds, token shards, safetensors and sharded
# indexes, checkpoint state and indexes, --config files, cluster files,
# tokenizer.json), and tests/fuzz's harnesses over their seeds and past
# findings: about 6 minutes of building and 15 s of running on CI's
# 2 cores, measured 2026-11-28. ENGINE_SANITIZER_TESTS=all runs every
# cpu-labelled test instead (a whole second build). Leak checking is off:
# Open MPI keeps its allocations until exit by design. Any UB report stops its
# test (-fno-sanitize-recover), so CTest counts it as a failure.
ENGINE_SANITIZED_PARSER_TESTS=(test_untrusted_json test_token_shard_hostile test_formats_hostile test_formats_fuzz
  test_checkpoint_hostile test_checkpoint_fuzz test_config_file test_cluster_file test_bpe_tokenizer test_bpe_pipelines)
# ... and tests/fuzz's harnesses replaying their seeds and past findings (CTest: NAME_replay).
ENGINE_SANITIZED_FUZZ_REPLAYS=(fuzz_tokenizer_json fuzz_tokenizer_encode fuzz_safetensors fuzz_safetensors_index
  fuzz_token_shard fuzz_llmc_tokenizer fuzz_hf_config fuzz_cluster_file fuzz_checkpoint fuzz_train_config)
sanitizer_tests=${ENGINE_SANITIZER_TESTS:-parsers}
if [ $# -eq 0 ] && [ "$sanitizer_tests" != 0 ]; then
  export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  if [ "$sanitizer_tests" = all ]; then
    echo "== the cpu-labelled tests under AddressSanitizer + UndefinedBehaviorSanitizer ($ENGINE_SANITIZE_BUILD_DIR)"
    engine_build_sanitized
    ctest --test-dir "$ENGINE_SANITIZE_BUILD_DIR" --output-on-failure --timeout 900 -L cpu
  else
    echo "== the parsers' hostile-input tests under AddressSanitizer + UndefinedBehaviorSanitizer ($ENGINE_SANITIZE_BUILD_DIR)"
    engine_build_sanitized "${ENGINE_SANITIZED_PARSER_TESTS[@]}" "${ENGINE_SANITIZED_FUZZ_REPLAYS[@]}"
    pattern="^($(IFS='|'; echo "${ENGINE_SANITIZED_PARSER_TESTS[*]}")|($(IFS='|'; echo "${ENGINE_SANITIZED_FUZZ_REPLAYS[*]}"))_replay)\$"
    ctest --test-dir "$ENGINE_SANITIZE_BUILD_DIR" --output-on-failure --timeout 900 -R "$pattern"
  fi
fi
