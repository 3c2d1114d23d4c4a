// CrashTrace: the native stack of the thread that crashed, on stderr, before the process
// dies of the signal.
//
// Python's faulthandler prints the Python threads' stacks on a fatal signal, but when
// the faulting thread runs no Python (an engine thread, a torch or gloo thread), it
// names none of them as current and shows nothing of where the fault was. With
// InstallCrashTrace, a fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) first
// writes
//
//   headrace: fatal signal 11 (SIGSEGV) in thread 4242 at address 0x10; native stack:
//     #0 /path/libfoo.so+0x1a2b3 (exported_symbol+0x12)
//     ...
//
// (module and offset, resolvable offline with `addr2line -e MODULE OFFSET` on an
// unstripped build; the symbol where the module exports one), then hands the signal to
// the handler that was there before (faulthandler's, ASan's, or the default: the
// process still dies of it). `headrace` installs it at import when HEADRACE_CRASH_TRACE
// is set; the DDP trainer tests set it, since their rank processes are where a crash in
// CI left no trace.
//
// The handler writes with write(2) only, from a buffer on its stack; backtrace() and
// dladdr() are not on POSIX's async-signal-safe list but are what crash reporters use
// (backtrace is called once at install, so that its library is loaded before a crash).
#pragma once

namespace headrace {

// Installs the handler for the fatal signals (once; later calls do nothing).
void InstallCrashTrace();

}  // namespace headrace
