// Checkpoints: the engine's training state, written so that it can be trusted
// (checksums, atomic commits) and moved (any layout resumes any other).
//
// Layout of a checkpoint directory (ARCHITECTURE.md: names, global shapes and
// splits are the contract, so a later run may resume under another layout):
//   <dir>/step_00000100/state.json       step, run identity, layout, sampler RNG,
//                                        learning-rate schedule (lr_schedule),
//                                        the shard indexes, every file's size and
//                                        XXH3 checksum, and its own checksum
//   <dir>/step_00000100/rank_00003.json  index of one rank's slices: per tensor
//                                        its name, kind (param, adam_m, adam_v),
//                                        global shape, tensor-parallel split
//                                        (dim, parts, rank, count), slice shape,
//                                        file, byte offset and XXH3 checksum
//   <dir>/step_00000100/rank_00003.bin   the raw fp32 slices of that rank
//   <dir>/step_00000100/model.bin        the whole model in llm.c's format, when
//                                        one rank holds it (no tp, no pp)
//   <dir>/step_00000100/rank_00003_onebit.json/.bin
//                                        optional per-rank state that differs on
//                                        every rank (RankExtra below: 1-bit Adam's
//                                        error buffers), written by EVERY rank
//   <dir>/latest                         the name of the newest complete step dir
//
// Writing (launch/checkpoint/checkpoint_writer.cpp) has three steps so the middle one, the
// only slow one, can run on a background thread (launch/checkpoint/checkpoint_saver.h):
// begin (collective: make <step>.tmp), write this rank's files (local file
// I/O only), commit (collective: agree every rank's files are written, write
// state.json, rename <step>.tmp to <step>, point `latest` at it, delete
// checkpoints beyond --keep-checkpoints). A crash at any moment leaves every
// committed checkpoint as it was. Only data-parallel rank 0 of each (tp, pp)
// position writes shards (the others hold the same values). Ranks must share
// the file system.
//
// Reading (launch/checkpoint/checkpoint_reader.cpp) verifies state.json's own checksum,
// each index file's, each file's size and each tensor's checksum as it is
// read; any failure is a DamagedCheckpoint naming the file and the tensor,
// and `--resume latest|auto` then falls back to the newest intact one
// (Trainer::resume). A rank reads the records of the tensors it holds, in
// whichever shard they are, and re-cuts tensor-parallel slices when the
// split differs (launch/checkpoint/tensor_slices.h): a resume may change tp, pp, dp,
// the ZeRO stage and sequence parallelism.
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
  nlohmann::json layout;          // tp, pp, dp, zero of the writing run (information)
  nlohmann::json optimizer;       // optimizer name and settings (null: AdamW, or a checkpoint from before)
  nlohmann::json lr_schedule;     // the learning-rate schedule it follows (null: a checkpoint from before it was recorded)
};

// A rank's own state that differs across data-parallel ranks, so the shards
// (written by dp rank 0 only) cannot hold it: 1-bit Adam's compression error
// buffers. Every rank writes rank_NNNNN_<tag>.bin (the raw f32 arrays) and
// rank_NNNNN_<tag>.json ({"rank", "meta", "arrays": [{name, count,
// byte_offset, xxh3}]}); state.json lists them under "rank_extras": {tag: [...]}.
// Such state is only meaningful in the layout that wrote it: `meta` records
// that layout and the reader compares it with its own.
struct RankArray {
  std::string name;
  std::vector<float> values;  // a copy: an asynchronous save writes it while training goes on
};
struct RankExtra {
  std::string tag;  // "onebit"
  nlohmann::json meta;
  std::vector<RankArray> arrays;
  const std::vector<float>* find(const std::string& name) const;  // null when absent
};

// A save that failed on every rank alike, after the ranks agreed on it: the
// same message everywhere, the temporary directory removed, the previous
// checkpoint untouched. Only this may be survived (Trainer::save_or_warn);
// any other error during a save is one rank's and aborts the job.
class CheckpointError : public engine::Error {
 public:
  using engine::Error::Error;
};
// A save refused because the state holds a NaN or infinity: a checkpoint
// every resume would trust must never hold one. Not survivable.
class NonFiniteStateError : public CheckpointError {
 public:
  using CheckpointError::CheckpointError;
};
// A checkpoint that fails its checks: a checksum, a truncated, missing or
// unreadable file, an index that is not what it should be. A resume from
// `latest` falls back to an older checkpoint; other load errors (another
// run's checkpoint, a model of another shape) stop the run.
class DamagedCheckpoint : public engine::Error {
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

// ---- writing (launch/checkpoint/checkpoint_writer.cpp) ------------------------------------

// What one rank's write produced, for the commit: its files' sizes and
// checksums, or why it failed.
struct RankFiles {
  std::string error;               // "" when every file was written
  bool nonfinite = false;          // refused: the state holds a NaN or infinity (error says where)
  std::string shard_index;         // "rank_00003.json" or ""
  std::string extra_index;         // "rank_00003_onebit.json" or ""
  std::string extra_tag;           // "onebit" or ""
  nlohmann::json files = nlohmann::json::object();  // name -> {"bytes", "xxh3"}
};

// Collective: makes <checkpoint_dir>/step_NNNNNNNN.tmp and returns its path;
// throws CheckpointError (on every rank) when it cannot.
std::string begin_checkpoint(const std::string& checkpoint_dir, std::int64_t step, parallel::Communicator& world);
// Local: writes this rank's part into `temp_dir` (no communication, so it may
// run on a background thread). Never throws: failures are in the result.
RankFiles write_rank_files(const std::string& temp_dir, const model::GptConfig& config,
                           const model::ParamRegistry& registry, const HostState& host, const ShardRole& role,
                           const RankExtra* extra) noexcept;
// Collective: commits the checkpoint every rank wrote its part of, then keeps
// the newest `keep` checkpoints (0: all). Returns the step directory. On a
// failure every rank throws the same CheckpointError (NonFiniteStateError
// when a rank refused its state), the temporary directory is removed and the
// previous checkpoint is untouched.
std::string commit_checkpoint(const std::string& checkpoint_dir, const TrainingState& state, const RankFiles& mine,
                              int keep, parallel::Communicator& world);
// The three in a row: a synchronous save.
std::string save_checkpoint(const std::string& checkpoint_dir, const TrainingState& state,
                            const model::GptConfig& config, const model::ParamRegistry& registry,
                            const HostState& host, const ShardRole& role, parallel::Communicator& world,
                            const RankExtra* extra = nullptr, int keep = 0);

// Deletes the oldest complete checkpoints (step_NNNNNNNN with a state.json)
// of `checkpoint_dir` older than `newest` (the one just committed) until
// `keep` remain counting `newest`, and temporary directories crashed saves
// left. Newer ones are left alone. Returns what it deleted. Rank 0 calls it
// after a commit.
std::vector<std::string> remove_old_checkpoints(const std::string& checkpoint_dir, int keep, const std::string& newest);

// ---- reading (launch/checkpoint/checkpoint_reader.cpp) ------------------------------------

// Where to look for a checkpoint to resume from, best first:
//   a directory path: just it (no fallback: the user named it);
//   "latest" / "auto": the step directory `latest` names, then every other
//   step_NNNNNNNN directory in checkpoint_dir, newest first. Garbage in
//   `latest`, or a `latest` naming a missing directory, adds a line to `notes`
//   and the scan goes on. Empty for "auto" with nothing saved yet; throws for
//   "latest" with nothing to resume from.
std::vector<std::string> resume_candidates(const std::string& resume, const std::string& checkpoint_dir,
                                           std::vector<std::string>& notes);

// Loads a step directory into `host`, verifying what it reads; throws
// DamagedCheckpoint when a check fails, and engine::Error if the
// checkpoint's run identity (model shape, batch, seed, data) differs from
// `expected_run`, naming each difference, or a tensor has another global
// shape.
TrainingState load_checkpoint(const std::string& step_dir, const nlohmann::json& expected_run,
                              const model::ParamRegistry& registry, const HostState& host);

// World rank `rank`'s RankExtra `tag` from a step directory (checksums
// verified); nullopt when the checkpoint has none for that rank (written
// without one, or by fewer ranks).
std::optional<RankExtra> load_rank_extra(const std::string& step_dir, const std::string& tag, int rank);

}  // namespace launch
