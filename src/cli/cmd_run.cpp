// `ferry run`: one prompt in, the continuation streamed to stdout, the timings to stderr.
#include <algorithm>
#include <cstdio>

#include "cli/commands.h"
#include "cli/kv_options.h"
#include "cli/model_options.h"
#include "cli/spec_options.h"
#include "engine/generator.h"

namespace ferry::cli {
namespace {

struct RunOptions {
    ModelOptions model;
    SamplingOptions sampling;
    SpecOptions spec;
    KvDTypeOption kv_dtype;
    KvEvictionOption kv_eviction;
    std::string prompt;
    std::string prompt_file;
    std::string system;
    int max_tokens = 128;
    bool chat = false;
    bool no_stats = false;
    bool ignore_eos = false;
};

void run(const RunOptions& o) {
    std::string prompt = o.prompt_file.empty() ? o.prompt : read_file_or_exit(o.prompt_file);
    engine::LoadedModel lm = o.model.load(!o.no_stats);
    const auto& tok = *lm.tokenizer;

    std::vector<int32_t> ids;
    if (o.chat) {
        if (!lm.chat_template) throw ExitError(lm.chat_template_error);
        std::vector<tokenizer::ChatMessage> msgs;
        if (!o.system.empty()) msgs.push_back({"system", o.system});
        msgs.push_back({"user", prompt});
        // The rendered template carries its own BOS text where the model wants one.
        ids = tok.encode(take(lm.chat_template->apply(msgs, true)), false, true);
    } else {
        ids = tok.encode(prompt, true, true);
    }
    const int ctx = o.model.resolved_ctx(lm);
    const engine::KvEvictionConfig eviction = o.kv_eviction.resolved();
    if (Status s =
            engine::Generator::check_eviction(*lm.model, o.kv_dtype.resolved(), ctx, eviction);
        !s)
        throw ExitError(s.error().message);
    if (eviction.on() && o.spec.resolved().method == engine::SpecMethod::Draft)
        throw ExitError(
            "--kv-eviction with a draft model is not supported (the draft's cache would still "
            "grow with the sequence); use --spec ngram or none");
    if (static_cast<int>(ids.size()) >= ctx && !eviction.on())
        throw ExitError(
            fmt::format("the prompt is {} tokens, and the context of {} needs room for at least "
                        "one generated token (raise --ctx, up to the model's {})",
                        ids.size(), ctx, lm.model->config().n_ctx_train));

    engine::Generator gen(*lm.model, lm.backend, ctx, o.kv_dtype.format(lm), eviction);
    gen.set_sample_on(o.sampling.sample_on.resolved());
    const auto spec_cfg = o.spec.resolved();
    const auto draft = o.spec.load_draft(!o.no_stats, lm.backend);
    auto proposer = o.spec.make(lm, draft ? &*draft : nullptr, ctx, o.kv_dtype.resolved());
    tokenizer::StreamDecoder dec(tok);
    if (!o.chat) {  // echo the prompt, as a completion continues it
        std::fputs(prompt.c_str(), stdout);
        std::fflush(stdout);
    }
    auto stats = take(gen.generate(
        ids, o.sampling.resolved(lm.generation), o.max_tokens,
        [&](int32_t t) {
            std::string s = dec.push(t);
            std::fwrite(s.data(), 1, s.size(), stdout);
            std::fflush(stdout);
            return true;
        },
        [&](int32_t t) { return !o.ignore_eos && tok.is_eog(t); },
        {proposer.get(), spec_cfg.k, spec_cfg.policy}));
    std::string rest = dec.flush();
    std::fwrite(rest.data(), 1, rest.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    if (!o.no_stats)
        std::fprintf(stderr,
                     "\nprompt: %d tokens | ttft: %.1f ms | prefill: %.1f tok/s | "
                     "generated: %d tokens | decode: %.1f tok/s | threads: %d | %s\n",
                     stats.prompt_tokens, stats.ttft_ms, stats.prefill_tokens_per_s(),
                     stats.generated_tokens, stats.decode_tokens_per_s(),
                     o.model.resolved_threads(), stats.finish_reason.c_str());
    if (!o.no_stats && eviction.on())
        std::fprintf(stderr, "kv eviction: %lld tokens evicted, the cache kept %lld\n",
                     static_cast<long long>(gen.evicted()),
                     static_cast<long long>(gen.position() - gen.evicted()));
    if (!o.no_stats && (stats.spec_steps > 0 || stats.spec_declined_steps > 0))
        std::fprintf(stderr,
                     "speculation (%s, %s): %d of %d draft tokens accepted (%.0f %%), %.2f per "
                     "step; %d steps without a draft that would not have paid\n",
                     engine::spec_method_name(spec_cfg.method),
                     engine::spec_policy_name(spec_cfg.policy), stats.spec_accepted_tokens,
                     stats.spec_draft_tokens,
                     100.0 * stats.spec_accepted_tokens / std::max(1, stats.spec_draft_tokens),
                     stats.spec_steps ? double(stats.spec_accepted_tokens) / stats.spec_steps : 0.0,
                     stats.spec_declined_steps);
    if (!o.no_stats && stats.spec_tree_moved_steps > 0)
        std::fprintf(stderr,
                     "speculation trees: %d steps accepted a branch off the leading chain\n",
                     stats.spec_tree_moved_steps);
}

}  // namespace

void add_run_command(CLI::App& app) {
    auto o = std::make_shared<RunOptions>();
    CLI::App* cmd = app.add_subcommand("run", "generate a continuation of a prompt (streamed)");
    o->model.add_to(*cmd);
    o->sampling.add_to(*cmd);
    auto* p = cmd->add_option("-p,--prompt", o->prompt, "the prompt text");
    auto* pf = cmd->add_option("-f,--prompt-file", o->prompt_file, "read the prompt from a file");
    p->excludes(pf);
    cmd->add_option("-n,--max-tokens", o->max_tokens,
                    "tokens to generate at most (0: until the end of text or a full context)")
        ->capture_default_str()
        ->check(CLI::Range(0, 1 << 24));
    auto* chat = cmd->add_flag("--chat", o->chat, "wrap the prompt in the model's chat template");
    cmd->add_option("--system", o->system, "system message (with --chat)")->needs(chat);
    cmd->add_flag("--ignore-eos", o->ignore_eos, "keep generating past end-of-generation tokens");
    cmd->add_flag("--no-stats", o->no_stats, "print only the text");
    o->kv_dtype.add_to(*cmd);
    o->kv_eviction.add_to(*cmd);
    o->spec.add_to(*cmd, false);
    cmd->callback([o, p, pf] {
        if (p->count() == 0 && pf->count() == 0) throw ExitError("run needs -p PROMPT or -f FILE");
        run(*o);
    });
}

}  // namespace ferry::cli
