#include "tokenizer/chat_template.h"

#include <optional>
#include <string_view>

namespace ferry::tokenizer {

namespace {

bool contains(std::string_view s, std::string_view needle) {
    return s.find(needle) != std::string_view::npos;
}

// Jinja's `trim` filter (Python str.strip), limited to ASCII whitespace.
std::string trim(std::string_view s) {
    constexpr std::string_view ws = " \t\n\r\f\v";
    size_t b = s.find_first_not_of(ws);
    if (b == std::string_view::npos) return {};
    size_t e = s.find_last_not_of(ws);
    return std::string(s.substr(b, e - b + 1));
}

// The string literal that starts just after `open` (a quote) in `src`, unescaped; nullopt
// when it is not closed.
std::optional<std::string> read_literal(std::string_view src, size_t open) {
    char quote = src[open];
    std::string out;
    for (size_t i = open + 1; i < src.size(); ++i) {
        char c = src[i];
        if (c == quote) return out;
        if (c == '\\' && i + 1 < src.size()) {
            char e = src[++i];
            out += e == 'n' ? '\n' : e == 't' ? '\t' : e;
        } else {
            out += c;
        }
    }
    return std::nullopt;
}

// SmolLM2 and Qwen2 style templates print a fixed system turn when the conversation has
// none: a literal "<|im_start|>system\n...<|im_end|>" guarded by a "!= 'system'" test.
std::string find_default_system(std::string_view src) {
    if (!contains(src, "!= 'system'") && !contains(src, "!= \"system\"")) return {};
    constexpr std::string_view head = "<|im_start|>system\n", tail = "<|im_end|>";
    for (size_t at = src.find("<|im_start|>system"); at != std::string_view::npos;
         at = src.find("<|im_start|>system", at + 1)) {
        if (at == 0 || (src[at - 1] != '\'' && src[at - 1] != '"')) continue;
        auto lit = read_literal(src, at - 1);
        if (!lit || lit->rfind(head, 0) != 0) continue;
        size_t end = lit->find(tail);
        if (end == std::string::npos) continue;  // system content is concatenated in
        return lit->substr(head.size(), end - head.size());
    }
    return {};
}

}  // namespace

Expected<ChatTemplate> ChatTemplate::from_source(const std::string& source, std::string bos_text,
                                                 std::string eos_text) {
    ChatTemplate t;
    t.bos_ = std::move(bos_text);
    t.eos_ = std::move(eos_text);
    if (source.empty())
        return make_error("unsupported chat template: the model has none (empty template)");
    if (contains(source, "<|start_header_id|>")) {
        // Llama 3.1+ add a "Cutting Knowledge Date" system turn that this renderer lacks.
        if (contains(source, "Cutting Knowledge Date"))
            return make_error(
                "unsupported chat template: Llama-3.1 style (date/tool system header)");
        t.family_ = Family::Llama3;
    } else if (contains(source, "<|im_start|>")) {
        t.family_ = Family::ChatML;
        t.default_system_ = find_default_system(source);
    } else if (contains(source, "<start_of_turn>")) {
        t.family_ = Family::Gemma;
    } else if (contains(source, "[INST]") && contains(source, "<<SYS>>")) {
        t.family_ = Family::Llama2;  // Mistral's [INST] without <<SYS>> renders differently
    } else {
        std::string head = source.substr(0, 60);
        for (char& c : head)
            if (c == '\n') c = ' ';
        return make_error("unsupported chat template: not ChatML, Llama-2/3 or Gemma: \"{}{}\"",
                          head, source.size() > 60 ? "..." : "");
    }
    return t;
}

const char* ChatTemplate::family_name() const {
    switch (family_) {
        case Family::ChatML:
            return "chatml";
        case Family::Llama3:
            return "llama3";
        case Family::Llama2:
            return "llama2";
        case Family::Gemma:
            return "gemma";
    }
    return "?";
}

std::string ChatTemplate::apply(const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt) const {
    std::string out;
    const bool has_system = !messages.empty() && messages[0].role == "system";
    switch (family_) {
        case Family::ChatML:
            if (!has_system && !default_system_.empty() && !messages.empty())
                out += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
            for (const auto& m : messages)
                out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
            if (add_generation_prompt) out += "<|im_start|>assistant\n";
            break;
        case Family::Llama3:
            for (size_t i = 0; i < messages.size(); ++i) {
                if (i == 0) out += bos_;
                out += "<|start_header_id|>" + messages[i].role + "<|end_header_id|>\n\n" +
                       trim(messages[i].content) + "<|eot_id|>";
            }
            if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
            break;
        case Family::Llama2: {
            // Meta's template: the system prompt is folded into the first user turn.
            size_t first = has_system ? 1 : 0;
            for (size_t i = first; i < messages.size(); ++i) {
                std::string content = messages[i].content;
                if (i == first && has_system)
                    content = "<<SYS>>\n" + messages[0].content + "\n<</SYS>>\n\n" + content;
                if (messages[i].role == "user")
                    out += bos_ + "[INST] " + trim(content) + " [/INST]";
                else if (messages[i].role == "assistant")
                    out += " " + trim(content) + " " + eos_;
            }
            break;
        }
        case Family::Gemma: {
            // Gemma has no system role; Gemma-3's template prefixes it to the first turn.
            out += bos_;
            size_t first = has_system ? 1 : 0;
            for (size_t i = first; i < messages.size(); ++i) {
                std::string prefix = i == first && has_system ? messages[0].content + "\n\n" : "";
                const std::string& role = messages[i].role;
                out += "<start_of_turn>" + (role == "assistant" ? std::string("model") : role) +
                       "\n" + prefix + trim(messages[i].content) + "<end_of_turn>\n";
            }
            if (add_generation_prompt) out += "<start_of_turn>model\n";
            break;
        }
    }
    return out;
}

}  // namespace ferry::tokenizer
