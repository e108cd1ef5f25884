#include "cli/spec_options.h"

#include "cli/commands.h"
#include "core/paths.h"

namespace ferry::cli {

void SpecOptions::add_to(CLI::App& cmd, bool serving) {
    auto& c = config;
    serving_ = serving;
    cmd.add_option("--spec", method,
                   serving ? "speculative decoding for requests that do not choose: off, ngram "
                             "(prompt lookup), lookahead (Jacobi guesses and an n-gram pool), "
                             "draft (--draft-model) or medusa (--medusa-heads)"
                           : "speculative decoding: off, ngram (prompt lookup), lookahead (Jacobi "
                             "guesses and an n-gram pool), draft (--draft-model) or medusa "
                             "(--medusa-heads)")
        ->capture_default_str()
        ->check(CLI::IsMember({"off", "ngram", "lookahead", "draft", "medusa"}));
    k_ = cmd.add_option("--spec-k", c.k,
                        "draft tokens per step (the most, under --spec-policy cost)")
             ->capture_default_str()
             ->check(CLI::Range(1, 32));
    ngram_min_ =
        cmd.add_option("--spec-ngram-min", c.ngram_min, "prompt lookup: shortest suffix matched")
            ->capture_default_str()
            ->check(CLI::Range(1, 64));
    ngram_max_ =
        cmd.add_option("--spec-ngram-max", c.ngram_max, "prompt lookup: longest suffix matched")
            ->capture_default_str()
            ->check(CLI::Range(1, 64));
    tree_ = cmd.add_flag(
        "--spec-tree", c.ngram_tree,
        "prompt lookup: verify the continuations of up to 8 earlier occurrences of the "
        "matched suffix as one tree (tree attention) instead of the latest one's alone");
    lookahead_n_ = cmd.add_option("--spec-lookahead-n", c.lookahead_n,
                                  "lookahead: the length of the n-grams its pool collects")
                       ->capture_default_str()
                       ->check(CLI::Range(2, 8));
    policy_ = cmd.add_option(
                     "--spec-policy", policy,
                     "cost: 0..K draft tokens per sequence and step, where the measured step costs "
                     "and acceptance say they pay (off where they would lose); fixed: always K")
                  ->capture_default_str()
                  ->check(CLI::IsMember({"cost", "fixed"}));
    if (serving)
        cmd.add_option("--spec-disable-batch", c.disable_batch,
                       "no speculation in steps where more sequences than this decode (0: the "
                       "policy alone decides)")
            ->capture_default_str()
            ->check(CLI::Range(0, 1 << 16));
    draft_ = cmd.add_option("--draft-model", draft_model,
                            "smaller GGUF model with the same vocabulary, for --spec draft");
    heads_ = cmd.add_option(
        "--medusa-heads", config.medusa_heads,
        "Medusa heads for --spec medusa, as ferry train-medusa writes them (default: "
        "MODEL.medusa.gguf beside the model)");
    medusa_tree_ =
        cmd.add_option(
               "--medusa-tree", config.medusa_tree,
               "--spec medusa drafts a tree of up to N tokens (each head's likeliest few, the "
               "likeliest branches), verified in one pass with tree attention, instead of one "
               "token per head; N replaces --spec-k for Medusa (0: a chain)")
            ->capture_default_str()
            ->check(CLI::Range(0, 32));
}

engine::SpecConfig SpecOptions::resolved() const {
    engine::SpecConfig c = config;
    c.method = take(engine::parse_spec_method(method));
    c.policy = take(engine::parse_spec_policy(policy));
    if (c.ngram_min > c.ngram_max)
        throw ExitError(fmt::format("--spec-ngram-min ({}) is larger than --spec-ngram-max ({})",
                                    c.ngram_min, c.ngram_max));
    if (c.method == engine::SpecMethod::Draft && draft_model.empty())
        throw ExitError("--spec draft needs --draft-model FILE");
    check_used();
    return c;
}

void SpecOptions::check_used() const {
    if (serving_) return;
    using M = engine::SpecMethod;
    const M m = take(engine::parse_spec_method(method));
    struct Use {
        CLI::Option* opt;
        bool applies;
        const char* needs;
    };
    const bool lookup = m == M::Ngram || m == M::Lookahead;
    for (const Use& u :
         {Use{k_, m != M::Off, "--spec"}, Use{policy_, m != M::Off, "--spec"},
          Use{ngram_min_, lookup, "--spec ngram or lookahead"},
          Use{ngram_max_, lookup, "--spec ngram or lookahead"},
          Use{tree_, m == M::Ngram, "--spec ngram"},
          Use{lookahead_n_, m == M::Lookahead, "--spec lookahead"},
          Use{draft_, m == M::Draft, "--spec draft"}, Use{heads_, m == M::Medusa, "--spec medusa"},
          Use{medusa_tree_, m == M::Medusa, "--spec medusa"}})
        if (u.opt && u.opt->count() > 0 && !u.applies)
            throw ExitError(fmt::format("{} has no effect without {} (this run has --spec {})",
                                        u.opt->get_name(), u.needs, method));
}

std::optional<engine::LoadedModel> SpecOptions::load_draft(
    bool progress, std::shared_ptr<kernels::Backend> backend) const {
    if (draft_model.empty()) return std::nullopt;
    return take(engine::LoadedModel::load(take(resolve_model_path(draft_model)), progress,
                                          std::move(backend)));
}

std::unique_ptr<engine::Proposer> SpecOptions::make(const engine::LoadedModel& target,
                                                    const engine::LoadedModel* draft,
                                                    int64_t max_tokens,
                                                    quant::KvDType draft_kv) const {
    return take(engine::make_proposer(resolved(), target, draft, max_tokens, draft_kv));
}

}  // namespace ferry::cli
