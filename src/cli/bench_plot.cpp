#include "cli/bench_plot.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include <fmt/format.h>

#include "cli/commands.h"

namespace ferry::cli {
namespace {

namespace fs = std::filesystem;

// The repository the plotting script lives in: $FERRY_SOURCE_DIR, the executable's parent
// (build/ferry in the source tree), then the working directory.
fs::path repo_root() {
    std::vector<fs::path> candidates;
    if (const char* src = std::getenv("FERRY_SOURCE_DIR")) candidates.emplace_back(src);
    std::error_code ec;
    const auto exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) candidates.push_back(exe.parent_path().parent_path());
    candidates.push_back(fs::current_path(ec));
    for (const auto& c : candidates)
        if (fs::is_regular_file(c / "scripts/plot_bench.py", ec)) return c;
    throw ExitError(
        "--plot: scripts/plot_bench.py was not found (run from the repository, or set "
        "FERRY_SOURCE_DIR)");
}

}  // namespace

void add_plot_option(CLI::App& cmd, std::string& file) {
    cmd.add_option("--plot", file,
                   "also draw the results into FILE: .png / .svg / .pdf figures, or .html (the "
                   "figures and the numbers in one page); needs matplotlib (the tools venv, "
                   "`make venv`, or $FERRY_PYTHON)")
        ->check([](const std::string& f) -> std::string {
            for (const char* ext : {".png", ".svg", ".pdf", ".html"})
                if (f.size() > std::strlen(ext) &&
                    f.compare(f.size() - std::strlen(ext), std::strlen(ext), ext) == 0)
                    return "";
            return "--plot: FILE must end in .png, .svg, .pdf or .html";
        });
}

void write_plot(const nlohmann::json& results, const std::string& file) {
    const fs::path root = repo_root();
    std::string python = "python3";
    if (const char* p = std::getenv("FERRY_PYTHON"))
        python = p;
    else if (std::error_code ec; fs::is_regular_file(root / ".venv/bin/python", ec))
        python = (root / ".venv/bin/python").string();
    // The results go through a file: a big serve run's per-request rows do not fit argv.
    char tmpl[] = "/tmp/ferry-plot-XXXXXX";
    const int fd = mkstemp(tmpl);
    if (fd < 0) throw ExitError("--plot: cannot create a temporary file");
    close(fd);
    {
        std::ofstream out(tmpl);
        out << results.dump();
        if (!out) {
            std::remove(tmpl);
            throw ExitError("--plot: cannot write the temporary results file");
        }
    }
    const std::string script = (root / "scripts/plot_bench.py").string();
    const pid_t pid = fork();
    if (pid == 0) {
        execlp(python.c_str(), python.c_str(), script.c_str(), tmpl, "-o", file.c_str(),
               static_cast<char*>(nullptr));
        std::fprintf(stderr, "--plot: cannot run %s\n", python.c_str());
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) < 0) status = -1;
    std::remove(tmpl);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        throw ExitError(fmt::format(
            "--plot: {} {} failed (exit {}); it needs matplotlib: `make venv`, or point "
            "FERRY_PYTHON at a Python that has it",
            python, script, WIFEXITED(status) ? WEXITSTATUS(status) : -1));
}

}  // namespace ferry::cli
