// SequenceMemory's books (see sequence_memory.h).
#include "kv/sequence_memory.h"

#include <algorithm>
#include <cassert>

namespace pelican {
namespace {

int64_t blocks_for(int64_t n_tokens, int32_t block_tokens) {
    return (n_tokens + block_tokens - 1) / block_tokens;
}

}  // namespace

SequenceMemory::SequenceMemory(const SequenceMemoryOptions& opt, std::unique_ptr<MemoryStorage> storage)
    : opt_(opt),
      storage_(std::move(storage)),
      blocks_(opt.n_blocks),
      seqs_(static_cast<size_t>(opt.max_seqs)) {
    const auto max_blocks = static_cast<size_t>(blocks_for(opt.max_seq_tokens, opt.block_tokens));
    for (Seq& q : seqs_) {
        q.table.reserve(max_blocks);
        if (opt.recurrent) q.entry_len.assign(static_cast<size_t>(ring()), -1);
    }
}

Expected<std::unique_ptr<SequenceMemory>> SequenceMemory::create(const SequenceMemoryOptions& opt,
                                                                 std::unique_ptr<MemoryStorage> storage) {
    if (!storage) return make_error("sequence memory: no storage");
    if (opt.n_blocks < 0) return make_error("sequence memory: {} KV blocks", opt.n_blocks);
    if (opt.block_tokens <= 0) return make_error("sequence memory: {} tokens per block", opt.block_tokens);
    if (opt.max_seqs <= 0) return make_error("sequence memory: room for {} sequences", opt.max_seqs);
    if (opt.max_seq_tokens <= 0)
        return make_error("sequence memory: {} tokens per sequence", opt.max_seq_tokens);
    if (opt.recurrent && (opt.checkpoints < 1 || opt.checkpoints > 64))
        return make_error("sequence memory: {} recurrent checkpoints (1 to 64)", opt.checkpoints);
    return std::unique_ptr<SequenceMemory>(new SequenceMemory(opt, std::move(storage)));
}

Status SequenceMemory::check_open(SeqId s, const char* what) const {
    if (!is_open(s)) return make_error("{}: sequence {} is not open", what, s);
    return {};
}

bool SequenceMemory::is_open(SeqId s) const {
    return s >= 0 && s < opt_.max_seqs && seqs_[static_cast<size_t>(s)].open;
}

int64_t SequenceMemory::length(SeqId s) const {
    assert(is_open(s));
    return seqs_[static_cast<size_t>(s)].length;
}

std::span<const int32_t> SequenceMemory::block_table(SeqId s) const {
    assert(is_open(s));
    return seqs_[static_cast<size_t>(s)].table;
}

Expected<SeqId> SequenceMemory::open() {
    for (SeqId s = 0; s < opt_.max_seqs; ++s) {
        Seq& q = seqs_[static_cast<size_t>(s)];
        if (q.open) continue;
        q.open = true;
        q.length = 0;
        q.mtp_length = 0;
        q.table.clear();
        if (opt_.recurrent) {
            std::fill(q.entry_len.begin(), q.entry_len.end(), -1);
            q.cursor = 0;
            q.entry_len[0] = 0;
            storage_->clear_state(entry(s, 0));
        }
        ++n_open_;
        return s;
    }
    return make_error("all {} sequence slots are in use", opt_.max_seqs);
}

void SequenceMemory::close(SeqId s) {
    if (!is_open(s)) return;
    Seq& q = seqs_[static_cast<size_t>(s)];
    shrink_table(q, 0);
    q.open = false;
    q.length = 0;
    q.mtp_length = 0;
    --n_open_;
}

Status SequenceMemory::grow_table(Seq& q, int64_t n_blocks_needed) {
    const auto have = static_cast<int64_t>(q.table.size());
    if (n_blocks_needed <= have) return {};
    if (n_blocks_needed - have > blocks_.n_free())
        return make_error("the KV pool is full: {} more blocks of {} tokens needed, {} of {} free",
                          n_blocks_needed - have, opt_.block_tokens, blocks_.n_free(), blocks_.n_blocks());
    while (static_cast<int64_t>(q.table.size()) < n_blocks_needed) q.table.push_back(blocks_.alloc());
    return {};
}

void SequenceMemory::shrink_table(Seq& q, int64_t n_blocks_kept) {
    while (static_cast<int64_t>(q.table.size()) > n_blocks_kept) {
        blocks_.unref(q.table.back());
        q.table.pop_back();
    }
}

Status SequenceMemory::reserve(SeqId s, int64_t n) {
    PELICAN_TRY(check_open(s, "reserve"));
    if (n < 0 || n > opt_.max_seq_tokens)
        return make_error("reserve: {} positions, a sequence holds at most {}", n, opt_.max_seq_tokens);
    return grow_table(seqs_[static_cast<size_t>(s)], blocks_for(n, opt_.block_tokens));
}

Status SequenceMemory::copy_shared(Seq& q, int64_t pos, int64_t n, int64_t grow) {
    // The blocks holding positions pos .. pos+n-1 that exist already; each shared one needs a free block.
    const int64_t first = pos / opt_.block_tokens;
    const int64_t last =
        std::min<int64_t>((pos + n - 1) / opt_.block_tokens, static_cast<int64_t>(q.table.size()) - 1);
    int64_t shared = 0;
    for (int64_t b = first; b <= last; ++b) shared += blocks_.refs(q.table[static_cast<size_t>(b)]) > 1;
    if (shared + grow > blocks_.n_free())
        return make_error("the KV pool is full: {} more blocks of {} tokens needed, {} of {} free",
                          shared + grow, opt_.block_tokens, blocks_.n_free(), blocks_.n_blocks());
    for (int64_t b = first; b <= last; ++b) {
        int32_t& id = q.table[static_cast<size_t>(b)];
        if (blocks_.refs(id) == 1) continue;
        const int32_t copy = blocks_.alloc();
        storage_->copy_kv_block(id, copy);
        blocks_.unref(id);
        id = copy;
    }
    return {};
}

Status SequenceMemory::prepare_mtp_write(SeqId s, int64_t pos, int64_t n) {
    PELICAN_TRY(check_open(s, "mtp write"));
    Seq& q = seqs_[static_cast<size_t>(s)];
    if (pos < 0 || n <= 0 || pos + n > q.length)
        return make_error("mtp write: positions {}..{}, but sequence {} holds {}", pos, pos + n - 1, s,
                          q.length);
    return copy_shared(q, pos, n, /*grow=*/0);
}

Status SequenceMemory::prepare_write(SeqId s, int64_t pos, int64_t n) {
    PELICAN_TRY(check_open(s, "write"));
    Seq& q = seqs_[static_cast<size_t>(s)];
    if (pos != q.length)
        return make_error("write: positions from {} on, but sequence {} holds {} (truncate first)", pos, s,
                          q.length);
    if (n <= 0) return make_error("write: {} positions", n);
    if (pos + n > opt_.max_seq_tokens)
        return make_error("write: positions {}..{} do not fit the context of {} tokens", pos, pos + n - 1,
                          opt_.max_seq_tokens);
    // Copy on write first (it needs one free block per shared block), then grow.
    const int64_t grow =
        std::max<int64_t>(0, blocks_for(pos + n, opt_.block_tokens) - static_cast<int64_t>(q.table.size()));
    PELICAN_TRY(copy_shared(q, pos, n, grow));
    return grow_table(q, blocks_for(pos + n, opt_.block_tokens));
}

void SequenceMemory::commit(SeqId s, int64_t new_length, int32_t n_states) {
    assert(is_open(s));
    Seq& q = seqs_[static_cast<size_t>(s)];
    assert(new_length > q.length && new_length <= static_cast<int64_t>(q.table.size()) * opt_.block_tokens);
    if (opt_.recurrent) {
        assert(n_states >= 1 && n_states <= opt_.checkpoints && n_states <= new_length - q.length);
        for (int32_t i = 0; i < n_states; ++i) {
            const int32_t c = (q.cursor + 1 + i) % ring();
            q.entry_len[static_cast<size_t>(c)] = new_length - n_states + 1 + i;
        }
        q.cursor = (q.cursor + n_states) % ring();
    }
    q.length = new_length;
}

int32_t SequenceMemory::state_read_entry(SeqId s) const {
    assert(is_open(s) && opt_.recurrent);
    return entry(s, seqs_[static_cast<size_t>(s)].cursor);
}

int32_t SequenceMemory::state_write_entry(SeqId s, int32_t i) const {
    assert(is_open(s) && opt_.recurrent && i >= 0 && i < opt_.checkpoints);
    return entry(s, (seqs_[static_cast<size_t>(s)].cursor + 1 + i) % ring());
}

int64_t SequenceMemory::truncate(SeqId s, int64_t n_keep) {
    if (!is_open(s)) return 0;
    Seq& q = seqs_[static_cast<size_t>(s)];
    n_keep = std::max<int64_t>(n_keep, 0);
    if (n_keep >= q.length) return q.length;
    int64_t keep = n_keep;
    if (opt_.recurrent) {
        // The longest restorable length <= n_keep; entries past it are dropped.
        int32_t best = -1;
        for (int32_t c = 0; c < ring(); ++c) {
            int64_t& len = q.entry_len[static_cast<size_t>(c)];
            if (len > n_keep) len = -1;
            if (len >= 0 && (best < 0 || len > q.entry_len[static_cast<size_t>(best)])) best = c;
        }
        if (best < 0) {  // nothing on hand: start over from the empty state
            best = q.cursor;
            q.entry_len[static_cast<size_t>(best)] = 0;
            storage_->clear_state(entry(s, best));
        }
        q.cursor = best;
        keep = q.entry_len[static_cast<size_t>(best)];
    }
    q.length = keep;
    q.mtp_length = std::min(q.mtp_length, keep);
    shrink_table(q, blocks_for(keep, opt_.block_tokens));
    return keep;
}

Status SequenceMemory::fork(SeqId from, SeqId to) {
    PELICAN_TRY(check_open(from, "fork"));
    PELICAN_TRY(check_open(to, "fork"));
    if (from == to) return make_error("fork: sequence {} onto itself", from);
    Seq& dst = seqs_[static_cast<size_t>(to)];
    const Seq& src = seqs_[static_cast<size_t>(from)];
    if (dst.length != 0 || !dst.table.empty()) return make_error("fork: sequence {} is not empty", to);
    // Share only the blocks that hold positions (reserved ones past the length stay the source's).
    const int64_t n = blocks_for(src.length, opt_.block_tokens);
    for (int64_t b = 0; b < n; ++b) {
        const int32_t id = src.table[static_cast<size_t>(b)];
        blocks_.ref(id);
        dst.table.push_back(id);
    }
    dst.length = src.length;
    dst.mtp_length = src.mtp_length;  // the MTP rows live in the shared blocks too
    if (opt_.recurrent) {
        std::fill(dst.entry_len.begin(), dst.entry_len.end(), -1);
        dst.cursor = 0;
        dst.entry_len[0] = src.length;
        storage_->copy_state(entry(from, src.cursor), entry(to, 0));
    }
    return {};
}

int64_t SequenceMemory::mtp_length(SeqId s) const {
    return is_open(s) ? seqs_[static_cast<size_t>(s)].mtp_length : 0;
}

void SequenceMemory::commit_mtp(SeqId s, int64_t n) {
    assert(is_open(s) && n >= 0 && n <= seqs_[static_cast<size_t>(s)].length);
    Seq& q = seqs_[static_cast<size_t>(s)];
    q.mtp_length = std::max(q.mtp_length, n);
}

}  // namespace pelican
