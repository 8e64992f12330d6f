// kv/sequence_memory.h: the books of the paged KV pool and the recurrent-state rings, against a
// host storage that holds token ids (a KV row = the token written at that position; a state =
// a hash of the tokens so far), so every read through a block table or a state entry can be checked
// against a plain per-sequence token list.
#include "kv/sequence_memory.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <vector>

namespace pelican {
namespace {

uint64_t extend(uint64_t h, int32_t tok) { return (h ^ static_cast<uint64_t>(tok + 1)) * 0x100000001b3ULL; }
uint64_t hash_of(const std::vector<int32_t>& toks, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; ++i) h = extend(h, toks[i]);
    return h;
}
constexpr uint64_t kEmpty = 0xcbf29ce484222325ULL;

class FakeStorage final : public MemoryStorage {
public:
    FakeStorage(int32_t n_blocks, int32_t bt, int32_t n_entries)
        : bt_(bt),
          rows_(static_cast<size_t>(n_blocks) * bt, -1),
          states_(static_cast<size_t>(n_entries), 0) {}
    void copy_kv_block(int32_t src, int32_t dst) override {
        ++copies;
        for (int32_t i = 0; i < bt_; ++i) row(dst, i) = row(src, i);
    }
    void copy_state(int32_t src, int32_t dst) override { states_[static_cast<size_t>(dst)] = state(src); }
    void clear_state(int32_t e) override { states_[static_cast<size_t>(e)] = kEmpty; }
    size_t bytes() const override { return rows_.size() * 4 + states_.size() * 8; }

    int32_t& row(int32_t block, int32_t i) { return rows_[static_cast<size_t>(block) * bt_ + i]; }
    uint64_t& state(int32_t e) { return states_[static_cast<size_t>(e)]; }
    int copies = 0;

private:
    int32_t bt_;
    std::vector<int32_t> rows_;
    std::vector<uint64_t> states_;
};

struct Fixture {
    SequenceMemoryOptions opt;
    FakeStorage* st = nullptr;
    std::unique_ptr<SequenceMemory> mem;
    explicit Fixture(SequenceMemoryOptions o) : opt(o) {
        auto storage = std::make_unique<FakeStorage>(o.n_blocks, o.block_tokens,
                                                     o.recurrent ? o.max_seqs * (o.checkpoints + 1) : 0);
        st = storage.get();
        auto m = SequenceMemory::create(o, std::move(storage));
        EXPECT_TRUE(m.ok()) << m.error().message;
        mem = std::move(m).value();
    }
    // One step as an executor does it: rows written through the table, states into the ring
    // (one per token when the step has at most `checkpoints` tokens, else only the last).
    Status step(SeqId s, const std::vector<int32_t>& toks) {
        const int64_t pos = mem->length(s);
        const auto n = static_cast<int64_t>(toks.size());
        PELICAN_TRY(mem->prepare_write(s, pos, n));
        const auto table = mem->block_table(s);
        for (int64_t i = 0; i < n; ++i)
            st->row(table[static_cast<size_t>((pos + i) / opt.block_tokens)],
                    static_cast<int32_t>((pos + i) % opt.block_tokens)) = toks[static_cast<size_t>(i)];
        int32_t n_states = 1;
        if (opt.recurrent) {
            uint64_t h = st->state(mem->state_read_entry(s));
            const bool per_token = n <= opt.checkpoints;
            n_states = per_token ? static_cast<int32_t>(n) : 1;
            for (int64_t i = 0; i < n; ++i) {
                h = extend(h, toks[static_cast<size_t>(i)]);
                if (per_token) st->state(mem->state_write_entry(s, static_cast<int32_t>(i))) = h;
            }
            if (!per_token) st->state(mem->state_write_entry(s, 0)) = h;
        }
        mem->commit(s, pos + n, n_states);
        return {};
    }
    std::vector<int32_t> read(SeqId s) {
        std::vector<int32_t> out;
        const auto table = mem->block_table(s);
        for (int64_t p = 0; p < mem->length(s); ++p)
            out.push_back(st->row(table[static_cast<size_t>(p / opt.block_tokens)],
                                  static_cast<int32_t>(p % opt.block_tokens)));
        return out;
    }
};

SequenceMemoryOptions small(bool recurrent = false) {
    return {.n_blocks = 16,
            .block_tokens = 4,
            .max_seqs = 4,
            .max_seq_tokens = 40,
            .recurrent = recurrent,
            .checkpoints = 3};
}

TEST(SequenceMemory, BadOptionsAreErrors) {
    auto make = [](SequenceMemoryOptions o) {
        return SequenceMemory::create(o, std::make_unique<FakeStorage>(1, 1, 1)).ok();
    };
    EXPECT_TRUE(make(small()));
    auto o = small();
    o.block_tokens = 0;
    EXPECT_FALSE(make(o));
    o = small();
    o.max_seqs = 0;
    EXPECT_FALSE(make(o));
    o = small();
    o.max_seq_tokens = 0;
    EXPECT_FALSE(make(o));
    o = small(true);
    o.checkpoints = 0;
    EXPECT_FALSE(make(o));
    EXPECT_FALSE(SequenceMemory::create(small(), nullptr).ok());
}

TEST(SequenceMemory, OpenWriteCloseReturnsEveryBlock) {
    Fixture f(small());
    auto a = f.mem->open();
    ASSERT_TRUE(a.ok());
    ASSERT_TRUE(f.step(*a, {1, 2, 3, 4, 5}).ok());
    EXPECT_EQ(f.mem->length(*a), 5);
    EXPECT_EQ(f.mem->block_table(*a).size(), 2u);
    EXPECT_EQ(f.read(*a), (std::vector<int32_t>{1, 2, 3, 4, 5}));
    EXPECT_EQ(f.mem->n_free_blocks(), 14);
    f.mem->close(*a);
    EXPECT_EQ(f.mem->n_free_blocks(), 16);
    EXPECT_FALSE(f.mem->is_open(*a));
    f.mem->close(*a);  // twice: no-op
    EXPECT_EQ(f.mem->n_open(), 0);
}

TEST(SequenceMemory, SlotsAndPoolRunOutCleanly) {
    Fixture f(small());
    std::vector<SeqId> ids;
    for (int i = 0; i < 4; ++i) ids.push_back(f.mem->open().value());
    auto fifth = f.mem->open();
    ASSERT_FALSE(fifth.ok());
    EXPECT_NE(fifth.error().message.find("4 sequence slots"), std::string::npos) << fifth.error().message;
    ASSERT_TRUE(f.mem->reserve(ids[0], 40).ok());  // 10 blocks
    auto full = f.mem->reserve(ids[1], 28);        // 7 more: only 6 free
    ASSERT_FALSE(full.ok());
    EXPECT_NE(full.error().message.find("KV pool is full"), std::string::npos) << full.error().message;
    EXPECT_EQ(f.mem->n_free_blocks(), 6);                   // nothing taken by the failed call
    EXPECT_FALSE(f.mem->reserve(ids[1], 41).ok());          // past max_seq_tokens
    EXPECT_FALSE(f.mem->prepare_write(ids[1], 3, 1).ok());  // not at the sequence's end
    EXPECT_FALSE(f.mem->reserve(99, 1).ok());
    EXPECT_FALSE(f.mem->prepare_write(-1, 0, 1).ok());
}

TEST(SequenceMemory, TruncateFreesBlocksAndRewrites) {
    Fixture f(small());
    SeqId a = f.mem->open().value();
    ASSERT_TRUE(f.step(a, {1, 2, 3, 4, 5, 6, 7, 8, 9}).ok());
    EXPECT_EQ(f.mem->n_free_blocks(), 13);
    EXPECT_EQ(f.mem->truncate(a, 5), 5);
    EXPECT_EQ(f.mem->n_free_blocks(), 14);
    EXPECT_EQ(f.mem->truncate(a, 50), 5);  // past the end: nothing
    ASSERT_TRUE(f.step(a, {60, 70}).ok());
    EXPECT_EQ(f.read(a), (std::vector<int32_t>{1, 2, 3, 4, 5, 60, 70}));
    EXPECT_EQ(f.mem->truncate(a, 0), 0);
    EXPECT_EQ(f.mem->n_free_blocks(), 16);
}

TEST(SequenceMemory, ForkSharesBlocksAndCopiesOnWrite) {
    Fixture f(small());
    SeqId a = f.mem->open().value(), b = f.mem->open().value();
    ASSERT_TRUE(f.step(a, {1, 2, 3, 4, 5, 6}).ok());  // blocks: [1 2 3 4] [5 6 . .]
    ASSERT_TRUE(f.mem->fork(a, b).ok());
    EXPECT_EQ(f.mem->n_free_blocks(), 14);  // shared, not copied
    EXPECT_EQ(f.mem->block_refs(f.mem->block_table(a)[0]), 2);
    EXPECT_EQ(f.read(b), f.read(a));
    ASSERT_TRUE(f.step(b, {70, 80, 90}).ok());  // b writes into the shared partial block: copied
    EXPECT_EQ(f.st->copies, 1);
    ASSERT_TRUE(f.step(a, {7}).ok());  // a's partial block is its own again: no copy
    EXPECT_EQ(f.st->copies, 1);
    EXPECT_EQ(f.read(a), (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7}));
    EXPECT_EQ(f.read(b), (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 70, 80, 90}));
    EXPECT_EQ(f.mem->block_table(a)[0], f.mem->block_table(b)[0]);  // the full block stays shared
    EXPECT_FALSE(f.mem->fork(a, b).ok());                           // b is not empty
    EXPECT_FALSE(f.mem->fork(a, a).ok());
    f.mem->close(a);
    EXPECT_EQ(f.read(b), (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 70, 80, 90}));
    f.mem->close(b);
    EXPECT_EQ(f.mem->n_free_blocks(), 16);
}

TEST(SequenceMemory, RecurrentTruncateWithinCheckpointsIsExact) {
    Fixture f(small(/*recurrent=*/true));  // 3 checkpoints
    SeqId a = f.mem->open().value();
    EXPECT_EQ(f.st->state(f.mem->state_read_entry(a)), kEmpty);
    std::vector<int32_t> toks = {5, 6, 7, 8, 9, 10, 11, 12};
    ASSERT_TRUE(
        f.step(a, std::vector<int32_t>(toks.begin(), toks.begin() + 5)).ok());  // chunk: last state only
    for (int i = 5; i < 8; ++i) ASSERT_TRUE(f.step(a, {toks[static_cast<size_t>(i)]}).ok());
    EXPECT_EQ(f.st->state(f.mem->state_read_entry(a)), hash_of(toks, 8));
    // 8 -> 6: within the last 3 positions, exact and O(1)
    EXPECT_EQ(f.mem->truncate(a, 6), 6);
    EXPECT_EQ(f.st->state(f.mem->state_read_entry(a)), hash_of(toks, 6));
    ASSERT_TRUE(f.step(a, {99}).ok());
    std::vector<int32_t> now = {5, 6, 7, 8, 9, 10, 99};
    EXPECT_EQ(f.st->state(f.mem->state_read_entry(a)), hash_of(now, 7));
    EXPECT_EQ(f.read(a), now);
    // 7 -> 3: no state at 3 tokens or fewer is on hand (the first 5 came as one chunk and the
    // empty state's entry was reused): the sequence starts over at 0.
    EXPECT_EQ(f.mem->truncate(a, 3), 0);
    EXPECT_EQ(f.st->state(f.mem->state_read_entry(a)), kEmpty);
    EXPECT_EQ(f.mem->length(a), 0);
    EXPECT_EQ(f.mem->n_free_blocks(), 16);
}

TEST(SequenceMemory, RecurrentTruncatePastTheRingRestoresTheLongestKept) {
    Fixture f(small(true));
    SeqId a = f.mem->open().value();
    std::vector<int32_t> toks;
    for (int i = 0; i < 10; ++i) {
        toks.push_back(100 + i);
        ASSERT_TRUE(f.step(a, {toks.back()}).ok());
    }
    // The ring (4 entries) holds lengths 7..10; asking for 5 gives 0 (nothing <= 5 on hand).
    EXPECT_EQ(f.mem->truncate(a, 8), 8);
    EXPECT_EQ(f.st->state(f.mem->state_read_entry(a)), hash_of(toks, 8));
    EXPECT_EQ(f.mem->truncate(a, 7), 7);
    EXPECT_EQ(f.mem->truncate(a, 5), 0);
    // A verify-style step of 3 tokens writes 3 states: any of them can be restored.
    ASSERT_TRUE(f.step(a, {1, 2, 3}).ok());
    EXPECT_EQ(f.mem->truncate(a, 1), 1);
    EXPECT_EQ(f.st->state(f.mem->state_read_entry(a)), hash_of({1}, 1));
}

TEST(SequenceMemory, RecurrentForkCopiesTheState) {
    Fixture f(small(true));
    SeqId a = f.mem->open().value(), b = f.mem->open().value();
    ASSERT_TRUE(f.step(a, {1, 2, 3}).ok());
    ASSERT_TRUE(f.mem->fork(a, b).ok());
    EXPECT_EQ(f.st->state(f.mem->state_read_entry(b)), hash_of({1, 2, 3}, 3));
    ASSERT_TRUE(f.step(b, {4}).ok());
    ASSERT_TRUE(f.step(a, {9}).ok());
    EXPECT_EQ(f.st->state(f.mem->state_read_entry(a)), hash_of({1, 2, 3, 9}, 4));
    EXPECT_EQ(f.st->state(f.mem->state_read_entry(b)), hash_of({1, 2, 3, 4}, 4));
    // b's ring holds only what it wrote after the fork: truncate below the fork point restarts.
    EXPECT_EQ(f.mem->truncate(b, 3), 3);
    EXPECT_EQ(f.mem->truncate(b, 2), 0);
}

// Hundreds of sequences through a seeded random mix of open / step / truncate / fork / close:
// every sequence reads back exactly its own tokens, and no block leaks.
TEST(SequenceMemory, RandomInterleavingNeverLeaksOrMixesUp) {
    for (bool recurrent : {false, true}) {
        SequenceMemoryOptions o{.n_blocks = 96,
                                .block_tokens = 5,
                                .max_seqs = 12,
                                .max_seq_tokens = 60,
                                .recurrent = recurrent,
                                .checkpoints = 8};
        Fixture f(o);
        std::mt19937 rng(1234);
        std::map<SeqId, std::vector<int32_t>> ref;
        int opened = 0;
        for (int it = 0; it < 4000; ++it) {
            const int op = static_cast<int>(rng() % 10);
            if (op == 0 || ref.empty()) {
                auto s = f.mem->open();
                if (s.ok()) {
                    ASSERT_FALSE(ref.count(*s));
                    ref[*s] = {};
                    ++opened;
                }
                continue;
            }
            auto it_s = ref.begin();
            std::advance(it_s, static_cast<long>(rng() % ref.size()));
            const SeqId s = it_s->first;
            std::vector<int32_t>& toks = it_s->second;
            if (op <= 5) {  // a step of 1..12 tokens
                const auto n = static_cast<size_t>(1 + rng() % 12);
                std::vector<int32_t> add;
                for (size_t i = 0; i < n; ++i) add.push_back(static_cast<int32_t>(rng() % 1000));
                if (toks.size() + n > 60) continue;
                const int32_t before = f.mem->n_free_blocks();
                if (f.step(s, add).ok()) {
                    toks.insert(toks.end(), add.begin(), add.end());
                } else {
                    EXPECT_EQ(f.mem->n_free_blocks(), before);  // a refused step took nothing
                }
            } else if (op <= 7) {
                const auto keep = static_cast<int64_t>(rng() % (toks.size() + 1));
                const int64_t got = f.mem->truncate(s, keep);
                ASSERT_LE(got, keep);
                if (!recurrent) {
                    ASSERT_EQ(got, keep);
                }
                toks.resize(static_cast<size_t>(got));
            } else if (op == 8) {
                auto t = f.mem->open();
                if (!t.ok()) continue;
                ++opened;
                ASSERT_TRUE(f.mem->fork(s, *t).ok());
                ref[*t] = toks;
            } else {
                f.mem->close(s);
                ref.erase(s);
                continue;
            }
            ASSERT_EQ(f.mem->length(s), static_cast<int64_t>(toks.size()));
            ASSERT_EQ(f.read(s), toks) << "sequence " << s << " at op " << it;
            if (recurrent) {
                ASSERT_EQ(f.st->state(f.mem->state_read_entry(s)), hash_of(toks, toks.size()));
            }
        }
        EXPECT_GT(opened, 100);
        // Blocks in use = the distinct blocks the open tables name; every reference accounted for.
        std::map<int32_t, int32_t> refs;
        for (auto& [s, toks] : ref) {
            ASSERT_EQ(f.read(s), toks);
            for (int32_t b : f.mem->block_table(s)) ++refs[b];
        }
        for (auto& [b, n] : refs) EXPECT_EQ(f.mem->block_refs(b), n) << "block " << b;
        EXPECT_EQ(f.mem->n_free_blocks(), o.n_blocks - static_cast<int32_t>(refs.size()));
        for (auto& [s, toks] : ref) f.mem->close(s);
        EXPECT_EQ(f.mem->n_free_blocks(), o.n_blocks);
        EXPECT_EQ(f.mem->n_open(), 0);
    }
}

}  // namespace
}  // namespace pelican
