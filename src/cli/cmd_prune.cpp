// `ferry prune IN.gguf OUT.gguf --sparsity 2:4|0.5 [--method magnitude|wanda|sparsegpt]
// [--calib FILE] [--calib-tokens N] [--type f16] [--group-size G] [--damp F] [--sequential]`:
// zeroes the least important weights of every layer's linear maps (calibrate/pruning.h) and writes
// them in a type that holds zero exactly, so the pattern survives. `ferry quantize` keeps it too
// (to q8_0, q4_0, int8, int4, or int4s, which stores a 2:4 file compressed; rounding to nearest or
// with GPTQ told by the file's ferry.sparsity.pattern key to keep the zeros) and refuses the types
// and methods that would not.
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "calibrate/calibrated.h"
#include "calibrate/calibration.h"
#include "calibrate/pruning.h"
#include "cli/calib_text.h"
#include "cli/commands.h"
#include "cli/model_options.h"
#include "cli/weight_types.h"
#include "core/paths.h"
#include "core/progress.h"
#include "engine/loaded_model.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "hf/model_dir.h"
#include "quant/dequantize.h"
#include "quant/ferry_types.h"
#include "quant/quantize.h"

namespace ferry::cli {
namespace {

struct PruneCliOptions {
    std::string in, out, sparsity, method = "wanda", type = "f16", calib;
    int64_t calib_tokens = 4096;
    double damp = 0.01;
    int threads = 0;
    bool quiet = false;
    bool sequential = false;
    int group_size = 128;  // int4 and int4s only
};

void prune_file(const PruneCliOptions& o) {
    // Checked before the work, not after it: the write would rename over a device or fail.
    if (Status st = gguf::check_output_path(o.out); !st) throw ExitError(st.error().message);
    const calibrate::SparsityPattern pattern = take(calibrate::parse_sparsity(o.sparsity));
    const calibrate::PruneMethod method = take(calibrate::parse_prune_method(o.method));
    const DType type = take(parse_weight_type(o.type, o.group_size));
    if (quant::is_int4s(type) && !pattern.at_most_2_of_4())
        throw ExitError(fmt::format(
            "--type {} stores at most 2 non-zero weights of every 4, which --sparsity {} does "
            "not promise; use --sparsity 2:4 (or another type)",
            o.type, o.sparsity));
    if (!quant::keeps_zeros(type))
        throw ExitError(fmt::format(
            "--type {} would not keep the zeros (its grid is shifted by a minimum); use f32, "
            "f16, bf16, q8_0, q4_0, int8, int4 or int4s",
            o.type));
    const auto backend =
        take(kernels::make_backend({.threads = resolve_threads(o.threads), .activations = {}}));
    ThreadPool& pool = backend->host_pool();
    engine::LoadedModel lm = take(engine::LoadedModel::load(o.in, false, backend));
    const model::LlamaConfig& c = lm.model->config();
    // Every matrix's width against the pattern before minutes of calibration, not after.
    for (int li = 0; li < c.n_layer && !c.is_moe(); ++li)
        for (const std::string& name : calibrate::prunable_tensors(li))
            if (const gguf::TensorInfo* t = lm.file->tensor(name))
                if (Status s = calibrate::check_pattern(pattern, t->shape[0]); !s)
                    throw ExitError(fmt::format("{}: {}", name, s.error().message));

    calibrate::CalibrationStats stats;
    calibrate::LayerStats per_layer;
    std::vector<int32_t> tokens;
    calibrate::CalibrationOptions copt;
    if (method != calibrate::PruneMethod::Magnitude) {
        std::string path;
        tokens = calibration_tokens(lm, o.calib, o.calib_tokens, &path);
        if (!o.quiet)
            std::fprintf(stderr, "ferry prune: %s calibration on %zu tokens of %s%s\n",
                         calibrate::prune_method_name(method), tokens.size(), path.c_str(),
                         o.sequential ? ", one pass per layer on the layers before it pruned" : "");
        copt.hessian = method == calibrate::PruneMethod::SparseGpt;
        copt.sq_mean = method == calibrate::PruneMethod::Wanda;
    }
    if (method != calibrate::PruneMethod::Magnitude && o.sequential) {
        // Layer L is calibrated on what the pruned layers 0..L-1 hand it, as SparseGPT does, so
        // it makes up for their errors too. The model runs with each pruned layer swapped in,
        // rounded to the type the file will hold.
        per_layer =
            [&](int li,
                const calibrate::TensorOverrides& so_far) -> Expected<calibrate::CalibrationStats> {
            if (li > 0)
                for (const std::string& name : calibrate::prunable_tensors(li - 1)) {
                    const auto it = so_far.floats.find(name);
                    if (it == so_far.floats.end()) continue;
                    const gguf::TensorInfo* t = lm.file->tensor(name);
                    const int64_t cols = t->shape[0], rows = t->n_elements / cols;
                    const DType out_type = quant::fallback_for(type, cols);
                    const size_t rb = row_bytes(out_type, cols);
                    auto bytes =
                        std::make_shared<std::vector<uint8_t>>(rb * static_cast<size_t>(rows));
                    for (int64_t r = 0; r < rows; ++r)
                        if (Status s = quant::quantize_row(out_type, &it->second[r * cols],
                                                           bytes->data() + rb * r, cols);
                            !s)
                            return s.error();
                    const Tensor m =
                        Tensor(bytes->data(), out_type, {rows, cols}).owned_by(std::move(bytes));
                    if (Status s = lm.model->replace_matrix(*lm.backend, name, m); !s)
                        return s.error();
                }
            calibrate::CalibrationOptions one = copt;
            one.only_layer = li;
            return calibrate::calibrate(*lm.model, lm.backend, tokens, one);
        };
    } else if (method != calibrate::PruneMethod::Magnitude) {
        const auto n = static_cast<int64_t>(tokens.size());
        Progress bar("calibrate", n, !o.quiet);
        stats = take(calibrate::calibrate(*lm.model, lm.backend, tokens, copt,
                                          [&](int d, int t) { bar.update(n * d / t); }));
        bar.finish();
    }
    calibrate::PruneOptions popt;
    popt.pattern = pattern;
    popt.method = method;
    popt.damp = o.damp;
    calibrate::TensorOverrides ov;
    {
        Progress bar(fmt::format("prune {} {}", pattern.name(), o.method), c.n_layer, !o.quiet);
        ov = take(calibrate::run_prune(
            *lm.file, c,
            method == calibrate::PruneMethod::Magnitude || per_layer ? nullptr : &stats, popt, pool,
            [&](int d, int) { bar.update(d); }, per_layer));
        bar.finish();
    }
    if (!o.quiet)
        for (const auto& n : ov.notes) std::fprintf(stderr, "ferry prune: %s\n", n.c_str());

    gguf::Writer w;
    w.copy_metadata(*lm.file);
    set_weight_type_metadata(w, type);  // the layers' type now, not the input's
    w.set("ferry.sparsity.pattern", gguf::make_string(pattern.spec()));
    w.set("ferry.sparsity.method", gguf::make_string(calibrate::prune_method_name(method)));
    int64_t pruned_weights = 0, all_weights = 0;
    auto floats = std::make_shared<std::map<std::string, std::vector<float>>>(std::move(ov.floats));
    for (const auto& t : lm.file->tensors()) {
        all_weights += t.n_elements;
        const auto it = floats->find(t.name);
        if (it == floats->end()) {
            std::vector<uint8_t> bytes(t.data, t.data + t.n_bytes);
            if (Status s = w.add_tensor(t.name, t.shape, t.type, std::move(bytes)); !s)
                throw ExitError(s.error().message);
            continue;
        }
        pruned_weights += t.n_elements;
        const int64_t cols = t.shape[0], rows = t.n_elements / cols;
        // Rows that do not split into the type's blocks take its fallback (int4: smaller groups,
        // then int8; q4_0: q8_0, then f16), each of which keeps 0 exact too.
        const DType out_type = quant::fallback_for(type, cols);
        auto produce = [floats, name = t.name, rows, cols, out_type,
                        pattern](std::vector<uint8_t>& out) -> Status {
            const std::vector<float>& f = floats->at(name);
            const size_t rb = row_bytes(out_type, cols);
            out.resize(rb * static_cast<size_t>(rows));
            std::vector<float> back(static_cast<size_t>(rows * cols));
            for (int64_t r = 0; r < rows; ++r) {
                if (Status s =
                        quant::quantize_row(out_type, &f[r * cols], out.data() + rb * r, cols);
                    !s)
                    return s;
                if (Status s =
                        quant::dequantize_row(out_type, out.data() + rb * r, &back[r * cols], cols);
                    !s)
                    return s;
            }
            // What is written must follow the pattern, read back as a loader reads it.
            if (!calibrate::follows_pattern(back, rows, cols, pattern))
                return make_error("{}: the pattern did not survive rounding to {}", name,
                                  dtype_name(out_type));
            floats->erase(name);
            return Status::Ok();
        };
        if (Status s = w.add_tensor(t.name, t.shape, out_type, produce); !s)
            throw ExitError(s.error().message);
    }
    if (Status s = w.write(o.out); !s) throw ExitError(s.error().message);
    auto result = take(gguf::File::open(o.out));
    std::fprintf(stderr,
                 "ferry prune: wrote %s: %s (%s) on %lld weights of the layers' linear maps "
                 "(%.0f %% of all), written as %s; %.1f MiB\n",
                 o.out.c_str(), pattern.name().c_str(), o.method.c_str(),
                 static_cast<long long>(pruned_weights),
                 100.0 * static_cast<double>(pruned_weights) / static_cast<double>(all_weights),
                 o.type.c_str(), result->file_size() / 1048576.0);
}

}  // namespace

void add_prune_command(CLI::App& app) {
    auto o = std::make_shared<PruneCliOptions>();
    auto* cmd = app.add_subcommand(
        "prune",
        "Prune a GGUF model's layer matrices (2:4 semi-structured or unstructured; magnitude, "
        "Wanda or SparseGPT), to be quantized afterwards as usual");
    cmd->add_option("input", o->in, "Input GGUF file, or `default` for the default model")
        ->required();
    cmd->add_option("output", o->out, "Output GGUF file")->required();
    cmd->add_option("--sparsity", o->sparsity,
                    "N:M (2:4: at most 2 non-zero in every 4 consecutive weights of a row) or a "
                    "fraction of each row (0.5)")
        ->required();
    cmd->add_option("--method", o->method,
                    "magnitude (|w|), wanda (|w| times the input's norm, calibrated) or sparsegpt "
                    "(calibrated; the kept weights are updated to make up for the pruned)")
        ->check(CLI::IsMember({"magnitude", "wanda", "sparsegpt"}))
        ->capture_default_str();
    cmd->add_option("--type", o->type,
                    "type of the pruned matrices: f32, f16, bf16, q8_0, q4_0, int8, int4 or int4s "
                    "(2:4 only: int4 storing 2 codes of every 4) (types that keep 0 exact); the "
                    "other tensors keep theirs")
        ->capture_default_str();
    auto* group =
        cmd->add_option("--group-size", o->group_size, "int4 / int4s group size (32, 64 or 128)")
            ->capture_default_str();
    auto* calib = cmd->add_option("--calib", o->calib,
                                  "Calibration text for wanda/sparsegpt (default: "
                                  "data/calib/default.txt)");
    auto* calib_tokens = cmd->add_option("--calib-tokens", o->calib_tokens,
                                         "Use at most this many calibration tokens")
                             ->check(CLI::PositiveNumber)
                             ->capture_default_str();
    auto* damp = cmd->add_option("--damp", o->damp,
                                 "sparsegpt: dampening added to the Hessian's diagonal, as a "
                                 "fraction of its mean")
                     ->check(CLI::Range(0.0, 10.0))
                     ->capture_default_str();
    cmd->add_option("-t,--threads", o->threads, "Threads (default: physical cores)")
        ->check(CLI::Range(0, 1024));
    auto* sequential = cmd->add_flag(
        "--sequential", o->sequential,
        "wanda/sparsegpt: calibrate each layer on the model with the layers before it already "
        "pruned (one forward pass per layer), instead of all layers in one pass on the dense "
        "model");
    cmd->add_flag("-q,--quiet", o->quiet, "No progress bar");
    cmd->callback([o, calib, calib_tokens, damp, sequential, group] {
        o->in = take(resolve_model_path(o->in));
        if (o->in == o->out) throw ExitError("input and output must be different files");
        if (std::error_code ec; std::filesystem::is_directory(o->out, ec))
            throw ExitError(o->out + ": is a directory; name the output file");
        take(calibrate::parse_sparsity(o->sparsity));  // a bad pattern before loading anything
        if (hf::is_model_dir(o->in))
            throw ExitError(fmt::format(
                "{}: prune reads a GGUF; convert the directory first (ferry quantize {} "
                "model-f16.gguf --type f16), then prune that",
                o->in, o->in));
        if (o->method == "magnitude" && (calib->count() || calib_tokens->count()))
            throw ExitError("--calib and --calib-tokens apply to --method wanda or sparsegpt");
        if (o->method != "sparsegpt" && damp->count())
            throw ExitError("--damp applies to --method sparsegpt only");
        if (o->method == "magnitude" && sequential->count())
            throw ExitError(
                "--sequential applies to --method wanda or sparsegpt (magnitude "
                "reads no activations)");
        if (group->count() && o->type != "int4" && o->type != "int4s")
            throw ExitError("--group-size applies to --type int4 and int4s only");
        prune_file(*o);
    });
}

}  // namespace ferry::cli
