#include "launch/memory_report.h"

#include <string>

#include "engine/buffer.h"

namespace launch {

void report_memory(std::ostream* out, parallel::Communicator& world, const MemoryAccount& mine,
                   const parallel::DataParallel& data_parallel, const optim::Optimizer& optimizer,
                   const MemoryNotes& notes) {
  double held[5] = {static_cast<double>(mine.weights), static_cast<double>(mine.grads),
                    static_cast<double>(mine.optimizer), static_cast<double>(mine.activations),
                    static_cast<double>(data_parallel.staging_bound())};
  world.all_reduce(engine::Tensor(held, engine::Shape{5}, engine::DType::kF64, engine::DeviceType::kCpu),
                   parallel::ReduceOp::kMax);
  if (!out) return;
  const parallel::Sharding& sharding = data_parallel.sharding();
  const std::string shard = " (" + data_parallel.name() + " shard)";
  const std::string state = optimizer.describe_state(sharding.state);
  auto bytes = [](double b) { return engine::format_bytes(static_cast<std::size_t>(b)); };
  *out << "memory     per rank (largest over ranks): parameters " << bytes(held[0])
       << (notes.separate_working ? " (fp32 master + working copy)" : "") << (sharding.weights ? shard : "")
       << ", gradients " << bytes(held[1]) << (sharding.grads ? shard : "") << ", optimizer state "
       << bytes(held[2]) << (state.empty() ? "" : " (" + state + ")") << ", activations " << bytes(held[3]) << " ("
       << notes.slots << " micro-batch slot" << (notes.slots > 1 ? "s" : "") << ", recompute "
       << model::recompute_name(notes.recompute) << ")";
  if (held[4] > 0)
    *out << ", " << data_parallel.name() << " gather/reduce buffers <= " << bytes(held[4]) << " (allocated as used)";
  *out << "\n";
}

}  // namespace launch
