// The only translation unit that includes spdlog; it is compiled without torch's include directories.
#include "util/log.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <sys/ioctl.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace ft::log {
namespace {

std::atomic<Level> g_level{Level::kInfo};
std::mutex g_status_mutex;
std::string g_status;  // the status line on stderr, empty when none (guarded by g_status_mutex)
std::atomic<int> g_rank{0};
std::atomic<int> g_world{1};

spdlog::level::level_enum to_spdlog(Level level) {
  switch (level) {
    case Level::kTrace:
      return spdlog::level::trace;
    case Level::kDebug:
      return spdlog::level::debug;
    case Level::kInfo:
      return spdlog::level::info;
    case Level::kWarn:
      return spdlog::level::warn;
    case Level::kError:
      return spdlog::level::err;
    case Level::kOff:
      return spdlog::level::off;
  }
  return spdlog::level::info;
}

// The console pattern around `body`. On a terminal each line first returns to column 0 and clears it, so a log line
// replaces a progress bar drawn there (metrics/metrics.cpp) instead of being appended to it.
std::string console_pattern(const std::string& body) {
  static const bool tty = ::isatty(STDERR_FILENO) == 1;
  return (tty ? "\r\033[K" : "") + body;
}

std::shared_ptr<spdlog::logger>& logger() {
  static std::shared_ptr<spdlog::logger> instance = [] {
    auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    auto l = std::make_shared<spdlog::logger>("finetune", sink);
    l->set_pattern(console_pattern("%^[%H:%M:%S %L]%$ %v"));
    l->set_level(spdlog::level::trace);
    l->flush_on(spdlog::level::info);
    return l;
  }();
  return instance;
}

}  // namespace

std::optional<Level> parse_level(std::string_view name) {
  if (name == "trace") return Level::kTrace;
  if (name == "debug") return Level::kDebug;
  if (name == "info") return Level::kInfo;
  if (name == "warn" || name == "warning") return Level::kWarn;
  if (name == "error") return Level::kError;
  if (name == "off") return Level::kOff;
  return std::nullopt;
}

void init(Level level, int rank, int world_size) {
  g_rank = rank;
  g_world = world_size;
  set_level(level);
  if (world_size > 1) {
    logger()->set_pattern(console_pattern("%^[%H:%M:%S %L]%$ [rank " + std::to_string(rank) + "] %v"));
  }
}

void set_level(Level level) {
  // Ranks other than 0 report warnings and errors only.
  if (g_rank.load() != 0 && level < Level::kWarn) level = Level::kWarn;
  g_level = level;
}

Level level() {
  return g_level.load();
}
bool enabled(Level l) {
  return l >= g_level.load() && l != Level::kOff;
}
int rank() {
  return g_rank.load();
}

void write(Level l, std::string_view message) {
  if (!enabled(l)) return;
  const std::lock_guard<std::mutex> lock(g_status_mutex);
  if (!g_status.empty()) std::fputs("\r\033[K", stderr);  // a terminal's pattern clears too; a pipe needs it here
  logger()->log(to_spdlog(l), "{}", message);
  if (!g_status.empty()) {
    std::fputs(g_status.c_str(), stderr);
    std::fflush(stderr);
  }
}

void set_status(std::string_view line) {
  const std::lock_guard<std::mutex> lock(g_status_mutex);
  g_status.assign(line);
  // \r returns to column 0, \033[K clears what a longer previous line left behind.
  std::fprintf(stderr, "\r%s\033[K", g_status.c_str());
  std::fflush(stderr);
}

void end_status() {
  const std::lock_guard<std::mutex> lock(g_status_mutex);
  if (g_status.empty()) return;
  std::fputc('\n', stderr);
  std::fflush(stderr);
  g_status.clear();
}

int console_columns() {
  winsize size{};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  if (const char* columns = std::getenv("COLUMNS")) {
    const int n = std::atoi(columns);
    if (n > 0) return n;
  }
  return 80;
}

void write_to_files(Level level, std::string_view message) {
  auto& l = *logger();
  if (l.sinks().size() <= 1) return;  // sink 0 is the console
  const spdlog::details::log_msg msg(l.name(), to_spdlog(level), spdlog::string_view_t(message.data(), message.size()));
  for (size_t i = 1; i < l.sinks().size(); ++i) {
    l.sinks()[i]->log(msg);
    l.sinks()[i]->flush();
  }
}

void add_file_sink(const std::string& path) {
  auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, /*truncate=*/false);
  sink->set_pattern("[%Y-%m-%d %H:%M:%S.%e %L] %v");
  logger()->sinks().push_back(sink);
}

}  // namespace ft::log
