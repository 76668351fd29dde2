#include "model/partition.h"

#include <algorithm>
#include <sstream>

namespace model {

StageRange whole_model(const GptConfig& config) { return StageRange{0, config.n_layer, true, true}; }

StageRange pipeline_stage_range(const GptConfig& config, int stage, int stages) {
  const std::int64_t L = config.n_layer;
  return StageRange{L * stage / stages, L * (stage + 1) / stages, stage == 0, stage == stages - 1};
}

std::vector<StageRange> pipeline_chunk_ranges(const GptConfig& config, int pp_rank, int pp, int virtual_stages,
                                              parallel::StagePlacement placement) {
  std::vector<StageRange> chunks;
  for (int c = 0; c < virtual_stages; ++c)
    chunks.push_back(pipeline_stage_range(config, parallel::virtual_stage(placement, pp, pp_rank, c), virtual_stages * pp));
  return chunks;
}

StageRange rank_range(const std::vector<StageRange>& chunks) {
  StageRange r{chunks.front().first_layer, chunks.front().last_layer, false, false};
  for (const StageRange& c : chunks) {
    r.first_layer = std::min(r.first_layer, c.first_layer);
    r.last_layer = std::max(r.last_layer, c.last_layer);
    r.has_embedding = r.has_embedding || c.has_embedding;
    r.has_head = r.has_head || c.has_head;
  }
  return r;
}

std::string check_partition(const GptConfig& config, int tp, int pp) {
  std::ostringstream problems;
  if (tp >= 1 && config.n_head % tp != 0)
    problems << "; n_head " << config.n_head << " is not divisible by tp " << tp
             << " (attention is split by heads)";
  if (tp >= 1 && config.n_head % tp == 0 && config.kv_heads() % tp != 0)
    problems << "; n_kv_head " << config.kv_heads() << " is not divisible by tp " << tp
             << " (each rank holds whole key/value heads)";
  if (tp >= 1 && config.mlp_width() % tp != 0)
    problems << "; the MLP width " << config.mlp_width() << " is not divisible by tp " << tp;
  if (tp >= 1 && config.padded_vocab() % tp != 0)
    problems << "; the padded vocabulary " << config.padded_vocab() << " is not divisible by tp " << tp;
  if (pp >= 1 && config.n_layer < pp)
    problems << "; " << config.n_layer << " layers cannot fill " << pp << " pipeline stages (need at least one each)";
  const std::string text = problems.str();
  return text.empty() ? text : text.substr(2);
}

std::string check_fp8_shapes(const GptConfig& config, int tp, std::int64_t micro_batch_tokens) {
  const std::pair<const char*, std::int64_t> dims[] = {{"micro-batch x seq-len tokens", micro_batch_tokens},
                                                       {"n_embd", config.n_embd},
                                                       {"n_embd / tp", config.n_embd / tp},
                                                       {"the qkv width / tp", config.qkv_width() / tp},
                                                       {"the MLP fc width / tp", config.fc_width() / tp},
                                                       {"the MLP width / tp", config.mlp_width() / tp}};
  for (const auto& [what, value] : dims)
    if (value % 16 != 0) return std::string(what) + " is " + std::to_string(value);
  return "";
}

}  // namespace model
