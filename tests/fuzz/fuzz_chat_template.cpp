// The Jinja chat-template interpreter: the input is a template (a model file's
// tokenizer.chat_template), parsed, then rendered over a plain conversation and over one with
// a system prompt, tools, a tool call and its result, as the server renders them.
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fuzz_target.h"
#include "tokenizer/chat_template.h"

namespace {

using ferry::tokenizer::ChatMessage;
using ferry::tokenizer::ChatTemplate;

std::vector<ChatMessage> with_tools() {
    std::vector<ChatMessage> m{{"system", "Be brief."}, {"user", "Weather in Paris?"}};
    ChatMessage call{"assistant", std::nullopt};
    call.tool_calls.push_back({"call_1", "function", "get_weather", {{"city", "Paris"}}});
    m.push_back(call);
    ChatMessage result{"tool", "{\"temp\": 21}"};
    result.tool_call_id = "call_1";
    result.name = "get_weather";
    m.push_back(result);
    m.push_back({"assistant",
                 "21 \xc2\xb0"
                 "C."});
    m.push_back({"user", "Thanks"});
    return m;
}

}  // namespace

FERRY_FUZZ_TARGET(chat_template)(const uint8_t* data, size_t size) {
    static const std::vector<ChatMessage> plain{
        {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "What is 2+2?"}};
    static const std::vector<ChatMessage> tooled = with_tools();
    static const auto tools = nlohmann::ordered_json::parse(R"([{"type":"function","function":{
        "name":"get_weather","description":"Current weather","parameters":{"type":"object",
        "properties":{"city":{"type":"string"}},"required":["city"]}}}])");
    static const auto extra = nlohmann::ordered_json::parse(R"({"enable_thinking":false})");

    auto t = ChatTemplate::from_source(std::string(reinterpret_cast<const char*>(data), size),
                                       "<s>", "</s>");
    if (!t.ok()) return 0;
    std::tm now{};
    now.tm_year = 126, now.tm_mon = 11, now.tm_mday = 3;
    t->fix_time(now);
    (void)t->apply(plain, true);
    (void)t->apply(tooled, false, tools, extra);
    return 0;
}
