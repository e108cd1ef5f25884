#include "model/medusa_heads.h"

#include <cmath>
#include <cstring>
#include <filesystem>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"

namespace ferry::model {

namespace {
constexpr const char* kArch = "medusa";
std::string weight_name(int k) {
    return "medusa." + std::to_string(k) + ".weight";
}
std::string bias_name(int k) {
    return "medusa." + std::to_string(k) + ".bias";
}
}  // namespace

MedusaHeads MedusaHeads::zeros(int n, int64_t n_embd, int64_t n_vocab) {
    MedusaHeads m;
    m.n_embd = n_embd;
    m.n_vocab = n_vocab;
    m.w.assign(static_cast<size_t>(n), std::vector<float>(static_cast<size_t>(n_embd * n_embd)));
    m.b.assign(static_cast<size_t>(n), std::vector<float>(static_cast<size_t>(n_embd)));
    return m;
}

void MedusaHeads::finish(int k, const float* h, const float* a, float* z) const {
    const float* bias = b[static_cast<size_t>(k)].data();
    for (int64_t i = 0; i < n_embd; ++i) {
        const float u = a[i] + bias[i];
        z[i] = h[i] + u / (1.0f + std::exp(-u));
    }
}

Expected<MedusaHeads> MedusaHeads::load(const std::string& path) {
    auto file = gguf::File::open(path);
    if (!file) return file.error();
    const gguf::File& f = **file;
    if (f.get_string("general.architecture").value_or("") != kArch)
        return make_error("{}: not a Medusa heads file (general.architecture is '{}', not '{}')",
                          path, f.get_string("general.architecture").value_or(""), kArch);
    const auto n = f.get_int("medusa.head_count");
    const auto d = f.get_int("medusa.embedding_length");
    const auto v = f.get_int("medusa.vocab_size");
    if (!n || !d || !v || *n < 1 || *n > 64 || *d < 1 || *v < 1)
        return make_error(
            "{}: medusa.head_count (1..64), medusa.embedding_length and medusa.vocab_size must "
            "be set and positive",
            path);
    MedusaHeads m = zeros(static_cast<int>(*n), *d, *v);
    m.trained_on = f.get_string("medusa.trained_on").value_or("");
    for (int k = 0; k < m.n_heads(); ++k) {
        const std::pair<std::string, std::vector<float>*> parts[] = {
            {weight_name(k), &m.w[static_cast<size_t>(k)]},
            {bias_name(k), &m.b[static_cast<size_t>(k)]}};
        for (const auto& [name, dst] : parts) {
            const gguf::TensorInfo* t = f.tensor(name);
            if (!t) return make_error("{}: tensor {} is missing", path, name);
            if (t->type != DType::F32 || t->n_elements != static_cast<int64_t>(dst->size()))
                return make_error("{}: tensor {} must be F32 with {} elements (has {} of {})", path,
                                  name, dst->size(), t->n_elements, dtype_name(t->type));
            std::memcpy(dst->data(), t->data, dst->size() * sizeof(float));
        }
    }
    return m;
}

Status MedusaHeads::save(const std::string& path) const {
    gguf::Writer w;
    w.set("general.architecture", gguf::make_string(kArch));
    w.set("medusa.head_count", gguf::make_u32(static_cast<uint32_t>(n_heads())));
    w.set("medusa.embedding_length", gguf::make_u32(static_cast<uint32_t>(n_embd)));
    w.set("medusa.vocab_size", gguf::make_u32(static_cast<uint32_t>(n_vocab)));
    if (!trained_on.empty()) w.set("medusa.trained_on", gguf::make_string(trained_on));
    auto bytes = [](const std::vector<float>& v) {
        std::vector<uint8_t> out(v.size() * sizeof(float));
        std::memcpy(out.data(), v.data(), out.size());
        return out;
    };
    for (int k = 0; k < n_heads(); ++k) {
        if (Status s = w.add_tensor(weight_name(k), {n_embd, n_embd}, DType::F32,
                                    bytes(this->w[static_cast<size_t>(k)]));
            !s)
            return s;
        if (Status s =
                w.add_tensor(bias_name(k), {n_embd}, DType::F32, bytes(b[static_cast<size_t>(k)]));
            !s)
            return s;
    }
    return w.write(path);
}

Status MedusaHeads::check_fits(const LlamaConfig& c) const {
    if (n_embd != c.n_embd || n_vocab != c.n_vocab)
        return make_error(
            "these Medusa heads were trained for a model of width {} and vocabulary {}{}; this "
            "model has {} and {} (train heads for it: ferry train-medusa)",
            n_embd, n_vocab, trained_on.empty() ? "" : " (" + trained_on + ")", c.n_embd,
            c.n_vocab);
    return {};
}

std::string default_medusa_path(const std::string& model_path) {
    namespace fs = std::filesystem;
    const fs::path p(model_path);
    if (fs::is_directory(p)) return (p / "medusa.gguf").string();
    fs::path out = p;
    out.replace_extension(".medusa.gguf");
    return out.string();
}

}  // namespace ferry::model
