#include "tokenizer/jinja/interpreter.h"

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/error.h"

namespace ferry::tokenizer::jinja {

const Value* Frame::find_here(std::string_view name) const {
    for (const auto& [k, v] : vars)
        if (k == name) return &v;
    return nullptr;
}

void Frame::set(const std::string& name, Value v) {
    for (auto& [k, x] : vars) {
        if (k == name) {
            x = std::move(v);
            return;
        }
    }
    vars.emplace_back(name, std::move(v));
}

namespace {

// Swaps the interpreter's scope for the duration of a block and puts it back, also when the
// block throws (a template error ends the render, but the interpreter stays consistent).
class ScopeSwap {
  public:
    ScopeSwap(std::shared_ptr<Frame>& slot, std::shared_ptr<Frame> next)
        : slot_(slot), saved_(std::move(slot)) {
        slot_ = std::move(next);
    }
    ~ScopeSwap() { slot_ = std::move(saved_); }
    ScopeSwap(const ScopeSwap&) = delete;
    ScopeSwap& operator=(const ScopeSwap&) = delete;

  private:
    std::shared_ptr<Frame>& slot_;
    std::shared_ptr<Frame> saved_;
};

std::shared_ptr<Frame> child_of(const std::shared_ptr<Frame>& parent) {
    auto f = std::make_shared<Frame>();
    f->parent = parent;
    return f;
}

CmpOp cmp_of(CompareOp op) {
    switch (op) {
        case CompareOp::Eq:
            return CmpOp::Eq;
        case CompareOp::Ne:
            return CmpOp::Ne;
        case CompareOp::Lt:
            return CmpOp::Lt;
        case CompareOp::Le:
            return CmpOp::Le;
        case CompareOp::Gt:
            return CmpOp::Gt;
        default:
            return CmpOp::Ge;
    }
}

// transformers' namespace refuses underscore-prefixed names (a sandbox-escape guard).
void check_namespace_name(const std::string& name) {
    if (!name.empty() && name[0] == '_')
        fail(
            "Chat templates cannot store underscore-prefixed attributes on a namespace, but got "
            "'{}'. Please rename the attribute.",
            name);
}

}  // namespace

Interpreter::~Interpreter() {
    // Macros hold the frame they were defined in, and that frame holds them: clearing the
    // captured frames breaks the cycle so a render leaks nothing.
    for (auto& f : captured_)
        if (f) f->vars.clear();
    for (auto& ns : namespaces_) ns.dict_ref().clear();
}

std::string Interpreter::render(const Body& body, std::shared_ptr<Frame> globals) {
    scope_ = child_of(globals);
    captured_.push_back(scope_);
    std::string out;
    exec(body, out);
    return out;
}

void Interpreter::check_size(size_t bytes) const {
    if (bytes > limits_.max_output_bytes)
        fail("the rendered text would exceed {} bytes", limits_.max_output_bytes);
}

void Interpreter::count_iterations(int64_t n) {
    iterations_ += n;
    if (iterations_ > limits_.max_iterations)
        fail("loops ran more than {} iterations in total", limits_.max_iterations);
}

Interpreter::Flow Interpreter::exec(const Body& body, std::string& out) {
    for (const auto& s : body) {
        const Flow f = exec_stmt(*s, out);
        if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
}

std::string Interpreter::render_scoped(const Body& body) {
    ScopeSwap swap(scope_, child_of(scope_));
    std::string out;
    exec(body, out);
    return out;
}

Interpreter::Flow Interpreter::exec_stmt(const Stmt& s, std::string& out) {
    try {
        switch (s.kind) {
            case Stmt::Kind::Text:
                out += static_cast<const TextStmt&>(s).text;
                check_size(out.size());
                return Flow::Normal;
            case Stmt::Kind::Output:
                out += to_str(eval(*static_cast<const OutputStmt&>(s).expr));
                check_size(out.size());
                return Flow::Normal;
            case Stmt::Kind::If: {
                const auto& st = static_cast<const IfStmt&>(s);
                for (const auto& [cond, body] : st.branches)
                    if (truthy(eval(*cond))) return exec(body, out);
                return exec(st.otherwise, out);
            }
            case Stmt::Kind::For:
                exec_for(static_cast<const ForStmt&>(s), out);
                return Flow::Normal;
            case Stmt::Kind::Set: {
                const auto& st = static_cast<const SetStmt&>(s);
                assign(st.target, eval(*st.value));
                return Flow::Normal;
            }
            case Stmt::Kind::SetBlock: {
                const auto& st = static_cast<const SetBlockStmt&>(s);
                Value v(render_scoped(st.body));
                for (const auto& f : st.filters) v = eval_filter(*f, std::move(v));
                assign(st.target, std::move(v));
                return Flow::Normal;
            }
            case Stmt::Kind::Macro: {
                const auto& st = static_cast<const MacroStmt&>(s);
                scope_->set(st.name, make_macro(st.name, &st.params, &st.body));
                return Flow::Normal;
            }
            case Stmt::Kind::CallBlock: {
                const auto& st = static_cast<const CallBlockStmt&>(s);
                Value callee = eval(*st.call->callee);
                CallArgs args = eval_args(st.call->args);
                args.named.emplace_back("caller",
                                        make_macro("caller", &st.caller_params, &st.body));
                out += to_str(call(callee, args));
                check_size(out.size());
                return Flow::Normal;
            }
            case Stmt::Kind::FilterBlock: {
                const auto& st = static_cast<const FilterBlockStmt&>(s);
                Value v(render_scoped(st.body));
                for (const auto& f : st.filters) v = eval_filter(*f, std::move(v));
                out += to_str(v);
                check_size(out.size());
                return Flow::Normal;
            }
            case Stmt::Kind::With: {
                const auto& st = static_cast<const WithStmt&>(s);
                std::vector<Value> values;
                for (const auto& [t, e] : st.assigns) values.push_back(eval(*e));
                ScopeSwap swap(scope_, child_of(scope_));
                for (size_t i = 0; i < values.size(); ++i) assign(st.assigns[i].first, values[i]);
                return exec(st.body, out);
            }
            case Stmt::Kind::Scope:
                out += render_scoped(static_cast<const ScopeStmt&>(s).body);
                check_size(out.size());
                return Flow::Normal;
            case Stmt::Kind::Break:
                return Flow::Break;
            case Stmt::Kind::Continue:
                return Flow::Continue;
        }
    } catch (TemplateError& e) {
        e.set_line_if_unset(s.line);
        throw;
    }
    return Flow::Normal;
}

void Interpreter::exec_for(const ForStmt& s, std::string& out) {
    List items = iterate(eval(*s.iter));
    if (s.filter) {
        // `for x in xs if cond`: the loop (its index, length, first/last) sees only the kept.
        List kept;
        for (auto& x : items) {
            count_iterations(1);
            ScopeSwap swap(scope_, child_of(scope_));
            assign(s.target, x);
            if (truthy(eval(*s.filter))) kept.push_back(std::move(x));
        }
        items = std::move(kept);
    }
    if (items.empty()) {
        ScopeSwap swap(scope_, child_of(scope_));
        exec(s.otherwise, out);
        return;
    }
    const int64_t n = int64_t(items.size());
    auto last_changed = std::make_shared<std::optional<Value>>();
    const std::shared_ptr<Frame> outer = scope_;
    for (int64_t i = 0; i < n; ++i) {
        count_iterations(1);
        // A fresh scope per iteration: what the body sets is gone at the next one (jinja2).
        ScopeSwap swap(scope_, child_of(outer));
        assign(s.target, items[size_t(i)]);
        Dict loop;
        loop.set("index", i + 1);
        loop.set("index0", i);
        loop.set("revindex", n - i);
        loop.set("revindex0", n - i - 1);
        loop.set("first", i == 0);
        loop.set("last", i == n - 1);
        loop.set("length", n);
        loop.set("depth", 1);
        loop.set("depth0", 0);
        loop.set("previtem",
                 i > 0 ? items[size_t(i - 1)] : Value::undefined("there is no previous item"));
        loop.set("nextitem",
                 i + 1 < n ? items[size_t(i + 1)] : Value::undefined("there is no next item"));
        loop.set("cycle", Value::callable("loop.cycle", [i](Interpreter&, CallArgs& a) -> Value {
                     if (a.positional.empty()) fail("no items for cycling given");
                     return a.positional[size_t(i) % a.positional.size()];
                 }));
        loop.set("changed", Value::callable("loop.changed",
                                            [last_changed](Interpreter&, CallArgs& a) -> Value {
                                                Value now = Value::list(a.positional);
                                                if (*last_changed && equal(**last_changed, now))
                                                    return false;
                                                *last_changed = std::move(now);
                                                return true;
                                            }));
        scope_->set("loop", Value::make_namespace(std::move(loop)));
        if (exec(s.body, out) == Flow::Break) break;
    }
}

void Interpreter::assign(const Target& t, Value v) {
    switch (t.kind) {
        case Target::Kind::Name:
            scope_->set(t.names[0], std::move(v));
            return;
        case Target::Kind::Unpack: {
            if (!v.is_sequence() && !v.is_string() && !v.is_dict())
                fail("cannot unpack non-iterable {} object", type_name(v));
            List items = iterate(v);
            if (items.size() < t.names.size())
                fail("not enough values to unpack (expected {}, got {})", t.names.size(),
                     items.size());
            if (items.size() > t.names.size())
                fail("too many values to unpack (expected {})", t.names.size());
            for (size_t i = 0; i < items.size(); ++i) scope_->set(t.names[i], std::move(items[i]));
            return;
        }
        case Target::Kind::NamespaceAttr: {
            Value ns = lookup(t.names[0]);
            if (!ns.is_namespace()) fail("cannot assign attribute on non-namespace object");
            check_namespace_name(t.attr);
            ns.dict_ref().set(Value(t.attr), std::move(v));
            return;
        }
    }
}

Value Interpreter::make_macro(std::string name, const MacroParams* params, const Body* body) {
    std::shared_ptr<Frame> closure = scope_;
    captured_.push_back(closure);
    return Value::callable(name, [name, params, body, closure](Interpreter& in, CallArgs& args) {
        return in.call_macro(name, *params, *body, closure, args);
    });
}

Value Interpreter::call_macro(const std::string& name, const MacroParams& params, const Body& body,
                              const std::shared_ptr<Frame>& closure, CallArgs& args) {
    if (call_depth_ >= limits_.max_call_depth)
        fail("macro calls nested more than {} deep (a macro calling itself without end?)",
             limits_.max_call_depth);
    auto frame = child_of(closure);
    const size_t n = params.names.size();
    if (args.positional.size() > n) fail("macro '{}' takes not more than {} argument(s)", name, n);
    std::vector<bool> given(n, false);
    for (size_t i = 0; i < args.positional.size(); ++i) {
        frame->set(params.names[i], std::move(args.positional[i]));
        given[i] = true;
    }
    for (auto& [key, v] : args.named) {
        if (key == "caller") {
            frame->set("caller", std::move(v));
            continue;
        }
        size_t k = 0;
        while (k < n && params.names[k] != key) ++k;
        if (k == n) fail("macro '{}' takes no keyword argument '{}'", name, key);
        if (given[k]) fail("macro '{}' got multiple values for argument '{}'", name, key);
        frame->set(key, std::move(v));
        given[k] = true;
    }
    ScopeSwap swap(scope_, frame);
    for (size_t k = 0; k < n; ++k) {
        if (given[k]) continue;
        // Defaults are evaluated at the call, in the macro's scope (they may name earlier
        // parameters), as jinja2 does.
        frame->set(params.names[k], params.defaults[k]
                                        ? eval(*params.defaults[k])
                                        : Value::undefined(fmt::format(
                                              "parameter '{}' was not provided", params.names[k])));
    }
    ++call_depth_;
    std::string out;
    try {
        exec(body, out);
    } catch (...) {
        --call_depth_;
        throw;
    }
    --call_depth_;
    return Value(std::move(out));
}

Value Interpreter::call(const Value& callee, CallArgs& args) {
    if (callee.is_callable()) return callee.callable_ref().fn(*this, args);
    if (callee.is_undefined()) fail_undefined(callee);
    fail("'{}' object is not callable", type_name(callee));
}

Value Interpreter::lookup(const std::string& name) const {
    for (const Frame* f = scope_.get(); f; f = f->parent.get())
        if (const Value* v = f->find_here(name)) return *v;
    return Value::undefined(fmt::format("'{}' is undefined", name));
}

CallArgs Interpreter::eval_args(const Args& a) {
    CallArgs out;
    out.positional.reserve(a.positional.size());
    for (const auto& e : a.positional) out.positional.push_back(eval(*e));
    for (const auto& [k, e] : a.named) out.named.emplace_back(k, eval(*e));
    return out;
}

Value Interpreter::eval_filter(const FilterExpr& f, Value subject) {
    CallArgs args = eval_args(f.args);
    return apply_filter(*this, f.name, subject, args);
}

Value Interpreter::eval(const Expr& e) {
    try {
        return eval_inner(e);
    } catch (TemplateError& err) {
        err.set_line_if_unset(e.line);
        throw;
    }
}

Value Interpreter::eval_inner(const Expr& e) {
    switch (e.kind) {
        case Expr::Kind::Literal:
            return static_cast<const LiteralExpr&>(e).value;
        case Expr::Kind::Name:
            return lookup(static_cast<const NameExpr&>(e).name);
        case Expr::Kind::List:
        case Expr::Kind::Tuple: {
            const auto& s = static_cast<const SeqExpr&>(e);
            List items;
            items.reserve(s.items.size());
            for (const auto& x : s.items) items.push_back(eval(*x));
            return e.kind == Expr::Kind::List ? Value::list(std::move(items))
                                              : Value::tuple(std::move(items));
        }
        case Expr::Kind::Dict: {
            Dict d;
            for (const auto& [k, v] : static_cast<const DictExpr&>(e).items) {
                Value key = eval(*k);
                if (key.is_list() || key.is_dict() || key.is_undefined())
                    fail("unhashable type: '{}'", type_name(key));
                d.set(std::move(key), eval(*v));
            }
            return Value::dict(std::move(d));
        }
        case Expr::Kind::Attr: {
            const auto& a = static_cast<const AttrExpr&>(e);
            return get_attr(eval(*a.object), a.name);
        }
        case Expr::Kind::Subscript: {
            const auto& s = static_cast<const SubscriptExpr&>(e);
            Value obj = eval(*s.object);
            if (s.index->kind == Expr::Kind::Slice) {
                const auto& sl = static_cast<const SliceExpr&>(*s.index);
                auto part = [&](const ExprPtr& p) { return p ? eval(*p) : Value(nullptr); };
                return slice(obj, part(sl.start), part(sl.stop), part(sl.step));
            }
            return get_item(obj, eval(*s.index));
        }
        case Expr::Kind::Slice:
            fail("a slice outside a subscript");
        case Expr::Kind::Call: {
            const auto& c = static_cast<const CallExpr&>(e);
            Value callee = eval(*c.callee);
            CallArgs args = eval_args(c.args);
            return call(callee, args);
        }
        case Expr::Kind::Filter: {
            const auto& f = static_cast<const FilterExpr&>(e);
            return eval_filter(f, eval(*f.operand));
        }
        case Expr::Kind::Test: {
            const auto& t = static_cast<const TestExpr&>(e);
            Value v = eval(*t.operand);
            CallArgs args = eval_args(t.args);
            const bool r = apply_test(*this, t.name, v, args);
            return t.negated ? !r : r;
        }
        case Expr::Kind::Neg:
        case Expr::Kind::Pos:
            return negate(eval(*static_cast<const UnaryExpr&>(e).operand),
                          e.kind == Expr::Kind::Neg);
        case Expr::Kind::Not:
            return !truthy(eval(*static_cast<const UnaryExpr&>(e).operand));
        case Expr::Kind::Binary: {
            const auto& b = static_cast<const BinaryExpr&>(e);
            Value l = eval(*b.left);
            return binary_op(*this, b.op, l, eval(*b.right));
        }
        case Expr::Kind::And:
        case Expr::Kind::Or: {
            // Python's: the deciding operand itself, not a bool.
            const auto& b = static_cast<const BinaryExpr&>(e);
            Value l = eval(*b.left);
            if (truthy(l) == (e.kind == Expr::Kind::Or)) return l;
            return eval(*b.right);
        }
        case Expr::Kind::Concat: {
            std::string s;
            for (const auto& p : static_cast<const ConcatExpr&>(e).parts) {
                s += to_str(eval(*p));
                check_size(s.size());
            }
            return Value(std::move(s));
        }
        case Expr::Kind::Compare: {
            const auto& c = static_cast<const CompareExpr&>(e);
            Value left = eval(*c.first);
            for (const auto& [op, x] : c.rest) {
                Value right = eval(*x);
                bool r;
                if (op == CompareOp::In)
                    r = contains(right, left);
                else if (op == CompareOp::NotIn)
                    r = !contains(right, left);
                else
                    r = compare(cmp_of(op), left, right);
                if (!r) return false;
                left = std::move(right);
            }
            return true;
        }
        case Expr::Kind::Cond: {
            const auto& c = static_cast<const CondExpr&>(e);
            if (truthy(eval(*c.test))) return eval(*c.then);
            if (c.otherwise) return eval(*c.otherwise);
            return Value::undefined(
                fmt::format("the inline if-expression on line {} evaluated to false and no else "
                            "section was defined.",
                            e.line));
        }
    }
    fail("unknown expression");
}

}  // namespace ferry::tokenizer::jinja
