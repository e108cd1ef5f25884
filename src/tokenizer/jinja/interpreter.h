// Walks a parsed template with jinja2's scoping: `set` inside a for-loop body is gone at the
// next iteration (hence namespace()), `if` opens no scope, a macro reads the names of the scope
// it was defined in as they are when it is called. One Interpreter is one render; the
// template it walks is shared and never written.
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace ferry::tokenizer::jinja {

// A render is bounded in every direction a template (or a conversation fed to it) could run
// away: a macro calling itself, a loop over range() in a loop, a string doubled in a loop.
struct RenderLimits {
    size_t max_output_bytes = size_t(32) << 20;  // the output, and any one string built
    int64_t max_iterations = 1'000'000;          // loop iterations, all loops together
    int max_call_depth = 100;                    // macros calling macros
};

struct Frame {
    std::vector<std::pair<std::string, Value>> vars;
    std::shared_ptr<Frame> parent;

    const Value* find_here(std::string_view name) const;
    void set(const std::string& name, Value v);
};

class Interpreter {
  public:
    Interpreter(RenderLimits limits, std::tm now) : limits_(limits), now_(now) {}
    ~Interpreter();
    Interpreter(const Interpreter&) = delete;
    Interpreter& operator=(const Interpreter&) = delete;

    // Renders `body` with `globals` as the outermost scope; throws TemplateError.
    std::string render(const Body& body, std::shared_ptr<Frame> globals);

    // For the builtins: calls, filters and tests by name, and the render's bounds.
    Value call(const Value& callee, CallArgs& args);
    void check_size(size_t bytes) const;
    void count_iterations(int64_t n);
    const std::tm& now() const { return now_; }
    // A namespace can be made to hold itself (`set ns.me = [ns]`); the render empties the ones
    // it made when it ends, so such a cycle is not leaked.
    void own_namespace(const Value& ns) { namespaces_.push_back(ns); }

  private:
    enum class Flow { Normal, Break, Continue };

    RenderLimits limits_;
    std::tm now_;
    std::shared_ptr<Frame> scope_;
    int call_depth_ = 0;
    int64_t iterations_ = 0;
    std::vector<std::shared_ptr<Frame>> captured_;  // frames that macros closed over
    std::vector<Value> namespaces_;

    Flow exec(const Body& body, std::string& out);
    Flow exec_stmt(const Stmt& s, std::string& out);
    void exec_for(const ForStmt& s, std::string& out);
    void assign(const Target& t, Value v);
    std::string render_scoped(const Body& body);

  public:  // for the closures the interpreter makes of macros
    Value call_macro(const std::string& name, const MacroParams& params, const Body& body,
                     const std::shared_ptr<Frame>& closure, CallArgs& args);

  private:
    Value make_macro(std::string name, const MacroParams* params, const Body* body);

    Value eval(const Expr& e);
    Value eval_inner(const Expr& e);
    Value lookup(const std::string& name) const;
    CallArgs eval_args(const Args& a);
    Value eval_filter(const FilterExpr& f, Value subject);
};

}  // namespace ferry::tokenizer::jinja
