// A model-free Service for the server harnesses: one token per byte (id = byte + 1, id 0 ends a
// generation), a real chat template (Qwen 2.5's, which renders tools) and real constraint
// compilation, and a "model" that answers at once: each completion echoes the prompt's last
// bytes, or walks its grammar, for at most a few tokens, with logprobs where asked. So every
// field a request can set reaches the code that serves it, at thousands of requests a second.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "engine/constraint.h"
#include "fuzz_target.h"
#include "grammar/matcher.h"
#include "server/service.h"
#include "tokenizer/chat_template.h"

namespace ferry::fuzz {

class FuzzService : public server::Service {
  public:
    FuzzService() : template_(load_template()), compiler_(vocab()) {}

    Expected<engine::RequestId> add_request(std::vector<int32_t> prompt, engine::RequestParams p,
                                            engine::TokenCallback on_token) override {
        if (prompt.empty()) return make_error("the prompt is empty");
        const engine::RequestId id = ++next_id_;
        std::shared_ptr<engine::PromptLogprobs> plp;
        if (p.prompt_logprobs >= 0) {
            plp = std::make_shared<engine::PromptLogprobs>();
            for (size_t i = 1; i < prompt.size(); ++i)
                plp->push_back({-1.5f, 2, top(prompt[i], p.prompt_logprobs)});
        }
        const int limit = std::min(p.max_tokens, 6);
        for (int c = 0; c < p.n; ++c) {
            std::unique_ptr<grammar::Matcher> m;
            if (p.grammar && p.grammar_trigger.empty())
                m = std::make_unique<grammar::Matcher>(p.grammar);
            engine::TokenEvent ev;
            ev.request = id;
            ev.index = c;
            ev.prompt_tokens = static_cast<int>(prompt.size());
            ev.prompt_logprobs = plp;
            int made = 0;
            bool stopped = false;
            for (; made < limit; ++made) {
                int32_t tok =
                    prompt[(prompt.size() - 1 + size_t(made) + size_t(c)) % prompt.size()];
                if (m) {
                    const auto mask = m->mask();
                    tok = -1;
                    for (int32_t t = 0; t < n_vocab() && tok < 0; ++t)
                        if (mask->test((t + 17 * made) % n_vocab()))
                            tok = (t + 17 * made) % n_vocab();
                    if (tok < 0 || !m->accept(tok)) break;
                    if (m->ended()) {
                        stopped = true;
                        break;
                    }
                }
                ev.token = tok;
                ev.text = tok > 0 ? std::string(1, char(tok - 1)) : "";
                ev.logprob = -0.25f * float(made + 1);
                ev.top_logprobs =
                    p.top_logprobs >= 0 ? top(tok, p.top_logprobs) : decltype(ev.top_logprobs){};
                ev.completion_tokens = made + 1;
                on_token(ev);
                ev.prompt_logprobs.reset();
            }
            engine::TokenEvent last;
            last.request = id;
            last.index = c;
            last.finished = true;
            last.finish_reason =
                stopped ? engine::FinishReason::Stop : engine::FinishReason::Length;
            last.prompt_tokens = static_cast<int>(prompt.size());
            last.completion_tokens = made;
            last.prompt_logprobs = made == 0 ? plp : nullptr;
            on_token(last);
        }
        return id;
    }
    void abort(engine::RequestId) override {}
    void abort_all() override {}
    engine::EngineMetrics metrics() const override { return {}; }
    int max_model_len() const override { return 512; }
    int n_vocab() const override { return 257; }
    std::vector<int32_t> encode(std::string_view t, bool) const override {
        std::vector<int32_t> ids;
        for (unsigned char ch : t) ids.push_back(int32_t(ch) + 1);
        return ids;
    }
    std::string decode(std::span<const int32_t> ids) const override {
        std::string s;
        for (auto i : ids)
            if (i > 0) s += char(i - 1);
        return s;
    }
    std::string token_piece(int32_t id) const override {
        return id > 0 ? std::string(1, char(id - 1)) : "";
    }
    Expected<std::string> apply_chat(const std::vector<tokenizer::ChatMessage>& m,
                                     const nlohmann::ordered_json& tools,
                                     const nlohmann::ordered_json& extra,
                                     bool add_generation_prompt) const override {
        return template_.apply(m, add_generation_prompt, tools, extra);
    }
    std::string chat_template_source() const override { return template_.source(); }
    Expected<std::shared_ptr<const grammar::CompiledGrammar>> compile_constraint(
        const engine::Constraint& c) const override {
        return compiler_.compile(c);
    }

  private:
    static tokenizer::ChatTemplate load_template() {
        const std::string path = source_dir() + "/tests/golden/templates/qwen2.5.jinja";
        auto t = tokenizer::ChatTemplate::from_file(path, "", "<|im_end|>");
        if (!t.ok()) {
            std::fprintf(stderr, "%s\n", t.error().message.c_str());
            std::abort();
        }
        return std::move(*t);
    }
    static std::shared_ptr<const grammar::Vocabulary> vocab() {
        std::vector<std::string> pieces{""};
        for (int b = 0; b < 256; ++b) pieces.emplace_back(1, char(b));
        std::vector<bool> usable(pieces.size(), true);
        usable[0] = false;
        return std::make_shared<grammar::Vocabulary>(std::move(pieces), std::move(usable),
                                                     std::vector<int32_t>{0});
    }
    static std::vector<engine::TokenLogprob> top(int32_t tok, int k) {
        std::vector<engine::TokenLogprob> v;
        for (int i = 0; i < k; ++i) v.push_back({(tok + i) % 257, -0.5f * float(i + 1)});
        return v;
    }

    tokenizer::ChatTemplate template_;
    mutable engine::ConstraintCompiler compiler_;
    std::atomic<engine::RequestId> next_id_{0};
};

}  // namespace ferry::fuzz
