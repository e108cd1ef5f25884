#include "engine/step_message.h"

#include <cstring>

#include "kernels/backend.h"

namespace ferry::engine {
namespace {

template <class T>
void put_bytes(std::vector<std::byte>& out, const T* p, size_t n) {
    const size_t at = out.size();
    out.resize(at + n * sizeof(T));
    if (n) std::memcpy(out.data() + at, p, n * sizeof(T));
}

template <class T>
void put(std::vector<std::byte>& out, T v) {
    put_bytes(out, &v, 1);
}

template <class T>
void put_array(std::vector<std::byte>& out, const std::vector<T>& v) {
    put<uint32_t>(out, static_cast<uint32_t>(v.size()));
    put_bytes(out, v.data(), v.size());
}

class Reader {
  public:
    explicit Reader(std::span<const std::byte> b) : b_(b) {}
    template <class T>
    bool get(T& v) {
        if (b_.size() - at_ < sizeof(T)) return false;
        std::memcpy(static_cast<void*>(&v), b_.data() + at_, sizeof(T));
        at_ += sizeof(T);
        return true;
    }
    template <class T>
    bool get_array(std::vector<T>& v) {
        uint32_t n = 0;
        if (!get(n) || (b_.size() - at_) / sizeof(T) < n) return false;
        v.resize(n);
        if (n) std::memcpy(static_cast<void*>(v.data()), b_.data() + at_, n * sizeof(T));
        at_ += n * sizeof(T);
        return true;
    }
    bool done() const { return at_ == b_.size(); }

  private:
    std::span<const std::byte> b_;
    size_t at_ = 0;
};

}  // namespace

void encode_step(const StepMessage& m, std::vector<std::byte>& out) {
    out.clear();
    put<uint8_t>(out, static_cast<uint8_t>(m.kind));
    if (m.kind == StepMessage::Kind::Keepalive) return;
    if (m.kind == StepMessage::Kind::Setup) {
        put<int64_t>(out, m.setup.n_blocks);
        put<int32_t>(out, m.setup.block_size);
        put<int32_t>(out, static_cast<int32_t>(m.setup.kv_dtype));
        put<int64_t>(out, m.setup.n_window_blocks);
        put<int32_t>(out, m.setup.calibration_tokens);
        return;
    }
    put_array(out, m.copies);
    put_array(out, m.window_copies);
    // Moves as two arrays: a (int32, int64) pair has padding, which would go out unwritten.
    std::vector<int32_t> move_blocks;
    std::vector<int64_t> move_deltas;
    for (const auto& [b, d] : m.moves) {
        move_blocks.push_back(b);
        move_deltas.push_back(d);
    }
    put_array(out, move_blocks);
    put_array(out, move_deltas);
    put_array(out, m.slot_table);
    put_array(out, m.slot_window_table);
    put_array(out, m.slot_from);
    put_array(out, m.slot_to);
    put<uint32_t>(out, static_cast<uint32_t>(m.work.size()));
    for (const StepWork& w : m.work) {
        put<int64_t>(out, w.start_pos);
        put<int64_t>(out, w.rope_offset);
        put<int32_t>(out, w.n_logits);
        put_array(out, w.tokens);
        put_array(out, w.blocks);
        put_array(out, w.window_blocks);
        put_array(out, w.tree);
    }
}

Expected<StepMessage> decode_step(std::span<const std::byte> bytes) {
    Reader r(bytes);
    StepMessage m;
    uint8_t kind = 0;
    if (!r.get(kind)) return make_error("parallel group: an empty step message");
    const auto bad = [&] {
        return make_error("parallel group: a malformed step message ({} bytes)", bytes.size());
    };
    if (kind == static_cast<uint8_t>(StepMessage::Kind::Setup)) {
        m.kind = StepMessage::Kind::Setup;
        int32_t dtype = 0;
        if (!r.get(m.setup.n_blocks) || !r.get(m.setup.block_size) || !r.get(dtype) ||
            !r.get(m.setup.n_window_blocks) || !r.get(m.setup.calibration_tokens) || !r.done())
            return bad();
        if (dtype < 0 || dtype > static_cast<int32_t>(quant::KvDType::FP8)) return bad();
        m.setup.kv_dtype = static_cast<quant::KvDType>(dtype);
        return m;
    }
    if (kind == static_cast<uint8_t>(StepMessage::Kind::Keepalive)) {
        m.kind = StepMessage::Kind::Keepalive;
        if (!r.done()) return bad();
        return m;
    }
    if (kind != static_cast<uint8_t>(StepMessage::Kind::Step)) return bad();
    uint32_t n = 0;
    std::vector<int32_t> move_blocks;
    std::vector<int64_t> move_deltas;
    if (!r.get_array(m.copies) || !r.get_array(m.window_copies) || !r.get_array(move_blocks) ||
        !r.get_array(move_deltas) || move_blocks.size() != move_deltas.size() ||
        !r.get_array(m.slot_table) || !r.get_array(m.slot_window_table) ||
        !r.get_array(m.slot_from) || !r.get_array(m.slot_to) ||
        m.slot_from.size() != m.slot_to.size() || !r.get(n))
        return bad();
    for (size_t i = 0; i < move_blocks.size(); ++i)
        m.moves.emplace_back(move_blocks[i], move_deltas[i]);
    m.work.resize(n);
    for (StepWork& w : m.work)
        if (!r.get(w.start_pos) || !r.get(w.rope_offset) || !r.get(w.n_logits) ||
            !r.get_array(w.tokens) || !r.get_array(w.blocks) || !r.get_array(w.window_blocks) ||
            !r.get_array(w.tree) ||
            (!w.tree.empty() && !kernels::valid_tree_masks(w.tree, w.tokens.size())))
            return bad();
    if (!r.done()) return bad();
    return m;
}

}  // namespace ferry::engine
