// The tree-attention check both model families run: a draft tree verified in one pass gives
// each token the logits its branch gets as a chain, bit for bit, and an accepted branch moved
// down to its positions' slots continues exactly as that chain would.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/model_runner.h"
#include "engine/speculation.h"

namespace ferry::testing {

// The last token 17 after `prefix`, then the tree {260, 1000 under it; 42, 7 under it, 300
// under that} (ids modulo the vocabulary), in 4-slot blocks so it crosses block boundaries.
// window_blocks > 0: the runner has a hybrid cache, its sliding layers' pool that many blocks (the
// tables are 0, 1, 2, ...).
inline void expect_tree_is_its_chains(const model::LlamaModel& m,
                                      std::shared_ptr<kernels::Backend> backend,
                                      const std::vector<int32_t>& prefix,
                                      int64_t window_blocks = 0) {
    using engine::ModelRunner;
    const int64_t nv = m.config().n_vocab;
    const auto p0 = static_cast<int64_t>(prefix.size());
    const int64_t n_blocks = (p0 + 8) / 4 + 1;
    std::vector<int32_t> blocks(static_cast<size_t>(n_blocks));
    for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<int32_t>(i);
    const std::span<const int32_t> window =
        window_blocks > 0 ? std::span<const int32_t>(blocks) : std::span<const int32_t>();
    auto id = [&](int64_t x) { return static_cast<int32_t>(x % nv); };
    engine::Draft d;
    d.tokens = {id(260), id(1000), id(42), id(7), id(300)};
    d.parent = {-1, 0, -1, 2, 3};
    std::vector<int32_t> chunk{17};
    chunk.insert(chunk.end(), d.tokens.begin(), d.tokens.end());
    const auto masks = engine::tree_masks(d);
    auto runner = [&] {
        return ModelRunner(m, backend, n_blocks, 4, {}, window_blocks > 0 ? n_blocks : 0);
    };
    auto chain_logits = [&](const std::vector<int32_t>& path) {  // prefix + path, last row
        ModelRunner r = runner();
        std::vector<int32_t> all = prefix;
        all.insert(all.end(), path.begin(), path.end());
        ModelRunner::Work w{all, 0, blocks, 1};
        w.window_blocks = window;
        const auto l = r.run({&w, 1});
        return std::vector<float>(l.begin(), l.end());
    };
    auto worst = [&](const float* a, const std::vector<float>& b) {
        float w = 0;
        for (int64_t v = 0; v < nv; ++v)
            w = std::max(w, std::abs(a[v] - b[static_cast<size_t>(v)]));
        return w;
    };
    ModelRunner r = runner();
    ModelRunner::Work pre{prefix, 0, blocks, 0};
    pre.window_blocks = window;
    r.run({&pre, 1});
    ModelRunner::Work w{chunk, p0, blocks, static_cast<int>(chunk.size())};
    w.window_blocks = window;
    w.tree = masks;
    const auto l = r.run({&w, 1});
    const std::vector<float> tree(l.begin(), l.end());
    for (size_t i = 0; i < chunk.size(); ++i) {
        std::vector<int32_t> path;  // the token's branch, root first
        for (int32_t n = static_cast<int32_t>(i) - 1; n >= 0;
             n = d.parent_of(static_cast<size_t>(n)))
            path.insert(path.begin(), d.tokens[static_cast<size_t>(n)]);
        path.insert(path.begin(), 17);
        EXPECT_EQ(worst(tree.data() + i * nv, chain_logits(path)), 0.0f) << "token " << i;
    }
    // Accept the branch 42 -> 7 (draft tokens 2, 3): they move to slots p0 + 1, p0 + 2 and the
    // next token sees the chain 17 42 7.
    engine::TreeVerdict v;
    v.tokens = {id(42), id(7), id(300)};
    v.rows = {0, 3, 4};
    r.move_slots(blocks, window, engine::tree_slot_moves(v, p0));
    const int32_t next[] = {id(300)};
    ModelRunner::Work after{next, p0 + 3, blocks, 1};
    after.window_blocks = window;
    const auto la = r.run({&after, 1});
    EXPECT_EQ(worst(la.data(), chain_logits({17, id(42), id(7), id(300)})), 0.0f)
        << "after the move";
}

}  // namespace ferry::testing
