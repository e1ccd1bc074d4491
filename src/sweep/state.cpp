#include "sweep/state.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "util/file_writer.h"

namespace fs = std::filesystem;

namespace ft::sweep {

const char* to_string(Status s) {
  switch (s) {
    case Status::kPending:
      return "pending";
    case Status::kRunning:
      return "running";
    case Status::kFinished:
      return "finished";
    case Status::kFailed:
      return "failed";
    case Status::kInterrupted:
      return "interrupted";
    case Status::kPruned:
      return "pruned";
  }
  return "?";
}

std::optional<Status> parse_status(const std::string& s) {
  for (const Status st : {Status::kPending, Status::kRunning, Status::kFinished, Status::kFailed, Status::kInterrupted,
                          Status::kPruned}) {
    if (s == to_string(st)) return st;
  }
  return std::nullopt;
}

namespace {

// Fields read without json::value(), whose inlined string conversion GCC 12 flags as a null dereference at -O2.
std::string text_of(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get_ref<const std::string&>() : std::string();
}

double number_of(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

}  // namespace

TrialState read_state(const fs::path& trial_dir) {
  TrialState s;
  std::ifstream in(trial_dir / "trial.json");
  if (!in) return s;
  std::stringstream text;
  text << in.rdbuf();
  const auto j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return s;
  s.status = parse_status(text_of(j, "status")).value_or(Status::kPending);
  s.attempts = static_cast<int>(number_of(j, "attempts"));
  s.exit_code = static_cast<int>(number_of(j, "exit_code"));
  s.error = text_of(j, "error");
  s.wall_s = number_of(j, "wall_s");
  s.started = number_of(j, "started");
  s.host = text_of(j, "host");
  s.pid = static_cast<int>(number_of(j, "pid"));
  return s;
}

void write_state(const fs::path& trial_dir, const TrialState& s) {
  nlohmann::json j;
  j["status"] = to_string(s.status);
  j["attempts"] = s.attempts;
  j["exit_code"] = s.exit_code;
  j["error"] = s.error;
  j["wall_s"] = s.wall_s;
  j["started"] = s.started;
  j["host"] = s.host;
  j["pid"] = s.pid;
  fs::create_directories(trial_dir);
  write_file_atomic(trial_dir / "trial.json", j.dump(2) + "\n");
}

std::optional<FileLock> try_lock_trial(const fs::path& trial_dir) {
  fs::create_directories(trial_dir);
  return FileLock::try_lock(trial_dir / ".lock");
}

bool locked_elsewhere(const fs::path& trial_dir) {
  return locked_by_another(trial_dir / ".lock");
}

Status observed_status(const fs::path& trial_dir, const TrialState& state) {
  if (state.status == Status::kRunning && !locked_elsewhere(trial_dir)) return Status::kInterrupted;
  return state.status;
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace ft::sweep
