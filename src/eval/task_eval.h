// Task accuracy (`ferry eval --tasks FILE`): prompts with known short answers, generated
// greedily and checked by a simple rule, plus agreement of the greedy output with a reference
// model. Perplexity and KL average over every token; a quantized model often keeps those
// close while failing the few tokens that decide an arithmetic answer or a format, so this
// measures what a user would see. The file format is described in docs/eval.md.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "engine/loaded_model.h"
#include "tokenizer/chat_template.h"

namespace ferry::eval {

// How a completion is checked against the answer (both compared case-sensitively):
//   prefix   (default) the completion, leading whitespace removed, starts with the answer
//            and the answer is not followed by a letter or digit ("42." and "42 apples"
//            match 42, "420" does not)
//   exact    the completion, whitespace trimmed at both ends, equals the answer
//   contains the answer occurs anywhere in the completion
//   regex    the answer is an ECMAScript regular expression found anywhere in the completion
enum class MatchRule { Prefix, Exact, Contains, Regex };

const char* match_rule_name(MatchRule r);
bool answer_matches(std::string_view completion, const std::string& answer, MatchRule rule);

struct EvalTask {
    std::string id;
    std::string category;
    // Either a chat (rendered with the model's chat template) or a plain completion prompt.
    std::vector<tokenizer::ChatMessage> messages;
    std::string prompt;
    std::optional<std::string> answer;  // absent: scored only by agreement with a reference
    MatchRule match = MatchRule::Prefix;
    int max_tokens = 16;
    int line = 0;  // 1-based line in the task file, for messages

    bool is_chat() const { return !messages.empty(); }
};

// One task per non-blank line; errors name the source and the line.
Expected<std::vector<EvalTask>> parse_tasks(std::string_view jsonl, const std::string& source);
Expected<std::vector<EvalTask>> load_tasks(const std::string& path);

// The first line of a completion: leading whitespace dropped, cut at the first newline,
// trailing whitespace dropped.
std::string first_line(std::string_view text);

struct TaskOutput {
    std::vector<int32_t> tokens;  // generated, the end-of-generation token excluded
    std::string text;
    std::string finish_reason;  // "stop" or "length"
};

struct TaskItem {
    const EvalTask* task = nullptr;
    int prompt_tokens = 0;
    TaskOutput out;
    bool correct = false;  // meaningful when the task has an answer
    std::optional<TaskOutput> ref;
    bool ref_correct = false;
    bool ref_identical = false;   // same token sequence and the same way of ending
    bool ref_first_line = false;  // same first line of text
};

struct TaskScore {
    int n = 0;         // tasks
    int n_scored = 0;  // tasks with an answer
    int correct = 0;
    int ref_correct = 0;
    int ref_identical = 0;
    int ref_first_line = 0;

    std::optional<double> accuracy() const;
    std::optional<double> ref_accuracy() const;
    double ref_agreement() const { return n ? double(ref_identical) / n : 0; }
    double ref_first_line_agreement() const { return n ? double(ref_first_line) / n : 0; }
};

struct TaskEvalResult {
    std::vector<TaskItem> items;
    TaskScore overall;
    std::map<std::string, TaskScore> by_category;
    bool has_ref = false;
};

// Greedy generation of every task with `model` and, when `ref` is given, with the reference
// on the same prompt tokens (the model's tokenizer and chat template: the vocabularies must
// match, so token sequences are comparable). Each model runs on its own backend.
// on_task(done, total) reports progress.
Expected<TaskEvalResult> run_tasks(const engine::LoadedModel& model, const engine::LoadedModel* ref,
                                   const std::vector<EvalTask>& tasks,
                                   const std::function<void(int, int)>& on_task = nullptr);

// The "tasks" object of `ferry eval --json` (keys in docs/eval.md); with_items adds each
// task's outputs.
nlohmann::json task_eval_json(const TaskEvalResult& r, bool with_items);
// The same for people: accuracy overall and per category, and the reference agreement.
std::string task_eval_table(const TaskEvalResult& r);

}  // namespace ferry::eval
