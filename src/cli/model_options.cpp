#include "cli/model_options.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <thread>
#include <utility>

#include "cli/commands.h"
#include "cli/weight_types.h"
#include "core/paths.h"
#include "core/thread_pool.h"

namespace ferry::cli {

void ActivationsOption::add_to(CLI::App& cmd) {
    cmd.add_option("--activations", name,
                   "what q4/q5/q8_0, k-quant and int4 weights meet: int16 (default; integer "
                   "products, logits "
                   "within ~0.01 of exact), int8 (fastest, coarse) or f32 (exact float math)")
        ->check(CLI::IsMember({"f32", "int16", "int8"}));
}

std::optional<kernels::Activations> ActivationsOption::resolved() const {
    kernels::Activations a;
    if (!name.empty() && kernels::parse_activations(name.c_str(), &a)) return a;
    return std::nullopt;
}

void ModelOptions::add_to(CLI::App& cmd) {
    cmd.add_option("-m,--model", model,
                   "GGUF model file, Hugging Face model directory (config.json, *.safetensors, "
                   "tokenizer.json), or 'default' (SmolLM2-135M-Instruct Q4_1)")
        ->capture_default_str();
    cmd.add_option("--weights", weights,
                   "round every matrix to this type as it loads, like vLLM's --quantization: "
                   "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k, int8, int4, "
                   "int3, fp8, w8a8 (default: the checkpoint's types)");
    cmd.add_option("--chat-template", chat_template,
                   "a Jinja chat template file to use instead of the model's own")
        ->check(CLI::ExistingFile);
    cmd.add_option("-t,--threads", threads, "worker threads (default: physical cores)")
        ->check(CLI::Range(0, 1024));
    cmd.add_option("-c,--ctx", ctx, "context length in tokens (default: min(trained, 4096))")
        ->check(CLI::Range(0, 1 << 24));
    activations.add_to(cmd);
    parallel.add_to(cmd);
    device.add_to(cmd);
}

void DeviceOption::add_to(CLI::App& cmd) {
    cmd.add_option("--device", name,
                   "where the model runs: cpu, cuda (a build with -DFERRY_CUDA=ON, on a GPU) or "
                   "auto (a GPU if there is one)")
        ->check(CLI::IsMember({"cpu", "cuda", "auto"}))
        ->capture_default_str();
    cmd.add_option("--cuda-graphs", cuda_graphs,
                   "on the GPU: replay each decode step's launches as a CUDA graph captured from "
                   "an earlier step with the same launches (on, the default), or launch every "
                   "kernel each step (off)")
        ->check(CLI::IsMember({"on", "off"}));
}

void SampleOnOption::add_to(CLI::App& cmd) {
    cmd.add_option("--sample-on", name,
                   "where tokens are drawn: device (beside the logits; only token ids cross to "
                   "the host), host (the logits cross), auto (the device on a GPU; on the CPU "
                   "greedy picks only)")
        ->check(CLI::IsMember({"auto", "host", "device"}))
        ->capture_default_str();
}

engine::SampleOn SampleOnOption::resolved() const {
    if (name == "host") return engine::SampleOn::Host;
    if (name == "device") return engine::SampleOn::Device;
    return engine::SampleOn::Auto;
}

std::shared_ptr<kernels::Backend> DeviceOption::backend(int threads,
                                                        const ActivationsOption& activations,
                                                        int ranks) const {
    if (name == "cpu" && !cuda_graphs.empty())
        throw ExitError("--cuda-graphs applies to the CUDA backend (--device cuda or auto)");
    if (name != "cpu") {
        auto gpu = kernels::make_backend({.device = Device::CUDA,
                                          .threads = threads,
                                          .activations = {},
                                          .cuda_graphs = cuda_graphs != "off"});
        if (gpu.ok()) {
            // Options that only the CPU backend has are refused rather than ignored.
            if (activations.resolved())
                throw ExitError(
                    "--activations applies to the CPU backend; on CUDA products run in float");
            if (ranks > 1) throw ExitError("--tp / --pp run on the CPU backend only for now");
            return std::move(*gpu);
        }
        if (name == "cuda") throw ExitError("--device cuda: " + gpu.error().message);
        if (!cuda_graphs.empty())
            std::fprintf(stderr, "ferry: note: no GPU here (%s); --cuda-graphs has no effect\n",
                         gpu.error().message.c_str());
    }
    return take(kernels::make_backend({.threads = threads, .activations = activations.resolved()}));
}

int resolve_threads(int requested) {
    if (requested <= 0) return physical_core_count();
    const int cpus = static_cast<int>(std::thread::hardware_concurrency());
    if (cpus > 0 && requested > cpus) {
        static bool said = false;
        if (!std::exchange(said, true))
            std::fprintf(stderr,
                         "ferry: note: -t %d is more than this machine's %d CPUs; using %d\n",
                         requested, cpus, cpus);
        return cpus;
    }
    return requested;
}

int ModelOptions::resolved_threads() const {
    // The ranks of a group on one machine share its cores.
    if (threads == 0 && parallel.ranks() > 1)
        return resolve_threads(std::max(1, physical_core_count() / parallel.ranks()));
    return resolve_threads(threads);
}

int ModelOptions::resolved_ctx(const engine::LoadedModel& lm) const {
    const int trained = lm.model->config().n_ctx_train;
    // Allowed (a user may know the model generalises), but said: positions past the trained
    // context are ones the model never saw, as llama.cpp warns.
    if (ctx > trained && trained > 0)
        std::fprintf(stderr,
                     "ferry: note: --ctx %d is above the model's trained context of %d tokens; "
                     "past it the output may degrade\n",
                     ctx, trained);
    if (ctx > 0) return ctx;
    return std::min(trained, 4096);
}

std::shared_ptr<kernels::Backend> ModelOptions::backend() const {
    return device.backend(resolved_threads(), activations, parallel.ranks());
}

std::optional<DType> ModelOptions::weight_type() const {
    if (weights.empty()) return std::nullopt;
    return take(parse_weight_type(weights));
}

engine::LoadedModel ModelOptions::load(bool progress) const {
    const std::string path = take(resolve_model_path(model));
    const auto group = parallel.join(path);
    auto lm =
        take(engine::LoadedModel::load(path, progress && (!group.world || group.world->rank() == 0),
                                       backend(), weight_type(), group));
    follow_if_not_rank0(lm);
    apply_to(lm);
    return lm;
}

void ModelOptions::apply_to(engine::LoadedModel& lm) const {
    for (const auto& n : lm.model->load_notes())
        std::fprintf(stderr, "ferry: note: --weights %s: %s\n", weights.c_str(), n.c_str());
    if (chat_template.empty()) return;
    lm.chat_template =
        take(tokenizer::ChatTemplate::from_file(chat_template, lm.bos_text, lm.eos_text));
    lm.chat_template_error.clear();
}

// CLI::Range lets NaN through (every comparison with it is false).
const CLI::Validator kFinite(
    [](std::string& s) {
        try {
            return std::isfinite(std::stod(s)) ? std::string() : "must be a finite number";
        } catch (const std::exception&) {
            return std::string("must be a number");
        }
    },
    "FINITE");

void SamplingOptions::add_to(CLI::App& cmd) {
    auto& p = params;
    temperature_ = cmd.add_option("--temperature,--temp", p.temperature,
                                  "sampling temperature; 0 = greedy (default: the model's "
                                  "generation_config.json if it sets one, else this)")
                       ->capture_default_str()
                       ->check(kFinite & CLI::Range(0.0, 100.0));
    top_k_ = cmd.add_option("--top-k", p.top_k, "keep the k most likely tokens (0 = off)")
                 ->capture_default_str()
                 ->check(CLI::Range(0, 1 << 30));
    top_p_ = cmd.add_option("--top-p", p.top_p, "nucleus sampling mass (1 = off)")
                 ->capture_default_str()
                 ->check(kFinite & CLI::Range(0.0, 1.0));
    cmd.add_option("--min-p", p.min_p, "drop tokens below min-p x the top probability (0 = off)")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 1.0));
    repetition_ = cmd.add_option("--repeat-penalty,--repetition-penalty", p.repetition_penalty,
                                 "penalise tokens seen in the last --repeat-last-n (1 = off)")
                      ->capture_default_str()
                      ->check(kFinite & CLI::Range(0.01, 100.0));  // logits are divided by it
    cmd.add_option("--repeat-last-n", p.penalty_last_n, "window of the penalties (-1 = all)")
        ->capture_default_str();
    cmd.add_option("--presence-penalty", p.presence_penalty)
        ->check(kFinite & CLI::Range(-2.0, 2.0));
    cmd.add_option("--frequency-penalty", p.frequency_penalty)
        ->check(kFinite & CLI::Range(-2.0, 2.0));
    cmd.add_option("--seed", seed, "random seed; the same seed gives the same output")
        ->check(CLI::Range(int64_t{0}, INT64_MAX));
    sample_on.add_to(cmd);
}

engine::SamplingParams SamplingOptions::resolved() const {
    engine::SamplingParams p = params;
    if (seed >= 0) {
        p.seed = static_cast<uint64_t>(seed);
        p.has_seed = true;
    }
    return p;
}

engine::SamplingParams SamplingOptions::resolved(const engine::GenerationDefaults& model) const {
    engine::SamplingParams p = resolved();
    engine::GenerationDefaults g = model;  // less what the command line sets
    auto given = [](const CLI::Option* o) { return o && o->count() > 0; };
    if (given(temperature_)) g.temperature.reset();
    if (given(top_p_)) g.top_p.reset();
    if (given(top_k_)) g.top_k.reset();
    if (given(repetition_)) g.repetition_penalty.reset();
    g.apply_to(p);
    return p;
}

}  // namespace ferry::cli
