// `ferry chat`: a multi-turn conversation in the terminal through the model's chat template.
// Each turn re-renders the whole conversation and only feeds the tokens the cache lacks.
// Ctrl-C stops a reply (kept as far as it got) or drops the line being typed; the oldest turns
// give way when the conversation outgrows the context.
#include <cstdio>
#include <optional>

#include "cli/commands.h"
#include "cli/interrupt.h"
#include "cli/kv_options.h"
#include "cli/line_editor.h"
#include "cli/model_options.h"
#include "engine/generator.h"

namespace ferry::cli {
namespace {

struct ChatOptions {
    ModelOptions model;
    SamplingOptions sampling;
    KvDTypeOption kv_dtype;
    KvEvictionOption kv_eviction;
    std::string system;
    int max_tokens = 512;
    bool stats = false;
    std::string history_file = LineEditor::default_history_file();
};

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
    return n;
}

void chat(const ChatOptions& o) {
    engine::LoadedModel lm = o.model.load(true);
    if (!lm.chat_template) throw ExitError(lm.chat_template_error);
    const auto& tok = *lm.tokenizer;
    const int ctx = o.model.resolved_ctx(lm);
    // Under KV eviction the conversation is never cut: the cache keeps its first tokens and its
    // latest, and the oldest turns fade out of the window instead of being dropped and
    // recomputed.
    const engine::KvEvictionConfig eviction = o.kv_eviction.resolved();
    if (Status s =
            engine::Generator::check_eviction(*lm.model, o.kv_dtype.resolved(), ctx, eviction);
        !s)
        throw ExitError(s.error().message);
    engine::Generator gen(*lm.model, lm.backend, ctx, o.kv_dtype.format(lm), eviction);
    gen.set_sample_on(o.sampling.sample_on.resolved());
    LineEditor input("ferry", o.history_file);
    const bool tty = input.interactive();
    // At a terminal Ctrl-C stops a reply; reading a file, it ends the program as usual.
    std::optional<interrupt::Catcher> catcher;
    if (tty) catcher.emplace();
    std::vector<tokenizer::ChatMessage> msgs;
    const size_t first_turn = o.system.empty() ? 0 : 1;
    if (!o.system.empty()) msgs.push_back({"system", o.system});
    if (!o.system.empty() && !eviction.on()) {
        // A system message the context cannot hold with a turn would fail every turn.
        std::vector<tokenizer::ChatMessage> probe = msgs;
        probe.push_back({"user", "hi"});
        const auto n = tok.encode(take(lm.chat_template->apply(probe, true)), false, true).size();
        if (static_cast<int64_t>(n) + 1 >= ctx)
            throw ExitError(fmt::format(
                "the system message takes {} tokens of the context of {}, leaving no room for "
                "a conversation (raise --ctx or shorten --system)",
                n, ctx));
    }
    const char* help =
        "/reset starts over, /exit or Ctrl-D leaves, Ctrl-C stops a reply, /help shows this";
    if (tty) std::fprintf(stderr, "ferry chat: %s\n", help);
    // A reply needs room too: the oldest turns give way until the prompt leaves this much.
    const int64_t reply_room = std::min<int64_t>(o.max_tokens, std::max(1, ctx / 4));

    for (bool first = true;; first = false) {
        if (tty && !first) std::fputc('\n', stdout);
        auto in = input.read("> ");
        if (in.status == LineEditor::Status::End) break;
        if (in.status == LineEditor::Status::Interrupted) continue;
        std::string line = std::move(in.line);
        input.remember(line);
        if (line == "/exit" || line == "/quit") break;
        if (line == "/reset") {
            msgs.resize(first_turn);
            gen.reset();
            continue;
        }
        if (line.empty()) continue;
        if (line == "/help" || line == "/?") {
            std::fprintf(stderr, "ferry chat: %s (start a line with // to send a '/')\n", help);
            continue;
        }
        if (line[0] == '/' && line.rfind("//", 0) != 0 &&
            line.find_first_of(" \t") == std::string::npos) {
            std::fprintf(stderr, "ferry chat: unknown command %s; %s\n", line.c_str(), help);
            continue;
        }
        if (line.rfind("//", 0) == 0) line.erase(0, 1);
        // Trimmed on a copy: a message that cannot be sent leaves the conversation as it was.
        std::vector<tokenizer::ChatMessage> trial = msgs;
        trial.push_back({"user", line});
        std::vector<int32_t> ids;
        size_t dropped = 0;
        bool failed = false;
        for (;;) {
            auto text = lm.chat_template->apply(trial, true);
            if (!text) {  // the template refused the conversation: say why, keep the session
                std::fprintf(stderr, "ferry: error: %s\n", text.error().message.c_str());
                failed = true;
                break;
            }
            ids = tok.encode(*text, false, true);
            if (static_cast<int64_t>(ids.size()) + reply_room <= ctx || eviction.on()) break;
            // Drop the oldest turn: from the first message after the system one up to the
            // next user message, so the conversation still starts with a user turn.
            size_t end = first_turn + 1;
            while (end < trial.size() && trial[end].role != "user") ++end;
            if (end >= trial.size()) {                                  // only this message is left
                if (static_cast<int64_t>(ids.size()) + 1 < ctx) break;  // a short reply fits
                std::fprintf(stderr,
                             "ferry: this message (%zu tokens with the template) does not fit "
                             "the context of %d; it was not sent\n",
                             ids.size(), ctx);
                failed = true;
                break;
            }
            dropped += end - first_turn;
            trial.erase(trial.begin() + long(first_turn), trial.begin() + long(end));
        }
        if (failed) continue;
        msgs = std::move(trial);
        if (dropped)
            std::fprintf(stderr,
                         "ferry chat: dropped the %zu oldest message%s to fit the context of %d "
                         "tokens\n",
                         dropped, dropped == 1 ? "" : "s", ctx);
        const size_t keep = common_prefix(gen.history(), ids);
        // At least one new token must be fed so there are logits to sample from.
        gen.truncate(std::min(keep, ids.size() - 1));
        std::vector<int32_t> fresh(ids.begin() + gen.position(), ids.end());

        tokenizer::StreamDecoder dec(tok);
        std::string reply;
        const int budget =
            eviction.on() ? o.max_tokens
                          : std::min<int64_t>(o.max_tokens, ctx - static_cast<int64_t>(ids.size()));
        interrupt::clear();
        bool stopped = false;
        auto st = take(gen.generate(
            fresh, o.sampling.resolved(lm.generation), budget,
            [&](int32_t t) {
                std::string s = dec.push(t);
                reply += s;
                std::fwrite(s.data(), 1, s.size(), stdout);
                std::fflush(stdout);
                stopped = interrupt::pending();
                return !stopped;
            },
            [&](int32_t t) { return tok.is_eog(t); }));
        std::string rest = dec.flush();
        reply += rest;
        std::fputs(rest.c_str(), stdout);
        std::fputc('\n', stdout);
        std::fflush(stdout);
        interrupt::clear();
        if (stopped) std::fputs("ferry chat: reply stopped (kept as far as it got)\n", stderr);
        msgs.push_back({"assistant", reply});
        if (o.stats)
            std::fprintf(stderr, "[%d new prompt tokens, ttft %.0f ms, %d tokens at %.1f tok/s]\n",
                         st.prompt_tokens, st.ttft_ms, st.generated_tokens,
                         st.decode_tokens_per_s());
    }
}

}  // namespace

void add_chat_command(CLI::App& app) {
    auto o = std::make_shared<ChatOptions>();
    CLI::App* cmd = app.add_subcommand("chat", "interactive multi-turn chat in the terminal");
    o->model.add_to(*cmd);
    o->sampling.add_to(*cmd);
    cmd->add_option("--system", o->system, "system message for the conversation");
    cmd->add_option("-n,--max-tokens", o->max_tokens, "tokens per reply at most")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 24));
    cmd->add_flag("--stats", o->stats, "print timings after each reply");
    cmd->add_option("--history-file", o->history_file,
                    "where typed lines are kept across sessions (empty: this session only)")
        ->capture_default_str();
    o->kv_dtype.add_to(*cmd);
    o->kv_eviction.add_to(*cmd);
    cmd->callback([o] { chat(*o); });
}

}  // namespace ferry::cli
