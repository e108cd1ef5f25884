#include "hf/model_dir.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

namespace ferry::hf {
namespace {

namespace fs = std::filesystem;

// A JSON file's object; null when the file is absent and not required.
Expected<nlohmann::json> read_json(const fs::path& p, bool required) {
    std::error_code ec;
    if (!fs::exists(p, ec)) {
        if (required) return make_error("{}: missing", p.string());
        return nlohmann::json();
    }
    std::ifstream in(p);
    if (!in) return make_error("{}: cannot be read", p.string());
    nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return make_error("{}: not a JSON object", p.string());
    return j;
}

}  // namespace

bool is_model_dir(const std::string& path) {
    std::error_code ec;
    return fs::is_directory(path, ec) && fs::exists(fs::path(path) / "config.json", ec);
}

Expected<std::unique_ptr<ModelDir>> ModelDir::open(const std::string& dir) {
    std::unique_ptr<ModelDir> d(new ModelDir());
    d->dir_ = dir;
    const fs::path root(dir);
    std::error_code ec;
    if (!fs::is_directory(root, ec)) return make_error("{}: not a directory", dir);
    auto config = read_json(root / "config.json", true);
    if (!config) return config.error();
    d->config_ = std::move(*config);
    auto gen = read_json(root / "generation_config.json", false);
    if (!gen) return gen.error();
    d->generation_ = std::move(*gen);
    auto tc = read_json(root / "tokenizer_config.json", false);
    if (!tc) return tc.error();
    d->tokenizer_config_ = std::move(*tc);
    if (fs::exists(root / "tokenizer.json", ec))
        d->tokenizer_json_ = (root / "tokenizer.json").string();

    const fs::path index_path = root / "model.safetensors.index.json";
    if (fs::exists(index_path, ec)) {
        auto index = read_json(index_path, true);
        if (!index) return index.error();
        auto wm = index->find("weight_map");
        if (wm == index->end() || !wm->is_object())
            return make_error("{}: no weight_map object", index_path.string());
        // Shards in the order they first appear, each opened once.
        std::map<std::string, size_t> shard_of;
        std::vector<std::pair<std::string, std::string>> wants;  // tensor, shard file
        for (auto it = wm->begin(); it != wm->end(); ++it) {
            if (!it.value().is_string())
                return make_error("{}: weight_map['{}'] is not a file name", index_path.string(),
                                  it.key());
            const std::string file = it.value().get<std::string>();
            if (file.find('/') != std::string::npos || file == "..")
                return make_error("{}: shard '{}' is not a file of the directory",
                                  index_path.string(), file);
            if (!shard_of.count(file)) {
                auto sf = SafetensorsFile::open((root / file).string());
                if (!sf) return sf.error();
                shard_of[file] = d->shards_.size();
                d->shards_.push_back(std::move(*sf));
            }
            wants.emplace_back(it.key(), file);
        }
        for (const auto& [tensor, file] : wants)
            if (!d->shards_[shard_of[file]]->tensor(tensor))
                return make_error("{}: tensor '{}' is not in {} as the index says", dir, tensor,
                                  file);
    } else {
        auto sf = SafetensorsFile::open((root / "model.safetensors").string());
        if (!sf) return sf.error();
        d->shards_.push_back(std::move(*sf));
    }
    std::set<std::string> seen;
    for (const auto& s : d->shards_)
        for (const auto& t : s->tensors())
            if (!seen.insert(t.name).second)
                return make_error("{}: tensor '{}' is in more than one shard", dir, t.name);
    return d;
}

const SafeTensor* ModelDir::tensor(std::string_view name) const {
    for (const auto& s : shards_)
        if (const SafeTensor* t = s->tensor(name)) return t;
    return nullptr;
}

std::vector<const SafeTensor*> ModelDir::tensors() const {
    std::vector<const SafeTensor*> out;
    for (const auto& s : shards_)
        for (const auto& t : s->tensors()) out.push_back(&t);
    return out;
}

void ModelDir::release(const void* p, size_t n) const {
    for (const auto& s : shards_) s->release(p, n);
}

Expected<std::string> ModelDir::chat_template() const {
    const fs::path root(dir_);
    std::error_code ec;
    if (fs::exists(root / "chat_template.jinja", ec)) {
        std::ifstream in(root / "chat_template.jinja", std::ios::binary);
        if (!in) return make_error("{}: cannot be read", (root / "chat_template.jinja").string());
        return std::string(std::istreambuf_iterator<char>(in), {});
    }
    auto from = [&](const nlohmann::json& j, const std::string& where) -> Expected<std::string> {
        auto it = j.is_object() ? j.find("chat_template") : j.end();
        if (!j.is_object() || it == j.end() || it->is_null()) return std::string();
        if (it->is_string()) return it->get<std::string>();
        if (it->is_array()) {
            for (const auto& e : *it)
                if (e.is_object() && e.value("name", "") == "default" && e.contains("template") &&
                    e["template"].is_string())
                    return e["template"].get<std::string>();
            return make_error("{}: chat_template is a list with no template named \"default\"",
                              where);
        }
        return make_error("{}: chat_template is neither a string nor a list of named templates",
                          where);
    };
    auto ct = read_json(root / "chat_template.json", false);
    if (!ct) return ct.error();
    auto t = from(*ct, (root / "chat_template.json").string());
    if (!t || !t->empty()) return t;
    return from(tokenizer_config_, (root / "tokenizer_config.json").string());
}

std::string ModelDir::special_token_text(const std::string& key) const {
    if (!tokenizer_config_.is_object()) return {};
    auto it = tokenizer_config_.find(key);
    if (it == tokenizer_config_.end()) return {};
    if (it->is_string()) return it->get<std::string>();
    if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
        return (*it)["content"].get<std::string>();
    return {};
}

std::vector<int32_t> ModelDir::eos_token_ids() const {
    std::vector<int32_t> ids;
    if (!generation_.is_object()) return ids;
    auto it = generation_.find("eos_token_id");
    if (it == generation_.end()) return ids;
    auto take = [&](const nlohmann::json& v) {
        if (v.is_number_integer()) ids.push_back(v.get<int32_t>());
    };
    if (it->is_array())
        for (const auto& v : *it) take(v);
    else
        take(*it);
    return ids;
}

}  // namespace ferry::hf
