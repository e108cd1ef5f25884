#include "calibrate/medusa_training.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iterator>
#include <numeric>
#include <random>

#include "core/thread_pool.h"
#include "engine/loaded_model.h"
#include "engine/model_runner.h"
#include "model/llama.h"
#include "quant/dequantize.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ferry::calibrate {

namespace {

constexpr int kBlock = 16;

double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The self-distillation data: per continuation, its tokens (the prompt's last one first, then
// the model's greedy choices) and the hidden state at each of them but the last. Hidden row i
// is where token i + 1 was chosen; head k's target for it is token i + 2 + k.
struct Continuation {
    std::vector<int32_t> tokens;
    std::vector<float> hidden;  // (tokens.size() - 1) x n_embd
};

Expected<std::vector<Continuation>> generate(const engine::LoadedModel& lm,
                                             std::span<const int32_t> text,
                                             const MedusaTrainOptions& opt,
                                             const MedusaProgress& progress) {
    const model::LlamaModel& m = *lm.model;
    const int64_t d = m.config().n_embd, nv = m.config().n_vocab;
    const int par = std::max(1, opt.parallel);
    if (opt.chat && !lm.chat_template)
        return make_error("train-medusa --chat: {}", lm.chat_template_error);
    static const char* const kAsk[] = {
        "Continue this text.",
        "Summarise this in a few sentences.",
        "Explain what this passage is about.",
        "Rewrite this more simply.",
        "List the main points of this as bullet points.",
        "What questions might a reader have after this? Answer them.",
    };

    // Prompts: consecutive pieces of the text, wrapping round when it is short.
    const auto n_text = static_cast<int64_t>(text.size());
    int64_t next_prompt = 0, positions = 0, asked = 0;
    std::vector<Continuation> out;
    while (positions < opt.tokens) {
        struct Seq {
            std::vector<int32_t> all;  // prompt + continuation so far
            Continuation c;
            bool done = false;
        };
        std::vector<Seq> seqs(static_cast<size_t>(par));
        int64_t longest = 0;
        for (Seq& s : seqs) {
            std::vector<int32_t> piece;
            for (int i = 0; i < opt.prompt_len; ++i)
                piece.push_back(text[static_cast<size_t>((next_prompt + i) % n_text)]);
            next_prompt = (next_prompt + opt.prompt_len) % n_text;
            if (opt.chat) {
                const std::string ask = std::string(kAsk[asked++ % std::size(kAsk)]) + "\n\n" +
                                        lm.tokenizer->decode(piece);
                auto rendered = lm.chat_template->apply({{"user", ask}}, true);
                if (!rendered) return rendered.error();
                s.all = lm.tokenizer->encode(*rendered, false, true);
            } else {
                s.all = std::move(piece);
            }
            s.c.tokens.push_back(s.all.back());
            longest = std::max<int64_t>(longest, static_cast<int64_t>(s.all.size()));
        }
        const int64_t blocks_per = (longest + opt.continuation + kBlock - 1) / kBlock;
        engine::ModelRunner runner(m, lm.backend, blocks_per * par, kBlock);
        runner.set_keep_hidden(true);
        std::vector<int32_t> table(static_cast<size_t>(blocks_per * par));
        std::iota(table.begin(), table.end(), 0);
        // Step 0 runs the prompts; every later step one token of each live continuation.
        for (int step = 0; step <= opt.continuation; ++step) {
            std::vector<engine::ModelRunner::Work> work;
            std::vector<Seq*> live;
            for (size_t i = 0; i < seqs.size(); ++i) {
                Seq& s = seqs[i];
                if (s.done) continue;
                const std::span<const int32_t> blocks(table.data() + i * blocks_per,
                                                      static_cast<size_t>(blocks_per));
                const int64_t start = step == 0 ? 0 : static_cast<int64_t>(s.all.size()) - 1;
                work.push_back({std::span<const int32_t>(s.all).subspan(static_cast<size_t>(start)),
                                start, blocks, 1});
                live.push_back(&s);
            }
            if (work.empty()) break;
            const std::span<const float> logits = runner.run(work);
            const std::span<const float> hidden = runner.hidden();
            if (hidden.size() != live.size() * static_cast<size_t>(d))
                return make_error("train-medusa: the model showed no final hidden state");
            for (size_t j = 0; j < live.size(); ++j) {
                Seq& s = *live[j];
                const float* row = logits.data() + j * static_cast<size_t>(nv);
                const auto tok = static_cast<int32_t>(std::max_element(row, row + nv) - row);
                s.c.hidden.insert(s.c.hidden.end(), hidden.begin() + static_cast<int64_t>(j) * d,
                                  hidden.begin() + static_cast<int64_t>(j + 1) * d);
                s.c.tokens.push_back(tok);
                s.all.push_back(tok);
                ++positions;
                if (lm.tokenizer->is_eog(tok) || step == opt.continuation - 1) s.done = true;
            }
            if (progress) progress("generate", std::min(positions, opt.tokens), opt.tokens);
        }
        for (Seq& s : seqs)
            if (s.c.tokens.size() >= 3) out.push_back(std::move(s.c));
    }
    return out;
}

// A position of the data: its continuation and hidden row.
struct Pos {
    int32_t c, i;
};

struct Adam {
    std::vector<float> m, v;
    int64_t t = 0;
    explicit Adam(size_t n) : m(n), v(n) {}
    void step(std::vector<float>& w, const std::vector<float>& g, float lr, ThreadPool& pool) {
        ++t;
        const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
        const float c1 = 1.0f - std::pow(b1, static_cast<float>(t));
        const float c2 = 1.0f - std::pow(b2, static_cast<float>(t));
        pool.parallel_for(static_cast<int64_t>(w.size()), [&](int64_t a, int64_t e) {
            for (int64_t i = a; i < e; ++i) {
                m[i] = b1 * m[i] + (1 - b1) * g[i];
                v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
                w[i] -= lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps);
            }
        });
    }
};

}  // namespace

Expected<model::MedusaHeads> train_medusa(const engine::LoadedModel& lm,
                                          std::span<const int32_t> text,
                                          const MedusaTrainOptions& opt, MedusaTrainReport* report,
                                          const MedusaProgress& progress) {
    const model::LlamaModel& m = *lm.model;
    const model::LlamaConfig& c = m.config();
    if (m.comm())
        return make_error(
            "train-medusa runs in one process (the heads need the whole output head)");
    if (opt.heads < 1 || opt.heads > 16) return make_error("--heads must be 1..16");
    if (text.size() < static_cast<size_t>(opt.prompt_len))
        return make_error("the text has {} tokens; a continuation starts from {}", text.size(),
                          opt.prompt_len);
    if (opt.tokens < 16 || opt.continuation < opt.heads + 2 || opt.batch < 1 || opt.epochs < 1)
        return make_error(
            "train-medusa needs --tokens >= 16, --continuation >= heads + 2, a batch and an epoch");
    kernels::Backend& be = *lm.backend;
    ThreadPool& pool = be.host_pool();
    const int64_t d = c.n_embd, nv = c.n_vocab;
    MedusaTrainReport rep;

    auto t0 = std::chrono::steady_clock::now();
    auto data = generate(lm, text, opt, progress);
    if (!data) return data.error();
    rep.generate_seconds = seconds_since(t0);
    const std::vector<Continuation>& cs = *data;

    // Every position with a target for head 0 (later heads skip those past a continuation's
    // end). Whole continuations are held out, a tenth of them: a small model's greedy text
    // repeats itself, and positions of one continuation on both sides would flatter the heads.
    std::mt19937_64 rng(opt.seed);
    std::vector<int32_t> order(cs.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    const size_t n_held = std::max<size_t>(1, cs.size() / 10);
    if (cs.size() < n_held + 1)
        return make_error("train-medusa: too few continuations to train on ({}); raise --tokens",
                          cs.size());
    std::vector<Pos> held, train;
    for (size_t j = 0; j < order.size(); ++j) {
        const int32_t ci = order[j];
        for (size_t i = 0; i + 2 < cs[static_cast<size_t>(ci)].tokens.size(); ++i)
            (j < n_held ? held : train).push_back({ci, static_cast<int32_t>(i)});
    }
    rep.held_out_positions = static_cast<int64_t>(held.size());
    rep.train_positions = static_cast<int64_t>(train.size());
    auto target = [&](Pos p, int k) -> int32_t {
        const auto& t = cs[static_cast<size_t>(p.c)].tokens;
        const size_t at = static_cast<size_t>(p.i) + 2 + static_cast<size_t>(k);
        return at < t.size() ? t[at] : -1;
    };
    auto hrow = [&](Pos p) {
        return cs[static_cast<size_t>(p.c)].hidden.data() + static_cast<int64_t>(p.i) * d;
    };

    // The output head transposed ({n_embd, n_vocab}, floats), for the gradient through it.
    const kernels::Matrix& head = m.output_head();
    kernels::Matrix head_t;
    {
        std::vector<float> wt(static_cast<size_t>(d * nv));
        std::vector<float> row(static_cast<size_t>(d));
        const auto* base = static_cast<const uint8_t*>(head.data.raw());
        for (int64_t v = 0; v < nv; ++v) {
            if (Status s = quant::dequantize_row(head.type(), base + v * head.data.row_bytes(),
                                                 row.data(), d);
                !s)
                return s.error();
            for (int64_t i = 0; i < d; ++i) wt[static_cast<size_t>(i * nv + v)] = row[i];
        }
        const kernels::MatrixSource src{Tensor(wt.data(), DType::F32, {d, nv}),
                                        kernels::MatrixUse::Matmul};
        head_t = be.make_resident({&src, 1})[0];
    }

    model::MedusaHeads heads = model::MedusaHeads::zeros(opt.heads, d, nv);
    heads.trained_on = lm.path;
    const int64_t bmax = opt.batch;
    const int64_t shape_z[] = {bmax, d}, shape_l[] = {bmax, nv};
    const Tensor z_dev = be.alloc(DType::F32, shape_z), gz_dev = be.alloc(DType::F32, shape_z);
    const Tensor l_dev = be.alloc(DType::F32, shape_l);
    std::vector<float> a(static_cast<size_t>(bmax * d)), z(a.size()), gu(a.size());
    std::vector<float> g(static_cast<size_t>(bmax * nv));

    // One batch through head k: the loss (summed) and, with `grads`, the weights' gradients and
    // the count of top-1 hits.
    auto run_batch = [&](int k, std::span<const Pos> batch, std::vector<float>* gw,
                         std::vector<float>* gb, int64_t* hits) {
        const auto n = static_cast<int64_t>(batch.size());
        const std::vector<float>& w = heads.w[static_cast<size_t>(k)];
        // a = W h, z = h + SiLU(a + b)
        pool.parallel_for(n * d, [&](int64_t s, int64_t e) {
            for (int64_t x = s; x < e; ++x) {
                const int64_t r = x / d, o = x % d;
                const float* h = hrow(batch[static_cast<size_t>(r)]);
                const float* wr = w.data() + o * d;
                float acc = 0;
                for (int64_t i = 0; i < d; ++i) acc += wr[i] * h[i];
                a[static_cast<size_t>(x)] = acc;
            }
        });
        for (int64_t r = 0; r < n; ++r)
            heads.finish(k, hrow(batch[static_cast<size_t>(r)]), a.data() + r * d,
                         z.data() + r * d);
        const Tensor zd = z_dev.slice(0, n), ld = l_dev.slice(0, n);
        be.upload(z.data(), zd);
        const kernels::MatmulOut out[] = {{&head, ld}};
        be.matmul(out, zd);
        if (c.final_softcap > 0) be.softcap(ld, c.final_softcap);
        const Tensor lh = be.host_view(ld);
        // Softmax, the loss, and d loss / d logits (divided by the batch), row by row.
        std::vector<double> row_loss(static_cast<size_t>(n));
        std::vector<int64_t> row_hit(static_cast<size_t>(n));
        const bool grads = gw != nullptr;
        pool.parallel_for(n, [&](int64_t s, int64_t e) {
            for (int64_t r = s; r < e; ++r) {
                const float* l = lh.data<const float>() + r * nv;
                float* gr = g.data() + r * nv;
                const int32_t y = target(batch[static_cast<size_t>(r)], k);
                const float* top = std::max_element(l, l + nv);
                const float mx = *top;
                row_hit[static_cast<size_t>(r)] = (top - l) == y;
                double sum = 0;
                for (int64_t v = 0; v < nv; ++v) {
                    gr[v] = std::exp(l[v] - mx);
                    sum += gr[v];
                }
                row_loss[static_cast<size_t>(r)] = std::log(sum) - static_cast<double>(l[y] - mx);
                if (!grads) continue;
                const auto inv = static_cast<float>(1.0 / sum);
                const float per = 1.0f / static_cast<float>(n);
                for (int64_t v = 0; v < nv; ++v) {
                    float p = gr[v] * inv - (v == y ? 1.0f : 0.0f);
                    if (c.final_softcap > 0) {  // through cap * tanh(x / cap)
                        const float t = l[v] / c.final_softcap;
                        p *= 1.0f - t * t;
                    }
                    gr[v] = p * per;
                }
            }
        });
        double loss = 0;
        int64_t hit = 0;
        for (int64_t r = 0; r < n; ++r) {
            loss += row_loss[static_cast<size_t>(r)];
            hit += row_hit[static_cast<size_t>(r)];
        }
        if (hits) *hits += hit;
        if (!gw) return loss;
        // d loss / d z = g W_out, then through SiLU.
        const Tensor gd = l_dev.slice(0, n), gzd = gz_dev.slice(0, n);
        be.upload(g.data(), gd);
        const kernels::MatmulOut back[] = {{&head_t, gzd}};
        be.matmul(back, gd);
        const Tensor gzh = be.host_view(gzd);
        const float* bias = heads.b[static_cast<size_t>(k)].data();
        for (int64_t x = 0; x < n * d; ++x) {
            const float u = a[static_cast<size_t>(x)] + bias[x % d];
            const float sg = 1.0f / (1.0f + std::exp(-u));
            gu[static_cast<size_t>(x)] =
                gzh.data<const float>()[x] * (sg * (1.0f + u * (1.0f - sg)));
        }
        // gW[o][i] = sum_r gu[r][o] h_r[i], gb[o] = sum_r gu[r][o]
        pool.parallel_for(d, [&](int64_t s, int64_t e) {
            for (int64_t o = s; o < e; ++o) {
                float* gwr = gw->data() + o * d;
                std::fill(gwr, gwr + d, 0.0f);
                float gbo = 0;
                for (int64_t r = 0; r < n; ++r) {
                    const float gro = gu[static_cast<size_t>(r * d + o)];
                    gbo += gro;
                    const float* h = hrow(batch[static_cast<size_t>(r)]);
                    for (int64_t i = 0; i < d; ++i) gwr[i] += gro * h[i];
                }
                (*gb)[static_cast<size_t>(o)] = gbo;
            }
        });
        return loss;
    };

    // Held-out top-1 of head k (positions with a target for it).
    // The positions of `set` that have a target for head k (not past their answer's end).
    auto for_head = [&](const std::vector<Pos>& set, int k) {
        std::vector<Pos> ps;
        for (const Pos& p : set)
            if (target(p, k) >= 0) ps.push_back(p);
        return ps;
    };
    auto evaluate = [&](int k) {
        const std::vector<Pos> ps = for_head(held, k);
        int64_t hits = 0;
        for (size_t s = 0; s < ps.size(); s += static_cast<size_t>(bmax)) {
            const size_t e = std::min(ps.size(), s + static_cast<size_t>(bmax));
            run_batch(k, std::span<const Pos>(ps).subspan(s, e - s), nullptr, nullptr, &hits);
        }
        return ps.empty() ? 0.0 : static_cast<double>(hits) / static_cast<double>(ps.size());
    };

    t0 = std::chrono::steady_clock::now();
    const int64_t steps_per_epoch = (static_cast<int64_t>(train.size()) + bmax - 1) / bmax;
    const int64_t total_steps = steps_per_epoch * opt.epochs * opt.heads;
    int64_t done = 0;
    for (int k = 0; k < opt.heads; ++k) {
        rep.top1_before.push_back(evaluate(k));
        std::vector<Pos> ps = for_head(train, k);
        Adam aw(heads.w[static_cast<size_t>(k)].size()), ab(heads.b[static_cast<size_t>(k)].size());
        std::vector<float> gw(heads.w[static_cast<size_t>(k)].size()),
            gb(heads.b[static_cast<size_t>(k)].size());
        for (int ep = 0; ep < opt.epochs; ++ep) {
            std::shuffle(ps.begin(), ps.end(), rng);
            double loss = 0;
            for (size_t s = 0; s < ps.size(); s += static_cast<size_t>(bmax)) {
                const size_t e = std::min(ps.size(), s + static_cast<size_t>(bmax));
                loss += run_batch(k, std::span<const Pos>(ps).subspan(s, e - s), &gw, &gb, nullptr);
                aw.step(heads.w[static_cast<size_t>(k)], gw, opt.lr, pool);
                ab.step(heads.b[static_cast<size_t>(k)], gb, opt.lr, pool);
                if (progress) progress("train", ++done, total_steps);
            }
            const double mean = ps.empty() ? 0.0 : loss / static_cast<double>(ps.size());
            if (ep == 0) rep.loss_first.push_back(mean);
            if (ep == opt.epochs - 1) rep.loss_last.push_back(mean);
        }
        rep.top1_after.push_back(evaluate(k));
    }
    rep.train_seconds = seconds_since(t0);
    if (report) *report = std::move(rep);
    return heads;
}

}  // namespace ferry::calibrate
