// crash_report.h (core) — one readable report when a rank dies of a fatal signal (SIGSEGV,
// SIGBUS, SIGILL, SIGFPE): which rank and host, the faulting address, the instruction and, as
// far as the stack can be walked, the calling functions, on stderr. A jump to a null or wild
// address (a call through a dead pointer) leaves no unwindable frame at the fault, so the
// report also names the return address at the top of the stack: the function that made the
// call. After the report the previous handler runs (MPI's own, then the default action), so
// the process still dies of the same signal and the launcher sees it as before.
// Invariants: the handler writes with write(2) only, from buffers prepared at install time
// (plus the C library's backtrace); it runs on an alternate stack on the installing thread,
// so a stack overflow there is reported too.
#pragma once

namespace sm {

// Installs the handlers for this process; call after MPI_Init (whose library may install its
// own, which then runs after the report). `where` names the process (where_am_i()). Idempotent.
void install_crash_report(const char* where);

}  // namespace sm
