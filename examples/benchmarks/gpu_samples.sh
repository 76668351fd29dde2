# shellcheck shell=bash
# Sourced by gpu_bench.sh: samples the GPU's SM and memory clocks, power,
# temperature and clock-event ("throttle") reasons every 200 ms while one
# timed run goes on, so that each figure can be read against the clocks it
# ran at (an H100/H200 at its power cap runs below its boost clock, and two
# programs compared at different clocks are not compared fairly).
#
#   gpu_samples_start NAME     # nvidia-smi -lms 200 > $LOG_DIR/NAME_gpu_samples.csv, in the background
#   gpu_samples_stop           # ends that nvidia-smi (its PID only)
#   gpu_samples_summary NAME   # one line: SM clock median/min, power mean/max, max temperature, reasons seen
#
# Needs LOG_DIR and gpu_index. Nothing here fails the benchmark: without a
# working nvidia-smi the summary says so.

GPU_SAMPLES_PID=""
GPU_SAMPLES_FIELDS=""

# The field list, once: newer drivers call the reasons clocks_event_reasons.*,
# older ones clocks_throttle_reasons.* (kept as an alias for a while); take the
# first list this nvidia-smi accepts. utilization.gpu picks the busy samples.
gpu_samples_fields() {
  [ -n "$GPU_SAMPLES_FIELDS" ] && { [ "$GPU_SAMPLES_FIELDS" != none ]; return; }
  local base=timestamp,utilization.gpu,clocks.sm,clocks.mem,power.draw,temperature.gpu f
  GPU_SAMPLES_FIELDS=none
  command -v nvidia-smi >/dev/null 2>&1 || return 1
  for f in "$base,clocks_event_reasons.active" "$base,clocks_throttle_reasons.active" "$base"; do
    if timeout 20 nvidia-smi --query-gpu="$f" --format=csv,noheader,nounits -i "${gpu_index:-0}" >/dev/null 2>&1; then
      GPU_SAMPLES_FIELDS=$f
      return 0
    fi
  done
  return 1
}

gpu_samples_start() {
  local csv=$LOG_DIR/$1_gpu_samples.csv
  GPU_SAMPLES_PID=""
  gpu_samples_fields || { echo "# nvidia-smi could not be queried: no samples" >"$csv"; return 0; }
  echo "# $GPU_SAMPLES_FIELDS" >"$csv"
  nvidia-smi --query-gpu="$GPU_SAMPLES_FIELDS" --format=csv,noheader,nounits -lms 200 -i "${gpu_index:-0}" >>"$csv" 2>&1 &
  GPU_SAMPLES_PID=$!
  return 0
}

gpu_samples_stop() {
  [ -n "$GPU_SAMPLES_PID" ] || return 0
  kill "$GPU_SAMPLES_PID" 2>/dev/null || true
  wait "$GPU_SAMPLES_PID" 2>/dev/null || true
  GPU_SAMPLES_PID=""
  return 0
}

# Statistics over the samples with utilization >= 50% (the run's steps, not its
# start-up, compilation or exit); all samples where none is that busy. Reasons
# are NVML's bits, named: 0x1 idle, 0x2 application clocks, 0x4 SW power cap,
# 0x8 HW slowdown, 0x10 sync boost, 0x20 SW thermal, 0x40 HW thermal, 0x80 HW
# power brake, 0x100 display clocks.
gpu_samples_summary() {
  local csv=$LOG_DIR/$1_gpu_samples.csv
  [ -f "$csv" ] || { echo "clocks   $1: no samples"; return 0; }
  awk -F', *' -v run="$1" '
    function names(hex,   v, i, c, out) {  # "0x0000000000000004" -> "sw_power_cap"
      v = 0; hex = tolower(hex); sub(/^0x/, "", hex)
      for (i = 1; i <= length(hex); i++) { c = index("0123456789abcdef", substr(hex, i, 1)); if (!c) return "?"; v = v * 16 + c - 1 }
      if (v == 0) return "none"
      out = ""
      for (i = 0; i < 9; i++) if (int(v / 2 ^ i) % 2) out = out (out == "" ? "" : "+") bit[i]
      return (out == "") ? hex : out
    }
    BEGIN { split("idle app_clocks sw_power_cap hw_slowdown sync_boost sw_thermal hw_thermal hw_power_brake display_clocks", b, " ")
            for (i = 1; i <= 9; i++) bit[i - 1] = b[i] }
    /^#/ { next }
    $3 !~ /^[0-9.]+$/ { bad++; next }   # an error line, or [N/A] / [Not Supported]
    {
      n++; busy[n] = ($2 ~ /^[0-9.]+$/ && $2 >= 50); sm[n] = $3; pw[n] = $5; tp[n] = $6; rs[n] = $7
    }
    END {
      if (n == 0) { printf "clocks   %-22s no usable samples (%d lines unreadable)\n", run, bad; exit }
      nb = 0; for (i = 1; i <= n; i++) nb += busy[i]
      use_all = (nb == 0)
      m = 0; psum = 0; pn = 0; pmax = -1; tmax = -1; smin = 1e9; reasons = ""
      for (i = 1; i <= n; i++) {
        if (!use_all && !busy[i]) continue
        v[++m] = sm[i]; if (sm[i] < smin) smin = sm[i]
        if (pw[i] ~ /^[0-9.]+$/) { psum += pw[i]; pn++; if (pw[i] > pmax) pmax = pw[i] }
        if (tp[i] ~ /^[0-9.]+$/ && tp[i] > tmax) tmax = tp[i]
        r = rs[i]; gsub(/ /, "", r)
        if (r ~ /^0x[0-9a-fA-F]+$/) r = r " (" names(r) ")"
        if (r != "" && index(", " reasons ", ", ", " r ", ") == 0) reasons = reasons (reasons == "" ? "" : ", ") r
      }
      for (i = 2; i <= m; i++) { x = v[i]; j = i - 1; while (j > 0 && v[j] > x) { v[j + 1] = v[j]; j-- } v[j + 1] = x }
      med = (m % 2) ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2
      printf "clocks   %-22s SM median %4.0f MHz, min %4.0f | power mean %s W, max %s W | max %s C | reasons {%s} | %d of %d samples%s\n",
        run, med, smin, pn ? sprintf("%.0f", psum / pn) : "n/a", pn ? sprintf("%.0f", pmax) : "n/a",
        (tmax >= 0) ? tmax : "n/a", (reasons == "") ? "n/a" : reasons, m, n, use_all ? " (none >= 50% busy: all)" : " >= 50% busy"
    }' "$csv"
  return 0
}
