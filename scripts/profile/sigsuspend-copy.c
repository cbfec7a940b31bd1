/* Preloaded into a worker run under valgrind by scripts/profile-worker. valgrind 3.19 (Debian 12) writes into the
 * signal mask passed to sigsuspend, and libdispatch passes one in read-only memory: valgrind then dies of SIGSEGV
 * as the worker starts. This sigsuspend passes a copy on the stack to the real one. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>

int sigsuspend(const sigset_t *mask) {
    static int (*real)(const sigset_t *);
    sigset_t copy = *mask;
    if (!real) real = (int (*)(const sigset_t *))dlsym(RTLD_NEXT, "sigsuspend");
    return real(&copy);
}
