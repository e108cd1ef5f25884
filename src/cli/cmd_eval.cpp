// `ferry eval -m MODEL [--ref REF] [--text FILE] [--tasks FILE]`: perplexity, and against a
// reference model the KL divergence, top-1 agreement and largest logit difference, on the same
// tokens; with --tasks, greedy answers to short prompts (eval/task_eval.h); with --stream, the
// text as one sequence through the serving engine, under KV eviction if asked
// (eval/stream_eval.h).
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/kv_options.h"
#include "cli/model_options.h"
#include "cli/tensor_parallel.h"
#include "core/paths.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "engine/loaded_model.h"
#include "eval/evaluator.h"
#include "eval/stream_eval.h"
#include "eval/task_eval.h"

namespace ferry::cli {
namespace {

struct EvalCmdOptions {
    std::string model = "default";
    std::string ref;
    std::string text;
    std::string tasks;
    bool task_items = false;
    int ctx = 512;
    bool ctx_given = false;
    int stride = 0;
    int threads = 0;
    int64_t max_tokens = 0;
    bool json = false;
    KvDTypeOption kv_dtype{"f32"};  // of the model under test; --ref keeps f32
    ActivationsOption activations;  // for both models (a float --ref is not affected)
    DeviceOption device;            // both models on it
    bool stream = false;            // one sequence through the engine (stream_eval.h)
    int chunk = 64;                 // --stream: tokens per step
    KvEvictionOption kv_eviction;
    // The model under test split over ranks (the reference stays whole, on rank 0).
    TensorParallelOptions parallel;
};

// --stream: the text as one sequence through the serving engine.
void eval_stream(const EvalCmdOptions& o, const engine::LoadedModel& lm,
                 std::span<const int32_t> tokens) {
    engine::EngineConfig c;
    c.max_model_len = o.ctx_given ? o.ctx : lm.model->config().n_ctx_train;
    c.max_num_batched_tokens = o.chunk;
    c.prefill_chunk_while_decoding = 0;
    c.prefix_cache = false;
    c.kv_dtype = o.kv_dtype.resolved();
    c.kv_eviction = o.kv_eviction.resolved();
    const auto n = static_cast<int64_t>(tokens.size());
    Progress bar("eval", n, !o.json);
    auto r = take(eval::evaluate_stream(
        lm, tokens, c, [&](int64_t done, int64_t) { bar.update(std::min(done, n)); }));
    bar.finish();
    const double kv_mib = static_cast<double>(r.peak_kv_blocks) *
                          static_cast<double>(r.kv_bytes_per_block) / 1048576.0;
    nlohmann::json j = {
        {"model", lm.path},
        {"text", o.text},
        {"mode", "stream"},
        {"chunk", o.chunk},
        {"context", c.max_model_len},
        {"tokens", r.n_tokens},
        {"scored_tokens", r.n_scored},
        {"nll", r.nll},
        {"perplexity", r.perplexity},
        {"kv_dtype", o.kv_dtype.name},
        {"kv_eviction", engine::kv_eviction_name(c.kv_eviction.kind)},
        {"kv_budget", c.kv_eviction.budget},
        {"kv_sink", c.kv_eviction.sink_tokens},
        {"evicted_tokens", r.evicted_tokens},
        {"peak_kv_blocks", r.peak_kv_blocks},
        {"block_size", r.block_size},
        {"peak_kv_mib", kv_mib},
        {"seconds", r.seconds},
        {"tokens_per_s", static_cast<double>(r.n_tokens) / r.seconds},
    };
    if (o.json) {
        std::printf("%s\n", j.dump(2).c_str());
        return;
    }
    std::printf("model       %s\n", lm.path.c_str());
    std::printf("tokens      %lld scored of %lld, as one sequence in chunks of %d\n",
                static_cast<long long>(r.n_scored), static_cast<long long>(r.n_tokens), o.chunk);
    if (c.kv_eviction.on())
        std::printf("eviction    %s: budget %d tokens, %d sink token(s); %llu tokens evicted\n",
                    engine::kv_eviction_name(c.kv_eviction.kind), c.kv_eviction.budget,
                    c.kv_eviction.sink_tokens, static_cast<unsigned long long>(r.evicted_tokens));
    std::printf("perplexity  %.4f\n", r.perplexity);
    std::printf("KV held     %lld blocks of %d tokens at most (%.1f MiB, %s)\n",
                static_cast<long long>(r.peak_kv_blocks), r.block_size, kv_mib,
                o.kv_dtype.name.c_str());
    std::printf("speed       %.1f tokens/s\n", static_cast<double>(r.n_tokens) / r.seconds);
}

std::string resolve_tasks_path(const std::string& spec) {
    if (spec == "default") return take(find_data_file("eval/tasks.jsonl"));
    return spec;
}

struct TaskFile {
    std::string path;
    std::vector<eval::EvalTask> tasks;
};

// Runs the task file and returns its "tasks" JSON, printing the table unless json.
nlohmann::json eval_tasks(const EvalCmdOptions& o, const TaskFile& tf,
                          const engine::LoadedModel& lm, const engine::LoadedModel* ref) {
    const std::string& path = tf.path;
    const auto& tasks = tf.tasks;
    Progress bar("tasks", 1000, !o.json);
    auto r = take(eval::run_tasks(lm, ref, tasks, [&](int done, int total) {
        bar.update(static_cast<int64_t>(done) * 1000 / total);
    }));
    bar.finish();
    nlohmann::json j = eval::task_eval_json(r, o.task_items);
    j["file"] = path;
    if (!o.json) {
        std::printf("tasks       %s (%d tasks, %d with an answer)\n", path.c_str(), r.overall.n,
                    r.overall.n_scored);
        std::fputs(eval::task_eval_table(r).c_str(), stdout);
    }
    return j;
}

void eval(const EvalCmdOptions& o) {
    // The task file is checked before anything slow runs, so a typo fails at once.
    std::optional<TaskFile> tf;
    if (!o.tasks.empty()) {
        tf.emplace();
        tf->path = resolve_tasks_path(o.tasks);
        tf->tasks = take(eval::load_tasks(tf->path));
    }
    // Both models on one backend: one thread pool, one activation mode. The ranks of a split
    // model on one machine share its cores.
    const int ranks = o.parallel.ranks();
    const int threads =
        o.threads == 0 && ranks > 1 ? std::max(1, physical_core_count() / ranks) : o.threads;
    const auto backend = o.device.backend(resolve_threads(threads), o.activations, ranks);
    const std::string path = take(resolve_model_path(o.model));
    const auto group = o.parallel.join(path);
    auto lm = take(engine::LoadedModel::load(path, false, backend, std::nullopt, group));
    follow_if_not_rank0(lm);  // the other ranks run rank 0's forward passes, then exit
    std::optional<engine::LoadedModel> ref;
    if (!o.ref.empty())
        ref = take(engine::LoadedModel::load(take(resolve_model_path(o.ref)), false, backend));
    if (o.text.empty()) {
        nlohmann::json j = {{"model", lm.path}};
        if (ref) j["ref"] = ref->path;
        if (!o.json) std::printf("model       %s\n", lm.path.c_str());
        j["tasks"] = eval_tasks(o, *tf, lm, ref ? &*ref : nullptr);
        if (o.json) std::printf("%s\n", j.dump(2).c_str());
        return;
    }

    // Both models are scored on the model's tokenization; a reference with another
    // vocabulary would make the comparison meaningless, so evaluate() refuses it.
    std::vector<int32_t> tokens = lm.tokenizer->encode(read_file_or_exit(o.text), true);
    if (o.max_tokens > 0 && static_cast<int64_t>(tokens.size()) > o.max_tokens)
        tokens.resize(static_cast<size_t>(o.max_tokens));
    if (o.stream) return eval_stream(o, lm, tokens);

    eval::EvalOptions opt;
    opt.kv_format = o.kv_dtype.format(lm);
    opt.ctx = o.ctx;
    opt.stride = o.stride > 0 ? o.stride : o.ctx / 2;
    opt.backend = backend;
    Progress bar("eval", 1000, !o.json);
    auto r = take(eval::evaluate(
        *lm.model, ref ? ref->model.get() : nullptr, tokens, opt,
        [&](int done, int total) { bar.update(static_cast<int64_t>(done) * 1000 / total); }));
    bar.finish();

    nlohmann::json j = {
        {"model", lm.path},
        {"text", o.text},
        {"ctx", opt.ctx},
        {"stride", opt.stride},
        {"tokens", r.n_tokens},
        {"scored_tokens", r.n_scored},
        {"windows", r.n_windows},
        {"nll", r.nll},
        {"perplexity", r.perplexity},
        {"kv_dtype", o.kv_dtype.name},
    };
    if (r.has_ref) {
        j["ref"] = ref->path;
        j["ref_perplexity"] = r.ref_perplexity;
        j["delta_ppl_percent"] = 100.0 * (r.perplexity / r.ref_perplexity - 1.0);
        j["kl_mean"] = r.kl_mean;
        j["kl_p99"] = r.kl_p99;
        j["top1_agreement"] = r.top1_agreement;
        j["max_abs_logit_diff"] = r.max_abs_logit_diff;
    }
    if (tf && o.json) j["tasks"] = eval_tasks(o, *tf, lm, ref ? &*ref : nullptr);
    if (o.json) {
        std::printf("%s\n", j.dump(2).c_str());
        return;
    }
    std::printf("model       %s\n", lm.path.c_str());
    std::printf("tokens      %lld scored of %lld (ctx %d, stride %d, %d windows)\n",
                static_cast<long long>(r.n_scored), static_cast<long long>(r.n_tokens), opt.ctx,
                opt.stride, r.n_windows);
    std::printf("perplexity  %.4f\n", r.perplexity);
    if (r.has_ref) {
        std::printf("reference   %s (perplexity %.4f, ΔPPL %+.2f %%)\n", ref->path.c_str(),
                    r.ref_perplexity, 100.0 * (r.perplexity / r.ref_perplexity - 1.0));
        std::printf("KL mean     %.6f nats (p99 %.6f)\n", r.kl_mean, r.kl_p99);
        std::printf("top-1       %.2f %%\n", 100.0 * r.top1_agreement);
        std::printf("max |Δlogit| %.4f\n", r.max_abs_logit_diff);
    }
    if (tf) eval_tasks(o, *tf, lm, ref ? &*ref : nullptr);
}

}  // namespace

void add_eval_command(CLI::App& app) {
    auto o = std::make_shared<EvalCmdOptions>();
    auto* cmd = app.add_subcommand("eval",
                                   "Perplexity of a model on a text, and its divergence "
                                   "from a reference model");
    cmd->add_option("-m,--model", o->model, "Model: a GGUF path or 'default'");
    o->parallel.add_to(*cmd);
    cmd->add_option("--ref", o->ref, "Reference model to compare against (same vocabulary)");
    cmd->add_option("--text", o->text, "Text file to evaluate on (e.g. data/eval/*.txt)");
    cmd->add_option("--tasks", o->tasks,
                    "JSONL task file scored by greedy answers ('default': "
                    "data/eval/tasks.jsonl; format in docs/eval.md)");
    cmd->add_flag("--task-items", o->task_items,
                  "With --json, list every task's output under tasks.items");
    auto* ctx = cmd->add_option("--ctx", o->ctx,
                                "Window length in tokens (--stream: the engine's context; "
                                "default the model's trained one)")
                    ->check(CLI::Range(2, 1 << 20));
    cmd->add_flag("--stream", o->stream,
                  "Score the text as one sequence through the serving engine "
                  "(chunked prefill, the KV cache and --kv-eviction as served)");
    auto* chunk = cmd->add_option("--chunk", o->chunk, "--stream: tokens per engine step")
                      ->capture_default_str()
                      ->check(CLI::Range(1, 1 << 16));
    o->kv_eviction.add_to(*cmd);
    o->kv_dtype.add_to(*cmd);
    o->activations.add_to(*cmd);
    o->device.add_to(*cmd);
    auto* stride =
        cmd->add_option("--stride", o->stride, "Window advance in tokens (default: ctx / 2)")
            ->check(CLI::Range(1, 1 << 24));
    cmd->add_option("--max-tokens", o->max_tokens, "Score only the first N tokens of the text")
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
    cmd->add_option("-t,--threads", o->threads, "Threads (default: physical cores)")
        ->check(CLI::Range(0, 1024));
    cmd->add_flag("--json", o->json, "Print the results as JSON");
    cmd->callback([o, ctx, chunk, stride] {
        if (o->text.empty() && o->tasks.empty())
            throw ExitError("eval needs --text FILE, --tasks FILE or both");
        o->ctx_given = ctx->count() > 0;
        // The table has no room for every item; --task-items lists them in the JSON only.
        if (o->task_items && (!o->json || o->tasks.empty()))
            throw ExitError(
                "--task-items lists every task's output in --json's tasks.items: it "
                "needs --tasks and --json");
        if (!o->stream && (chunk->count() || o->kv_eviction.given()))
            throw ExitError("--chunk, --kv-eviction, --kv-budget and --kv-sink apply to --stream");
        if (o->stream &&
            (!o->ref.empty() || !o->tasks.empty() || o->text.empty() || stride->count()))
            throw ExitError(
                "--stream scores one model on --text as one sequence; --ref, --tasks and "
                "--stride belong to the windowed evaluation");
        o->kv_eviction.resolved();  // refuses a budget without eviction and the reverse
        eval(*o);
    });
}

}  // namespace ferry::cli
