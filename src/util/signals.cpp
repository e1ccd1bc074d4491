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

std::atomic<int> g_caught{0};        // the Catcher's pending signal
std::atomic<int> g_caught_count{0};  // signals the Catcher received
struct sigaction g_old_int {}, g_old_term {};

extern "C" void on_caught(int sig) {
  g_caught.store(sig);
  g_caught_count.fetch_add(1);
}

}  // namespace

Catcher::Catcher() {
  g_caught.store(0);
  g_caught_count.store(0);
  struct sigaction action {};
  action.sa_handler = on_caught;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, &g_old_int);
  sigaction(SIGTERM, &action, &g_old_term);
}

Catcher::~Catcher() {
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
}

int Catcher::take() { return g_caught.exchange(0); }
int Catcher::count() const { return g_caught_count.load(); }

void install() {
  if (g_installed.exchange(true)) return;
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  // A write to a socket whose peer died (a rank of a lost node) then fails with EPIPE, which Gloo and the store client
  // raise as errors that name the lost ranks, instead of SIGPIPE killing this rank first (Python ignores it too).
  signal(SIGPIPE, SIG_IGN);
  // A write past the file-size limit (ulimit -f) then fails with EFBIG, which the writers report with the file and a
  // hint, leaving the previous checkpoint in place, instead of SIGXFSZ killing the run without a word.
  signal(SIGXFSZ, SIG_IGN);
}

bool stop_requested() { return g_signal.load() != 0; }
int stop_signal() { return g_signal.load(); }
void reset() { g_signal = 0; }

}  // namespace ft::signals
