#include "launch/run/metrics.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "engine/buffer.h"
#include "engine/check.h"
#include "launch/files/atomic_file.h"
#include "launch/files/untrusted_json.h"

namespace launch {

MetricsLog::MetricsLog(const std::string& path) : path_(path) {
  if (path.empty()) return;
  file_.open(path, std::ios::app);
  ENGINE_CHECK(file_.good(), "cannot open metrics file '", path, "' for appending: ", std::strerror(errno));
}

std::string MetricsLog::format_compact_duration(double seconds) {
  const long long s = seconds > 0 ? static_cast<long long>(seconds + 0.5) : 0;
  char text[48];
  if (s >= 3600)
    std::snprintf(text, sizeof text, "%lldh%02lldm", s / 3600, s / 60 % 60);
  else if (s >= 60)
    std::snprintf(text, sizeof text, "%lldm%02llds", s / 60, s % 60);
  else
    std::snprintf(text, sizeof text, "%llds", s);
  return text;
}

std::string MetricsLog::format_line(const StepMetrics& m) {
  char line[416];
  // HFU only where it differs from MFU: with recomputation (JSONL always has it).
  char hfu[32] = "";
  if (m.recompute) std::snprintf(hfu, sizeof hfu, " | HFU %.1f%%", m.hfu * 100.0);
  const int width = static_cast<int>(std::to_string(m.steps).size());
  std::snprintf(line, sizeof line,
                "step %*lld/%lld | loss %.4f | norm %.3f | lr %.2e | %.1f ms | %.0f tok/s | %.2f TFLOP/s | "
                "MFU %.1f%%%s | mem %s | elapsed %s eta %s",
                width, static_cast<long long>(m.step), static_cast<long long>(m.steps), m.loss, m.grad_norm, m.lr,
                m.step_seconds * 1e3, m.tokens_per_second, m.tflops_per_device, m.mfu * 100.0, hfu,
                engine::format_bytes(m.peak_memory_bytes).c_str(), format_compact_duration(m.elapsed_seconds).c_str(),
                format_compact_duration(m.eta_seconds).c_str());
  std::string out = line;
  if (m.parallel) {
    char par[160];
    std::snprintf(par, sizeof par, " | bubble %.0f%% | comm tp %s dp %s pp %s", m.bubble_fraction * 100.0,
                  engine::format_bytes(static_cast<std::size_t>(m.comm_bytes_tp)).c_str(),
                  engine::format_bytes(static_cast<std::size_t>(m.comm_bytes_dp)).c_str(),
                  engine::format_bytes(static_cast<std::size_t>(m.comm_bytes_pp)).c_str());
    out += par;
  }
  if (m.val_loss) {
    char val[48];
    std::snprintf(val, sizeof val, " | val %.4f", *m.val_loss);
    out += val;
  }
  if (m.skipped) out += " | SKIPPED (non-finite, not applied)";
  return out;
}

void MetricsLog::record(const StepMetrics& m) {
  if (!file_.is_open()) return;
  nlohmann::json j = {{"step", m.step},
                      {"loss", m.loss},
                      {"grad_norm", m.grad_norm},
                      {"lr", m.lr},
                      {"step_time_s", m.step_seconds},
                      {"tokens_per_s", m.tokens_per_second},
                      {"tflops_per_device", m.tflops_per_device},
                      {"mfu", m.mfu},
                      {"hfu", m.hfu},
                      {"peak_memory_bytes", m.peak_memory_bytes},
                      {"peak_rss_bytes", m.peak_rss_bytes},
                      {"elapsed_s", m.elapsed_seconds},
                      {"eta_s", m.eta_seconds}};
  if (m.val_loss) j["val_loss"] = *m.val_loss;
  if (m.skipped) j["skipped"] = true;  // non-finite values are written as null
  if (m.parallel) {
    j["bubble_fraction"] = m.bubble_fraction;
    j["comm_bytes"] = {{"tp", m.comm_bytes_tp}, {"dp", m.comm_bytes_dp}, {"pp", m.comm_bytes_pp}};
    j["exposed_comm_s"] = m.exposed_comm_seconds;
    j["wait_seconds_tp"] = m.wait_seconds_tp;
    j["wait_seconds_pp"] = m.wait_seconds_pp;
    j["wait_seconds_dp"] = m.wait_seconds_dp;
    j["wait_seconds_world"] = m.wait_seconds_world;
  }
  file_ << j.dump() << '\n';
  check_written();
}

void MetricsLog::record_validation(std::int64_t step, double val_loss) {
  if (!file_.is_open()) return;
  file_ << nlohmann::json{{"step", step}, {"val_loss", val_loss}}.dump() << '\n';
  check_written();
}

void MetricsLog::restart_at(std::int64_t step, const nlohmann::json& event) {
  if (path_.empty()) return;
  file_.close();
  // Only this run's records may go: those after the last resume marker (an
  // earlier attempt of this run, or the run itself if it never resumed).
  // Earlier runs appended to the same file keep theirs.
  std::vector<std::string> lines;
  std::size_t ours = 0;  // index of the first line that belongs to this run
  {
    std::ifstream in(path_);
    for (std::string line; std::getline(in, line);) {
      if (json_nesting_depth(line) > kMaxJsonDepth) continue;  // not a record of ours (launch/files/untrusted_json.h)
      const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!record.is_object()) continue;  // a line cut short by a crash
      lines.push_back(line);
      if (record.value("event", "") == "resume") ours = lines.size();
    }
  }
  std::string kept;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (i >= ours) {
      const nlohmann::json record = nlohmann::json::parse(lines[i], nullptr, /*allow_exceptions=*/false);
      if (record.is_object() && record.contains("step") && record["step"].is_number() && record["step"].get<std::int64_t>() > step) continue;
    }
    kept += lines[i] + '\n';
  }
  // Rewritten whole under a temporary name: a crash now leaves either the
  // old file or the new one.
  AtomicFile rewritten(path_);
  rewritten.write(kept);
  rewritten.commit();
  file_.open(path_, std::ios::app);
  ENGINE_CHECK(file_.good(), "cannot open metrics file '", path_, "' for appending: ", std::strerror(errno));
  record_event(event);
}

void MetricsLog::record_event(const nlohmann::json& event) {
  if (!file_.is_open()) return;
  file_ << event.dump() << '\n';
  check_written();
}

void MetricsLog::check_written() {
  file_.flush();
  ENGINE_CHECK(file_.good(), "cannot write metrics file '", path_, "' (disk full or removed?): ", std::strerror(errno));
}

std::uint64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace launch
