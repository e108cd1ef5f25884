#include "cli/interrupt.h"

#include <signal.h>

#include <csignal>

namespace ferry::cli::interrupt {
namespace {

volatile std::sig_atomic_t g_pending = 0;
struct sigaction g_previous {};

// A second Ctrl-C before the first was acted on (a long prompt still being read, say) ends
// the program the usual way.
void on_sigint(int) {
    if (g_pending) {
        signal(SIGINT, SIG_DFL);
        raise(SIGINT);
        return;
    }
    g_pending = 1;
}

}  // namespace

Catcher::Catcher() {
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: the terminal read must return to see the flag
    sigaction(SIGINT, &sa, &g_previous);
}

Catcher::~Catcher() {
    sigaction(SIGINT, &g_previous, nullptr);
}

bool pending() {
    return g_pending != 0;
}
void clear() {
    g_pending = 0;
}

}  // namespace ferry::cli::interrupt
