// Rank-aware logging. spdlog lives behind this header (log.cpp never sees torch's fmt, see docs/platforms.md);
// callers format their message first, usually with FT_LOG_* from util/fmt.h.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace ft::log {

enum class Level { kTrace, kDebug, kInfo, kWarn, kError, kOff };

// Parses "trace|debug|info|warn|error|off"; nullopt for anything else.
std::optional<Level> parse_level(std::string_view name);

// Sets up the process-wide logger. In a multi-process run, rank 0 logs from `level` up, other ranks log
// warnings and errors only, each line prefixed with "[rank N]".
void init(Level level, int rank = 0, int world_size = 1);
void set_level(Level level);
Level level();
bool enabled(Level level);
int rank();

void write(Level level, std::string_view message);
inline void trace(std::string_view m) {
  write(Level::kTrace, m);
}
inline void debug(std::string_view m) {
  write(Level::kDebug, m);
}
inline void info(std::string_view m) {
  write(Level::kInfo, m);
}
inline void warn(std::string_view m) {
  write(Level::kWarn, m);
}
inline void error(std::string_view m) {
  write(Level::kError, m);
}

// A status line (a progress bar) kept at the bottom of stderr: drawn now, cleared before every console log line and
// drawn again after it, so log lines scroll above it (as tqdm's bar). An empty line removes it; end_status() leaves
// the last one on screen and moves to a new line.
void set_status(std::string_view line);
void end_status();
// The width of the terminal on stderr, asked anew at each call so that a status line follows resizes; $COLUMNS when
// stderr is no terminal, else 80.
int console_columns();

// Also writes every line to `path` (appending), e.g. <run_dir>/train.log.
void add_file_sink(const std::string& path);
// Writes `message` to the file sinks only (the console already shows it), e.g. the final error of a run.
void write_to_files(Level level, std::string_view message);

}  // namespace ft::log
