// Each subcommand of `ferry` registers itself on the application; main only wires them.
#pragma once

#include <fstream>
#include <stdexcept>
#include <string>

#include <CLI/CLI.hpp>

#include "core/status.h"

namespace ferry::cli {

void add_run_command(CLI::App& app);
void add_chat_command(CLI::App& app);
void add_info_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_quantize_command(CLI::App& app);
void add_prune_command(CLI::App& app);
void add_train_medusa_command(CLI::App& app);
void add_synth_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_serve_command(CLI::App& app);
// Under `bench`: `bench throughput` (offline, through the engine), `bench serve` (over HTTP).
void add_bench_throughput_command(CLI::App& bench);
void add_bench_serve_command(CLI::App& bench);

// Thrown by a subcommand's callback to end the program with a one-line message; main turns it
// into "ferry: error: <message>" and the exit code.
struct ExitError : std::runtime_error {
    int code;
    explicit ExitError(const std::string& msg, int c = 1) : std::runtime_error(msg), code(c) {}
};

// An input file opened for reading, or exit with "<path>: is a directory" / "cannot be read".
std::ifstream open_or_exit(const std::string& path);
// The whole file as bytes (open_or_exit's errors).
std::string read_file_or_exit(const std::string& path);
// --request-rate: requests per second, 0 for "inf"; anything else not > 0 exits.
double parse_request_rate(const std::string& s);

// Unwraps an Expected or exits with its error message.
template <class T>
T take(Expected<T> e) {
    if (!e) throw ExitError(e.error().message);
    return std::move(e).value();
}

}  // namespace ferry::cli
