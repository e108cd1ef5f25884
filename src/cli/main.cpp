// `ferry`: one binary, one subcommand per job. Each subcommand lives in its own cmd_*.cpp.
#include <cstdio>
#include <exception>
#include <new>

#include "cli/commands.h"
#include "cli/tensor_parallel.h"

namespace {

int run(int argc, char** argv) {
    CLI::App app{"ferry: an LLM inference engine that shows where every millisecond and byte goes"};
    app.set_version_flag("--version", "ferry 0.1.0");
    app.require_subcommand(1);
    app.fallthrough(false);
    ferry::cli::add_run_command(app);
    ferry::cli::add_chat_command(app);
    ferry::cli::add_serve_command(app);
    ferry::cli::add_info_command(app);
    ferry::cli::add_plan_command(app);
    ferry::cli::add_bench_command(app);
    ferry::cli::add_quantize_command(app);
    ferry::cli::add_prune_command(app);
    ferry::cli::add_train_medusa_command(app);
    ferry::cli::add_synth_command(app);
    ferry::cli::add_eval_command(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    } catch (const ferry::cli::ExitError& e) {
        std::fprintf(stderr, "ferry: error: %s\n", e.what());
        return e.code;
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "ferry: error: out of memory\n");
        return 1;
    } catch (const std::exception& e) {
        // A last net: whatever a command did not turn into a message of its own still ends
        // as one line and a failing exit status, not std::terminate's abort.
        std::fprintf(stderr, "ferry: error: %s\n", e.what());
        return 1;
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    return ferry::cli::report_group_status(run(argc, argv));
}
