// `ferry quantize IN.gguf OUT.gguf --type T [--group-size G] [--keep PATTERN...]
// [--keep-f16 PATTERN...] [--method rtn|gptq|awq [--calib FILE] [--calib-tokens N]
// [--act-order] [--damp F]]`:
// re-quantization of every matrix, round-to-nearest unless GPTQ or AWQ (4-bit group types
// only) calibrate the layers' matrices on a text first. For GGUF's types it follows
// llama.cpp's llama-quantize conventions so the output loads there too; ferry's own types
// (int8, int4, fp8) only load in ferry. IN may be a Hugging Face directory: it is written out as
// a GGUF (convert/hf_to_gguf.h) with every matrix in T, as llama.cpp's convert_hf_to_gguf.py
// followed by llama-quantize would.
#include <fnmatch.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "calibrate/calibrated.h"
#include "calibrate/calibration.h"
#include "calibrate/pruning.h"
#include "cli/auto_mixed.h"
#include "cli/calib_text.h"
#include "cli/commands.h"
#include "cli/model_options.h"
#include "cli/weight_types.h"
#include "convert/hf_to_gguf.h"
#include "core/paths.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "engine/loaded_model.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "hf/model_dir.h"
#include "model/llama_config.h"
#include "quant/dequantize.h"
#include "quant/ferry_types.h"
#include "quant/group_grid.h"
#include "quant/quantize.h"

namespace ferry::cli {
namespace {

// Token rows AWQ keeps per linear input to measure output error while searching its scales:
// the search runs 21 trial roundings of every matrix against them, so they bound its cost.
constexpr int64_t kAwqSamples = 256;

struct QuantizeOptions {
    std::string in, out, type;
    std::vector<std::string> keep;      // left at the input type, bytes untouched
    std::vector<std::string> keep_f16;  // matrices written as f16 instead of the target
    int group_size = 128;               // int4 and int3 only
    int threads = 0;
    bool quiet = false;
    std::string method = "rtn";  // rtn, gptq, awq
    std::string calib;           // calibration text; empty: data/calib/default.txt
    int64_t calib_tokens = 4096;
    bool act_order = false;    // gptq
    double damp = 0.01;        // gptq
    double smooth_alpha = -1;  // w8a8: SmoothQuant's migration strength; < 0: none
    bool smoothing() const { return smooth_alpha >= 0; }
    // --auto-mixed: a type per matrix from mix_types within `budget` bits per weight.
    bool auto_mixed = false;
    double budget = 0;
    // Rungs half a bit or so apart around 4.5 bits (docs/quantization.md, "Per-layer mixed
    // precision", measured these against shorter ladders).
    std::vector<std::string> mix_types = {"int3_g64", "int3_g32", "q4_0", "int4_g32", "q8_0"};
};

// The sensitivity trials run the model over the calibration tokens once per candidate, so
// --auto-mixed reads fewer of them by default than GPTQ: windows of kMixedWindow tokens spread
// evenly over the whole text (its prose, dialogue, tables and code alike; a text's first 512
// tokens are one kind of writing, and a mix tuned to it generalises worse).
constexpr int64_t kMixedCalibTokens = 512;
constexpr int kMixedWindow = 128;

bool matches(const std::string& name, const std::string& pattern) {
    return fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

bool matches_any(const std::string& name, const std::vector<std::string>& patterns) {
    return std::any_of(patterns.begin(), patterns.end(),
                       [&](const std::string& p) { return matches(name, p); });
}

// A --keep or --keep-f16 pattern that matches no tensor is a typo (`blk.*.attn_qq*`): the
// matrices it meant would be quantized with nothing said.
void check_patterns_match(const QuantizeOptions& o,
                          const std::vector<convert::SourceTensor>& sources) {
    for (const auto& [flag, patterns] : {std::pair{"--keep", &o.keep}, {"--keep-f16", &o.keep_f16}})
        for (const auto& p : *patterns) {
            const bool any = std::any_of(sources.begin(), sources.end(),
                                         [&](const auto& t) { return matches(t.name, p); });
            if (any) continue;
            std::string names;
            const size_t k = std::min<size_t>(3, sources.size());
            for (size_t i = 0; i < k; ++i)
                names += (i ? ", " : "") + sources[i * sources.size() / k].name;
            throw ExitError(fmt::format("{} '{}' matches no tensor of {} (its names look like {})",
                                        flag, p, o.in, names));
        }
}

// --type and --group-size to a type, or a k-quant mix over its base type.
WeightTarget weight_target(const QuantizeOptions& o) {
    return take(parse_weight_target(o.type, o.group_size));
}

// A k-quant mix's type for each tensor but --keep's and --keep-f16's, and one summary line of
// what it chose.
std::map<std::string, DType> k_mix_types(const QuantizeOptions& o, quant::KMix mix,
                                         const std::vector<convert::SourceTensor>& sources) {
    std::vector<quant::KMixTensor> shapes;
    for (const auto& t : sources) shapes.push_back({t.name, t.shape});
    const quant::KMixModel model = quant::k_mix_model(shapes);
    std::map<std::string, DType> types;
    std::map<DType, int> counts;  // the matrices the mix decides: not norms or routers (f32)
    for (const auto& t : sources) {
        if (matches_any(t.name, o.keep) || matches_any(t.name, o.keep_f16)) continue;
        const DType ty = quant::k_mix_type(mix, model, t.name, t.shape.size(), t.shape[0]);
        types[t.name] = ty;
        if (ty != DType::F32) ++counts[ty];
    }
    if (!o.quiet) {
        std::string line;
        for (const auto& [ty, n] : counts)
            line += fmt::format("{}{} {}", line.empty() ? "" : ", ", n, dtype_name(ty));
        std::fprintf(stderr, "ferry quantize: %s matrices: %s\n", o.type.c_str(), line.c_str());
    }
    return types;
}

// --mix-types, cheapest first by bits per weight (at a row they all split into).
std::vector<DType> mix_candidates(const QuantizeOptions& o) {
    std::vector<DType> c;
    for (const auto& name : o.mix_types) {
        const DType t = take(parse_weight_type(name, o.group_size));
        if (std::find(c.begin(), c.end(), t) == c.end()) c.push_back(t);
    }
    if (c.size() < 2) throw ExitError("--mix-types: name at least two types to choose between");
    auto bits = [](DType t) { return static_cast<double>(row_bytes(t, 1536)) * 8.0 / 1536; };
    std::stable_sort(c.begin(), c.end(), [&](DType a, DType b) { return bits(a) < bits(b); });
    return c;
}

// The type a tensor is written as; nullopt: left at its input type (--keep). `mixed`: the
// types --auto-mixed chose.
std::optional<DType> planned_type(const QuantizeOptions& o, DType target, const std::string& name,
                                  size_t n_dims, int64_t row,
                                  const std::map<std::string, DType>* mixed = nullptr) {
    if (matches_any(name, o.keep)) return std::nullopt;
    if (mixed)
        if (const auto it = mixed->find(name); it != mixed->end()) return it->second;
    if (n_dims > 1 && matches_any(name, o.keep_f16)) return DType::F16;
    return quant::type_for_tensor(target, name, n_dims, row);
}

// GPTQ or AWQ: run the model over the calibration text, then compute what replaces RTN for
// the layers' matrices (and, for AWQ, their norms).
calibrate::TensorOverrides calibrated_overrides(const QuantizeOptions& o, DType target,
                                                engine::LoadedModel& lm, ThreadPool& pool) {
    std::string path;
    const std::vector<int32_t> tokens = calibration_tokens(lm, o.calib, o.calib_tokens, &path);
    const std::string what = o.smoothing() ? "smoothquant" : o.method;
    if (lm.model->config().is_moe())
        throw ExitError(what +
                        " on a mixture of experts is not supported yet (each expert's "
                        "statistics would come from its own tokens); round to nearest instead");
    if (!o.quiet)
        std::fprintf(stderr, "ferry quantize: %s calibration on %zu tokens of %s\n", what.c_str(),
                     tokens.size(), path.c_str());

    calibrate::CalibrationOptions copt;
    copt.hessian = o.method == "gptq";
    copt.abs_mean = o.method == "awq";
    copt.abs_max = o.smoothing();
    copt.n_samples = o.method == "awq" ? kAwqSamples : 0;
    calibrate::CalibrationStats stats;
    {
        const auto n = static_cast<int64_t>(tokens.size());
        Progress bar("calibrate", n, !o.quiet);
        stats =
            take(calibrate::calibrate(*lm.model, lm.backend, tokens, copt,
                                      [&](int done, int total) { bar.update(n * done / total); }));
        bar.finish();
    }
    const model::LlamaConfig& c = lm.model->config();
    auto type_of = [&](const std::string& name, int64_t row) {
        const gguf::TensorInfo* t = lm.file->tensor(name);
        return planned_type(o, target, name, t ? t->shape.size() : 2, row);
    };
    Progress bar(what, c.n_layer, !o.quiet);
    auto on_layer = [&](int done, int) { bar.update(done); };
    calibrate::TensorOverrides ov;
    if (o.smoothing()) {
        ov =
            take(calibrate::run_smoothquant(*lm.file, c, stats, type_of, o.smooth_alpha, on_layer));
    } else if (o.method == "gptq") {
        calibrate::GptqOptions g;
        g.damp = o.damp;
        g.act_order = o.act_order;
        g.keep_zeros = lm.file->get_string("ferry.sparsity.pattern").has_value();
        ov = take(calibrate::run_gptq(*lm.file, c, stats, type_of, g, pool, on_layer));
    } else {
        ov = take(calibrate::run_awq(*lm.file, c, stats, type_of, pool, on_layer));
    }
    bar.finish();
    if (!o.quiet)
        for (const auto& n : ov.notes) std::fprintf(stderr, "ferry quantize: %s\n", n.c_str());
    return ov;
}

// --auto-mixed: measures, plans, says what it chose, and marks the file as mixed.
std::map<std::string, DType> auto_mixed_types(const QuantizeOptions& o,
                                              const std::vector<DType>& mix,
                                              engine::LoadedModel& lm, gguf::Writer& w) {
    std::string path;
    const std::vector<int32_t> text =
        calibration_tokens(lm, o.calib, std::numeric_limits<int64_t>::max(), &path);
    const std::vector<int32_t> tokens = spread_windows(text, o.calib_tokens, kMixedWindow);
    if (!o.quiet)
        std::fprintf(stderr,
                     "ferry quantize: auto-mixed within %.3g bits per weight: each matrix at each "
                     "of %zu types, measured on %zu tokens in windows of %d spread over %s\n",
                     o.budget, mix.size(), tokens.size(), kMixedWindow, path.c_str());
    auto fixed = [&](const std::string& name, size_t n_dims, int64_t row) -> std::optional<DType> {
        if (matches_any(name, o.keep)) return lm.file->tensor(name)->type;
        if (n_dims == 1 || matches_any(name, o.keep_f16))
            return planned_type(o, mix.front(), name, n_dims, row);
        return std::nullopt;
    };
    const MixedPlan plan =
        plan_auto_mixed(lm, mix, o.budget, tokens, kMixedWindow, fixed, !o.quiet);
    if (!o.quiet)
        for (const std::string& line : describe(plan))
            std::fprintf(stderr, "ferry quantize: %s\n", line.c_str());
    set_mixed_metadata(w, o.budget, mix);
    return plan.types;
}

void quantize_file(const QuantizeOptions& o) {
    const std::vector<DType> mix = o.auto_mixed ? mix_candidates(o) : std::vector<DType>{};
    // Mixed: the cheapest candidate stands in where one type is asked (fallback rows, the
    // checks below); each matrix's own comes from the plan.
    const WeightTarget wt = o.auto_mixed ? WeightTarget{mix.front(), {}} : weight_target(o);
    const DType target = wt.base;
    const std::string type_name = o.auto_mixed ? "mixed"
                                  : wt.mix     ? o.type
                                               : std::string(dtype_name(target));
    if (o.method != "rtn" && !quant::has_group_grid(target))
        throw ExitError(fmt::format(
            "--method {} quantizes to 4- and 3-bit group types only: --type int4, int3, q4_0 or "
            "q4_1 (not {})",
            o.method, o.type));
    // One pool for everything: calibration's forward passes and the rows' quantization.
    const auto backend =
        take(kernels::make_backend({.threads = resolve_threads(o.threads), .activations = {}}));
    ThreadPool& pool = backend->host_pool();
    const bool from_dir = hf::is_model_dir(o.in);
    if (from_dir && (o.method != "rtn" || o.smoothing() || o.auto_mixed))
        throw ExitError(fmt::format(
            "{}: calibrated quantization (--method {}, --smooth-alpha, --auto-mixed) reads a "
            "GGUF; convert the directory first (ferry quantize {} model-f16.gguf --type f16), "
            "then quantize that",
            o.in, o.method, o.in));
    std::shared_ptr<gguf::File> in;
    std::shared_ptr<const hf::ModelDir> dir;
    std::optional<engine::LoadedModel> lm;
    gguf::Writer w;
    std::vector<convert::SourceTensor> sources;
    if (from_dir) {
        // A directory is written out as llama.cpp's converter would: its metadata in GGUF keys,
        // q and k rows in GGUF's order, every matrix in --type.
        dir = take(hf::ModelDir::open(o.in));
        const auto cfg = take(model::read_llama_config(dir->config(), o.in + "/config.json"));
        if (Status s = convert::write_metadata(*dir, cfg, w); !s)
            throw ExitError(s.error().message);
        sources = take(convert::source_tensors(*dir, cfg));
    } else {
        if (o.method == "rtn" && !o.smoothing() && !o.auto_mixed) {
            in = take(gguf::File::open(o.in));
        } else {
            lm.emplace(take(engine::LoadedModel::load(o.in, false, backend)));
            in = lm->file;
        }
        w.copy_metadata(*in);
        for (const auto& t : in->tensors())
            sources.push_back({.name = t.name,
                               .shape = t.shape,
                               .type = t.type,
                               .data = t.data,
                               .n_bytes = t.n_bytes,
                               .n_elements = t.n_elements,
                               .row_order = {},
                               .owned = {},
                               .parts = {},
                               .part_rows = 0});
    }
    check_patterns_match(o, sources);
    set_weight_type_metadata(w, wt);

    // A pruned file (ferry prune) keeps its pattern only in a type that rounds 0 to 0: not q4_1
    // and q4_k, which shift their grid by a minimum. (AWQ and SmoothQuant only scale weights, so
    // their zeros stay zeros.)
    if (in)
        if (const auto pattern = in->get_string("ferry.sparsity.pattern")) {
            const std::vector<DType> types = o.auto_mixed ? mix : std::vector<DType>{target};
            for (DType t : types)
                if (!quant::keeps_zeros(t))
                    throw ExitError(fmt::format(
                        "{} is pruned ({}): {} would not keep its zeros (its grid is shifted by "
                        "a minimum); quantize it to a type without one (q4_0, q8_0, q6_k, int4, "
                        "int3, int8, ...)",
                        o.in, *pattern,
                        o.auto_mixed ? "--mix-types " + std::string(dtype_name(t))
                                     : "--type " + o.type));
        }
    // int4s stores what ferry prune --sparsity 2:4 leaves; anything else would fail a row at a
    // time, minutes in.
    if (quant::is_int4s(target) || std::any_of(mix.begin(), mix.end(), quant::is_int4s)) {
        const auto pattern = in ? in->get_string("ferry.sparsity.pattern") : std::nullopt;
        const auto parsed = pattern
                                ? calibrate::parse_sparsity(*pattern)
                                : Expected<calibrate::SparsityPattern>(make_error("not pruned"));
        if (!parsed || !parsed->at_most_2_of_4())
            throw ExitError(fmt::format(
                "--type int4s stores matrices pruned 2:4, and {} is {}: prune it first (ferry "
                "prune {} pruned.gguf --sparsity 2:4), then quantize that",
                o.in, pattern ? "pruned " + *pattern : std::string("not pruned"), o.in));
    }
    auto overrides = std::make_shared<calibrate::TensorOverrides>();
    if (lm && !o.auto_mixed) *overrides = calibrated_overrides(o, target, *lm, pool);
    std::map<std::string, DType> mixed;
    if (o.auto_mixed) mixed = auto_mixed_types(o, mix, *lm, w);
    if (wt.mix) mixed = k_mix_types(o, *wt.mix, sources);
    int64_t total_elems = 0, n_kept = 0, n_f16 = 0, n_fallback = 0;
    size_t in_bytes = 0;
    for (const auto& t : sources) {
        total_elems += t.n_elements;
        in_bytes += t.n_bytes;
    }
    // (row length, type written) -> example names: one line per kind of fallback, not 180.
    std::map<std::pair<int64_t, DType>, std::string> fallbacks;
    std::string w8a16_names;  // w8a8: embedding and head, written int8 with float activations
    std::string dense_names;  // int4s: embedding and head, which ferry prune leaves dense
    auto done = std::make_shared<int64_t>(0);
    auto bar = std::make_shared<Progress>("quantize " + type_name, total_elems, !o.quiet);

    for (const auto& t : sources) {
        const convert::SourceTensor* ti = &t;
        const std::optional<DType> planned =
            planned_type(o, target, t.name, t.shape.size(), t.shape[0], &mixed);
        const DType out_type = planned.value_or(t.type);
        if (!planned) {
            ++n_kept;
        } else if (t.shape.size() == 1) {
        } else if (matches_any(t.name, o.keep_f16)) {
            ++n_f16;
        } else if (target == DType::W8A8 && out_type == DType::INT8 &&
                   t.name.rfind("blk.", 0) != 0) {
            w8a16_names += (w8a16_names.empty() ? "" : ", ") + t.name;
        } else if (quant::is_int4s(target) && out_type == quant::int4s_dense(target) &&
                   t.name.rfind("blk.", 0) != 0) {
            dense_names += (dense_names.empty() ? "" : ", ") + t.name;
        } else if (!mixed.contains(t.name)) {
            if (out_type != target) {
                ++n_fallback;
                auto& f = fallbacks[{t.shape[0], out_type}];
                if (f.empty())
                    f = t.name;
                else if (std::count(f.begin(), f.end(), ',') < 2)
                    f += ", " + t.name;
                else if (f.back() != '.')
                    f += ", ...";
            }
        }
        if (out_type != t.type && !dtype_info(t.type).supported)
            throw ExitError(fmt::format("{}: tensor '{}' has type {}, which ferry cannot read",
                                        o.in, t.name, dtype_name(t.type)));
        auto producer = [ti, out_type, &pool, done, bar,
                         overrides](std::vector<uint8_t>& out) -> Status {
            const auto ob = overrides->bytes.find(ti->name);
            const auto of = overrides->floats.find(ti->name);
            if (ob != overrides->bytes.end()) {
                out = std::move(ob->second);  // GPTQ's result, already in out_type
                overrides->bytes.erase(ob);
            } else {
                const int64_t row = ti->row(), n_rows = ti->n_rows();
                const size_t out_row = row_bytes(out_type, row);
                out.resize(out_row * static_cast<size_t>(n_rows));
                std::vector<std::string> errors(static_cast<size_t>(pool.size()));
                // Rows are independent, so they are spread over the pool in contiguous runs.
                pool.run([&](int share, int n_shares) {
                    const int64_t r0 = n_rows * share / n_shares,
                                  r1 = n_rows * (share + 1) / n_shares;
                    Status s = Status::Ok();
                    if (of == overrides->floats.end()) {
                        s = convert::rows_as(*ti, out_type, r0, r1, out.data() + out_row * r0);
                    } else {  // calibration's floats for this matrix, rounded to out_type
                        for (int64_t r = r0; r < r1 && s; ++r)
                            s = quant::quantize_row(out_type, of->second.data() + r * row,
                                                    out.data() + out_row * r, row);
                    }
                    if (!s) errors[static_cast<size_t>(share) % errors.size()] = s.error().message;
                });
                for (const auto& e : errors)
                    if (!e.empty()) return make_error("{}: {}", ti->name, e);
            }
            if (of != overrides->floats.end()) overrides->floats.erase(of);
            *done += ti->n_elements;
            bar->update(*done);
            return Status::Ok();
        };
        if (Status s = w.add_tensor(t.name, t.shape, out_type, producer); !s)
            throw ExitError(s.error().message);
    }
    for (const auto& [key, names] : fallbacks)
        std::fprintf(stderr,
                     "ferry quantize: rows of %lld elements do not split into %s blocks of %d; "
                     "those tensors are written as %s (%s)\n",
                     static_cast<long long>(key.first), type_name.c_str(),
                     dtype_info(target).block_size, std::string(dtype_name(key.second)).c_str(),
                     names.c_str());
    if (!w8a16_names.empty() && !o.quiet)
        std::fprintf(stderr,
                     "ferry quantize: %s written as int8 with float activations (w8a8 is for "
                     "the layers' linear maps)\n",
                     w8a16_names.c_str());
    if (!dense_names.empty() && !o.quiet)
        std::fprintf(stderr, "ferry quantize: %s written as %s (ferry prune leaves them dense)\n",
                     dense_names.c_str(),
                     std::string(dtype_name(quant::int4s_dense(target))).c_str());
    if (Status s = w.write(o.out); !s) throw ExitError(s.error().message);
    bar->finish();

    auto result = take(gguf::File::open(o.out));
    std::fprintf(stderr, "ferry quantize: wrote %s: %zu tensors, %.1f MiB (from %.1f MiB)",
                 o.out.c_str(), result->tensors().size(), result->file_size() / 1048576.0,
                 in_bytes / 1048576.0);
    if (n_kept) std::fprintf(stderr, ", %lld kept by --keep", static_cast<long long>(n_kept));
    if (n_f16) std::fprintf(stderr, ", %lld f16 by --keep-f16", static_cast<long long>(n_f16));
    if (n_fallback) std::fprintf(stderr, ", %lld fell back", static_cast<long long>(n_fallback));
    std::fprintf(stderr, "\n");
}

}  // namespace

void add_quantize_command(CLI::App& app) {
    auto o = std::make_shared<QuantizeOptions>();
    auto* cmd = app.add_subcommand(
        "quantize",
        "Re-quantize a GGUF model (round to nearest, GPTQ, AWQ or SmoothQuant), or convert a "
        "Hugging Face directory to GGUF");
    cmd->add_option("input", o->in,
                    "Input GGUF file (any type ferry reads), a Hugging Face model directory "
                    "(config.json, *.safetensors, tokenizer.json), or `default` for the default "
                    "model")
        ->required();
    cmd->add_option("output", o->out, "Output GGUF file")->required();
    cmd->add_option("--type", o->type,
                    "q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k, f16, bf16, f32; llama.cpp's "
                    "mixes q4_k_m and q5_k_m (q6_k for the head, and for attn_v and ffn_down in "
                    "the layers llama-quantize picks); or ferry's own (only ferry "
                    "reads them): int8 (per-row scale), int4 and int3 (groups), int4s (int4 on a "
                    "file pruned 2:4, 3/4 of int4's bytes), fp8 (E4M3, per-row scale), "
                    "w8a8 (int8 weights, activations quantized to int8 per token); or "
                    "--auto-mixed");
    auto* group = cmd->add_option("--group-size", o->group_size,
                                  "int4 / int3 / int4s group size: 32, 64 or 128")
                      ->capture_default_str();
    cmd->add_option("--keep", o->keep,
                    "Leave tensors whose names match this glob at their input type "
                    "(repeatable, e.g. 'output*' 'token_embd*' 'blk.0.*')");
    cmd->add_option("--keep-f16", o->keep_f16,
                    "Write matrices whose names match this glob as f16 instead of --type "
                    "(repeatable; --keep wins where both match)");
    cmd->add_option("--method", o->method,
                    "rtn (round to nearest), gptq or awq (both calibrate on a text; group types "
                    "only: int4, int3, int4s, q4_0, q4_1)")
        ->check(CLI::IsMember({"rtn", "gptq", "awq"}))
        ->capture_default_str();
    auto* calib = cmd->add_option(
        "--calib", o->calib, "Calibration text for gptq/awq (default: data/calib/default.txt)");
    auto* calib_tokens = cmd->add_option("--calib-tokens", o->calib_tokens,
                                         "Use at most this many calibration tokens")
                             ->check(CLI::PositiveNumber)
                             ->capture_default_str();
    auto* act_order = cmd->add_flag("--act-order", o->act_order,
                                    "gptq: quantize columns in order of decreasing activation");
    auto* damp = cmd->add_option("--damp", o->damp,
                                 "gptq: dampening added to the Hessian's diagonal, as a fraction "
                                 "of its mean")
                     ->check(CLI::Range(0.0, 10.0))
                     ->capture_default_str();
    auto* smooth =
        cmd->add_option("--smooth-alpha", o->smooth_alpha,
                        "w8a8: SmoothQuant, migrating activation outliers into the weights with "
                        "this strength (0..1; 0.5 is the paper's default), calibrated on --calib")
            ->check(CLI::Range(0.0, 1.0));
    auto* mixed = cmd->add_flag(
        "--auto-mixed", o->auto_mixed,
        "Per-layer mixed precision: measure each matrix's sensitivity (the KL its rounding "
        "alone causes on --calib) at each of --mix-types and keep the most sensitive at higher "
        "precision within --budget");
    auto* budget =
        cmd->add_option("--budget", o->budget, "--auto-mixed: bits per weight of the whole file")
            ->check(CLI::Range(1.0, 32.0));
    auto* mix_types = cmd->add_option("--mix-types", o->mix_types,
                                      "--auto-mixed: the types to choose from (int4 and int3 "
                                      "take --group-size)")
                          ->delimiter(',')
                          ->capture_default_str();
    cmd->add_option("-t,--threads", o->threads, "Threads (default: physical cores)")
        ->check(CLI::Range(0, 1024));
    cmd->add_flag("-q,--quiet", o->quiet, "No progress bar");
    cmd->callback([o, group, calib, calib_tokens, act_order, damp, smooth, mixed, budget,
                   mix_types] {
        // `default` names the cached default model, as -m does elsewhere.
        o->in = take(resolve_model_path(o->in));
        if (o->in == o->out) throw ExitError("input and output must be different files");
        // Checked before the work, not after minutes of quantizing.
        if (Status st = gguf::check_output_path(o->out); !st) throw ExitError(st.error().message);
        if (mixed->count()) {
            if (!o->type.empty())
                throw ExitError(
                    "--auto-mixed picks each matrix's type from --mix-types; drop --type");
            if (!budget->count())
                throw ExitError("--auto-mixed needs --budget BITS_PER_WEIGHT (e.g. 4.5)");
            if (o->method != "rtn" || smooth->count())
                throw ExitError(
                    "--auto-mixed rounds to nearest; --method gptq/awq and --smooth-alpha do "
                    "not combine with it yet");
            if (!calib_tokens->count()) o->calib_tokens = kMixedCalibTokens;
        } else {
            if (o->type.empty()) throw ExitError("--type is required (or --auto-mixed)");
            if (budget->count() || mix_types->count())
                throw ExitError("--budget and --mix-types apply to --auto-mixed only");
        }
        const bool group_type =
            o->type == "int4" || o->type == "int3" || o->type == "int4s" ||
            (o->auto_mixed && std::any_of(o->mix_types.begin(), o->mix_types.end(), [](auto& t) {
                 return t == "int4" || t == "int3" || t == "int4s";
             }));
        if (group->count() && !group_type)
            throw ExitError("--group-size applies to --type int4, int3 and int4s only");
        if (smooth->count() && o->type != "w8a8")
            throw ExitError(
                "--smooth-alpha applies to --type w8a8 only (it serves 8-bit activations)");
        if (smooth->count() && o->method != "rtn")
            throw ExitError(
                "--smooth-alpha and --method gptq/awq do not combine (w8a8 rounds to nearest)");
        if (o->method == "rtn" && !smooth->count() && !o->auto_mixed &&
            (calib->count() || calib_tokens->count()))
            throw ExitError(
                "--calib and --calib-tokens apply to --method gptq or awq, --smooth-alpha or "
                "--auto-mixed");
        if (o->method != "gptq" && (act_order->count() || damp->count()))
            throw ExitError("--act-order and --damp apply to --method gptq only");
        quantize_file(*o);
    });
}

}  // namespace ferry::cli
