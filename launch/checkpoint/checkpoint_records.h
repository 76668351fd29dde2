// What a checkpoint's JSON files say (launch/checkpoint/checkpoint.h has the
// format), every field validated before the reader uses it. A checkpoint
// folder is untrusted input, and its checksums catch accidents, not someone
// who recomputes them: this validation is what makes a folder safe to load.
// Every file name must stay inside the folder (launch/formats/untrusted_files.h),
// every number must be an integer of the right range (a float, 2^32 or -1
// is not a rank), every split must fit its shapes (a rank at or past its
// count wrote past a heap buffer, `parts: 0` divided by zero) and every
// slice must lie inside its file's written size, all before a byte is read.
// A failed check is a DamagedCheckpoint of one line naming the folder, the
// file, the record and the field.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "launch/checkpoint/checkpoint.h"
#include "launch/checkpoint/tensor_slices.h"
#include "launch/formats/untrusted_values.h"

namespace launch::checkpoint_records {

// Throws DamagedCheckpoint with `parts` streamed together, made printable
// (launch/formats/untrusted_values.h): a message that quotes a damaged file
// goes to a JSON log too, whose serializer throws on invalid UTF-8, and must
// stay one line.
template <typename... Parts>
[[noreturn]] void damaged(const Parts&... parts) {
  std::ostringstream message;
  (message << ... << parts);
  throw DamagedCheckpoint(printable_text(message.str()));
}

struct FileEntry {
  std::uint64_t bytes = 0;
  std::string xxh3;
};

// state.json's fields, checked (its format and checksum are checked first,
// by the reader).
struct StateRecord {
  std::int64_t step = 0;
  std::int64_t optimizer_steps = -1;
  std::string sampler_rng;
  nlohmann::json run, layout, optimizer, lr_schedule;
  std::vector<std::string> shards;                                // shard index names
  std::map<std::string, FileEntry> files;                         // every file, each inside the folder
  std::map<std::string, std::vector<std::string>> rank_extras;    // tag -> index names
  std::string step_dir;                                           // the folder they are in
  // The entry of `name`, a file that what `where` describes names;
  // damaged() when the name leads out of the folder or state.json does not
  // list it.
  const FileEntry& file(const std::string& name, const std::string& where) const;
};
StateRecord parse_state(const nlohmann::json& state, const std::string& step_dir);

// One tensor slice of a shard index.
struct TensorRecord {
  SliceRecord slice;
  std::string file;
  std::int64_t byte_offset = 0;
  std::string xxh3;
};
// The records of shard index `index_name`, each checked.
std::vector<TensorRecord> parse_shard_index(const nlohmann::json& index, const std::string& index_name,
                                            const StateRecord& state, const std::string& step_dir);

// A rank extra's index (RankExtra in checkpoint.h), checked.
struct ArrayRecord {
  std::string name;
  std::int64_t count = 0;
  std::int64_t byte_offset = 0;
  std::string xxh3;
};
struct ExtraIndex {
  std::int64_t rank = 0;
  std::string tag;
  std::string file;
  nlohmann::json meta;
  std::vector<ArrayRecord> arrays;
};
ExtraIndex parse_extra_index(const nlohmann::json& index, const std::string& index_name, const StateRecord& state,
                             const std::string& step_dir);

}  // namespace launch::checkpoint_records
