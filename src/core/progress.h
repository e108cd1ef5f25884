// A progress bar on stderr for long work (model load, quantization, benches). On a terminal
// it redraws one line; otherwise it prints a line at the start and one at the end, so logs
// stay readable.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace ferry {

class Progress {
  public:
    Progress(std::string label, int64_t total, bool enabled = true);
    ~Progress();
    void update(int64_t done);
    void finish();

  private:
    std::string label_;
    int64_t total_;
    bool enabled_, tty_, finished_ = false;
    int last_percent_ = -1;
    std::chrono::steady_clock::time_point start_;
};

}  // namespace ferry
