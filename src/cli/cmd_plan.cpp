// `ferry plan`: will this model fit this device, how many users, how fast. All arithmetic
// lives in src/plan; this file only maps flags to PlanOptions and prints.
#include <memory>
#include <string>

#include <fmt/format.h>

#include "cli/commands.h"
#include "plan/devices.h"
#include "plan/model_spec.h"
#include "plan/report.h"

namespace ferry::cli {
namespace {

struct PlanArgs {
    std::string model = "default";
    std::string device = "cpu";
    bool json = false;
    bool list = false;
    plan::PlanOptions options;
};

void list_known() {
    fmt::print("presets: {}\n", fmt::join(plan::preset_names(), ", "));
    fmt::print("devices:\n");
    for (const auto& d : plan::catalogue())
        fmt::print(
            "  {:<10} {:>4.0f} GB  {:>5.0f} GB/s  fp16 {:>7.1f}  fp8 {:>7.1f}  int8 {:>7.1f}"
            "  ({})\n",
            d.name, d.memory_gb, d.bandwidth_gbs, d.fp16_tflops, d.fp8_tflops, d.int8_tops,
            d.source);
    fmt::print("  cpu        measured on this machine\n");
    fmt::print("  cuda       measured on this machine's GPU (a build with -DFERRY_CUDA=ON)\n");
}

void run_plan(const PlanArgs& a) {
    if (a.list) return list_known();
    const plan::ModelSpec model = take(plan::load_model_spec(a.model));
    const plan::Device device = take(plan::find_device(a.device));
    const plan::PlanReport report = take(plan::make_plan(model, device, a.options));
    if (a.json)
        fmt::print("{}\n", plan::plan_to_json(report).dump(2));
    else
        fmt::print("{}", plan::plan_to_text(report));
}

}  // namespace

void add_plan_command(CLI::App& app) {
    auto args = std::make_shared<PlanArgs>();
    CLI::App* cmd = app.add_subcommand(
        "plan", "Will this model fit this device, how many users, how fast (memory + roofline)");
    cmd->add_option("-m,--model,model", args->model,
                    "GGUF file, HF config.json (or its folder), or preset name (dense, "
                    "mixture-of-experts such as mixtral-8x7b, or Gemma 3); 'default' = the "
                    "default SmolLM2-135M GGUF; also accepted as the first argument")
        ->capture_default_str();
    cmd->add_option("-d,--device", args->device,
                    "T4, L4, A10, A100-40GB, A100-80GB, H100-SXM, H100-PCIe, H200, RTX-3090, "
                    "RTX-4090, MI300X, cpu (measured) or cuda (this machine's GPU, measured)")
        ->capture_default_str();
    cmd->add_option(
        "--weights", args->options.weights,
        "f16|bf16|fp8|int8|int4|int4s (2:4 sparse)|w8a8|<gguf type, e.g. q4_k> (default: "
        "the model's own)");
    cmd->add_option("--kv-dtype", args->options.kv_dtype,
                    "f32|f16|fp8|int8 (ferry's caches: scales included)")
        ->capture_default_str();
    cmd->add_option("--ctx", args->options.ctx, "tokens per sequence (default: model's context)");
    cmd->add_option("--batch", args->options.batch, "concurrent sequences")->capture_default_str();
    cmd->add_option("--tp", args->options.tp, "tensor-parallel devices")->capture_default_str();
    cmd->add_option("--gpu-memory-utilization", args->options.gpu_memory_utilization,
                    "fraction of each device's memory to use")
        ->capture_default_str();
    cmd->add_option("--kv-cache-memory", args->options.kv_cache_memory,
                    "fixed KV pool in bytes (as the server allocates it) instead of batch x ctx");
    cmd->add_option("--max-num-batched-tokens,--max-batched-tokens",
                    args->options.max_batched_tokens, "tokens per forward step (sizes activations)")
        ->capture_default_str();
    cmd->add_flag("--json", args->json, "print JSON (keys documented in docs/plan.md)");
    cmd->add_flag("--list", args->list, "list presets and devices");
    cmd->callback([args] { run_plan(*args); });
}

}  // namespace ferry::cli
