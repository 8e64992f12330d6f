// The free list and reference counts of a paged KV pool's blocks (bookkeeping only: the blocks'
// bytes live in a backend's MemoryStorage, kv/sequence_memory.h). Everything is sized at
// construction; alloc / ref / unref never allocate.
#pragma once

#include <cassert>
#include <cstdint>
#include <vector>

namespace pelican {

class BlockPool {
public:
    explicit BlockPool(int32_t n_blocks) : refs_(static_cast<size_t>(n_blocks), 0) {
        free_.reserve(static_cast<size_t>(n_blocks));
        for (int32_t b = n_blocks - 1; b >= 0; --b) free_.push_back(b);  // block 0 is handed out first
    }

    int32_t n_blocks() const { return static_cast<int32_t>(refs_.size()); }
    int32_t n_free() const { return static_cast<int32_t>(free_.size()); }
    int32_t refs(int32_t b) const { return refs_[static_cast<size_t>(b)]; }

    // A free block with one reference, or -1 when none is left.
    int32_t alloc() {
        if (free_.empty()) return -1;
        const int32_t b = free_.back();
        free_.pop_back();
        refs_[static_cast<size_t>(b)] = 1;
        return b;
    }
    void ref(int32_t b) {
        assert(refs_[static_cast<size_t>(b)] > 0);
        ++refs_[static_cast<size_t>(b)];
    }
    // Drops one reference; the block is free again when it was the last.
    void unref(int32_t b) {
        assert(refs_[static_cast<size_t>(b)] > 0);
        if (--refs_[static_cast<size_t>(b)] == 0) free_.push_back(b);
    }

private:
    std::vector<int32_t> refs_;  // [n_blocks]
    std::vector<int32_t> free_;  // stack of free block ids
};

}  // namespace pelican
