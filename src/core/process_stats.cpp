#include "core/process_stats.h"

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace ferry {

namespace {

// A "Name:   1234 kB" line of /proc/self/status, in bytes (or the bare count for Threads).
int64_t status_field(const std::string& text, const char* name, bool kb) {
    const std::string key = std::string("\n") + name + ":";
    size_t at = text.find(key);
    if (at == std::string::npos) return 0;
    const int64_t v = std::strtoll(text.c_str() + at + key.size(), nullptr, 10);
    return kb ? v * 1024 : v;
}

}  // namespace

ProcessStats read_process_stats() {
    ProcessStats s;
    std::ifstream status("/proc/self/status");
    if (!status) return s;
    std::stringstream buf;
    buf << "\n" << status.rdbuf();
    const std::string text = buf.str();
    s.resident_bytes = status_field(text, "VmRSS", true);
    s.virtual_bytes = status_field(text, "VmSize", true);
    s.threads = status_field(text, "Threads", false);

    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
        ++s.open_fds;
    if (s.open_fds > 0) --s.open_fds;  // the directory listing's own descriptor
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) s.max_fds = static_cast<int64_t>(rl.rlim_cur);

    // /proc/self/stat: fields 14 and 15 are utime and stime, 22 the start time, in clock ticks
    // (the second field, the command name, may hold spaces: count from its closing paren).
    std::ifstream stat("/proc/self/stat");
    std::string line;
    std::getline(stat, line);
    const size_t paren = line.rfind(')');
    if (paren != std::string::npos) {
        std::istringstream fields(line.substr(paren + 2));
        std::string f;
        double utime = 0, stime = 0, start = 0;
        for (int i = 3; fields >> f; ++i) {
            if (i == 14) utime = std::strtod(f.c_str(), nullptr);
            if (i == 15) stime = std::strtod(f.c_str(), nullptr);
            if (i == 22) {
                start = std::strtod(f.c_str(), nullptr);
                break;
            }
        }
        const double hz = static_cast<double>(sysconf(_SC_CLK_TCK));
        s.cpu_seconds = (utime + stime) / hz;
        // Start time counts from boot: the boot time is now minus the uptime.
        std::ifstream up("/proc/uptime");
        double uptime = 0;
        if (up >> uptime) {
            const double now =
                std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
                    .count();
            s.start_time_unix = now - uptime + start / hz;
        }
    }
    s.ok = s.resident_bytes > 0;
    return s;
}

}  // namespace ferry
