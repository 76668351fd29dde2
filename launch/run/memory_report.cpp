#include "launch/run/memory_report.h"

#include <iterator>
#include <string>
#include <vector>

#include "engine/buffer.h"

namespace launch {

namespace {

constexpr const char* kKinds[] = {"weights", "grads", "optimizer", "activations", "staging", "communication"};
constexpr std::size_t kValues = std::size(kKinds) + 1;  // the kinds, then the total

std::vector<double> as_values(const model::RankMemory& m) {
  return {static_cast<double>(m.weights),     static_cast<double>(m.grads),
          static_cast<double>(m.optimizer),   static_cast<double>(m.activations),
          static_cast<double>(m.staging),     static_cast<double>(m.communication),
          static_cast<double>(m.total())};
}

model::RankMemory from_values(const double* v) {
  model::RankMemory m;
  m.weights = static_cast<std::size_t>(v[0]);
  m.grads = static_cast<std::size_t>(v[1]);
  m.optimizer = static_cast<std::size_t>(v[2]);
  m.activations = static_cast<std::size_t>(v[3]);
  m.staging = static_cast<std::size_t>(v[4]);
  m.communication = static_cast<std::size_t>(v[5]);
  return m;
}

nlohmann::json as_json(const model::RankMemory& m, std::size_t total) {
  return {{"weights", m.weights},         {"grads", m.grads},     {"optimizer", m.optimizer},
          {"activations", m.activations}, {"staging", m.staging}, {"communication", m.communication},
          {"total", total}};
}

}  // namespace

bool MemoryFigures::matches() const {
  return as_values(planned) == as_values(allocated) && planned_total == allocated_total;
}

nlohmann::json MemoryFigures::event() const {
  return {{"event", "memory"}, {"planned", as_json(planned, planned_total)},
          {"allocated", as_json(allocated, allocated_total)}};
}

MemoryFigures report_memory(std::ostream* out, parallel::Communicator& world, const model::RankMemory& planned,
                            const model::RankMemory& allocated, const parallel::DataParallel& data_parallel,
                            const optim::Optimizer& optimizer, const MemoryNotes& notes) {
  std::vector<double> held = as_values(planned);
  const std::vector<double> mine = as_values(allocated);
  held.insert(held.end(), mine.begin(), mine.end());
  world.all_reduce(engine::Tensor(held.data(), engine::Shape{static_cast<std::int64_t>(held.size())},
                                  engine::DType::kF64, engine::DeviceType::kCpu),
                   parallel::ReduceOp::kMax);
  MemoryFigures f;
  f.planned = from_values(held.data());
  f.planned_total = static_cast<std::size_t>(held[kValues - 1]);
  f.allocated = from_values(held.data() + kValues);
  f.allocated_total = static_cast<std::size_t>(held[2 * kValues - 1]);
  if (!out) return f;
  const parallel::Sharding& sharding = data_parallel.sharding();
  const std::string shard = " (" + data_parallel.name() + " shard)";
  const std::string state = optimizer.describe_state(sharding.state);
  auto bytes = [](std::size_t b) { return engine::format_bytes(b); };
  const model::RankMemory& p = f.planned;
  std::string weights_note;
  if (notes.separate_working)
    weights_note = sharding.master && !sharding.weights ? " (master shard + whole working copy)"
                                                        : " (fp32 master + working copy)";
  *out << "memory     per rank (largest over ranks): parameters " << bytes(p.weights) << weights_note
       << (sharding.weights ? shard : "")
       << ", gradients " << bytes(p.grads) << (sharding.grads ? shard : "") << ", optimizer state "
       << bytes(p.optimizer) << (state.empty() ? "" : " (" + state + ")") << ", activations " << bytes(p.activations)
       << " (" << notes.slots << " micro-batch slot" << (notes.slots > 1 ? "s" : "")
       << (notes.chunks > 1 ? " over " + std::to_string(notes.chunks) + " chunks of layers" : std::string())
       << ", recompute "
       << model::recompute_name(notes.recompute) << ")";
  if (p.staging > 0)
    *out << ", " << data_parallel.name() << " gather/reduce buffers <= " << bytes(p.staging) << " (allocated as used)";
  if (p.communication > 0)
    *out << ", NCCL's buffers <= " << bytes(p.communication) << " (estimated from its buffer sizes, parallel/nccl_memory.h)";
  *out << "; total " << bytes(f.planned_total) << "\n";
  if (!f.matches()) {
    *out << "warning    the memory plan (model/memory_plan.h) differs from this run's allocations:";
    const std::vector<double> a = as_values(f.allocated), q = as_values(f.planned);
    for (std::size_t i = 0; i + 1 < kValues; ++i)
      if (a[i] != q[i])
        *out << " " << kKinds[i] << " planned " << static_cast<std::size_t>(q[i]) << " B, allocated "
             << static_cast<std::size_t>(a[i]) << " B;";
    *out << " the planner's predictions are off by as much\n";
  }
  return f;
}

}  // namespace launch
