// `ferry quantize IN.gguf OUT.gguf --type T [--keep PATTERN...]`: round-to-nearest
// re-quantization of every matrix, with the same conventions as llama.cpp's llama-quantize so
// the output loads there too.
#include <fnmatch.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/paths.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "quant/dequantize.h"
#include "quant/quantize.h"

namespace ferry::cli {
namespace {

struct QuantizeOptions {
    std::string in, out, type;
    std::vector<std::string> keep;
    int threads = 0;
    bool quiet = false;
};

// llama.cpp's llama_ftype for a file whose matrices are all `t`; tools show it as the
// file's type, and nothing depends on it for loading.
uint32_t file_type_for(DType t) {
    switch (t) {
        case DType::F32:
            return 0;
        case DType::F16:
            return 1;
        case DType::Q4_0:
            return 2;
        case DType::Q4_1:
            return 3;
        case DType::Q8_0:
            return 7;
        case DType::Q4_K:
            return 14;  // Q4_K_S: every matrix Q4_K
        case DType::Q6_K:
            return 18;
        case DType::BF16:
            return 32;
        default:
            return 0;
    }
}

bool matches_any(const std::string& name, const std::vector<std::string>& patterns) {
    for (const auto& p : patterns)
        if (fnmatch(p.c_str(), name.c_str(), 0) == 0) return true;
    return false;
}

// A row that does not split into the target's blocks gets the best type it does split into,
// as llama.cpp does for odd-width models.
DType fallback_for(DType target, int64_t row) {
    if (row % dtype_info(target).block_size == 0) return target;
    if (target != DType::F32 && target != DType::F16 && target != DType::BF16 &&
        row % dtype_info(DType::Q8_0).block_size == 0)
        return DType::Q8_0;
    return DType::F16;
}

void quantize_file(const QuantizeOptions& o) {
    auto target = dtype_from_name(o.type);
    if (!target || !quant::can_quantize(*target))
        throw ExitError(fmt::format(
            "--type {}: not a type ferry writes (q8_0, q4_0, q4_1, q4_k, q6_k, f16, bf16, f32)",
            o.type));
    auto in = take(gguf::File::open(o.in));

    gguf::Writer w;
    w.copy_metadata(*in);
    w.set("general.file_type", gguf::make_u32(file_type_for(*target)));
    const bool quantized = dtype_info(*target).block_size > 1;
    if (quantized)
        w.set("general.quantization_version", gguf::make_u32(2));
    else
        w.remove("general.quantization_version");

    ThreadPool pool(o.threads > 0 ? o.threads : physical_core_count());
    int64_t total_elems = 0, n_kept = 0, n_fallback = 0;
    for (const auto& t : in->tensors()) total_elems += t.n_elements;
    // (row length, type written) -> example names: one line per kind of fallback, not 180.
    std::map<std::pair<int64_t, DType>, std::string> fallbacks;
    auto done = std::make_shared<int64_t>(0);
    auto bar = std::make_shared<Progress>("quantize " + o.type, total_elems, !o.quiet);

    for (const auto& t : in->tensors()) {
        const gguf::TensorInfo* ti = &t;
        DType out_type;
        if (matches_any(t.name, o.keep)) {
            out_type = t.type;
            ++n_kept;
        } else if (t.shape.size() == 1) {
            out_type = DType::F32;  // norms and biases: tiny, and the model reads them as F32
        } else {
            out_type = fallback_for(*target, t.shape[0]);
            if (out_type != *target) {
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
        auto producer = [ti, out_type, &pool, done, bar](std::vector<uint8_t>& out) -> Status {
            if (out_type == ti->type) {
                out.assign(ti->data, ti->data + ti->n_bytes);
            } else {
                const int64_t row = ti->shape[0];
                const int64_t n_rows = ti->n_elements / row;
                const size_t in_row = row_bytes(ti->type, row), out_row = row_bytes(out_type, row);
                out.resize(out_row * static_cast<size_t>(n_rows));
                std::vector<std::string> errors(static_cast<size_t>(pool.size()));
                // Rows are independent, so they are spread over the pool in contiguous runs.
                pool.run([&](int share, int n_shares) {
                    std::vector<float> tmp(static_cast<size_t>(row));
                    for (int64_t r = n_rows * share / n_shares; r < n_rows * (share + 1) / n_shares;
                         ++r) {
                        Status s =
                            quant::dequantize_row(ti->type, ti->data + in_row * r, tmp.data(), row);
                        if (s)
                            s = quant::quantize_row(out_type, tmp.data(), out.data() + out_row * r,
                                                    row);
                        if (!s) {
                            errors[static_cast<size_t>(share) % errors.size()] = s.error().message;
                            return;
                        }
                    }
                });
                for (const auto& e : errors)
                    if (!e.empty()) return make_error("{}", e);
            }
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
                     static_cast<long long>(key.first), o.type.c_str(),
                     dtype_info(*target).block_size, std::string(dtype_name(key.second)).c_str(),
                     names.c_str());
    if (Status s = w.write(o.out); !s) throw ExitError(s.error().message);
    bar->finish();

    auto result = take(gguf::File::open(o.out));
    std::fprintf(stderr, "ferry quantize: wrote %s: %zu tensors, %.1f MiB (from %.1f MiB)",
                 o.out.c_str(), result->tensors().size(), result->file_size() / 1048576.0,
                 in->file_size() / 1048576.0);
    if (n_kept) std::fprintf(stderr, ", %lld kept by --keep", static_cast<long long>(n_kept));
    if (n_fallback) std::fprintf(stderr, ", %lld fell back", static_cast<long long>(n_fallback));
    std::fprintf(stderr, "\n");
}

}  // namespace

void add_quantize_command(CLI::App& app) {
    auto o = std::make_shared<QuantizeOptions>();
    auto* cmd = app.add_subcommand("quantize", "Re-quantize a GGUF model (round to nearest)");
    cmd->add_option("input", o->in, "Input GGUF file (any type ferry reads)")->required();
    cmd->add_option("output", o->out, "Output GGUF file")->required();
    cmd->add_option("--type", o->type, "q8_0, q4_0, q4_1, q4_k, q6_k, f16, bf16 or f32")
        ->required();
    cmd->add_option("--keep", o->keep,
                    "Leave tensors whose names match this glob at their input type "
                    "(repeatable, e.g. 'output*' 'token_embd*' 'blk.0.*')");
    cmd->add_option("-t,--threads", o->threads, "Threads (default: physical cores)");
    cmd->add_flag("-q,--quiet", o->quiet, "No progress bar");
    cmd->callback([o] {
        if (o->in == o->out) throw ExitError("input and output must be different files");
        quantize_file(*o);
    });
}

}  // namespace ferry::cli
