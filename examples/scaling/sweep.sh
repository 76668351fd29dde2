#!/usr/bin/env bash
# A scaling sweep: one `train` run per layout of a layout file, all on the
# same model, batch and data, then examples/scaling/report.py's tables and
# plots over the runs (and, given a plan, the planner's predictions against
# the measurements). See examples/scaling/README.md.
#
#   examples/scaling/sweep.sh --layouts FILE --np N --out DIR [--build BUILD_DIR]
#       [--model PRESET] [--steps S] [--seq-len T] [--batch-tokens TOKENS]
#       [--data GLOB] [--plan PLAN_JSON | --cluster CLUSTER_JSON] [--skip K] [--repeat R]
#       [--no-plots] [-- extra train flags...]
#
# - The launcher is `mpirun` unless MPIRUN says otherwise (MPIRUN="srun
#   --mpi=pmix"); it is called as `$MPIRUN -n N train ...`. With Open MPI's
#   mpirun as root the two OMPI_ALLOW_RUN_AS_ROOT variables are set, and
#   --oversubscribe is added only when N exceeds the cores.
# - --build: a build folder holding launch/train (and launch/prepare without
#   --data); without it the script installs what is missing and builds, as
#   launch/train.sh does.
# - --data: the training shards, a file or a glob as `train --train-data`
#   takes it. Without it a small corpus of fortune files is tokenised once
#   into DIR/data (these runs measure time and memory, not learning).
# - Each layout runs in DIR/runs/NAME (--overwrite: a sweep starts afresh),
#   its console in DIR/logs/NAME.log. A failed layout is recorded with its
#   exit code in DIR/sweep_status.tsv and the sweep goes on.
# - --repeat R runs the whole list R times over (pass p > 1 in runs/NAME@p),
#   and the report keeps each layout's least disturbed pass (the smallest
#   median step): on a shared machine a disturbance lasts tens of seconds and
#   only ever adds time, so passes apart in time rarely both catch one.
# - No validation data is given, so no validation pass lands inside a step's
#   time; extra flags after `--` go to every run (and win over the sweep's).
# - The plan compared against: --plan FILE, else the file $PLAN_JSON names,
#   else DIR/plan.json if it exists (the planner's `plan --json --all`).
#   --cluster FILE (a cluster file: examples/scaling/clusters/, or `mpirun -n N
#   plan --calibrate --out FILE`) runs the planner first, for the sweep's model,
#   batch and ranks, into DIR/plan.json.
# - Every tool is checked before anything is written (a sweep that cannot
#   finish should not leave a half-made DIR): train, prepare without --data,
#   plan with --cluster, the launcher, and a Python with matplotlib for the
#   report's plots, found as examples/plot_python.py finds it ($PYTHON or
#   python3, else /usr/bin/python3). What is missing is named in one line.
#   --no-plots: the report's tables only, for a machine without matplotlib.
set -euo pipefail
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ENGINE_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
  exit "${1:-64}"
}
die() {
  echo "sweep.sh: $*" >&2
  exit 64
}

layouts="" np="" out="" build="" model="gpt-demo" steps=20 seq_len=128 batch_tokens=4096 data="" plan="" skip=3
cluster="" repeat=1 plots=1
extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --layouts) layouts=${2:?--layouts needs a file}; shift 2 ;;
    --np) np=${2:?--np needs a rank count}; shift 2 ;;
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --build) build=${2:?--build needs a folder}; shift 2 ;;
    --model) model=${2:?--model needs a preset}; shift 2 ;;
    --steps) steps=${2:?--steps needs a count}; shift 2 ;;
    --seq-len) seq_len=${2:?--seq-len needs a length}; shift 2 ;;
    --batch-tokens) batch_tokens=${2:?--batch-tokens needs a count}; shift 2 ;;
    --data) data=${2:?--data needs a file or glob}; shift 2 ;;
    --plan) plan=${2:?--plan needs a file}; shift 2 ;;
    --cluster) cluster=${2:?--cluster needs a cluster file}; shift 2 ;;
    --skip) skip=${2:?--skip needs a count}; shift 2 ;;
    --repeat) repeat=${2:?--repeat needs a count}; shift 2 ;;
    --no-plots) plots=0; shift ;;
    -h|--help) usage 0 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "sweep.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
[ -n "$layouts" ] && [ -n "$np" ] && [ -n "$out" ] || { echo "sweep.sh: --layouts, --np and --out are required" >&2; usage; }
[ -f "$layouts" ] || die "--layouts '$layouts': no such file"
[[ $np =~ ^[1-9][0-9]*$ ]] || die "--np '$np': expected a positive whole number"
[[ $steps =~ ^[1-9][0-9]*$ ]] || die "--steps '$steps': expected a positive whole number"
[[ $repeat =~ ^[1-9][0-9]*$ ]] || die "--repeat '$repeat': expected a positive whole number"
(( steps > skip )) || echo "sweep.sh: warning: --steps $steps leaves no step after the $skip skipped as warm-up" >&2
if [ -z "$plan" ] && [ -n "${PLAN_JSON:-}" ]; then
  [ -f "$PLAN_JSON" ] || die "PLAN_JSON '$PLAN_JSON': no such file"
  plan=$PLAN_JSON
fi
[ -z "$plan" ] || [ -f "$plan" ] || die "--plan '$plan': no such file"
[ -z "$plan" ] || [ -z "$cluster" ] || die "--plan and --cluster: give one (--cluster makes the plan)"
[ -z "$cluster" ] || [ -f "$cluster" ] || die "--cluster '$cluster': no such file"

# ---- the layouts, all checked before the first run --------------------------------
# NAME key=value ...; '#' starts a comment. tp and pp default to 1 and dp to
# the ranks they leave (N / (tp x pp)), always passed so that every run folder's
# config.json names its whole grid; any other key left out is not passed, and
# train's own default applies (config.json records it).
declare -A flag_of=([tp]=--tp [pp]=--pp [dp]=--dp [micro_batch]=--micro-batch [zero]=--zero
                    [recompute]=--recompute [schedule]=--pipeline-schedule [sequence_parallel]=--sequence-parallel
                    [virtual_stages]=--virtual-stages)
names=() layout_args=() layout_keys=()
declare -A seen=()
lineno=0
while IFS= read -r line || [ -n "$line" ]; do
  lineno=$((lineno + 1))
  line=${line%%#*}
  read -r -a words <<<"$line" || true
  [ ${#words[@]} -gt 0 ] || continue
  name=${words[0]}
  [[ $name =~ ^[A-Za-z0-9_.-]+$ ]] || die "$layouts:$lineno: layout name '$name' may hold only letters, digits, '_', '.', '-'"
  [[ $name == *=* ]] && die "$layouts:$lineno: the line must start with the layout's name, not '$name'"
  [ -z "${seen[$name]:-}" ] || die "$layouts:$lineno: layout '$name' appears twice"
  seen[$name]=1
  args="" keys="" tp=1 pp=1 dp=""
  for kv in "${words[@]:1}"; do
    [[ $kv == *=* ]] || die "$layouts:$lineno: '$kv' is not key=value"
    key=${kv%%=*} value=${kv#*=}
    [ -n "${flag_of[$key]:-}" ] || die "$layouts:$lineno: unknown key '$key' (tp, pp, dp, micro_batch, zero, recompute, schedule, virtual_stages, sequence_parallel)"
    case $key in
      recompute) [[ $value =~ ^(none|selective|full)$ ]] || die "$layouts:$lineno: recompute=$value: none, selective or full" ;;
      schedule) [[ $value =~ ^(1f1b|afab|interleaved|zb-h1|zb-v)$ ]] || die "$layouts:$lineno: schedule=$value: 1f1b, afab, interleaved, zb-h1 or zb-v" ;;
      sequence_parallel) [[ $value =~ ^[01]$ ]] || die "$layouts:$lineno: sequence_parallel=$value: 0 or 1" ;;
      *) [[ $value =~ ^[0-9]+$ ]] || die "$layouts:$lineno: $key=$value: expected a whole number" ;;
    esac
    case $key in tp) tp=$value ;; pp) pp=$value ;; dp) dp=$value ;; esac
    if [ "$key" = sequence_parallel ]; then
      [ "$value" = 1 ] && args+=" --sequence-parallel"
    else
      args+=" ${flag_of[$key]} $value"
    fi
    keys+="${keys:+ }$key=$value"
  done
  (( tp > 0 && pp > 0 )) || die "$layouts:$lineno: tp and pp must be at least 1"
  # A grid that does not fit N ranks is train's to refuse (it names what is
  # wrong); it is then recorded as a failed layout like any other.
  if [ -z "$dp" ] && (( np % (tp * pp) == 0 )); then
    args+=" --dp $(( np / (tp * pp) ))"
  fi
  [[ $args == *--tp* ]] || args+=" --tp $tp"
  [[ $args == *--pp* ]] || args+=" --pp $pp"
  names+=("$name") layout_args+=("$args") layout_keys+=("$keys")
done <"$layouts"
[ ${#names[@]} -gt 0 ] || die "$layouts: no layouts in it"

# ---- the tools, all checked before anything is written --------------------------------
if [ -n "$build" ]; then
  [ -d "$build" ] || die "--build '$build': no such folder"
  ENGINE_BUILD_DIR=$(cd "$build" && pwd)
else
  source "$ENGINE_ROOT/launch/setup_env.sh"
  engine_install_dependencies
  engine_build train prepare
fi
train=$ENGINE_BUILD_DIR/launch/train
read -r -a launcher <<<"${MPIRUN:-mpirun}"
missing=()
[ -x "$train" ] || missing+=("launch/train in $ENGINE_BUILD_DIR")
make_data=0  # no --data, and no corpus tokenised by an earlier sweep into DIR/data
if [ -z "$data" ] && ! ls "$out"/data/sweep_train_*.bin >/dev/null 2>&1; then
  make_data=1
  [ -x "$ENGINE_BUILD_DIR/launch/prepare" ] ||
    missing+=("launch/prepare in $ENGINE_BUILD_DIR (to tokenise a corpus: no --data given)")
  [ -d /usr/share/games/fortunes ] || missing+=("the fortunes corpus (no --data given: apt-get install fortunes)")
fi
[ -z "$cluster" ] || [ -x "$ENGINE_BUILD_DIR/launch/plan" ] ||
  missing+=("launch/plan in $ENGINE_BUILD_DIR (for --cluster)")
if [ ${#launcher[@]} -eq 0 ] || ! command -v "${launcher[0]}" >/dev/null; then
  if [ -n "${MPIRUN:-}" ]; then missing+=("the launcher '${launcher[0]:-}' that MPIRUN names")
  else missing+=("mpirun (apt-get install openmpi-bin, or name a launcher in MPIRUN)"); fi
fi
# The report's Python: with --no-plots any python3; else one with matplotlib,
# which setup_env.sh installs for the system's Python while a pyenv or
# virtualenv python3 first on PATH may lack it (examples/plot_python.py).
python=${PYTHON:-python3}
command -v "$python" >/dev/null || python=/usr/bin/python3
if ! command -v "$python" >/dev/null; then
  missing+=("python3 (for report.py)")
elif (( plots )); then
  install="apt-get install python3-matplotlib or pip install matplotlib; or --no-plots"
  python=$("$python" "$ENGINE_ROOT/examples/plot_python.py" 2>/dev/null) ||
    missing+=("matplotlib for the report's plots ($install)")
fi
if [ ${#missing[@]} -gt 0 ]; then
  joined=$(printf '; %s' "${missing[@]}")
  die "missing, so nothing was run or written: ${joined:2}"
fi

# ---- data -----------------------------------------------------------------------------
mkdir -p "$out/runs" "$out/logs"
out=$(cd "$out" && pwd)
if [ -z "$data" ]; then
  data="$out/data/sweep_train_*.bin"
  if (( make_data )); then
    mkdir -p "$out/data"
    find -L /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort | head -8 |
      xargs cat >"$out/data/text.txt"
    "$ENGINE_BUILD_DIR/launch/prepare" --input "$out/data/text.txt" --output-dir "$out/data" --name sweep >/dev/null
  fi
fi

# ---- the plan, when the sweep makes it -----------------------------------------------
if [ -n "$cluster" ]; then
  # The model's shape and the MFU convention the runs get from the extra flags
  # must be the planner's too.
  plan_flags=()
  for ((i = 0; i < ${#extra[@]}; i++)); do
    case ${extra[i]} in
      --n-layer|--n-head|--n-embd|--vocab-size|--max-seq-len|--attention-flops) plan_flags+=("${extra[i]}" "${extra[i + 1]:-}") ;;
      --n-layer=*|--n-head=*|--n-embd=*|--vocab-size=*|--max-seq-len=*|--attention-flops=*) plan_flags+=("${extra[i]}") ;;
    esac
  done
  plan=$out/plan.json
  "$ENGINE_BUILD_DIR/launch/plan" --model "$model" --seq-len "$seq_len" --batch-tokens "$batch_tokens" --devices "$np" \
    --cluster "$cluster" "${plan_flags[@]}" --json --all >"$plan.tmp" || die "the planner failed (see above)"
  mv "$plan.tmp" "$plan"
  echo "sweep: plan of $(grep -o '"step_seconds"' "$plan" | wc -l) layouts from $cluster in $plan"
fi

# ---- the launcher -------------------------------------------------------------------
case $(basename "${launcher[0]}") in
  mpirun|mpiexec|orterun)
    if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
    if (( np > $(nproc) )); then launcher+=(--oversubscribe); fi
    ;;
esac
# Each rank its share of the cores, as launch/train.sh does.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( $(nproc) / np > 0 ? $(nproc) / np : 1 ))}

# ---- the runs -----------------------------------------------------------------------
status=$out/sweep_status.tsv
printf 'layout\trun\texit_code\twall_s\tlayout_keys\tcommand\n' >"$status"
passes=""
(( repeat == 1 )) || passes=" x $repeat passes"
echo "sweep: ${#names[@]} layouts x $steps steps$passes, $np ranks ($OMP_NUM_THREADS OpenMP" \
  "threads each), model $model, T $seq_len, $batch_tokens tokens a step; runs in $out/runs"
sweep_start=$(date +%s.%N)
failed=0
for ((pass = 1; pass <= repeat; pass++)); do
  for i in "${!names[@]}"; do
    name=${names[i]}
    run=$name
    (( pass == 1 )) || run=$name@$pass
    read -r -a layout_flags <<<"${layout_args[i]}"
    cmd=("${launcher[@]}" -n "$np" "$train" --model "$model" --steps "$steps" --seq-len "$seq_len"
         --batch-tokens "$batch_tokens" --train-data "$data" --run-dir "$out/runs/$run" --overwrite
         --log-interval 5 "${layout_flags[@]}" "${extra[@]}")
    start=$(date +%s.%N)
    set +e
    "${cmd[@]}" >"$out/logs/$run.log" 2>&1 </dev/null
    code=$?
    set -e
    wall=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    printf '%s\t%s\t%d\t%s\t%s\t%s\n' "$name" "$run" "$code" "$wall" "${layout_keys[i]}" "${cmd[*]}" >>"$status"
    if [ "$code" -eq 0 ]; then
      printf 'sweep: %-24s done in %6.1f s\n' "$run" "$wall"
    else
      failed=$((failed + 1))
      printf 'sweep: %-24s FAILED (exit %d) after %.1f s; last lines of %s:\n' "$run" "$code" "$wall" "$out/logs/$run.log"
      tail -n 3 "$out/logs/$run.log" | sed 's/^/    /'
    fi
  done
done
total=$(awk -v a="$sweep_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
echo "sweep: $(( ${#names[@]} * repeat )) runs in $total s, $failed failed"

# $python: checked above, before the runs.
report=("$python" "$SCRIPT_DIR/report.py" "$out" --skip "$skip")
[ -z "$plan" ] || report+=(--plan "$plan")
(( plots )) || report+=(--no-plots)
"${report[@]}"
