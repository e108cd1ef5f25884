// Regular expressions compiled to GBNF, for vLLM's `guided_regex` and for JSON Schema's
// `pattern` (embedded between the quotes of a JSON string).
//
// Matching is a full match: the grammar accepts a string only if the whole of it matches the
// pattern. JSON Schema says `pattern` is unanchored (a search), but OpenAI, llama.cpp and
// outlines all treat it as a full match, and a full match is also a search match, so every
// string the grammar produces still validates. A leading `^` and a trailing `$` are accepted
// and change nothing; anchors anywhere else are refused.
//
// The dialect is the common part of ECMA-262 (JSON Schema's) and Python's `re`: literals,
// escapes (\d \w \s \D \W \S, \n \t \r \f \v \0, \xHH, \uHHHH, \UHHHHHHHH, any escaped
// punctuation), classes with ranges, negation and escapes inside ([\b] is a backspace), `.`,
// groups ( ), (?: ), (?P<name> ) and (?<name> ) (as plain groups), `|`, and the quantifiers
// * + ? {m} {m,} {m,n} with their lazy forms (which match the same strings). Where the two
// dialects disagree the grammar keeps to what both accept: \d and \w produce ASCII digits and
// word characters only, and \D, \W and negated classes holding \d or \w produce no non-ASCII
// (Python's Unicode \d and \w would match some of it); \s produces the spaces both agree on,
// \S and [^\s] leave out the spaces either has (Python adds \x1C-\x1F and U+0085, ECMA-262
// U+FEFF); `.` excludes \n \r U+2028 U+2029 (ECMA-262's line terminators; Python's `.` only
// excludes \n). Refused, each with an error naming it: backreferences, lookaround,
// atomic groups, inline flags, possessive quantifiers, \b \B \A \Z, Unicode property escapes,
// counts above kMaxRegexRepeat, {m,n} with n < m, {,n}, unbalanced parentheses.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace ferry::grammar {

inline constexpr int kMaxRegexRepeat = 1000;

// What the compiled expression is matched against: the text itself, or the text as it is
// written between the quotes of a JSON string, each character in its JSON encoding (`"` as
// \", `\` as \\, \b \f \n \r \t as those escapes, other control characters as \u00xx in lower
// case, everything else as itself). Only that one encoding per character is produced.
enum class RegexTarget { Raw, JsonStringContent };

// A GBNF expression (the right-hand side of a rule, one line, no rules of its own) that
// matches what `pattern` fully matches, in `target`'s encoding.
Expected<std::string> regex_to_gbnf(std::string_view pattern,
                                    RegexTarget target = RegexTarget::Raw);

// A complete grammar whose root fully matches `pattern`.
Expected<std::string> regex_grammar(std::string_view pattern);

}  // namespace ferry::grammar
