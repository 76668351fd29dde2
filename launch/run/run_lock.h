// One job per run folder: two jobs started on the same --run-dir would both
// append to its metrics, rewrite its config and save into its checkpoints;
// a --checkpoint-dir outside a run folder is locked the same way.
// Rank 0 takes an advisory lock (flock) on DIR/run.lock before anything of
// the run is written and holds it for the life of the job; the file names
// the holder (host and pid) for the refusal a second job prints. The kernel
// drops the lock when the holder exits, however it ends, so a lock file left
// behind by a finished or killed job blocks nothing. (flock is per host on
// some network file systems; jobs on two hosts are then not told apart.)
#pragma once

#include <string>

namespace launch {

class RunFolderLock {
 public:
  // Creates `folder` if needed and locks it; throws engine::Error naming
  // the flag, the folder and the holder ("host h pid 1234") when another
  // job holds it. `flag`: the option that named the folder, "--run-dir", or
  // "--checkpoint-dir" for a checkpoint folder outside any run folder (two
  // jobs saving into one would overwrite each other's checkpoints).
  explicit RunFolderLock(const std::string& folder, const std::string& flag = "--run-dir");
  // A --log-file outside any run folder: two jobs appending to one metrics
  // file would interleave their steps. The lock is FILE.lock beside it (the
  // metrics file itself holds only JSON lines, not the holder's name).
  static RunFolderLock for_file(const std::string& file, const std::string& flag);
  ~RunFolderLock();
  RunFolderLock(RunFolderLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  RunFolderLock(const RunFolderLock&) = delete;
  RunFolderLock& operator=(const RunFolderLock&) = delete;

  static constexpr const char* kFileName = "run.lock";
  static constexpr const char* kFileSuffix = ".lock";

 private:
  RunFolderLock() = default;
  // Locks `lock_path`, which guards `what` (named as the flag gave it).
  void lock(const std::string& lock_path, const std::string& what, const std::string& flag);
  int fd_ = -1;
};

}  // namespace launch
