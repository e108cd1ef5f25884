#include "core/progress.h"

#include <unistd.h>

#include <cstdio>

namespace ferry {

Progress::Progress(std::string label, int64_t total, bool enabled)
    : label_(std::move(label)),
      total_(total > 0 ? total : 1),
      enabled_(enabled),
      tty_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()) {
    if (enabled_ && !tty_) std::fprintf(stderr, "%s ...\n", label_.c_str());
}

Progress::~Progress() {
    finish();
}

void Progress::update(int64_t done) {
    if (!enabled_ || !tty_) return;
    const int percent = static_cast<int>(100 * done / total_);
    if (percent == last_percent_) return;
    last_percent_ = percent;
    constexpr int kWidth = 30;
    const int filled = percent * kWidth / 100;
    std::fprintf(stderr, "\r%s [%.*s%*s] %3d%%", label_.c_str(), filled,
                 "##############################", kWidth - filled, "", percent);
    std::fflush(stderr);
}

void Progress::finish() {
    if (!enabled_ || finished_) return;
    finished_ = true;
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    // On a terminal, clear the bar's line and replace it with the summary.
    std::fprintf(stderr, "%s%s done in %.2f s\n", tty_ ? "\r\033[K" : "", label_.c_str(), s);
}

}  // namespace ferry
