#include "tokenizer_test_util.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace ft::tok::test {

namespace fs = std::filesystem;

std::string python() {
  const char* env = std::getenv("FT_PYTHON");
  return env != nullptr && *env != '\0' ? env : FT_TEST_PYTHON;
}

fs::path source_dir() {
  const char* env = std::getenv("FT_SOURCE_DIR");
  return env != nullptr && *env != '\0' ? fs::path(env) : fs::path(FT_TEST_SOURCE_DIR);
}

int run(const std::string& command) {
  const int rc = std::system(command.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

namespace {

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct TempDirs {
  std::vector<fs::path> dirs;
  ~TempDirs() {
    std::error_code ec;
    for (const auto& d : dirs) fs::remove_all(d, ec);
  }
};
TempDirs& temp_dirs() {
  static TempDirs t;
  return t;
}

fs::path g_refs_dir;

// Versions of the reference packages, part of the cache key (a re-pinned package must regenerate the refs).
std::string package_versions() {
  const std::string cmd = "\"" + python() +
                          "\" -c \"import importlib.metadata as m\n"
                          "for p in ('tokenizers', 'tiktoken', 'mistral-common', 'llama-models', 'transformers', "
                          "'sentencepiece'):\n"
                          "    try: print(p, m.version(p))\n"
                          "    except Exception: print(p, None)\" 2>&1";
  std::string out;
  if (FILE* f = ::popen(cmd.c_str(), "r")) {
    char buf[256];
    while (std::fgets(buf, sizeof(buf), f) != nullptr) out += buf;
    ::pclose(f);
  }
  return out;
}

}  // namespace

fs::path temp_dir(const std::string& tag) {
  static int counter = 0;
  fs::path d =
      fs::temp_directory_path() / ("ft_tok_" + tag + "_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
  fs::remove_all(d);
  fs::create_directories(d);
  temp_dirs().dirs.push_back(d);
  return d;
}

void write_file(const fs::path& p, const std::string& content) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << content;
}

// ctest runs every case in its own process, so the (1-2 s) reference run is cached per script version in the
// build tree; a new script or Python gives a new key, so a stale cache is never compared against.
const nlohmann::json& refs() {
  static std::once_flag once;
  static nlohmann::json data;
  std::call_once(once, [] {
    const fs::path script = source_dir() / "tests/tokenizer/ref/make_refs.py";
    const std::string key =
        std::to_string(std::hash<std::string>{}(read(script) + "\n" + python() + "\n" + package_versions()));
    const fs::path base = fs::path(FT_TEST_BINARY_DIR) / "refs";
    g_refs_dir = base / key;
    fs::create_directories(base);
    // ctest -j runs several cases at once: one generates, the others wait for it on this lock.
    const int lock = ::open((base / "lock").c_str(), O_CREAT | O_RDWR, 0644);
    if (lock >= 0) ::flock(lock, LOCK_EX);
    if (!fs::exists(g_refs_dir / "refs.json")) {
      const fs::path tmp = base / (key + ".tmp" + std::to_string(getpid()));
      fs::remove_all(tmp);
      fs::create_directories(tmp);
      const std::string cmd = "\"" + python() + "\" \"" + script.string() + "\" \"" + tmp.string() + "\"";
      if (run(cmd) != 0) throw std::runtime_error("reference script failed: " + cmd);
      std::error_code ec;
      fs::rename(tmp, g_refs_dir, ec);  // another test process may have won the race: use its copy
      if (ec) fs::remove_all(tmp);
      for (const auto& entry : fs::directory_iterator(base)) {  // outputs of older script versions
        if (entry.is_directory() && entry.path() != g_refs_dir &&
            entry.path().filename().string().find(".tmp") == std::string::npos) {
          fs::remove_all(entry.path(), ec);
        }
      }
    }
    if (lock >= 0) ::close(lock);  // releases the flock
    data = nlohmann::json::parse(read(g_refs_dir / "refs.json"));
  });
  return data;
}

fs::path refs_dir() {
  refs();
  return g_refs_dir;
}

}  // namespace ft::tok::test
