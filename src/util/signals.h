// Graceful stop on SIGINT/SIGTERM: the first signal asks the training loop to finish its step and save;
// a second one exits at once with ExitCode::kInterrupted.
#pragma once

namespace ft::signals {

// Installs the handlers (idempotent), and ignores SIGPIPE (a dead peer's socket fails a collective with an error) and
// SIGXFSZ (a write past ulimit -f fails with EFBIG, reported like a full disk).
void install();
// True once SIGINT or SIGTERM has arrived.
bool stop_requested();
// The signal that asked for the stop, or 0.
int stop_signal();
// For tests: forget an earlier request.
void reset();

// For supervisors of child processes (the built-in launcher, `finetune sweep`): while a Catcher lives, SIGINT and
// SIGTERM are only recorded, never fatal, so the supervisor decides what each one means for its children (the
// first is forwarded so that they checkpoint, a second kills them). The previous handlers return on destruction.
// One Catcher at a time.
class Catcher {
 public:
  Catcher();
  ~Catcher();
  Catcher(const Catcher&) = delete;
  Catcher& operator=(const Catcher&) = delete;

  // The signal received since the last call (the latest one when several arrived), or 0; clears it.
  int take();
  // Signals received since construction.
  int count() const;
};

}  // namespace ft::signals
