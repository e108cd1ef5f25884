// `--plot FILE` for the bench commands: their JSON drawn by scripts/plot_bench.py (matplotlib,
// in the tools venv), as PNG or as an HTML page of figures and the numbers beside them.
#pragma once

#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace ferry::cli {

// Adds --plot to a bench command; the option's value is written to `file`.
void add_plot_option(CLI::App& cmd, std::string& file);

// Draws `results` (a bench's JSON, with its "bench" key) into `file` (.png, .svg, .pdf or
// .html). Throws ExitError naming what is missing when the plotter cannot run.
void write_plot(const nlohmann::json& results, const std::string& file);

}  // namespace ferry::cli
