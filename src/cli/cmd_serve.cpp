// `ferry serve`: the OpenAI-compatible HTTP server. It listens first (so /health can say 503
// while the model loads), then loads the model, starts the engine thread and serves until
// SIGTERM, when it drains running requests within a grace period.
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/model_options.h"
#include "core/paths.h"
#include "engine/constraint.h"
#include "engine/engine.h"
#include "quant/kv_format.h"
#include "server/auth.h"
#include "server/http_server.h"
#include "server/service.h"
#include "tokenizer/fim.h"

namespace ferry::cli {
namespace {

// The real Service: the serving engine plus the model's tokenizer and chat template.
class EngineService : public server::Service {
  public:
    EngineService(engine::Engine& e, const engine::LoadedModel& lm)
        : e_(e), lm_(lm), constraints_(engine::grammar_vocabulary(*lm.tokenizer)) {}

    Expected<engine::RequestId> add_request(std::vector<int32_t> prompt,
                                            engine::RequestParams params,
                                            engine::TokenCallback on_token) override {
        return e_.add_request(std::move(prompt), std::move(params), std::move(on_token));
    }
    void abort(engine::RequestId id) override { e_.abort(id); }
    void abort_all() override { e_.abort_all(); }
    engine::EngineMetrics metrics() const override { return e_.metrics(); }
    std::optional<std::string> failure() const override { return e_.failure(); }
    int max_model_len() const override { return e_.max_model_len(); }
    bool runs_past_context() const override { return e_.config().kv_eviction.past_context(); }
    int n_vocab() const override { return lm_.tokenizer->n_vocab(); }
    std::vector<int32_t> encode(std::string_view text, bool add_special) const override {
        return lm_.tokenizer->encode(text, add_special, true);
    }
    std::string decode(std::span<const int32_t> ids) const override {
        return lm_.tokenizer->decode(ids);
    }
    std::string token_piece(int32_t id) const override {
        return lm_.tokenizer->token_to_piece(id, true);
    }
    Expected<std::string> apply_chat(const std::vector<tokenizer::ChatMessage>& msgs,
                                     const nlohmann::ordered_json& tools,
                                     const nlohmann::ordered_json& extra,
                                     bool add_generation_prompt) const override {
        if (!lm_.chat_template)
            return make_error("this model's chat template cannot be used ({}); use /v1/completions",
                              lm_.chat_template_error);
        return lm_.chat_template->apply(msgs, add_generation_prompt, tools, extra);
    }
    Expected<std::vector<int32_t>> fill_in_middle(const std::vector<int32_t>& prefix,
                                                  std::string_view suffix) const override {
        return tokenizer::fim_prompt(*lm_.tokenizer, prefix, suffix);
    }
    std::string chat_template_source() const override {
        return lm_.chat_template ? lm_.chat_template->source() : std::string();
    }
    Expected<std::shared_ptr<const grammar::CompiledGrammar>> compile_constraint(
        const engine::Constraint& c) const override {
        return constraints_.compile(c);
    }
    engine::SamplingParams default_sampling() const override {
        engine::SamplingParams s = Service::default_sampling();
        lm_.generation.apply_to(s);
        return s;
    }

  private:
    engine::Engine& e_;
    const engine::LoadedModel& lm_;
    mutable engine::ConstraintCompiler constraints_;
};

struct ServeOptions {
    ModelOptions model;
    server::ServerOptions server;
    EngineOptions engine;
    std::string api_key_file;
    std::string served_name;
};

void serve(ServeOptions& o, bool api_key_given) {
    // `--api-key "$UNSET"` must not quietly serve everyone.
    if (api_key_given && o.server.api_key.empty())
        throw ExitError("--api-key is empty (omit it to serve without a key)");
    if (!o.api_key_file.empty()) o.server.api_key = take(server::read_key_file(o.api_key_file));
    // The key from the environment (kept out of `ps`, like vLLM's VLLM_API_KEY) when neither
    // flag gives one; set but empty is a mistake, as for the flag.
    if (const char* env = std::getenv("FERRY_API_KEY");
        env && !api_key_given && o.api_key_file.empty()) {
        if (!*env)
            throw ExitError("FERRY_API_KEY is set but empty (unset it to serve without a key)");
        o.server.api_key = env;
    }
    const std::string path = take(resolve_model_path(o.model.model));
    std::string stem = std::filesystem::path(path).stem().string();
    auto& names = o.server.model_names;
    names = {o.served_name.empty() ? stem : o.served_name, stem,
             std::filesystem::path(path).filename().string(), o.model.model};

    // The context is resolved by the engine from the model (0: min(trained, 4096)).
    (void)o.engine.spec.resolved();  // refuse bad speculation switches before listening

    // A rank other than 0 of a --tp group serves nothing itself: it loads its share and runs
    // rank 0's steps.
    const auto group = o.model.parallel.join(path);
    if (group.world && group.world->rank() != 0)
        follow_if_not_rank0(take(engine::LoadedModel::load(path, false, o.model.backend(),
                                                           o.model.weight_type(), group)));

    server::HttpServer http(o.server);
    if (auto st = http.start(); !st) throw ExitError(st.error().message);
    std::fprintf(stderr, "ferry serve: listening on http://%s:%d (model loading)%s\n",
                 o.server.host.c_str(), http.port(),
                 o.server.api_key.empty() ? "" : ", API key required");

    engine::LoadedModel lm = take(
        engine::LoadedModel::load(path, true, o.model.backend(), o.model.weight_type(), group));
    o.model.apply_to(lm);
    const auto draft = o.engine.spec.load_draft(true, lm.backend);
    if (http.shutting_down()) return http.wait();
    const engine::EngineConfig config = o.engine.resolved(o.model.ctx, draft ? &*draft : nullptr);
    const std::unique_ptr<engine::Engine> engine_ptr = take(engine::Engine::create(lm, config));
    engine::Engine& eng = *engine_ptr;
    note_kv_capped_context(eng, "ferry serve");
    eng.start();
    EngineService service(eng, lm);
    http.set_service(&service);
    std::fprintf(
        stderr,
        "ferry serve: ready: model '%s', context %d, %s activations, %s KV cache, chat page "
        "at http://%s:%d/\n",
        names.front().c_str(), eng.max_model_len(),
        kernels::activations_name(lm.backend->activations()), quant::kv_dtype_name(config.kv_dtype),
        o.server.host.c_str(), http.port());
    if (const auto& g = lm.generation; g.temperature || g.top_p || g.top_k || g.repetition_penalty)
        std::fprintf(
            stderr,
            "ferry serve: requests that leave them out get the model's "
            "generation_config.json sampling:%s\n",
            fmt::format(
                "{}{}{}{}", g.temperature ? fmt::format(" temperature {}", *g.temperature) : "",
                g.top_p ? fmt::format(" top_p {}", *g.top_p) : "",
                g.top_k ? fmt::format(" top_k {}", *g.top_k) : "",
                g.repetition_penalty ? fmt::format(" repetition_penalty {}", *g.repetition_penalty)
                                     : "")
                .c_str());
    std::fflush(stderr);
    http.wait();
    // The HTTP side is down: nothing can receive events any more, so stop hard.
    eng.abort_all();
    eng.stop();
    std::fprintf(stderr, "ferry serve: stopped\n");
}

}  // namespace

void add_serve_command(CLI::App& app) {
    auto o = std::make_shared<ServeOptions>();
    CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server with a chat page");
    o->model.add_to(*cmd);
    auto& s = o->server;
    auto& e = o->engine.config;
    cmd->add_option("--host", s.host, "address to listen on")->capture_default_str();
    cmd->add_option("--port", s.port, "TCP port (0: any free port)")
        ->capture_default_str()
        ->check(CLI::Range(0, 65535));
    auto* key = cmd->add_option("--api-key", s.api_key,
                                "require 'Authorization: Bearer KEY' (or 'x-api-key: KEY'); "
                                "--api-key-file or FERRY_API_KEY keep it off the command line");
    cmd->add_flag("--public-metrics", s.public_metrics,
                  "serve /metrics without the API key (by default it needs the key when one is "
                  "set)");
    cmd->add_option("--api-key-file", o->api_key_file, "read the API key from a file")
        ->excludes(key);
    cmd->add_option("--served-model-name", o->served_name,
                    "model id reported by /v1/models (default: the file name)");
    cmd->add_option("--max-queue", e.max_waiting, "waiting requests beyond this get 429")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 20));
    cmd->add_option("--max-body-bytes", s.max_body_bytes, "larger request bodies get 413")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1024}, int64_t{1} << 30));
    cmd->add_option("--http-threads", s.io_threads, "threads running the HTTP event loop")
        ->capture_default_str()
        ->check(CLI::Range(1, 64));
    cmd->add_option("--grace", s.grace_seconds, "seconds running requests get on SIGTERM")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 3600.0));
    cmd->add_flag("!--no-log-requests", s.log_requests, "do not log one line per request");
    o->engine.add_to(*cmd);
    cmd->callback([o, key] { serve(*o, key->count() > 0); });
}

}  // namespace ferry::cli
