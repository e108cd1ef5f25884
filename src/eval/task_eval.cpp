#include "eval/task_eval.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/generator.h"
#include "tokenizer/utf8.h"

namespace ferry::eval {
namespace {

using nlohmann::json;

constexpr int kMaxTaskTokens = 4096;

bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

std::string_view trim_left(std::string_view s) {
    while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
    return s;
}

std::string_view trim(std::string_view s) {
    s = trim_left(s);
    while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
    return s;
}

std::optional<MatchRule> parse_match_rule(const std::string& s) {
    if (s == "prefix") return MatchRule::Prefix;
    if (s == "exact") return MatchRule::Exact;
    if (s == "contains") return MatchRule::Contains;
    if (s == "regex") return MatchRule::Regex;
    return std::nullopt;
}

// Checks one line's object; `where` is "FILE:LINE" for the messages.
Expected<EvalTask> parse_task(const json& j, const std::string& where, int line) {
    if (!j.is_object()) return make_error("{}: a task must be a JSON object", where);
    static const std::set<std::string> known = {"id",     "category", "messages",  "prompt",
                                                "answer", "match",    "max_tokens"};
    for (const auto& [key, _] : j.items())
        if (!known.count(key))
            return make_error(
                "{}: unknown key \"{}\" (known: id, category, messages, prompt, "
                "answer, match, max_tokens)",
                where, key);
    auto string_field = [&](const char* key, std::string& out) -> Status {
        if (!j.contains(key)) return Status::Ok();
        if (!j[key].is_string()) return make_error("{}: \"{}\" must be a string", where, key);
        out = j[key].get<std::string>();
        return Status::Ok();
    };

    EvalTask t;
    t.line = line;
    t.id = fmt::format("line{}", line);
    t.category = "general";
    if (auto s = string_field("id", t.id); !s) return s.error();
    if (auto s = string_field("category", t.category); !s) return s.error();
    if (t.id.empty() || t.category.empty())
        return make_error("{}: \"id\" and \"category\" must not be empty", where);

    const bool has_messages = j.contains("messages"), has_prompt = j.contains("prompt");
    if (has_messages == has_prompt)
        return make_error("{}: a task needs exactly one of \"messages\" and \"prompt\"", where);
    if (has_prompt) {
        if (auto s = string_field("prompt", t.prompt); !s) return s.error();
        if (t.prompt.empty()) return make_error("{}: \"prompt\" is empty", where);
    } else {
        const json& m = j["messages"];
        if (!m.is_array() || m.empty())
            return make_error("{}: \"messages\" must be a non-empty array", where);
        for (size_t i = 0; i < m.size(); ++i) {
            const json& msg = m[i];
            if (!msg.is_object() || !msg.contains("role") || !msg.contains("content") ||
                !msg["role"].is_string() || !msg["content"].is_string())
                return make_error(
                    "{}: messages[{}] must be {{\"role\": ..., \"content\": ...}} "
                    "with string values",
                    where, i);
            std::string role = msg["role"].get<std::string>();
            if (role != "system" && role != "user" && role != "assistant")
                return make_error("{}: messages[{}] has role \"{}\" (system, user or assistant)",
                                  where, i, role);
            t.messages.push_back({std::move(role), msg["content"].get<std::string>()});
        }
        // The model answers the last message: a chat ending in its own turn would ask it to
        // continue past its end-of-turn token.
        if (t.messages.back().role != "user")
            return make_error("{}: the last message must have role \"user\"", where);
    }

    if (j.contains("answer")) {
        const json& a = j["answer"];
        // Numbers are accepted as written ("answer": 42) since most arithmetic answers are.
        if (a.is_string())
            t.answer = a.get<std::string>();
        else if (a.is_number_integer())
            t.answer = a.dump();
        else
            return make_error("{}: \"answer\" must be a string or an integer", where);
        if (t.answer->empty()) return make_error("{}: \"answer\" is empty", where);
    }
    if (j.contains("match")) {
        if (!j["match"].is_string()) return make_error("{}: \"match\" must be a string", where);
        auto r = parse_match_rule(j["match"].get<std::string>());
        if (!r)
            return make_error("{}: \"match\" is \"{}\" (prefix, exact, contains or regex)", where,
                              j["match"].get<std::string>());
        t.match = *r;
        if (!t.answer) return make_error("{}: \"match\" without an \"answer\"", where);
    }
    if (t.match == MatchRule::Regex) {
        try {
            std::regex re(*t.answer, std::regex::ECMAScript);
        } catch (const std::regex_error& e) {
            return make_error("{}: \"answer\" is not a valid regular expression: {}", where,
                              e.what());
        }
    }
    if (j.contains("max_tokens")) {
        const json& n = j["max_tokens"];
        if (!n.is_number_integer() || n.get<int64_t>() < 1 || n.get<int64_t>() > kMaxTaskTokens)
            return make_error("{}: \"max_tokens\" must be an integer in 1..{}", where,
                              kMaxTaskTokens);
        t.max_tokens = n.get<int>();
    }
    return t;
}

TaskOutput generate_one(engine::Generator& gen, const tokenizer::Tokenizer& tok,
                        std::span<const int32_t> prompt, int max_tokens, Status& status) {
    engine::SamplingParams greedy;
    greedy.temperature = 0.0f;
    greedy.top_k = 1;
    TaskOutput out;
    gen.reset();
    auto st = gen.generate(
        prompt, greedy, max_tokens,
        [&](int32_t t) {
            out.tokens.push_back(t);
            return true;
        },
        [&](int32_t t) { return tok.is_eog(t); });
    if (!st) {
        status = st.error();
        return out;
    }
    out.finish_reason = st->finish_reason;
    out.text = tok.decode(out.tokens);
    return out;
}

void add(TaskScore& s, const TaskItem& it, bool has_ref) {
    ++s.n;
    if (it.task->answer) {
        ++s.n_scored;
        s.correct += it.correct;
        s.ref_correct += has_ref && it.ref_correct;
    }
    s.ref_identical += it.ref_identical;
    s.ref_first_line += it.ref_first_line;
}

}  // namespace

const char* match_rule_name(MatchRule r) {
    switch (r) {
        case MatchRule::Prefix:
            return "prefix";
        case MatchRule::Exact:
            return "exact";
        case MatchRule::Contains:
            return "contains";
        case MatchRule::Regex:
            return "regex";
    }
    return "?";
}

bool answer_matches(std::string_view completion, const std::string& answer, MatchRule rule) {
    switch (rule) {
        case MatchRule::Prefix: {
            std::string_view c = trim_left(completion);
            if (c.substr(0, answer.size()) != answer) return false;
            if (c.size() == answer.size()) return true;
            // Only a letter or digit continues the answer's word; punctuation, space or a
            // non-ASCII byte (a new word in another script, an emoji) ends it.
            const auto next = static_cast<unsigned char>(c[answer.size()]);
            return !(next < 0x80 && std::isalnum(next));
        }
        case MatchRule::Exact:
            return trim(completion) == answer;
        case MatchRule::Contains:
            return completion.find(answer) != std::string_view::npos;
        case MatchRule::Regex: {
            // Validated by parse_tasks; a hand-built task with a bad pattern simply fails.
            try {
                std::regex re(answer, std::regex::ECMAScript);
                return std::regex_search(completion.begin(), completion.end(), re);
            } catch (const std::regex_error&) {
                return false;
            }
        }
    }
    return false;
}

std::string first_line(std::string_view text) {
    text = trim_left(text);
    text = text.substr(0, text.find('\n'));
    return std::string(trim(text));
}

std::optional<double> TaskScore::accuracy() const {
    if (!n_scored) return std::nullopt;
    return double(correct) / n_scored;
}

std::optional<double> TaskScore::ref_accuracy() const {
    if (!n_scored) return std::nullopt;
    return double(ref_correct) / n_scored;
}

Expected<std::vector<EvalTask>> parse_tasks(std::string_view jsonl, const std::string& source) {
    std::vector<EvalTask> tasks;
    std::set<std::string> ids;
    int line_no = 0;
    size_t pos = 0;
    while (pos < jsonl.size()) {
        size_t end = jsonl.find('\n', pos);
        if (end == std::string_view::npos) end = jsonl.size();
        std::string_view line = jsonl.substr(pos, end - pos);
        pos = end + 1;
        ++line_no;
        if (trim(line).empty()) continue;
        const std::string where = fmt::format("{}:{}", source, line_no);
        json j;
        try {
            j = json::parse(line);
        } catch (const json::parse_error& e) {
            return make_error("{}: not valid JSON (at character {})", where, e.byte);
        }
        auto t = parse_task(j, where, line_no);
        if (!t) return t.error();
        if (!ids.insert(t->id).second) return make_error("{}: duplicate id \"{}\"", where, t->id);
        tasks.push_back(std::move(t).value());
    }
    if (tasks.empty()) return make_error("{}: no tasks", source);
    return tasks;
}

Expected<std::vector<EvalTask>> load_tasks(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return make_error("{}: cannot be read", path);
    std::stringstream ss;
    ss << in.rdbuf();
    return parse_tasks(ss.str(), path);
}

Expected<TaskEvalResult> run_tasks(const engine::LoadedModel& model, const engine::LoadedModel* ref,
                                   const std::vector<EvalTask>& tasks,
                                   const std::function<void(int, int)>& on_task) {
    const auto& tok = *model.tokenizer;
    const int64_t n_vocab = model.model->config().n_vocab;
    if (ref && ref->model->config().n_vocab != n_vocab)
        return make_error("the reference model has {} tokens in its vocabulary, the model {}",
                          ref->model->config().n_vocab, n_vocab);

    TaskEvalResult r;
    r.has_ref = ref != nullptr;
    r.items.resize(tasks.size());
    std::vector<std::vector<int32_t>> prompts(tasks.size());
    int64_t ctx_needed = 1;
    for (size_t i = 0; i < tasks.size(); ++i) {
        const EvalTask& t = tasks[i];
        if (t.is_chat()) {
            if (!model.chat_template)
                return make_error(
                    "task \"{}\" is a chat, but the model has no chat template "
                    "ferry understands: {}",
                    t.id, model.chat_template_error);
            // The rendered template carries its own BOS text where the model wants one.
            auto text = model.chat_template->apply(t.messages, true);
            if (!text) return make_error("task \"{}\": {}", t.id, text.error().message);
            prompts[i] = tok.encode(*text, false, true);
        } else {
            // Task text is data: "<|im_start|>" in a prompt stays text, not a control token.
            prompts[i] = tok.encode(t.prompt, true, false);
        }
        r.items[i].task = &t;
        r.items[i].prompt_tokens = static_cast<int>(prompts[i].size());
        ctx_needed =
            std::max<int64_t>(ctx_needed, static_cast<int64_t>(prompts[i].size()) + t.max_tokens);
    }
    // Both models must hold the longest task; the shorter training context decides.
    int64_t n_ctx_train = model.model->config().n_ctx_train;
    if (ref) n_ctx_train = std::min<int64_t>(n_ctx_train, ref->model->config().n_ctx_train);
    for (size_t i = 0; i < tasks.size(); ++i)
        if (static_cast<int64_t>(prompts[i].size()) >= n_ctx_train)
            return make_error("task \"{}\" (line {}) is {} tokens, longer than the context of {}",
                              tasks[i].id, tasks[i].line, prompts[i].size(), n_ctx_train);
    const int64_t n_ctx = std::min(ctx_needed, n_ctx_train);

    const int total = static_cast<int>(tasks.size()) * (ref ? 2 : 1);
    int done = 0;
    // One model at a time, so only one cache exists at once.
    auto run_all = [&](const engine::LoadedModel& m, bool is_ref) -> Status {
        engine::Generator gen(*m.model, m.backend, n_ctx);
        for (size_t i = 0; i < tasks.size(); ++i) {
            Status st;
            TaskOutput out = generate_one(gen, tok, prompts[i], tasks[i].max_tokens, st);
            if (!st)
                return make_error("task \"{}\" (line {}): {}", tasks[i].id, tasks[i].line,
                                  st.error().message);
            TaskItem& it = r.items[i];
            const bool ok =
                tasks[i].answer && answer_matches(out.text, *tasks[i].answer, tasks[i].match);
            if (is_ref) {
                it.ref_correct = ok;
                it.ref = std::move(out);
            } else {
                it.correct = ok;
                it.out = std::move(out);
            }
            if (on_task) on_task(++done, total);
        }
        return Status::Ok();
    };
    if (auto s = run_all(model, false); !s) return s.error();
    if (ref)
        if (auto s = run_all(*ref, true); !s) return s.error();

    for (TaskItem& it : r.items) {
        if (it.ref) {
            it.ref_identical =
                it.out.tokens == it.ref->tokens && it.out.finish_reason == it.ref->finish_reason;
            it.ref_first_line = first_line(it.out.text) == first_line(it.ref->text);
        }
        add(r.overall, it, r.has_ref);
        add(r.by_category[it.task->category], it, r.has_ref);
    }
    return r;
}

namespace {

// A completion cut at max_tokens can end inside a character; JSON needs whole ones.
std::string valid_utf8(const std::string& s) {
    std::string out;
    tokenizer::utf8_sanitize(s, true, out);
    return out;
}

json opt_json(std::optional<double> v) {
    return v ? json(*v) : json(nullptr);
}

json score_json(const TaskScore& s, bool has_ref) {
    json j = {{"n", s.n},
              {"n_scored", s.n_scored},
              {"correct", s.correct},
              {"accuracy", opt_json(s.accuracy())}};
    if (has_ref) {
        j["ref_accuracy"] = opt_json(s.ref_accuracy());
        j["ref_agreement"] = s.ref_agreement();
        j["ref_first_line_agreement"] = s.ref_first_line_agreement();
    }
    return j;
}

std::string percent(std::optional<double> v) {
    return v ? fmt::format("{:.1f} %", 100.0 * *v) : std::string("—");
}

}  // namespace

nlohmann::json task_eval_json(const TaskEvalResult& r, bool with_items) {
    json j = score_json(r.overall, r.has_ref);
    json cats = json::object();
    for (const auto& [name, s] : r.by_category) cats[name] = score_json(s, r.has_ref);
    j["by_category"] = std::move(cats);
    if (!with_items) return j;
    json items = json::array();
    for (const TaskItem& it : r.items) {
        json o = {{"id", it.task->id},
                  {"category", it.task->category},
                  {"prompt_tokens", it.prompt_tokens},
                  {"output", valid_utf8(it.out.text)},
                  {"output_tokens", it.out.tokens.size()},
                  {"finish_reason", it.out.finish_reason}};
        if (it.task->answer) {
            o["answer"] = *it.task->answer;
            o["match"] = match_rule_name(it.task->match);
            o["correct"] = it.correct;
        }
        if (it.ref) {
            o["ref_output"] = valid_utf8(it.ref->text);
            o["ref_identical"] = it.ref_identical;
            o["ref_first_line_identical"] = it.ref_first_line;
            if (it.task->answer) o["ref_correct"] = it.ref_correct;
        }
        items.push_back(std::move(o));
    }
    j["items"] = std::move(items);
    return j;
}

std::string task_eval_table(const TaskEvalResult& r) {
    std::string out;
    auto row = [&](const std::string& name, const TaskScore& s) {
        out += fmt::format("  {:<14} {:>4} {:>9}", name, s.n, percent(s.accuracy()));
        if (r.has_ref)
            out += fmt::format(" {:>9} {:>10} {:>10}", percent(s.ref_accuracy()),
                               percent(s.ref_agreement()), percent(s.ref_first_line_agreement()));
        out += "\n";
    };
    out += fmt::format("  {:<14} {:>4} {:>9}", "category", "n", "accuracy");
    if (r.has_ref) out += fmt::format(" {:>9} {:>10} {:>10}", "ref acc", "identical", "1st line");
    out += "\n";
    for (const auto& [name, s] : r.by_category) row(name, s);
    row("all", r.overall);
    return out;
}

}  // namespace ferry::eval
