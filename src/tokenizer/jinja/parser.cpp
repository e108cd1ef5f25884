#include "tokenizer/jinja/parser.h"

#include <initializer_list>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/lexer.h"

namespace ferry::tokenizer::jinja {

namespace {

// Deeper nesting than this is no real template; refusing it keeps the recursive descent (and
// the interpreter walking the result) far from the end of the stack.
constexpr int kMaxDepth = 200;

// An open block: its tag and line, for "the 'for' block from line 3 is not closed".
struct OpenBlock {
    std::string tag;
    int line;
};

class Parser {
  public:
    explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

    Body parse_template() {
        Body body = parse_body({}, nullptr);
        return body;
    }

  private:
    std::vector<Token> t_;
    size_t i_ = 0;
    int depth_ = 0;
    int loops_ = 0;  // for-loops open around the current statement (break/continue need one)
    std::vector<OpenBlock> open_;

    struct DepthGuard {
        Parser& p;
        explicit DepthGuard(Parser& parser, int line) : p(parser) {
            if (++p.depth_ > kMaxDepth)
                throw TemplateError(
                    fmt::format("template nested more than {} levels deep", kMaxDepth), line);
        }
        ~DepthGuard() { --p.depth_; }
    };

    const Token& cur() const { return t_[i_]; }
    const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
    const Token& next() { return t_[i_ < t_.size() - 1 ? i_++ : i_]; }

    bool is_op(std::string_view op) const {
        return cur().type == TokenType::Op && cur().text == op;
    }
    bool is_name(std::string_view n) const {
        return cur().type == TokenType::Name && cur().text == n;
    }
    bool skip_op(std::string_view op) {
        if (!is_op(op)) return false;
        next();
        return true;
    }
    bool skip_name(std::string_view n) {
        if (!is_name(n)) return false;
        next();
        return true;
    }

    static std::string describe(const Token& t) {
        switch (t.type) {
            case TokenType::Text:
                return "text";
            case TokenType::VarBegin:
                return "'{{'";
            case TokenType::VarEnd:
                return "'}}'";
            case TokenType::BlockBegin:
                return "'{%'";
            case TokenType::BlockEnd:
                return "'%}'";
            case TokenType::Name:
                return "'" + t.text + "'";
            case TokenType::String:
                return "a string";
            case TokenType::Int:
            case TokenType::Float:
                return "a number";
            case TokenType::Op:
                return "'" + t.text + "'";
            case TokenType::End:
                return "the end of the template";
        }
        return "?";
    }

    [[noreturn]] void error(const std::string& msg) const { throw TemplateError(msg, cur().line); }
    [[noreturn]] void unexpected(const char* expected) const {
        error(fmt::format("expected {}, got {}", expected, describe(cur())));
    }

    void expect_op(std::string_view op) {
        if (!skip_op(op)) error(fmt::format("expected '{}', got {}", op, describe(cur())));
    }
    std::string expect_name(const char* what = "a name") {
        if (cur().type != TokenType::Name) unexpected(what);
        return next().text;
    }
    void expect_block_end() {
        if (cur().type != TokenType::BlockEnd) unexpected("'%}'");
        next();
    }

    // ---- statements -----------------------------------------------------------------------

    // Parses until a block tag whose name is in `ends`; leaves the parser on that name (just
    // after its '{%') and stores it in *which.
    Body parse_body(std::initializer_list<std::string_view> ends, std::string* which) {
        DepthGuard g(*this, cur().line);
        Body body;
        for (;;) {
            const Token& tok = cur();
            switch (tok.type) {
                case TokenType::Text:
                    body.push_back(std::make_unique<TextStmt>(tok.text, tok.line));
                    next();
                    break;
                case TokenType::VarBegin: {
                    next();
                    const int line = cur().line;
                    ExprPtr e = parse_tuple(true, false);
                    if (cur().type != TokenType::VarEnd) unexpected("'}}'");
                    next();
                    body.push_back(std::make_unique<OutputStmt>(std::move(e), line));
                    break;
                }
                case TokenType::BlockBegin: {
                    next();
                    if (cur().type != TokenType::Name) unexpected("a tag name");
                    for (std::string_view e : ends) {
                        if (cur().text == e) {
                            if (which) *which = cur().text;
                            next();
                            return body;
                        }
                    }
                    body.push_back(parse_statement());
                    break;
                }
                case TokenType::End:
                    if (!open_.empty())
                        throw TemplateError(
                            fmt::format(
                                "unexpected end of template: the '{{% {} %}}' block from line "
                                "{} is not closed",
                                open_.back().tag, open_.back().line),
                            tok.line);
                    return body;
                default:
                    error(fmt::format("unexpected {}", describe(tok)));
            }
        }
    }

    Body parse_block_body(const std::string& tag, int line,
                          std::initializer_list<std::string_view> ends, std::string* which) {
        open_.push_back({tag, line});
        Body b = parse_body(ends, which);
        open_.pop_back();
        return b;
    }

    StmtPtr parse_statement() {
        const Token& tok = cur();
        const std::string tag = tok.text;
        const int line = tok.line;
        next();
        if (tag == "if") return parse_if(line);
        if (tag == "for") return parse_for(line);
        if (tag == "set") return parse_set(line);
        if (tag == "macro") return parse_macro(line);
        if (tag == "call") return parse_call_block(line);
        if (tag == "filter") return parse_filter_block(line);
        if (tag == "with") return parse_with(line);
        if (tag == "generation") {
            expect_block_end();
            auto s = std::make_unique<ScopeStmt>(line);
            s->body = parse_block_body(tag, line, {"endgeneration"}, nullptr);
            expect_block_end();
            return s;
        }
        if (tag == "break" || tag == "continue") {
            if (loops_ == 0) throw TemplateError(fmt::format("'{}' outside a for loop", tag), line);
            expect_block_end();
            return std::make_unique<LoopControlStmt>(
                tag == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, line);
        }
        for (const char* unsupported : {"include", "import", "from", "extends", "block", "do",
                                        "autoescape", "trans", "pluralize"})
            if (tag == unsupported)
                throw TemplateError(fmt::format("tag '{}' is not supported", tag), line);
        if (tag.starts_with("end") || tag == "else" || tag == "elif")
            throw TemplateError(
                open_.empty()
                    ? fmt::format("unexpected '{}': no block is open", tag)
                    : fmt::format("unexpected '{}' inside the '{{% {} %}}' block from line {}", tag,
                                  open_.back().tag, open_.back().line),
                line);
        throw TemplateError(fmt::format("unknown tag '{}'", tag), line);
    }

    StmtPtr parse_if(int line) {
        auto s = std::make_unique<IfStmt>(line);
        ExprPtr cond = parse_tuple(true, false);
        expect_block_end();
        for (;;) {
            std::string which;
            Body b = parse_block_body("if", line, {"elif", "else", "endif"}, &which);
            s->branches.emplace_back(std::move(cond), std::move(b));
            if (which == "elif") {
                cond = parse_tuple(true, false);
                expect_block_end();
                continue;
            }
            if (which == "else") {
                expect_block_end();
                s->otherwise = parse_block_body("if", line, {"endif"}, nullptr);
            }
            expect_block_end();
            return s;
        }
    }

    Target parse_target(bool with_namespace) {
        Target t;
        if (with_namespace && cur().type == TokenType::Name && peek().type == TokenType::Op &&
            peek().text == ".") {
            t.kind = Target::Kind::NamespaceAttr;
            t.names.push_back(next().text);
            next();
            t.attr = expect_name("an attribute name");
            return t;
        }
        const bool paren = skip_op("(");
        t.names.push_back(expect_name("a name to assign to"));
        while (skip_op(",")) {
            if (cur().type != TokenType::Name) break;  // a trailing comma: still a tuple
            t.names.push_back(next().text);
            t.kind = Target::Kind::Unpack;
        }
        if (is_op(",") || t.names.size() > 1) t.kind = Target::Kind::Unpack;
        if (paren) {
            expect_op(")");
            t.kind = Target::Kind::Unpack;
        }
        for (const auto& n : t.names)
            if (n == "true" || n == "false" || n == "none" || n == "True" || n == "False" ||
                n == "None")
                error(fmt::format("cannot assign to '{}'", n));
        return t;
    }

    StmtPtr parse_for(int line) {
        auto s = std::make_unique<ForStmt>(line);
        s->target = parse_target(false);
        if (!skip_name("in")) unexpected("'in'");
        s->iter = parse_tuple(false, false, "recursive");
        if (skip_name("if")) s->filter = parse_expression(true);
        if (is_name("recursive")) error("recursive for loops are not supported");
        expect_block_end();
        std::string which;
        ++loops_;
        s->body = parse_block_body("for", line, {"else", "endfor"}, &which);
        --loops_;
        if (which == "else") {
            expect_block_end();
            s->otherwise = parse_block_body("for", line, {"endfor"}, nullptr);
        }
        expect_block_end();
        return s;
    }

    std::vector<std::unique_ptr<FilterExpr>> parse_filter_chain(bool leading_pipe) {
        std::vector<std::unique_ptr<FilterExpr>> out;
        if (!leading_pipe) out.push_back(parse_filter_call(nullptr));
        while (skip_op("|")) out.push_back(parse_filter_call(nullptr));
        return out;
    }

    StmtPtr parse_set(int line) {
        Target target = parse_target(true);
        if (skip_op("=")) {
            auto s = std::make_unique<SetStmt>(line);
            s->target = std::move(target);
            s->value = parse_tuple(true, false);
            expect_block_end();
            return s;
        }
        auto s = std::make_unique<SetBlockStmt>(line);
        s->target = std::move(target);
        if (is_op("|")) s->filters = parse_filter_chain(true);
        expect_block_end();
        s->body = parse_block_body("set", line, {"endset"}, nullptr);
        expect_block_end();
        return s;
    }

    MacroParams parse_params() {
        MacroParams p;
        expect_op("(");
        while (!is_op(")")) {
            if (!p.names.empty()) expect_op(",");
            if (is_op(")")) break;
            p.names.push_back(expect_name("a parameter name"));
            if (skip_op("="))
                p.defaults.push_back(parse_expression(true));
            else if (!p.defaults.empty() && p.defaults.back())
                error("a parameter without a default follows one with a default");
            else
                p.defaults.push_back(nullptr);
        }
        next();
        return p;
    }

    StmtPtr parse_macro(int line) {
        auto s = std::make_unique<MacroStmt>(line);
        s->name = expect_name("a macro name");
        s->params = parse_params();
        expect_block_end();
        const int saved = loops_;
        loops_ = 0;
        s->body = parse_block_body("macro", line, {"endmacro"}, nullptr);
        loops_ = saved;
        expect_block_end();
        return s;
    }

    StmtPtr parse_call_block(int line) {
        auto s = std::make_unique<CallBlockStmt>(line);
        if (is_op("(")) s->caller_params = parse_params();
        ExprPtr e = parse_expression(true);
        if (e->kind != Expr::Kind::Call) error("'{% call %}' needs a macro call");
        s->call.reset(static_cast<CallExpr*>(e.release()));
        expect_block_end();
        const int saved = loops_;
        loops_ = 0;
        s->body = parse_block_body("call", line, {"endcall"}, nullptr);
        loops_ = saved;
        expect_block_end();
        return s;
    }

    StmtPtr parse_filter_block(int line) {
        auto s = std::make_unique<FilterBlockStmt>(line);
        s->filters = parse_filter_chain(false);
        expect_block_end();
        s->body = parse_block_body("filter", line, {"endfilter"}, nullptr);
        expect_block_end();
        return s;
    }

    StmtPtr parse_with(int line) {
        auto s = std::make_unique<WithStmt>(line);
        while (cur().type != TokenType::BlockEnd) {
            if (!s->assigns.empty()) expect_op(",");
            Target t = parse_target(false);
            expect_op("=");
            s->assigns.emplace_back(std::move(t), parse_expression(true));
        }
        next();
        s->body = parse_block_body("with", line, {"endwith"}, nullptr);
        expect_block_end();
        return s;
    }

    // ---- expressions ------------------------------------------------------------------------

    bool at_tuple_end(const char* extra_end) const {
        const Token& t = cur();
        if (t.type == TokenType::VarEnd || t.type == TokenType::BlockEnd ||
            t.type == TokenType::End)
            return true;
        if (t.type == TokenType::Op && t.text == ")") return true;
        return extra_end && t.type == TokenType::Name && t.text == extra_end;
    }

    // A comma list is a tuple: `{{ a, b }}`, `set x = 1, 2`, `for x in 1, 2`.
    ExprPtr parse_tuple(bool with_condexpr, bool explicit_parens, const char* extra_end = nullptr) {
        const int line = cur().line;
        std::vector<ExprPtr> items;
        bool is_tuple = false;
        for (;;) {
            if (!items.empty()) expect_op(",");
            if (at_tuple_end(extra_end)) break;
            items.push_back(parse_expression(with_condexpr));
            if (is_op(","))
                is_tuple = true;
            else
                break;
        }
        if (!is_tuple) {
            if (!items.empty()) return std::move(items[0]);
            if (!explicit_parens) unexpected("an expression");
        }
        auto t = std::make_unique<SeqExpr>(Expr::Kind::Tuple, line);
        t->items = std::move(items);
        return t;
    }

    ExprPtr parse_expression(bool with_condexpr) {
        DepthGuard g(*this, cur().line);
        if (!with_condexpr) return parse_or();
        const int line = cur().line;
        ExprPtr e = parse_or();
        while (skip_name("if")) {
            ExprPtr test = parse_or();
            ExprPtr otherwise;
            if (skip_name("else")) otherwise = parse_expression(true);
            e = std::make_unique<CondExpr>(std::move(test), std::move(e), std::move(otherwise),
                                           line);
        }
        return e;
    }

    ExprPtr parse_or() {
        ExprPtr left = parse_and();
        while (is_name("or")) {
            const int line = next().line;
            left = std::make_unique<BinaryExpr>(Expr::Kind::Or, BinOp::Add, std::move(left),
                                                parse_and(), line);
        }
        return left;
    }

    ExprPtr parse_and() {
        ExprPtr left = parse_not();
        while (is_name("and")) {
            const int line = next().line;
            left = std::make_unique<BinaryExpr>(Expr::Kind::And, BinOp::Add, std::move(left),
                                                parse_not(), line);
        }
        return left;
    }

    ExprPtr parse_not() {
        if (is_name("not")) {
            DepthGuard g(*this, cur().line);
            const int line = next().line;
            return std::make_unique<UnaryExpr>(Expr::Kind::Not, parse_not(), line);
        }
        return parse_compare();
    }

    ExprPtr parse_compare() {
        const int line = cur().line;
        ExprPtr first = parse_math1();
        std::unique_ptr<CompareExpr> cmp;
        for (;;) {
            CompareOp op;
            if (is_op("=="))
                op = CompareOp::Eq;
            else if (is_op("!="))
                op = CompareOp::Ne;
            else if (is_op("<"))
                op = CompareOp::Lt;
            else if (is_op("<="))
                op = CompareOp::Le;
            else if (is_op(">"))
                op = CompareOp::Gt;
            else if (is_op(">="))
                op = CompareOp::Ge;
            else if (is_name("in"))
                op = CompareOp::In;
            else if (is_name("not") && peek().type == TokenType::Name && peek().text == "in") {
                next();
                op = CompareOp::NotIn;
            } else {
                break;
            }
            next();
            if (!cmp) cmp = std::make_unique<CompareExpr>(std::move(first), line);
            cmp->rest.emplace_back(op, parse_math1());
        }
        if (cmp) return cmp;
        return first;
    }

    ExprPtr parse_math1() {
        ExprPtr left = parse_concat();
        while (is_op("+") || is_op("-")) {
            const BinOp op = cur().text == "+" ? BinOp::Add : BinOp::Sub;
            const int line = next().line;
            left = std::make_unique<BinaryExpr>(Expr::Kind::Binary, op, std::move(left),
                                                parse_concat(), line);
        }
        return left;
    }

    ExprPtr parse_concat() {
        const int line = cur().line;
        ExprPtr first = parse_math2();
        if (!is_op("~")) return first;
        auto c = std::make_unique<ConcatExpr>(line);
        c->parts.push_back(std::move(first));
        while (skip_op("~")) c->parts.push_back(parse_math2());
        return c;
    }

    ExprPtr parse_math2() {
        ExprPtr left = parse_pow();
        for (;;) {
            BinOp op;
            if (is_op("*"))
                op = BinOp::Mul;
            else if (is_op("/"))
                op = BinOp::Div;
            else if (is_op("//"))
                op = BinOp::FloorDiv;
            else if (is_op("%"))
                op = BinOp::Mod;
            else
                break;
            const int line = next().line;
            left = std::make_unique<BinaryExpr>(Expr::Kind::Binary, op, std::move(left),
                                                parse_pow(), line);
        }
        return left;
    }

    ExprPtr parse_pow() {
        ExprPtr left = parse_unary(true);
        while (is_op("**")) {
            const int line = next().line;
            left = std::make_unique<BinaryExpr>(Expr::Kind::Binary, BinOp::Pow, std::move(left),
                                                parse_unary(true), line);
        }
        return left;
    }

    ExprPtr parse_unary(bool with_filter) {
        DepthGuard g(*this, cur().line);
        const int line = cur().line;
        ExprPtr node;
        if (is_op("-")) {
            next();
            node = std::make_unique<UnaryExpr>(Expr::Kind::Neg, parse_unary(false), line);
        } else if (is_op("+")) {
            next();
            node = std::make_unique<UnaryExpr>(Expr::Kind::Pos, parse_unary(false), line);
        } else {
            node = parse_primary();
        }
        node = parse_postfix(std::move(node));
        if (with_filter) node = parse_filter_expr(std::move(node));
        return node;
    }

    ExprPtr parse_primary() {
        const Token& tok = cur();
        const int line = tok.line;
        switch (tok.type) {
            case TokenType::Name: {
                const std::string n = next().text;
                if (n == "true" || n == "True")
                    return std::make_unique<LiteralExpr>(Value(true), line);
                if (n == "false" || n == "False")
                    return std::make_unique<LiteralExpr>(Value(false), line);
                if (n == "none" || n == "None")
                    return std::make_unique<LiteralExpr>(Value(nullptr), line);
                return std::make_unique<NameExpr>(n, line);
            }
            case TokenType::String: {
                std::string s = next().text;
                while (cur().type == TokenType::String) s += next().text;  // 'a' 'b' is 'ab'
                return std::make_unique<LiteralExpr>(Value(std::move(s)), line);
            }
            case TokenType::Int:
                return std::make_unique<LiteralExpr>(Value(next().int_value), line);
            case TokenType::Float:
                return std::make_unique<LiteralExpr>(Value(next().float_value), line);
            case TokenType::Op:
                if (tok.text == "(") {
                    next();
                    ExprPtr e = parse_tuple(true, true);
                    expect_op(")");
                    return e;
                }
                if (tok.text == "[") {
                    next();
                    auto l = std::make_unique<SeqExpr>(Expr::Kind::List, line);
                    while (!is_op("]")) {
                        if (!l->items.empty()) expect_op(",");
                        if (is_op("]")) break;
                        l->items.push_back(parse_expression(true));
                    }
                    next();
                    return l;
                }
                if (tok.text == "{") {
                    next();
                    auto d = std::make_unique<DictExpr>(line);
                    while (!is_op("}")) {
                        if (!d->items.empty()) expect_op(",");
                        if (is_op("}")) break;
                        ExprPtr k = parse_expression(true);
                        expect_op(":");
                        d->items.emplace_back(std::move(k), parse_expression(true));
                    }
                    next();
                    return d;
                }
                break;
            default:
                break;
        }
        error(fmt::format("unexpected {} in an expression", describe(tok)));
    }

    ExprPtr parse_postfix(ExprPtr node) {
        for (;;) {
            const int line = cur().line;
            if (skip_op(".")) {
                if (cur().type == TokenType::Name) {
                    node = std::make_unique<AttrExpr>(std::move(node), next().text, line);
                } else if (cur().type == TokenType::Int) {
                    auto idx = std::make_unique<LiteralExpr>(Value(next().int_value), line);
                    node = std::make_unique<SubscriptExpr>(std::move(node), std::move(idx), line);
                } else {
                    unexpected("an attribute name");
                }
            } else if (skip_op("[")) {
                std::vector<ExprPtr> args;
                while (!is_op("]")) {
                    if (!args.empty()) expect_op(",");
                    args.push_back(parse_subscribed());
                }
                next();
                if (args.empty()) error("empty subscript '[]'");
                ExprPtr index;
                if (args.size() == 1) {
                    index = std::move(args[0]);
                } else {
                    auto t = std::make_unique<SeqExpr>(Expr::Kind::Tuple, line);
                    t->items = std::move(args);
                    index = std::move(t);
                }
                node = std::make_unique<SubscriptExpr>(std::move(node), std::move(index), line);
            } else if (is_op("(")) {
                node = parse_call(std::move(node));
            } else {
                return node;
            }
        }
    }

    ExprPtr parse_subscribed() {
        const int line = cur().line;
        ExprPtr start;
        if (!is_op(":")) {
            start = parse_expression(true);
            if (!is_op(":")) return start;
        }
        next();  // ':'
        auto s = std::make_unique<SliceExpr>(line);
        s->start = std::move(start);
        if (!is_op(":") && !is_op("]") && !is_op(",")) s->stop = parse_expression(true);
        if (skip_op(":")) {
            if (!is_op("]") && !is_op(",")) s->step = parse_expression(true);
        }
        return s;
    }

    void parse_args(Args& args) {
        expect_op("(");
        bool need_comma = false;
        while (!is_op(")")) {
            if (need_comma) {
                expect_op(",");
                if (is_op(")")) break;
            }
            if (is_op("*") || is_op("**"))
                error("'*args' and '**kwargs' in calls are not supported");
            if (cur().type == TokenType::Name && peek().type == TokenType::Op &&
                peek().text == "=") {
                std::string key = next().text;
                next();
                for (const auto& [k, v] : args.named)
                    if (k == key) error(fmt::format("keyword argument '{}' repeated", key));
                args.named.emplace_back(std::move(key), parse_expression(true));
            } else {
                if (!args.named.empty()) error("a positional argument follows a keyword argument");
                args.positional.push_back(parse_expression(true));
            }
            need_comma = true;
        }
        next();
    }

    ExprPtr parse_call(ExprPtr callee) {
        auto c = std::make_unique<CallExpr>(std::move(callee), cur().line);
        parse_args(c->args);
        return c;
    }

    std::string parse_dotted_name(const char* what) {
        std::string name = expect_name(what);
        while (is_op(".") && peek().type == TokenType::Name) {
            next();
            name += "." + next().text;
        }
        return name;
    }

    std::unique_ptr<FilterExpr> parse_filter_call(ExprPtr operand) {
        const int line = cur().line;
        std::string name = parse_dotted_name("a filter name");
        if (!is_filter(name) && !is_unsupported_filter(name))
            throw TemplateError(fmt::format("unknown filter '{}'", name), line);
        auto f = std::make_unique<FilterExpr>(std::move(operand), std::move(name), line);
        if (is_op("(")) parse_args(f->args);
        return f;
    }

    ExprPtr parse_filter_expr(ExprPtr node) {
        for (;;) {
            if (skip_op("|")) {
                node = parse_filter_call(std::move(node));
            } else if (is_name("is")) {
                node = parse_test(std::move(node));
            } else if (is_op("(")) {
                node = parse_call(std::move(node));
            } else {
                return node;
            }
        }
    }

    ExprPtr parse_test(ExprPtr operand) {
        const int line = next().line;  // 'is'
        const bool negated = skip_name("not");
        std::string name = parse_dotted_name("a test name");
        if (!is_test(name)) throw TemplateError(fmt::format("unknown test '{}'", name), line);
        auto t = std::make_unique<TestExpr>(std::move(operand), std::move(name), negated, line);
        const Token& c = cur();
        if (is_op("(")) {
            parse_args(t->args);
        } else if ((c.type == TokenType::Name || c.type == TokenType::String ||
                    c.type == TokenType::Int || c.type == TokenType::Float || is_op("[") ||
                    is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
            // `x is divisibleby 3`, `x is sameas none`: one argument without parentheses.
            if (is_name("is")) error("tests cannot be chained with 'is'");
            t->args.positional.push_back(parse_postfix(parse_primary()));
        }
        return t;
    }
};

}  // namespace

Body parse(std::string_view source) {
    return Parser(tokenize(source)).parse_template();
}

}  // namespace ferry::tokenizer::jinja
