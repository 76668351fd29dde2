// Checkpoints: the model in llm.c's GPT-2 format, and the engine's own
// training state, so a resumed run continues exactly as if it never stopped.
//
// Layout of a checkpoint directory (DESIGN.md: names and global shapes are the
// contract, so a later run may resume under another parallel layout):
//   <dir>/step_00000100/state.json       step, run identity, layout, sampler RNG,
//                                        and the list of shard indexes
//   <dir>/step_00000100/rank_00003.json  index of one rank's slices: per tensor
//                                        its name, kind (param, adam_m, adam_v),
//                                        global shape, tensor-parallel split
//                                        (dim, parts, rank, count), slice shape,
//                                        file and byte offset
//   <dir>/step_00000100/rank_00003.bin   the raw fp32 slices of that rank
//   <dir>/step_00000100/model.bin        the whole model in llm.c's format, when
//                                        one rank holds it (no tp, no pp)
//   <dir>/step_00000100/rank_00003_onebit.json/.bin
//                                        optional per-rank state that differs on
//                                        every rank (RankExtra below: 1-bit Adam's
//                                        error buffers), written by EVERY rank
//   <dir>/latest                         the name of the newest complete step dir
// Only data-parallel rank 0 of each (tp, pp) position writes (the others hold
// the same values). Everything is written under a temporary directory that is
// renamed into place once every rank has finished, so a crash mid-write never
// damages an existing checkpoint. Ranks must share the file system.
//
// A rank loads the records whose name, kind and split match what it holds, in
// whichever shard they are: a resume may change dp and pp; changing tp needs
// re-slicing, which is refused for now with a clear message.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/check.h"
#include "model/gpt_config.h"
#include "model/param_registry.h"
#include "parallel/communicator.h"

namespace launch {

// llm.c's GPT-2 checkpoint: 256 int32 header (magic 20240326, version 3 = fp32,
// max_seq_len, vocab_size, n_layer, n_head, n_embd, padded_vocab), then the
// tensors in llm.c's order: wte, wpe, then each of ln1w, ln1b, qkvw, qkvb,
// attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb stacked over
// layers, then lnfw, lnfb.
constexpr int kLlmcModelMagic = 20240326;
constexpr int kLlmcModelVersionFp32 = 3;

model::GptConfig read_llmc_config(const std::string& path);
// `master` is a flat f32 buffer laid out by `registry` (whole, unsharded model).
void write_llmc_model(const std::string& path, const model::GptConfig& config, const model::ParamRegistry& registry,
                      const float* master);
// Refuses a file whose shape differs from `expected`, naming both shapes.
void read_llmc_model(const std::string& path, const model::GptConfig& expected, const model::ParamRegistry& registry,
                     float* master);

// Host copies of what a rank holds, each laid out by the registry.
struct HostState {
  float* master;
  float* adam_m;
  float* adam_v;
};

struct TrainingState {
  std::int64_t step = 0;          // training steps completed (applied or skipped as non-finite)
  std::int64_t optimizer_steps = -1;  // updates applied (-1: as many as steps; fewer after skipped steps)
  std::string sampler_rng;        // text state of the sampler's std::mt19937_64
  nlohmann::json run;             // what must match on resume (model, batch, seed, data)
  nlohmann::json layout;          // tp, pp, dp of the writing run (information)
  nlohmann::json optimizer;       // optimizer name and settings (null: AdamW, or a checkpoint from before)
};

// A rank's own state that differs across data-parallel ranks, so the shards
// (written by dp rank 0 only) cannot hold it: 1-bit Adam's compression error
// buffers. Every rank writes rank_NNNNN_<tag>.bin (the raw f32 arrays) and
// rank_NNNNN_<tag>.json ({"rank", "meta", "arrays": [{name, count,
// byte_offset}]}); state.json lists them under "rank_extras": {tag: [...]}.
// Such state is only meaningful in the layout that wrote it: `meta` records
// that layout and the reader compares it with its own.
struct RankArray {
  std::string name;
  const float* data;
  std::int64_t count;
};
struct RankExtra {
  std::string tag;  // "onebit"
  nlohmann::json meta;
  std::vector<RankArray> arrays;
};
struct LoadedRankExtra {
  nlohmann::json meta;
  std::vector<std::pair<std::string, std::vector<float>>> arrays;  // in the order written
  const std::vector<float>* find(const std::string& name) const;   // null when absent
};

// A save that failed on every rank alike, after the ranks agreed on it: the
// same message everywhere, the temporary directory removed, the previous
// checkpoint untouched. Only this may be survived (Trainer::save_or_warn);
// any other error during a save is one rank's and aborts the job.
class CheckpointError : public engine::Error {
 public:
  using engine::Error::Error;
};

// What this rank contributes to a checkpoint.
struct ShardRole {
  int rank = 0;                 // world rank: names the shard files
  bool writes_shard = true;     // data-parallel rank 0 of its (tp, pp) position
  bool writes_llmc = true;      // holds the whole model (no tp, no pp) and is world rank 0
  bool fail_writes = false;     // tests: fail as a full disk would (ENGINE_TEST_FAIL_SAVES)
};

// Collective over `world`: writes <checkpoint_dir>/step_NNNNNNNN and points
// `latest` at it. Returns the step directory's path. On a failure every rank
// throws the same CheckpointError (the first failing rank's message) and the
// previous checkpoint is untouched.
// `extra`, when given, is this rank's RankExtra (then every rank must pass one).
std::string save_checkpoint(const std::string& checkpoint_dir, const TrainingState& state,
                            const model::GptConfig& config, const model::ParamRegistry& registry,
                            const HostState& host, const ShardRole& role, parallel::Communicator& world,
                            const RankExtra* extra = nullptr);

// True on every rank of `world` when `ok` is true on every rank (collective).
bool all_ranks_ok(parallel::Communicator& world, bool ok);
// `text` of rank `root` of `world`, on every rank (collective).
std::string broadcast_string(parallel::Communicator& world, const std::string& text, int root = 0);
// The error of the lowest rank whose `error` is not empty, on every rank; ""
// when no rank failed (collective). Lets a job-wide failure be reported once,
// with the words of a rank that saw it.
std::string first_error(parallel::Communicator& world, const std::string& error);

// "latest" -> the directory `latest` names inside checkpoint_dir; a path is
// returned as is. Throws when there is nothing to resume from, except for
// "auto", which then returns "" (start fresh).
std::string resolve_checkpoint(const std::string& resume, const std::string& checkpoint_dir);

// Loads a step directory into `host`; throws if the checkpoint's run identity
// (model shape, batch, seed, data) differs from `expected_run`, naming each
// difference, or if any tensor is missing or has another shape.
TrainingState load_checkpoint(const std::string& step_dir, const nlohmann::json& expected_run,
                              const model::ParamRegistry& registry, const HostState& host);

// World rank `rank`'s RankExtra `tag` from a step directory; nullopt when the
// checkpoint has none for that rank (written without one, or by fewer ranks).
std::optional<LoadedRankExtra> load_rank_extra(const std::string& step_dir, const std::string& tag, int rank);

}  // namespace launch
