#include "util/signals.h"

#include <csignal>
#include <unistd.h>

#include <atomic>

#include "util/error.h"

namespace ft::signals {
namespace {

std::atomic<int> g_signal{0};
std::atomic<bool> g_installed{false};

extern "C" void on_signal(int sig) {
  if (g_signal.exchange(sig) != 0) {
    static const char kMsg[] = "\nfinetune: second signal, aborting now\n";
    (void)!write(STDERR_FILENO, kMsg, sizeof(kMsg) - 1);
    _exit(static_cast<int>(ExitCode::kInterrupted));
  }
}

}  // namespace

void install() {
  if (g_installed.exchange(true)) return;
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

bool stop_requested() { return g_signal.load() != 0; }
int stop_signal() { return g_signal.load(); }
void reset() { g_signal = 0; }

}  // namespace ft::signals
