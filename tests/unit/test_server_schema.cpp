// The OpenAI request validation and response shapes, against a fake service (no model).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "server/auth.h"
#include "server/openai_schema.h"
#include "server/prometheus.h"
#include "server/sse.h"

namespace ferry::server {
namespace {

// One token per byte (id = byte + 1), so lengths are easy to reason about.
class ByteService : public Service {
  public:
    Expected<engine::RequestId> add_request(std::vector<int32_t>, engine::RequestParams,
                                            engine::TokenCallback) override {
        return engine::RequestId{1};
    }
    void abort(engine::RequestId) override {}
    void abort_all() override {}
    engine::EngineMetrics metrics() const override { return {}; }
    int max_model_len() const override { return 64; }
    int n_vocab() const override { return 257; }
    std::vector<int32_t> encode(std::string_view t, bool) const override {
        std::vector<int32_t> ids;
        for (unsigned char c : t) ids.push_back(int32_t(c) + 1);
        return ids;
    }
    std::string decode(std::span<const int32_t> ids) const override {
        std::string s;
        for (auto i : ids) s += char(i - 1);
        return s;
    }
    std::string token_piece(int32_t id) const override { return std::string(1, char(id - 1)); }
    Expected<std::string> apply_chat(const std::vector<tokenizer::ChatMessage>& m,
                                     const nlohmann::ordered_json&, const nlohmann::ordered_json&,
                                     bool add_generation_prompt) const override {
        std::string s;
        for (const auto& x : m) s += x.role + ":" + x.content.value_or("") + "\n";
        if (add_generation_prompt) s += "assistant:";
        return s;
    }
};

std::optional<GenRequest> parse(const std::string& body, Endpoint kind, ApiError& err) {
    ByteService b;
    auto j = parse_body(body, err);
    if (!j) return std::nullopt;
    return parse_generation(*j, kind, b, {"m", "alias"}, err);
}

TEST(ServerSchema, CompletionDefaultsAndParams) {
    ApiError err;
    auto r = parse(R"({"model":"m","prompt":"hi","temperature":0,"seed":7,"n":2,"stop":"x",
                      "max_tokens":5,"logprobs":2,"top_k":-1,"ignore_eos":true,"priority":-2})",
                   Endpoint::Completions, err);
    ASSERT_TRUE(r) << err.message;
    EXPECT_EQ(r->prompts.size(), 1u);
    EXPECT_EQ(r->prompts[0].size(), 2u);
    EXPECT_EQ(r->params.n, 2);
    EXPECT_EQ(r->params.max_tokens, 5);
    EXPECT_EQ(r->params.stop, std::vector<std::string>{"x"});
    EXPECT_EQ(r->params.top_logprobs, 2);
    EXPECT_TRUE(r->params.sampling.has_seed);
    EXPECT_EQ(r->params.sampling.top_k, 0);
    EXPECT_TRUE(r->params.ignore_eos);
    EXPECT_EQ(r->params.priority, -2);
    auto d = parse(R"({"prompt":[[1,2],[3]]})", Endpoint::Completions, err);
    ASSERT_TRUE(d) << err.message;
    EXPECT_EQ(d->prompts.size(), 2u);
    EXPECT_EQ(d->params.max_tokens, 16);
    EXPECT_EQ(d->params.priority, 0);
}

// A field the endpoint does not know is refused by name, never run with the defaults.
TEST(ServerSchema, UnknownFieldsAreRefusedByName) {
    struct Case {
        const char* body;
        Endpoint kind;
        const char* param;
        const char* words;
    };
    for (const Case& c : {
             Case{R"({"prompt":"hi","max_token":1})", Endpoint::Completions, "max_token",
                  "Unrecognized request argument supplied: max_token"},
             Case{R"({"messages":[{"role":"user","content":"x"}],"prompt":"hi"})", Endpoint::Chat,
                  "prompt", "completions field"},
             Case{R"({"prompt":"hi","top_logprobs":1})", Endpoint::Completions, "top_logprobs",
                  "chat field"},
             Case{R"({"prompt":"hi","store":true})", Endpoint::Completions, "store", "store"},
             Case{R"({"prompt":"hi","metadata":"x"})", Endpoint::Completions, "metadata",
                  "an object"},
         }) {
        ApiError err;
        EXPECT_FALSE(parse(c.body, c.kind, err)) << c.body;
        EXPECT_EQ(err.param, c.param) << c.body;
        EXPECT_NE(err.message.find(c.words), std::string::npos) << err.message;
    }
    ApiError err;
    EXPECT_TRUE(parse(R"({"prompt":"hi","user":"u","store":false,"metadata":{},
                          "service_tier":"auto","guided_decoding_backend":"x"})",
                      Endpoint::Completions, err))
        << err.message;
}

TEST(ServerSchema, ErrorsNameTheField) {
    struct Case {
        const char* body;
        int status;
        const char* param;
    };
    const Case cases[] = {
        {R"({"prompt":"hi","temperature":"hot"})", 400, "temperature"},
        {R"({"prompt":"hi","temperature":3})", 400, "temperature"},
        {R"({"prompt":"hi","n":0})", 400, "n"},
        {R"({"prompt":"hi","priority":"high"})", 400, "priority"},
        {R"({"prompt":"hi","priority":1.5})", 400, "priority"},
        {R"({"prompt":"hi","max_tokens":1.5})", 400, "max_tokens"},
        {R"({"prompt":"hi","max_tokens":1e300})", 400, "max_tokens"},
        {R"({"prompt":"hi","max_tokens":100})", 400, "max_tokens"},
        {R"({"prompt":[1,2,999]})", 400, "prompt"},
        {R"({"prompt":"hi","model":"other"})", 404, "model"},
        {R"({"prompt":"hi","stop":[1]})", 400, "stop"},
        {R"({"prompt":"hi","stream_options":{"include_usage":true}})", 400, "stream_options"},
        {R"({"temperature":1})", 400, "prompt"},
        // Refused rather than silently ignored: they would change the output.
        {R"({"prompt":"hi","logit_bias":{"50256":-100}})", 400, "logit_bias"},  // > vocab
        {R"({"prompt":"hi","logit_bias":{"x":1}})", 400, "logit_bias"},
        {R"({"prompt":"hi","logit_bias":{"5":101}})", 400, "logit_bias"},
        {R"({"prompt":"hi","logit_bias":[1]})", 400, "logit_bias"},
        {R"({"prompt":"hi","tools":[{"type":"function"}]})", 400, "tools"},
        {R"({"prompt":"hi","tool_choice":"required"})", 400, "tool_choice"},
        {R"({"prompt":"hi","response_format":{"type":"json_object"}})", 400, "response_format"},
        {R"({"prompt":"hi","best_of":3})", 400, "best_of"},
        {R"({"prompt":"hi","suffix":"end"})", 400, "suffix"},  // this service has no FIM
        {R"({"prompt":"hi","suffix":3})", 400, "suffix"},
        {R"({"prompt":"hi","suffix":"end","echo":true})", 400, "echo"},
        {R"({"prompt":"hi","min_tokens":8})", 400, "min_tokens"},
        {R"({"prompt":"hi","include_stop_str_in_output":1})", 400, "include_stop_str_in_output"},
        {R"({"prompt":"hi","prompt_logprobs":21})", 400, "prompt_logprobs"},
        {R"({"prompt":"hi","max_tokens":0})", 400, "max_tokens"},
        {R"({"prompt":"hi","reasoning_effort":"low"})", 400, "reasoning_effort"},
        {R"({"prompt":"hi","modalities":["text","audio"]})", 400, "modalities"},
        {R"({"prompt":"hi","continue_final_message":true})", 400, "continue_final_message"},
        {R"({"prompt":"hi","add_generation_prompt":false})", 400, "add_generation_prompt"},
        {R"({"prompt":"hi","chat_template_kwargs":[1]})", 400, "chat_template_kwargs"},
        {R"({"prompt":"hi","guided_regex":"a","grammar":"root ::= \"a\""})", 400, "grammar"},
    };
    for (const auto& c : cases) {
        ApiError err;
        EXPECT_FALSE(parse(c.body, Endpoint::Completions, err)) << c.body;
        EXPECT_EQ(err.status, c.status) << c.body;
        EXPECT_EQ(err.param, c.param) << c.body;
    }
    ApiError err;
    auto biased =
        parse(R"({"prompt":"hi","logit_bias":{"5":-100,"7":2.5}})", Endpoint::Completions, err);
    ASSERT_TRUE(biased) << err.message;
    using Bias = std::vector<std::pair<int32_t, float>>;
    EXPECT_EQ(biased->params.sampling.logit_bias, (Bias{{5, -100.0f}, {7, 2.5f}}));
    // Their no-op values, which clients send by default, pass.
    EXPECT_TRUE(parse(R"({"prompt":"hi","logit_bias":{},"tools":[],"tool_choice":"none",
                          "response_format":{"type":"text"},"best_of":2,"n":2,"suffix":"",
                          "include_stop_str_in_output":false,"modalities":["text"],
                          "min_tokens":0})",
                      Endpoint::Completions, err))
        << err.message;
    std::string long_prompt(100, 'a');
    EXPECT_FALSE(parse(R"({"prompt":")" + long_prompt + "\"}", Endpoint::Completions, err));
    EXPECT_NE(err.message.find("100 tokens"), std::string::npos) << err.message;
    EXPECT_FALSE(parse(R"({"messages":[{"role":"robot","content":"x"}]})", Endpoint::Chat, err));
    EXPECT_FALSE(parse(R"({"messages":[]})", Endpoint::Chat, err));
    EXPECT_FALSE(parse(std::string(100, '[') + std::string(100, ']'), Endpoint::Chat, err));
    EXPECT_FALSE(parse("{\"prompt\":\"\xff\"}", Endpoint::Completions, err));
    EXPECT_FALSE(parse("{\"prompt\":", Endpoint::Completions, err));
    EXPECT_FALSE(parse("[]", Endpoint::Completions, err));
}

// What one request may ask for is bounded, with the bound in the message (docs/server.md's
// threat model): messages, the length of each stop string, tools.
TEST(ServerSchema, BoundsOnOneRequest) {
    ApiError err;
    auto chat_of = [](int n) {
        nlohmann::json msgs = nlohmann::json::array();
        for (int i = 0; i < n; ++i)
            msgs.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", ""}});
        return nlohmann::json{{"messages", msgs}, {"max_tokens", 1}}.dump();
    };
    EXPECT_FALSE(parse(chat_of(2049), Endpoint::Chat, err));
    EXPECT_EQ(err.param, "messages");
    EXPECT_NE(err.message.find("2049 messages; at most 2048"), std::string::npos) << err.message;
    // Under the bound, the conversation goes on to the template (and this one fits).
    EXPECT_TRUE(parse(chat_of(3), Endpoint::Chat, err)) << err.message;

    const std::string stop(1025, 's');
    auto with_stop = [](const std::string& st) {
        return nlohmann::json{{"prompt", "hi"}, {"stop", {st}}}.dump();
    };
    EXPECT_FALSE(parse(with_stop(stop), Endpoint::Completions, err));
    EXPECT_EQ(err.param, "stop");
    EXPECT_NE(err.message.find("at most 1024 bytes"), std::string::npos) << err.message;
    EXPECT_TRUE(parse(with_stop(stop.substr(1)), Endpoint::Completions, err)) << err.message;

    nlohmann::json tools = nlohmann::json::array();
    for (int i = 0; i < 129; ++i)
        tools.push_back(
            {{"type", "function"},
             {"function",
              {{"name", fmt::format("f{}", i)}, {"parameters", {{"type", "object"}}}}}});
    nlohmann::json body = {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"tools", tools}};
    EXPECT_FALSE(parse(body.dump(), Endpoint::Chat, err));
    EXPECT_EQ(err.param, "tools");
    EXPECT_NE(err.message.find("129 tools; at most 128"), std::string::npos) << err.message;
}

// A field of another type than the API's is a 400 naming it, never an exception out of the
// parser (a fuzz finding: tool_choice {"type": {...}}).
TEST(ServerSchema, FieldsOfTheWrongTypeAre400s) {
    const std::string tools =
        R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}])";
    struct Case {
        std::string body;
        const char* param;
    };
    const Case cases[] = {
        {R"({"messages":[{"role":"user","content":"x"}],)" + tools +
             R"(,"tool_choice":{"type":{"name":"f"},"function":{"name":"f"}}})",
         "tool_choice"},
        {R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":7,"function":{"name":"f"}}]})",
         "tools"},
        {R"({"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":5,"type":"function","function":{"name":"f","arguments":"{}"}}]}]})",
         "messages"},
        {R"({"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":[],"function":{"name":"f","arguments":"{}"}}]}]})",
         "messages"},
    };
    for (const auto& c : cases) {
        ApiError err;
        EXPECT_FALSE(parse(c.body, Endpoint::Chat, err)) << c.body;
        EXPECT_EQ(err.status, 400) << c.body;
        EXPECT_EQ(err.param, c.param) << c.body << ": " << err.message;
    }
}

TEST(ServerSchema, ChatShapes) {
    ApiError err;
    auto r = parse(R"({"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],
                      "logprobs":true,"top_logprobs":1,"stream":true,
                      "stream_options":{"include_usage":true}})",
                   Endpoint::Chat, err);
    ASSERT_TRUE(r) << err.message;
    EXPECT_EQ(r->prompt_texts[0], "user:hi\nassistant:");
    EXPECT_EQ(r->params.top_logprobs, 1);
    EXPECT_EQ(r->params.max_tokens, 64 - 18);
    ByteService b;
    Choice c;
    c.text = "ok";
    c.tokens = {'o' + 1, 'k' + 1};
    c.logprobs = {-0.5f, -0.25f};
    c.top_logprobs = {{{'o' + 1, -0.5f}}, {{'k' + 1, -0.25f}}};
    c.finish = engine::FinishReason::Length;
    json full = full_response(*r, b, "id", 1, "m", {c}, Usage{8, 2, 0});
    EXPECT_EQ(full["choices"][0]["message"]["content"], "ok");
    EXPECT_EQ(full["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(full["choices"][0]["logprobs"]["content"][1]["token"], "k");
    EXPECT_EQ(full["usage"]["total_tokens"], 10);
    json chunk = stream_chunk(*r, "id", 1, "m", 0, "o", true, nullptr, engine::FinishReason::None);
    EXPECT_EQ(chunk["choices"][0]["delta"]["role"], "assistant");
    EXPECT_TRUE(chunk["usage"].is_null());
    EXPECT_EQ(sse_event("x"), "data: x\n\n");
}

TEST(ServerSchema, ContinueFinalMessageEndsThePromptWithItsText) {
    ApiError err;
    const char* convo = R"("messages":[{"role":"user","content":"hi"},
                                      {"role":"assistant","content":" The answer is "}])";
    // Left open (the template's "\n" after it cut), with the generation prompt off by
    // default; the trimmed text is found too.
    auto r =
        parse(fmt::format(R"({{{},"continue_final_message":true}})", convo), Endpoint::Chat, err);
    ASSERT_TRUE(r) << err.message;
    EXPECT_EQ(r->prompt_texts[0], "user:hi\nassistant: The answer is ");
    r = parse(fmt::format(R"({{{},"add_generation_prompt":false}})", convo), Endpoint::Chat, err);
    ASSERT_TRUE(r) << err.message;
    EXPECT_EQ(r->prompt_texts[0], "user:hi\nassistant: The answer is \n");
    // The plain request opens a new assistant turn after it.
    r = parse(fmt::format(R"({{{}}})", convo), Endpoint::Chat, err);
    ASSERT_TRUE(r) << err.message;
    EXPECT_EQ(r->prompt_texts[0], "user:hi\nassistant: The answer is \nassistant:");

    struct Case {
        std::string body;
        Endpoint kind;
        const char* param;
    };
    const Case refused[] = {
        {fmt::format(R"({{{},"continue_final_message":true,"add_generation_prompt":true}})", convo),
         Endpoint::Chat, "continue_final_message"},
        {R"({"messages":[{"role":"user","content":"hi"}],"continue_final_message":true})",
         Endpoint::Chat, "continue_final_message"},
        {R"({"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":""}],
             "continue_final_message":true})",
         Endpoint::Chat, "continue_final_message"},
        {fmt::format(R"({{{},"continue_final_message":"yes"}})", convo), Endpoint::Chat,
         "continue_final_message"},
        {fmt::format(R"({{{},"add_generation_prompt":1}})", convo), Endpoint::Chat,
         "add_generation_prompt"},
        {R"({"prompt":"hi","continue_final_message":true})", Endpoint::Completions,
         "continue_final_message"},
        {R"({"prompt":"hi","add_generation_prompt":false})", Endpoint::Completions,
         "add_generation_prompt"},
    };
    for (const auto& c : refused) {
        EXPECT_FALSE(parse(c.body, c.kind, err)) << c.body;
        EXPECT_EQ(err.status, 400) << c.body;
        EXPECT_EQ(err.param, c.param) << c.body << ": " << err.message;
    }
}

TEST(ServerAuth, Bearer) {
    EXPECT_TRUE(authorized("", ""));
    EXPECT_TRUE(authorized("Bearer k1", "k1"));
    EXPECT_TRUE(authorized("bearer  k1 ", "k1"));
    EXPECT_FALSE(authorized("Bearer k2", "k1"));
    EXPECT_FALSE(authorized("k1", "k1"));
    EXPECT_FALSE(authorized("", "k1"));
    // A prefix of the key, the key and more, and a guess with a NUL where the key ends.
    EXPECT_FALSE(authorized("Bearer k", "k1"));
    EXPECT_FALSE(authorized("Bearer k12", "k1"));
    EXPECT_FALSE(authorized(std::string_view("Bearer k1\0", 10), "k1"));
    EXPECT_FALSE(authorized("Bearer ", "k1"));
}

TEST(ServerPrometheus, NamesAndHistogram) {
    engine::EngineMetrics m;
    m.running = 3;
    m.finished["stop"] = 2;
    m.ttft.observe(0.01);
    std::string t = render_prometheus(m, {}, "mod\"el");
    EXPECT_NE(t.find("ferry:num_requests_running{model_name=\"mod\\\"el\"} 3"), std::string::npos)
        << t;
    EXPECT_NE(
        t.find("ferry:request_success_total{model_name=\"mod\\\"el\",finished_reason=\"stop\"} 2"),
        std::string::npos);
    EXPECT_NE(t.find("ferry:time_to_first_token_seconds_count{model_name=\"mod\\\"el\"} 1"),
              std::string::npos);
    EXPECT_NE(t.find("# TYPE ferry:e2e_request_latency_seconds histogram"), std::string::npos);
    EXPECT_EQ(t.find("process_"), std::string::npos);       // no /proc figures: none made up
    EXPECT_EQ(t.find("device_memory"), std::string::npos);  // no device known: no gauge

    m.device = "cuda", m.device_memory_total = 80ull << 30, m.device_memory_free = 6ull << 30;
    m.kv_pool_bytes = 60ull << 30;
    t = render_prometheus(m, {}, "m");
    EXPECT_NE(t.find("ferry:device_memory_total_bytes{model_name=\"m\",device=\"cuda\"} " +
                     std::to_string(80ull << 30)),
              std::string::npos)
        << t;
    EXPECT_NE(t.find("ferry:device_memory_free_bytes{model_name=\"m\",device=\"cuda\"} " +
                     std::to_string(6ull << 30)),
              std::string::npos);
    EXPECT_NE(t.find("ferry:kv_cache_pool_bytes{model_name=\"m\"} " + std::to_string(60ull << 30)),
              std::string::npos);
}

TEST(ServerPrometheus, ProcessMetricsUnderTheStandardNames) {
    ServerCounters c;
    c.process = read_process_stats();
    ASSERT_TRUE(c.process.ok);
    c.process.open_fds = 17;
    c.process.threads = 9;
    const std::string t = render_prometheus({}, c, "m");
    EXPECT_NE(t.find("\nprocess_open_fds 17\n"), std::string::npos) << t;
    EXPECT_NE(t.find("\nprocess_threads 9\n"), std::string::npos);
    EXPECT_NE(t.find("# TYPE process_cpu_seconds_total counter\n"), std::string::npos);
    EXPECT_NE(t.find(fmt::format("\nprocess_resident_memory_bytes {}\n", c.process.resident_bytes)),
              std::string::npos);
}

}  // namespace
}  // namespace ferry::server
