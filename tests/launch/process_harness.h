// Runs programs (train, mpirun, launch/supervise) as child processes for the
// fault tests: every wait is bounded, and a Child kills what it started (its
// process group and every descendant) when it goes out of scope, whatever
// the test's outcome.
#pragma once

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace test_support {

// The parent of `pid`, from /proc/PID/stat (0 if it is gone).
inline pid_t parent_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // "pid (comm) state ppid ...": comm may hold spaces, so parse after ')'.
  const std::size_t close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(text.substr(close + 1));
  std::string state;
  pid_t ppid = 0;
  rest >> state >> ppid;
  return ppid;
}

// Every live descendant of `root`.
inline std::vector<pid_t> descendants(pid_t root) {
  std::vector<pid_t> all;
  if (DIR* proc = opendir("/proc")) {
    while (dirent* entry = readdir(proc)) {
      const pid_t pid = static_cast<pid_t>(std::atoi(entry->d_name));
      if (pid > 0) all.push_back(pid);
    }
    closedir(proc);
  }
  std::vector<pid_t> found{root};
  for (bool grew = true; grew;) {
    grew = false;
    for (pid_t pid : all) {
      const pid_t parent = parent_of(pid);
      bool known = false, parent_known = false;
      for (pid_t f : found) {
        known = known || f == pid;
        parent_known = parent_known || f == parent;
      }
      if (!known && parent_known) {
        found.push_back(pid);
        grew = true;
      }
    }
  }
  found.erase(found.begin());
  return found;
}

// The descendant of `root` that is MPI rank `rank` (Open MPI sets
// OMPI_COMM_WORLD_RANK in every rank's environment), or 0.
inline pid_t find_rank(pid_t root, int rank) {
  const std::string wanted = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
  for (pid_t pid : descendants(root)) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/environ");
    std::string var;
    while (std::getline(in, var, '\0'))
      if (var == wanted) return pid;
  }
  return 0;
}

inline bool wait_until(const std::function<bool()>& condition, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return condition();
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class Child {
 public:
  // Starts argv[0] (searched in PATH) in its own process group, stdout and
  // stderr to files, with `env` ("NAME=value") added to the environment.
  Child(const std::vector<std::string>& argv, const std::string& out_path, const std::string& err_path,
        const std::vector<std::string>& env = {})
      : out_path_(out_path), err_path_(err_path) {
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      if (!freopen(out_path.c_str(), "w", stdout) || !freopen(err_path.c_str(), "w", stderr)) _exit(126);
      for (const std::string& var : env) putenv(strdup(var.c_str()));
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execvp(args[0], args.data());
      _exit(127);
    }
  }
  ~Child() { kill_all(); }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  std::string out() const { return read_text(out_path_); }
  std::string err() const { return read_text(err_path_); }

  // The exit code (128 + N when killed by signal N), or -1 if it is still
  // running after `seconds`.
  int wait(double seconds) {
    if (exit_code_ >= 0) return exit_code_;
    int status = 0;
    const bool ended = wait_until([&] { return waitpid(pid_, &status, WNOHANG) == pid_; }, seconds);
    if (!ended) return -1;
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return exit_code_;
  }

  void signal(int sig) const { ::kill(pid_, sig); }

  // SIGKILL to the process group and to every descendant (launch/supervise
  // starts its job in a session of its own), then reaps the child.
  void kill_all() {
    if (pid_ <= 0 || exit_code_ >= 0) return;  // reaped: its pid may belong to someone else now
    for (pid_t p : descendants(pid_)) ::kill(p, SIGKILL);
    ::killpg(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  int exit_code_ = -1;
  std::string out_path_, err_path_;
};

}  // namespace test_support
