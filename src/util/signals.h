// Graceful stop on SIGINT/SIGTERM: the first signal asks the training loop to finish its step and save;
// a second one exits at once with ExitCode::kInterrupted.
#pragma once

namespace ft::signals {

// Installs the handlers (idempotent).
void install();
// True once SIGINT or SIGTERM has arrived.
bool stop_requested();
// The signal that asked for the stop, or 0.
int stop_signal();
// For tests: forget an earlier request.
void reset();

}  // namespace ft::signals
