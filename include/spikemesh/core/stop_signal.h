// stop_signal.h (core) — SIGTERM / SIGUSR1 (Slurm --signal) ask a run to stop at its next safe
// point and exit 0 (docs/architecture.md §9): training finishes the step and checkpoints; an
// event import (data/import_events.h) finishes the round, whose progress is in its .tmp. The
// handler only records the signal; the loop polls stop_signal() and agrees on it over the ranks.
// Tests raise the real signal (std::raise(SIGUSR1)) after install_stop_signal_handlers().
#pragma once

namespace sm {

// Installs the handlers (and ignores SIGPIPE, so `spikemesh train | head` cannot kill a run
// mid-checkpoint). Idempotent.
void install_stop_signal_handlers();
// The signal number received since the last clear (0: none).
int stop_signal();
// Forgets a received signal (the start of a run that must not inherit an earlier one).
void clear_stop_request();

}  // namespace sm
