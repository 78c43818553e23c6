/* LD_PRELOAD helper for scripts/probes/cuda_error_probe.py --native-backtrace: on SIGSEGV / SIGBUS / SIGABRT,
 * prints the fault address and the native call stack (glibc backtrace_symbols_fd: exported symbol names and
 * offsets; resolve the rest with addr2line against the mapping), then dies of the signal as before.
 * Build: cc -shared -fPIC -O1 -g -o segv_backtrace.so segv_backtrace.c */
#define _GNU_SOURCE
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void on_fatal(int sig, siginfo_t* info, void* ctx) {
  (void)ctx;
  void* frames[64];
  char head[160];
  int n = snprintf(head, sizeof head, "\n[segv_backtrace] signal %d (%s), address %p\n", sig, strsignal(sig),
                   info ? info->si_addr : NULL);
  if (n > 0) (void)!write(2, head, (size_t)n);
  int depth = backtrace(frames, 64);
  backtrace_symbols_fd(frames, depth, 2);
  signal(sig, SIG_DFL);
  raise(sig);
}

__attribute__((constructor)) static void install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fatal;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, NULL);
  sigaction(SIGBUS, &sa, NULL);
  sigaction(SIGABRT, &sa, NULL);
}
