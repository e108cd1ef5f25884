#include "convert/hf_to_gguf.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string_view>

#include <nlohmann/json.hpp>

#include "model/hf_weights.h"
#include "model/rope.h"
#include "quant/dequantize.h"

namespace ferry::convert {
namespace {

using nlohmann::json;

// llama.cpp's llama_token_type values (tokenizer.ggml.token_type).
enum TokenType : int32_t {
    kNormal = 1,
    kUnknown = 2,
    kControl = 3,
    kUserDefined = 4,
    kUnused = 5,
    kByte = 6
};

// The Split regexes real tokenizer.json files spell, against the tokenizer.ggml.pre name
// llama.cpp (and ferry's GGUF reader) gives the same splitting.
constexpr std::array<std::pair<std::string_view, std::string_view>, 2> kSplitRegexes = {{
    {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
     "llama-bpe"},
    {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
     "qwen2"},
}};

std::string type_of(const json& j) {
    if (!j.is_object()) return {};
    auto t = j.find("type");
    return t != j.end() && t->is_string() ? t->get<std::string>() : std::string();
}

bool flag(const json& j, const char* key, bool fallback) {
    auto it = j.find(key);
    return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

// The members of a Sequence (or the one component itself).
std::vector<json> components(const json& j) {
    if (type_of(j) == "Sequence") {
        for (const char* key : {"pretokenizers", "normalizers", "decoders"})
            if (auto it = j.find(key); it != j.end() && it->is_array())
                return std::vector<json>(it->begin(), it->end());
        return {};
    }
    if (j.is_null()) return {};
    return {j};
}

// ByteLevel BPE: the tokenizer.ggml.pre name of the pre-tokenizer.
Expected<std::string> byte_level_pre(const json& pre) {
    const auto parts = components(pre);
    auto is_byte_level = [](const json& p, bool regex) {
        return type_of(p) == "ByteLevel" && !flag(p, "add_prefix_space", false) &&
               flag(p, "use_regex", true) == regex;
    };
    // GPT-2's split is llama.cpp's "gpt-2"; its "default" is another one.
    if (parts.size() == 1 && is_byte_level(parts[0], true)) return std::string("gpt-2");
    if (parts.size() == 2 && type_of(parts[0]) == "Digits" &&
        flag(parts[0], "individual_digits", false) && is_byte_level(parts[1], true))
        return std::string("smollm");
    if (parts.size() == 2 && type_of(parts[0]) == "Split" && is_byte_level(parts[1], false)) {
        const json& pattern = parts[0].value("pattern", json::object());
        const std::string re = pattern.is_object() ? pattern.value("Regex", "") : "";
        const std::string behavior = parts[0].value("behavior", "");
        for (const auto& [r, name] : kSplitRegexes)
            if (re == r && behavior == "Isolated" && !flag(parts[0], "invert", false))
                return std::string(name);
    }
    return make_error(
        "its pre-tokenizer ({}) has no tokenizer.ggml.pre name ferry knows; GGUF can carry "
        "ByteLevel (gpt-2), Digits + ByteLevel (smollm) and Llama 3's or Qwen 2's Split + "
        "ByteLevel (llama-bpe, qwen2)",
        pre.dump().substr(0, 200));
}

// SentencePiece-style BPE (byte fallback, "▁" for spaces): whether a "▁" is put before the
// text, as tokenizer.ggml.add_space_prefix says. Fails for a layout llama.cpp's SentencePiece
// tokenizer does not reproduce.
Expected<bool> metaspace_prefix(const json& tok) {
    const json& pre = tok.value("pre_tokenizer", json());
    const json& norm = tok.value("normalizer", json());
    if (type_of(pre) == "Metaspace") {
        if (!norm.is_null())
            return make_error(
                "a Metaspace pre-tokenizer with a normalizer ({}) has no GGUF "
                "spelling",
                type_of(norm));
        const std::string scheme =
            pre.value("prepend_scheme", flag(pre, "add_prefix_space", true) ? "always" : "never");
        return scheme != "never";
    }
    if (!pre.is_null())
        return make_error("its pre-tokenizer ({}) with a byte-fallback BPE has no GGUF spelling",
                          type_of(pre));
    // Llama 2's: Prepend("▁") then Replace(" ", "▁"), or Replace alone (Gemma's).
    bool prepend = false, replace = false;
    for (const json& n : components(norm)) {
        const std::string t = type_of(n);
        if (t == "Prepend" && n.value("prepend", "") == "\u2581") {
            prepend = true;
        } else if (t == "Replace" && n.value("content", "") == "\u2581" &&
                   n.value("pattern", json::object()).value("String", "") == " ") {
            replace = true;
        } else {
            return make_error("its normalizer ({}) has no GGUF spelling", t);
        }
    }
    if (!replace)
        return make_error(
            "a byte-fallback BPE without a Metaspace pre-tokenizer or a Replace "
            "of ' ' by '\u2581' has no GGUF spelling");
    return prepend;
}

// tokenizer_config.json's special token (a string or an AddedToken object), as an id.
std::optional<int32_t> special_id(const json& config, const char* key,
                                  const std::map<std::string, int32_t>& ids) {
    if (!config.is_object()) return std::nullopt;
    auto it = config.find(key);
    if (it == config.end()) return std::nullopt;
    std::string text;
    if (it->is_string())
        text = it->get<std::string>();
    else if (it->is_object() && it->value("content", json()).is_string())
        text = (*it)["content"].get<std::string>();
    auto f = ids.find(text);
    return f == ids.end() ? std::nullopt : std::optional<int32_t>(f->second);
}

// Whether the post-processor's single-sequence template puts `id` first (or last).
bool template_adds(const json& tok, int32_t id, bool at_end) {
    for (const json& p : components(tok.value("post_processor", json()))) {
        if (type_of(p) != "TemplateProcessing") continue;
        const json& single = p.value("single", json::array());
        if (!single.is_array() || single.empty()) continue;
        const json& piece = at_end ? single.back() : single.front();
        if (!piece.contains("SpecialToken")) continue;
        const std::string name = piece["SpecialToken"].value("id", "");
        const json& st = p.value("special_tokens", json::object());
        if (!st.contains(name)) continue;
        const json& ids = st[name].value("ids", json::array());
        if (ids.is_array() && ids.size() == 1 && ids[0] == id) return true;
    }
    return false;
}

std::string merge_text(const json& m) {
    if (m.is_string()) return m.get<std::string>();
    if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
        return m[0].get<std::string>() + " " + m[1].get<std::string>();
    return {};
}

gguf::Value string_array(const std::vector<std::string>& v) {
    std::vector<gguf::Value> items;
    items.reserve(v.size());
    for (const auto& s : v) items.push_back(gguf::make_string(s));
    return gguf::make_array(gguf::ValueType::STRING, std::move(items));
}

template <typename T, typename F>
gguf::Value number_array(const std::vector<T>& v, gguf::ValueType type, F make) {
    std::vector<gguf::Value> items;
    items.reserve(v.size());
    for (const T& x : v) items.push_back(make(x));
    return gguf::make_array(type, std::move(items));
}

// The types a directory's tensors convert from.
Status check_float_type(const hf::ModelDir& dir, const hf::SafeTensor& t) {
    if (t.type == DType::F32 || t.type == DType::F16 || t.type == DType::BF16) return Status::Ok();
    return make_error("{}: tensor '{}' is {}; ferry converts F32, F16 and BF16 weights", dir.path(),
                      t.name, t.dtype);
}

Expected<json> read_json(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return make_error("{}: cannot be read", path);
    std::stringstream ss;
    ss << in.rdbuf();
    json j = json::parse(ss.str(), nullptr, false);
    if (j.is_discarded()) return make_error("{}: not valid JSON", path);
    return j;
}

}  // namespace

std::string gguf_arch(const model::LlamaConfig& c) {
    return model::gguf_arch_name(c.arch);
}

Status write_tokenizer(const json& tok, const json& config, int n_vocab, gguf::Writer& w) {
    const json& m = tok.value("model", json::object());
    if (type_of(m) != "BPE")
        return make_error(
            "tokenizer.json: model '{}' cannot be written as GGUF (ferry writes "
            "BPE tokenizers)",
            type_of(m));
    const json& vocab = m.value("vocab", json::object());
    if (!vocab.is_object() || vocab.empty())
        return make_error("tokenizer.json: the BPE model has no vocab");
    std::vector<std::string> tokens(static_cast<size_t>(n_vocab));
    std::vector<int32_t> types(static_cast<size_t>(n_vocab), kUnused);
    std::vector<bool> seen(static_cast<size_t>(n_vocab), false);
    std::map<std::string, int32_t> ids;
    auto put = [&](const std::string& text, const json& id_json, int32_t type) -> Status {
        if (!id_json.is_number_integer())
            return make_error("tokenizer.json: token '{}' has no integer id", text);
        const auto id = id_json.get<int64_t>();
        if (id < 0 || id >= n_vocab)
            return make_error(
                "tokenizer.json: token '{}' has id {}, outside config.json's "
                "vocab_size {}",
                text, id, n_vocab);
        tokens[static_cast<size_t>(id)] = text;
        types[static_cast<size_t>(id)] = type;
        seen[static_cast<size_t>(id)] = true;
        ids[text] = static_cast<int32_t>(id);
        return Status::Ok();
    };
    for (const auto& [text, id] : vocab.items())
        if (Status s = put(text, id, kNormal); !s) return s;
    for (const json& a : tok.value("added_tokens", json::array()))
        if (Status s = put(a.value("content", ""), a.value("id", json()),
                           a.value("special", false) ? kControl : kUserDefined);
            !s)
            return s;
    // ids the tokenizer never produces (a vocabulary padded for the matmul): placeholders, as
    // llama.cpp's converter writes them.
    for (size_t i = 0; i < tokens.size(); ++i)
        if (!seen[i]) tokens[i] = "[PAD" + std::to_string(i) + "]";

    std::vector<std::string> merges;
    for (const json& mg : m.value("merges", json::array())) {
        std::string s = merge_text(mg);
        if (s.empty()) return make_error("tokenizer.json: a merge is neither \"a b\" nor [a, b]");
        merges.push_back(std::move(s));
    }

    const bool byte_fallback = flag(m, "byte_fallback", false);
    if (!byte_fallback) {
        auto pre = byte_level_pre(tok.value("pre_tokenizer", json()));
        if (!pre) return Error{"tokenizer.json: " + pre.error().message};
        if (!tok.value("normalizer", json()).is_null())
            return make_error(
                "tokenizer.json: a byte-level BPE with a normalizer ({}) has no "
                "GGUF spelling",
                type_of(tok["normalizer"]));
        w.set("tokenizer.ggml.model", gguf::make_string("gpt2"));
        w.set("tokenizer.ggml.pre", gguf::make_string(*pre));
        w.set("tokenizer.ggml.tokens", string_array(tokens));
        w.set("tokenizer.ggml.token_type",
              number_array(types, gguf::ValueType::INT32, gguf::make_i32));
        w.set("tokenizer.ggml.merges", string_array(merges));
    } else {
        auto prefix = metaspace_prefix(tok);
        if (!prefix) return Error{"tokenizer.json: " + prefix.error().message};
        // SentencePiece merges the adjacent pair whose union scores highest; scoring a token
        // by minus the rank of the first merge that makes it replays the BPE merge order.
        std::vector<float> scores(tokens.size(), 0.0f);
        std::vector<bool> scored(tokens.size(), false);
        for (size_t r = 0; r < merges.size(); ++r) {
            const size_t sp = merges[r].find(' ');
            const std::string joined = merges[r].substr(0, sp) + merges[r].substr(sp + 1);
            auto it = ids.find(joined);
            if (it == ids.end() || scored[static_cast<size_t>(it->second)]) continue;
            scores[static_cast<size_t>(it->second)] = -static_cast<float>(r + 1);
            scored[static_cast<size_t>(it->second)] = true;
        }
        for (size_t i = 0; i < tokens.size(); ++i) {
            const std::string& t = tokens[i];
            if (types[i] == kNormal && t.size() == 6 && t.rfind("<0x", 0) == 0 && t[5] == '>')
                types[i] = kByte;
        }
        if (m.value("unk_token", json()).is_string()) {
            auto u = ids.find(m["unk_token"].get<std::string>());
            if (u != ids.end()) {
                types[static_cast<size_t>(u->second)] = kUnknown;
                w.set("tokenizer.ggml.unknown_token_id",
                      gguf::make_u32(static_cast<uint32_t>(u->second)));
            }
        }
        w.set("tokenizer.ggml.model", gguf::make_string("llama"));
        w.set("tokenizer.ggml.pre", gguf::make_string("default"));
        w.set("tokenizer.ggml.tokens", string_array(tokens));
        w.set("tokenizer.ggml.scores",
              number_array(scores, gguf::ValueType::FLOAT32, gguf::make_f32));
        w.set("tokenizer.ggml.token_type",
              number_array(types, gguf::ValueType::INT32, gguf::make_i32));
        w.set("tokenizer.ggml.add_space_prefix", gguf::make_bool(*prefix));
    }

    const auto bos = special_id(config, "bos_token", ids);
    const auto eos = special_id(config, "eos_token", ids);
    if (bos) w.set("tokenizer.ggml.bos_token_id", gguf::make_u32(static_cast<uint32_t>(*bos)));
    if (eos) w.set("tokenizer.ggml.eos_token_id", gguf::make_u32(static_cast<uint32_t>(*eos)));
    if (auto pad = special_id(config, "pad_token", ids))
        w.set("tokenizer.ggml.padding_token_id", gguf::make_u32(static_cast<uint32_t>(*pad)));
    // tokenizer_config's flags where it has them, else what the post-processor adds, as
    // transformers decides.
    const bool add_bos = config.is_object() && config.contains("add_bos_token") &&
                                 config["add_bos_token"].is_boolean()
                             ? config["add_bos_token"].get<bool>()
                             : bos && template_adds(tok, *bos, false);
    const bool add_eos = config.is_object() && config.contains("add_eos_token") &&
                                 config["add_eos_token"].is_boolean()
                             ? config["add_eos_token"].get<bool>()
                             : eos && template_adds(tok, *eos, true);
    if (add_bos && !bos)
        return make_error(
            "tokenizer_config.json: add_bos_token is set but bos_token is not a "
            "token of tokenizer.json");
    w.set("tokenizer.ggml.add_bos_token", gguf::make_bool(add_bos));
    w.set("tokenizer.ggml.add_eos_token", gguf::make_bool(add_eos));
    return Status::Ok();
}

Status write_metadata(const hf::ModelDir& dir, const model::LlamaConfig& c, gguf::Writer& w) {
    const std::string arch = gguf_arch(c);
    const std::string p = arch + ".";
    w.set("general.architecture", gguf::make_string(arch));
    std::string name = c.name;
    if (name.empty() || name == dir.path() + "/config.json")
        name = std::filesystem::path(dir.path()).filename().string();
    w.set("general.name", gguf::make_string(name));
    w.set(p + "context_length", gguf::make_u32(static_cast<uint32_t>(c.n_ctx_train)));
    w.set(p + "embedding_length", gguf::make_u32(static_cast<uint32_t>(c.n_embd)));
    w.set(p + "block_count", gguf::make_u32(static_cast<uint32_t>(c.n_layer)));
    w.set(p + "feed_forward_length", gguf::make_u32(static_cast<uint32_t>(c.n_ff)));
    w.set(p + "attention.head_count", gguf::make_u32(static_cast<uint32_t>(c.n_head)));
    w.set(p + "attention.head_count_kv", gguf::make_u32(static_cast<uint32_t>(c.n_head_kv)));
    if (c.head_dim != c.n_embd / c.n_head) {
        w.set(p + "attention.key_length", gguf::make_u32(static_cast<uint32_t>(c.head_dim)));
        w.set(p + "attention.value_length", gguf::make_u32(static_cast<uint32_t>(c.head_dim)));
    }
    w.set(p + "rope.dimension_count", gguf::make_u32(static_cast<uint32_t>(c.rope_dim)));
    w.set(p + "rope.freq_base", gguf::make_f32(c.rope_theta));
    w.set(p + "attention.layer_norm_rms_epsilon", gguf::make_f32(c.rms_eps));
    w.set(p + "vocab_size", gguf::make_u32(static_cast<uint32_t>(c.n_vocab)));
    // llama.cpp reads it but runs phi3 and llama-architecture files without it (its source says
    // Phi SWA is disabled); ferry applies it.
    if (c.sliding_window > 0)
        w.set(p + "attention.sliding_window",
              gguf::make_u32(static_cast<uint32_t>(c.sliding_window)));
    if (arch == "gemma3") {
        // llama.cpp reads the pattern as a period (layer l slides unless l % period ==
        // period - 1) and derives the query scale from the head size.
        if (c.sliding_window > 0) {
            int period = 0;
            for (int p0 = 1; p0 <= c.n_layer + 1 && !period; ++p0) {
                bool same = true;
                for (int l = 0; l < c.n_layer; ++l)
                    same &= (c.window(l) > 0) == ((l + 1) % p0 != 0);
                if (same) period = p0;
            }
            if (!period)
                return make_error(
                    "{}: sliding layers that do not repeat with a period have no GGUF "
                    "spelling",
                    dir.path());
            w.set(p + "attention.sliding_window_pattern",
                  gguf::make_u32(static_cast<uint32_t>(period)));
            w.set(p + "rope.freq_base_swa", gguf::make_f32(c.rope_theta_swa));
        }
        const int q_scalar = c.n_layer == 62 ? c.n_embd / c.n_head : c.head_dim;
        if (std::fabs(c.attn_scale * std::sqrt(static_cast<float>(q_scalar)) - 1.0f) > 1e-6f)
            return make_error(
                "{}: a query_pre_attn_scalar other than {} has no gemma3 GGUF key "
                "(llama.cpp derives it)",
                dir.path(), q_scalar);
        if (c.final_softcap > 0)
            w.set(p + "final_logit_softcapping", gguf::make_f32(c.final_softcap));
    }
    if (c.is_moe()) {
        // llama.cpp's routing: normalised over the chosen experts for Mixtral's llama files and
        // qwen3moe, not for qwen2moe, whatever a key says; scaled by expert_weights_scale.
        if (c.expert_norm != (arch != "qwen2moe"))
            return make_error(
                "{}: {}routing weights {}normalised over the chosen experts have "
                "no {} GGUF spelling (llama.cpp {} them)",
                dir.path(), "", c.expert_norm ? "" : "not ", arch,
                c.expert_norm ? "does not normalise" : "normalises");
        w.set(p + "expert_count", gguf::make_u32(static_cast<uint32_t>(c.n_expert)));
        w.set(p + "expert_used_count", gguf::make_u32(static_cast<uint32_t>(c.n_expert_used)));
        if (arch != "llama")
            w.set(p + "expert_feed_forward_length",
                  gguf::make_u32(static_cast<uint32_t>(c.n_ff_expert)));
        if (c.n_ff_shared > 0)
            w.set(p + "expert_shared_feed_forward_length",
                  gguf::make_u32(static_cast<uint32_t>(c.n_ff_shared)));
    }
    // Linear scaling has keys; Llama 3.1's is the rope_freqs.weight tensor (source_tensors).
    const model::RopeScaling& rs = c.rope_scaling;
    if (rs.type == model::RopeScaling::Type::Linear || rs.type == model::RopeScaling::Type::Yarn) {
        w.set(p + "rope.scaling.type", gguf::make_string(model::rope_scaling_name(rs.type)));
        w.set(p + "rope.scaling.factor", gguf::make_f32(static_cast<float>(rs.factor)));
    }
    if (rs.type == model::RopeScaling::Type::Yarn) {
        if (!rs.truncate)
            return make_error("{}: YaRN without truncation has no GGUF spelling", dir.path());
        w.set(p + "rope.scaling.original_context_length",
              gguf::make_u32(static_cast<uint32_t>(rs.original_ctx)));
        w.set(p + "rope.scaling.yarn_beta_fast", gguf::make_f32(static_cast<float>(rs.beta_fast)));
        w.set(p + "rope.scaling.yarn_beta_slow", gguf::make_f32(static_cast<float>(rs.beta_slow)));
        w.set(p + "rope.scaling.yarn_attn_factor",
              gguf::make_f32(static_cast<float>(model::rope_attention_scale(rs) /
                                                model::yarn_default_attention(rs.factor))));
    }

    if (dir.tokenizer_json_path().empty())
        return make_error("{}: no tokenizer.json; a GGUF needs the tokenizer", dir.path());
    auto tok = read_json(dir.tokenizer_json_path());
    if (!tok) return tok.error();
    if (Status s = write_tokenizer(*tok, dir.tokenizer_config(), c.n_vocab, w); !s)
        return make_error("{}: {}", dir.path(), s.error().message);
    // generation_config's end-of-generation ids beyond EOS: the first as the end-of-turn token,
    // which llama.cpp also stops on.
    const gguf::Value* eos = w.find("tokenizer.ggml.eos_token_id");
    for (int32_t id : dir.eos_token_ids()) {
        if (id < 0 || id >= c.n_vocab) continue;
        if (!eos) {
            w.set("tokenizer.ggml.eos_token_id", gguf::make_u32(static_cast<uint32_t>(id)));
            eos = w.find("tokenizer.ggml.eos_token_id");
        } else if (eos->as_int() != id) {
            w.set("tokenizer.ggml.eot_token_id", gguf::make_u32(static_cast<uint32_t>(id)));
            break;
        }
    }
    auto tmpl = dir.chat_template();
    if (!tmpl) return tmpl.error();
    if (!tmpl->empty()) w.set("tokenizer.chat_template", gguf::make_string(*tmpl));
    return Status::Ok();
}

Expected<std::vector<SourceTensor>> source_tensors(const hf::ModelDir& dir,
                                                   const model::LlamaConfig& c) {
    std::vector<std::string> names = {"token_embd.weight"};
    for (int l = 0; l < c.n_layer; ++l) {
        for (const char* t :
             {"attn_norm.weight", "attn_q.weight", "attn_q.bias", "attn_k.weight", "attn_k.bias",
              "attn_v.weight", "attn_v.bias", "attn_qkv.weight", "attn_q_norm.weight",
              "attn_k_norm.weight", "attn_output.weight", "ffn_norm.weight", "ffn_gate.weight",
              "ffn_up.weight", "ffn_down.weight", "post_attention_norm.weight",
              "post_ffw_norm.weight"})
            if (c.post_norms || !std::string_view(t).starts_with("post_"))
                names.push_back("blk." + std::to_string(l) + "." + t);
        if (c.is_moe())
            for (const char* t :
                 {"ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight",
                  "ffn_down_exps.weight", "ffn_gate_inp_shexp.weight", "ffn_gate_shexp.weight",
                  "ffn_up_shexp.weight", "ffn_down_shexp.weight"})
                names.push_back("blk." + std::to_string(l) + "." + t);
    }
    names.push_back("output_norm.weight");
    names.push_back("output.weight");

    // GGUF's llama architecture rotates adjacent pairs; transformers' layout rotates halves.
    // Row h*hd + 2b + a of the output is row h*hd + a*hd/2 + b of the directory's.
    const bool permute = gguf_arch(c) == "llama";
    if (permute && c.rope_dim != c.head_dim)
        return make_error(
            "{}: a partial rotation ({} of {} dims) in GGUF's llama layout is not "
            "written yet",
            dir.path(), c.rope_dim, c.head_dim);
    auto order = [&](int heads) {
        std::vector<int32_t> o(static_cast<size_t>(heads) * c.head_dim);
        const int hd = c.head_dim;
        for (int h = 0; h < heads; ++h)
            for (int b = 0; b < hd / 2; ++b)
                for (int a = 0; a < 2; ++a)
                    o[static_cast<size_t>(h * hd + 2 * b + a)] = h * hd + a * hd / 2 + b;
        return o;
    };

    std::vector<SourceTensor> out;
    std::map<std::string, bool> used;
    if (c.rope_scaling.type == model::RopeScaling::Type::Llama3) {
        // As llama.cpp's converter: each pair's frequency divisor, unscaled / scaled.
        const auto plain = model::rope_inv_freq(c.rope_dim, c.rope_theta, {});
        const auto scaled = model::rope_inv_freq(c.rope_dim, c.rope_theta, c.rope_scaling);
        SourceTensor s;
        s.name = "rope_freqs.weight";
        s.shape = {static_cast<int64_t>(plain.size())};
        s.n_elements = s.shape[0];
        s.owned.resize(plain.size() * sizeof(float));
        for (size_t i = 0; i < plain.size(); ++i) {
            const auto f = static_cast<float>(plain[i] / scaled[i]);
            std::memcpy(&s.owned[i * sizeof(float)], &f, sizeof f);
        }
        s.n_bytes = s.owned.size();
        s.data = s.owned.data();
        out.push_back(std::move(s));
    }
    for (const std::string& g : names) {
        if (g.ends_with("_exps.weight")) {
            // GGUF stacks a layer's experts in one tensor; a directory has one per expert.
            const std::string base = g.substr(0, g.size() - std::string("_exps.weight").size());
            SourceTensor s;
            s.name = g;
            for (int e = 0; e < c.n_expert; ++e) {
                const std::string one = base + "." + std::to_string(e) + ".weight";
                const hf::SafeTensor* t = model::HfWeights::stored(dir, one);
                if (!t) return make_error("{}: no tensor for {} (expert {})", dir.path(), one, e);
                used[t->name] = true;
                if (t->shape.size() != 2 ||
                    (e > 0 && (t->type != s.type || t->shape[0] != s.part_rows ||
                               t->shape[1] != s.shape[0])))
                    return make_error("{}: tensor '{}' has another shape or type than expert 0's",
                                      dir.path(), t->name);
                if (Status st = check_float_type(dir, *t); !st) return st.error();
                if (e == 0) {
                    s.shape = {t->shape[1], t->shape[0], c.n_expert};
                    s.type = t->type;
                    s.part_rows = t->shape[0];
                }
                s.parts.push_back(t->data);
                s.n_bytes += t->n_bytes;
                s.n_elements += t->n_elements;
            }
            out.push_back(std::move(s));
            continue;
        }
        const hf::SafeTensor* t = model::HfWeights::stored(dir, g);
        if (!t) continue;
        const std::string& hn = t->name;
        used[hn] = true;
        if (Status st = check_float_type(dir, *t); !st) return st.error();
        if (t->shape.empty() || t->shape.size() > 2)
            return make_error("{}: tensor '{}' has {} dimensions", dir.path(), hn, t->shape.size());
        SourceTensor s;
        s.name = g;
        s.shape.assign(t->shape.rbegin(), t->shape.rend());
        s.type = t->type;
        s.data = t->data;
        s.n_bytes = t->n_bytes;
        s.n_elements = t->n_elements;
        if (c.norm_plus_one && g.ends_with("norm.weight")) {
            // GGUF stores a Gemma norm's 1 + w, as llama.cpp's converter writes it.
            s.type = DType::F32;
            s.owned.resize(static_cast<size_t>(t->n_elements) * sizeof(float));
            auto* f = reinterpret_cast<float*>(s.owned.data());
            if (Status st = quant::dequantize_row(t->type, t->data, f, t->n_elements); !st)
                return make_error("{}: tensor '{}': {}", dir.path(), hn, st.error().message);
            for (int64_t i = 0; i < t->n_elements; ++i) f[i] += 1.0f;
            s.data = s.owned.data();
            s.n_bytes = s.owned.size();
        }
        const bool q = g.ends_with("attn_q.weight") || g.ends_with("attn_q.bias");
        const bool k = g.ends_with("attn_k.weight") || g.ends_with("attn_k.bias");
        if (permute && (q || k)) {
            const int heads = q ? c.n_head : c.n_head_kv;
            const int64_t rows = t->shape[0];
            if (rows != static_cast<int64_t>(heads) * c.head_dim)
                return make_error("{}: tensor '{}' has {} rows, not {} heads of {}", dir.path(), hn,
                                  rows, heads, c.head_dim);
            s.row_order = order(heads);
            if (t->shape.size() == 1) {  // a bias: one element per row, permuted here
                const size_t e = static_cast<size_t>(dtype_info(t->type).block_bytes);
                s.owned.resize(t->n_bytes);
                for (size_t r = 0; r < s.row_order.size(); ++r)
                    std::memcpy(&s.owned[r * e], t->data + static_cast<size_t>(s.row_order[r]) * e,
                                e);
                s.data = s.owned.data();
                s.row_order.clear();
            }
        }
        out.push_back(std::move(s));
    }
    for (const hf::SafeTensor* t : dir.tensors())
        if (!used.count(t->name))
            return make_error(
                "{}: tensor '{}' has no GGUF name ferry knows; converting without "
                "it would drop weights",
                dir.path(), t->name);
    return out;
}

}  // namespace ferry::convert
