// The parsed template: plain data the parser builds once and the interpreter walks for every
// render (read-only, so one template serves many threads). Each node keeps its source line
// for error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace ferry::tokenizer::jinja {

struct Expr {
    enum class Kind {
        Literal,
        Name,
        List,
        Tuple,
        Dict,
        Attr,       // a.b: attribute first, then item (jinja2's getattr)
        Subscript,  // a[b]: item first, then attribute
        Slice,      // only as a Subscript's index
        Call,
        Filter,
        Test,
        Neg,
        Pos,
        Not,
        Binary,
        And,
        Or,
        Concat,
        Compare,
        Cond,
    };
    Expr(Kind k, int l) : kind(k), line(l) {}
    virtual ~Expr() = default;
    Kind kind;
    int line;
};
using ExprPtr = std::unique_ptr<Expr>;

struct Args {
    std::vector<ExprPtr> positional;
    std::vector<std::pair<std::string, ExprPtr>> named;
};

struct LiteralExpr : Expr {
    LiteralExpr(Value v, int l) : Expr(Kind::Literal, l), value(std::move(v)) {}
    Value value;  // scalars only: a literal list is built afresh each time (SeqExpr)
};

struct NameExpr : Expr {
    NameExpr(std::string n, int l) : Expr(Kind::Name, l), name(std::move(n)) {}
    std::string name;
};

struct SeqExpr : Expr {  // Kind::List or Kind::Tuple
    using Expr::Expr;
    std::vector<ExprPtr> items;
};

struct DictExpr : Expr {
    explicit DictExpr(int l) : Expr(Kind::Dict, l) {}
    std::vector<std::pair<ExprPtr, ExprPtr>> items;
};

struct AttrExpr : Expr {
    AttrExpr(ExprPtr o, std::string n, int l)
        : Expr(Kind::Attr, l), object(std::move(o)), name(std::move(n)) {}
    ExprPtr object;
    std::string name;
};

struct SubscriptExpr : Expr {
    SubscriptExpr(ExprPtr o, ExprPtr i, int l)
        : Expr(Kind::Subscript, l), object(std::move(o)), index(std::move(i)) {}
    ExprPtr object, index;
};

struct SliceExpr : Expr {
    explicit SliceExpr(int l) : Expr(Kind::Slice, l) {}
    ExprPtr start, stop, step;  // null where omitted
};

struct CallExpr : Expr {
    CallExpr(ExprPtr c, int l) : Expr(Kind::Call, l), callee(std::move(c)) {}
    ExprPtr callee;
    Args args;
};

struct FilterExpr : Expr {
    FilterExpr(ExprPtr o, std::string n, int l)
        : Expr(Kind::Filter, l), operand(std::move(o)), name(std::move(n)) {}
    ExprPtr operand;  // null in `{% filter %}` and `{% set x | f %}`: applied to the body
    std::string name;
    Args args;
};

struct TestExpr : Expr {
    TestExpr(ExprPtr o, std::string n, bool neg, int l)
        : Expr(Kind::Test, l), operand(std::move(o)), name(std::move(n)), negated(neg) {}
    ExprPtr operand;
    std::string name;
    bool negated;
    Args args;
};

struct UnaryExpr : Expr {  // Neg, Pos, Not
    UnaryExpr(Kind k, ExprPtr o, int l) : Expr(k, l), operand(std::move(o)) {}
    ExprPtr operand;
};

enum class BinOp { Add, Sub, Mul, Div, FloorDiv, Mod, Pow };

struct BinaryExpr : Expr {  // Binary (with op), And, Or
    BinaryExpr(Kind k, BinOp o, ExprPtr a, ExprPtr b, int l)
        : Expr(k, l), op(o), left(std::move(a)), right(std::move(b)) {}
    BinOp op;
    ExprPtr left, right;
};

struct ConcatExpr : Expr {
    explicit ConcatExpr(int l) : Expr(Kind::Concat, l) {}
    std::vector<ExprPtr> parts;
};

enum class CompareOp { Eq, Ne, Lt, Le, Gt, Ge, In, NotIn };

struct CompareExpr : Expr {
    CompareExpr(ExprPtr f, int l) : Expr(Kind::Compare, l), first(std::move(f)) {}
    ExprPtr first;
    std::vector<std::pair<CompareOp, ExprPtr>> rest;  // a < b < c is (a < b) and (b < c)
};

struct CondExpr : Expr {
    CondExpr(ExprPtr t, ExprPtr a, ExprPtr b, int l)
        : Expr(Kind::Cond, l), test(std::move(t)), then(std::move(a)), otherwise(std::move(b)) {}
    ExprPtr test, then, otherwise;  // otherwise null: undefined
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
    enum class Kind {
        Text,
        Output,
        If,
        For,
        Set,
        SetBlock,
        Macro,
        CallBlock,
        FilterBlock,
        With,
        Break,
        Continue,
        Scope,  // transformers' {% generation %}: the body in a scope of its own
    };
    Stmt(Kind k, int l) : kind(k), line(l) {}
    virtual ~Stmt() = default;
    Kind kind;
    int line;
};

// What `set`, `for` and `with` assign to: a name, names unpacked from a sequence, or a
// namespace's attribute.
struct Target {
    enum class Kind { Name, Unpack, NamespaceAttr } kind = Kind::Name;
    std::vector<std::string> names;  // Name: one; Unpack: several; NamespaceAttr: the namespace
    std::string attr;
};

struct TextStmt : Stmt {
    TextStmt(std::string t, int l) : Stmt(Kind::Text, l), text(std::move(t)) {}
    std::string text;
};

struct OutputStmt : Stmt {
    OutputStmt(ExprPtr e, int l) : Stmt(Kind::Output, l), expr(std::move(e)) {}
    ExprPtr expr;
};

struct IfStmt : Stmt {
    explicit IfStmt(int l) : Stmt(Kind::If, l) {}
    std::vector<std::pair<ExprPtr, Body>> branches;  // if, then each elif
    Body otherwise;
};

struct ForStmt : Stmt {
    explicit ForStmt(int l) : Stmt(Kind::For, l) {}
    Target target;
    ExprPtr iter, filter;  // filter: `for x in xs if cond`, null if none
    Body body, otherwise;
};

struct SetStmt : Stmt {
    explicit SetStmt(int l) : Stmt(Kind::Set, l) {}
    Target target;
    ExprPtr value;
};

struct SetBlockStmt : Stmt {
    explicit SetBlockStmt(int l) : Stmt(Kind::SetBlock, l) {}
    Target target;
    std::vector<std::unique_ptr<FilterExpr>> filters;
    Body body;
};

struct MacroParams {
    std::vector<std::string> names;
    std::vector<ExprPtr> defaults;  // one per name; null: no default (undefined if not passed)
};

struct MacroStmt : Stmt {
    explicit MacroStmt(int l) : Stmt(Kind::Macro, l) {}
    std::string name;
    MacroParams params;
    Body body;
};

struct CallBlockStmt : Stmt {
    explicit CallBlockStmt(int l) : Stmt(Kind::CallBlock, l) {}
    std::unique_ptr<CallExpr> call;
    MacroParams caller_params;
    Body body;  // what `caller()` renders inside the called macro
};

struct FilterBlockStmt : Stmt {
    explicit FilterBlockStmt(int l) : Stmt(Kind::FilterBlock, l) {}
    std::vector<std::unique_ptr<FilterExpr>> filters;
    Body body;
};

struct WithStmt : Stmt {
    explicit WithStmt(int l) : Stmt(Kind::With, l) {}
    std::vector<std::pair<Target, ExprPtr>> assigns;
    Body body;
};

struct ScopeStmt : Stmt {
    explicit ScopeStmt(int l) : Stmt(Kind::Scope, l) {}
    Body body;
};

struct LoopControlStmt : Stmt {  // Break or Continue
    using Stmt::Stmt;
};

}  // namespace ferry::tokenizer::jinja
