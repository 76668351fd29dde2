#!/usr/bin/env bash
# Coverage-guided fuzzing of every parser of untrusted files (tests/fuzz/README.md):
# installs clang and libFuzzer if missing, builds the harnesses with libFuzzer,
# AddressSanitizer and UBSan in build-fuzz/ (CUDA off), and runs each for a time.
#   tests/fuzz/run.sh                      # every harness, 60 s each
#   tests/fuzz/run.sh 600 fuzz_safetensors # one harness, 10 minutes
# Each harness keeps its corpus in build-fuzz/fuzz-corpus/NAME/ (grown run
# after run) and writes any finding (crash, sanitizer report, timeout, an
# allocation beyond 2 GiB, a non-refusal exception) to
# build-fuzz/fuzz-findings/NAME/. Exits 1 if any harness found something;
# copy a finding into tests/fuzz/corpus/NAME/ once it is fixed, so that CTest
# replays it from then on.
set -euo pipefail
source "$(dirname "$0")/../../launch/setup_env.sh"

seconds=${1:-60}
shift || true
engine_install_dependencies clang libclang-rt-dev libomp-dev "${ENGINE_APT_PACKAGES[@]}"

build=${ENGINE_FUZZ_BUILD_DIR:-$ENGINE_ROOT/build-fuzz}
all_targets=(fuzz_tokenizer_json fuzz_tokenizer_encode fuzz_safetensors fuzz_safetensors_index fuzz_token_shard
  fuzz_llmc_tokenizer fuzz_hf_config fuzz_cluster_file fuzz_checkpoint fuzz_train_config)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all_targets[@]}")

cmake -S "$ENGINE_ROOT" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DENGINE_ENABLE_CUDA=OFF -DENGINE_SANITIZE=ON -DENGINE_FUZZ=ON >/dev/null
cmake --build "$build" -j "${ENGINE_BUILD_JOBS:-$(nproc)}" $(printf -- '--target %s ' "${targets[@]}")

export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
found=()
for t in "${targets[@]}"; do
  binary=$(find "$build/tests/fuzz" -maxdepth 1 -name "$t" -type f -executable)
  corpus=$build/fuzz-corpus/$t findings=$build/fuzz-findings/$t
  mkdir -p "$corpus" "$findings"
  # The seeds: the files and folders CMake recorded for the harness (tests/fuzz/CMakeLists.txt).
  IFS=';' read -r -a seeds <"$build/tests/fuzz/$t.seeds" || true
  for s in "${seeds[@]}"; do
    if [ -d "$s" ]; then cp -n "$s"/* "$corpus"/ 2>/dev/null || true; elif [ -f "$s" ]; then cp -n "$s" "$corpus"/; fi
  done
  dict=()
  case $t in fuzz_tokenizer_json|fuzz_hf_config|fuzz_cluster_file|fuzz_train_config)
    dict=(-dict="$ENGINE_ROOT/tests/fuzz/json.dict") ;;
  esac
  echo "== $t: ${seconds} s, corpus $corpus ($(ls "$corpus" | wc -l) inputs)"
  log=$findings/last_run.log
  if "$binary" "$corpus" "${dict[@]}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
       -malloc_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="$findings/" >"$log" 2>&1; then
    runs=$(grep -E '^stat::number_of_executed_units' "$log" | tail -1 | awk '{print $2}')
    echo "   no finding: $runs inputs run, corpus now $(ls "$corpus" | wc -l)"
  else
    what='FUZZ FINDING|ERROR: (AddressSanitizer|libFuzzer|UndefinedBehaviorSanitizer)'
    what+='|runtime error|out-of-memory|timeout'
    echo "   FINDING: $(grep -m1 -E "$what" "$log" || tail -1 "$log")"
    echo "   log $log; inputs: $(ls "$findings" | grep -v last_run.log | tr '\n' ' ')"
    found+=("$t")
  fi
done
if [ ${#found[@]} -gt 0 ]; then
  echo "findings in: ${found[*]}"
  exit 1
fi
echo "no finding in ${#targets[@]} harnesses"
