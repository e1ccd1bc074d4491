// Child processes of the supervisors (the built-in launcher, `finetune sweep`): starting one in its own process
// group that dies with its parent, its environment, and how it ended, in words.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace ft::process {

// This process's environment with `set` applied: entries of those names replaced, the others appended.
std::vector<std::string> environment(const std::map<std::string, std::string>& set);

// Starts `executable` with `argv` (argv[0] first) and the environment `env` ("KEY=value"). The child runs in its
// own process group (a terminal's Ctrl-C reaches the parent alone, which forwards it) and gets SIGKILL when the
// parent dies, even by SIGKILL. Its stdout and stderr go to `stdout_fd` / `stderr_fd` (-1: inherited); the
// parent's other descriptors should be close-on-exec. Throws ft::Error when fork fails; a failed exec makes the
// child exit with 127 after writing a line to its stderr.
pid_t spawn(const std::string& executable, const std::vector<std::string>& argv, const std::vector<std::string>& env,
            int stdout_fd = -1, int stderr_fd = -1);

// "exited with code 3", "was killed by signal 9 (Killed)" for a waitpid() status.
std::string describe_status(int status);
// The exit code a shell would report: the code, or 128 + the signal.
int exit_code(int status);
// True when the status is anything but a clean exit with code 0.
bool failed(int status);

// True when `line` looks like an error message ("error" in any case, or "terminate called").
bool mentions_error(const std::string& line);
// The last line of `text` that mentions_error(), else its last non-blank line; "" for blank text.
std::string last_error_line(const std::string& text);

// Writes all of `text` to `fd`, retrying after EINTR; gives up silently when the descriptor is gone.
void write_all(int fd, const std::string& text);

// Seconds since this process started (since its static objects were initialised, before main).
double seconds_since_start();

}  // namespace ft::process
