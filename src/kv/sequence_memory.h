// SequenceMemory: the state of many sequences on one device, as data an executor reads and writes.
//
//   KV pages.  Every attention layer's K and V rows live in fixed-size blocks of block_tokens
//   positions, from one pool per device. A sequence's block table maps position p to block
//   table[p / block_tokens], row p % block_tokens. fork() shares blocks by reference count (prefix
//   sharing); a write into a shared block copies it first (copy on write, prepare_write);
//   truncate() and close() drop references, and a block is free again when its last one goes.
//
//   Recurrent slots.  A model with recurrent layers (Gated DeltaNet: conv window + delta-rule state)
//   gives every open sequence a slot of R = checkpoints + 1 state entries, used as a ring: a step
//   reads the entry holding the state after the sequence's current length and writes the states
//   after its tokens into the following entries (never over the one it reads). So the states after
//   the last `checkpoints` positions stay on hand, and truncate() to any of them moves the ring's
//   cursor, O(1), no copy; a truncate further back reports the longest length it could restore
//   (0 at worst) and the caller re-feeds the tokens from there.
//
// The bytes belong to a backend (MemoryStorage: host memory on the CPU, device memory on a GPU);
// this class only keeps the books, so it is the same on every device. Everything is sized at
// create(): open, reserve, prepare_write, commit, truncate, fork and close never allocate.
//
//   PELICAN_ASSIGN(SeqId s, mem.open());
//   PELICAN_TRY(mem.prepare_write(s, 0, n));   // blocks for positions 0..n-1, shared ones copied
//   ... executor writes K/V rows through mem.block_table(s) and states through state_write_entry ...
//   mem.commit(s, n, /*n_states=*/1);
//   mem.truncate(s, n - 2);                    // e.g. two draft tokens rejected
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "kv/block_pool.h"

namespace pelican {

using SeqId = int32_t;

struct SequenceMemoryOptions {
    int32_t n_blocks = 0;        // KV blocks in the pool (0 is allowed for a model without attention)
    int32_t block_tokens = 16;   // positions per block
    int32_t max_seqs = 1;        // sequences open at once
    int64_t max_seq_tokens = 0;  // most positions one sequence may hold (its context), > 0
    bool recurrent = false;      // the model has recurrent layers: one state slot per sequence
    int32_t checkpoints = 8;     // recurrent: positions behind the current length truncate restores exactly
};

// The bytes behind the books, implemented by each backend.
class MemoryStorage {
public:
    virtual ~MemoryStorage() = default;
    // Copies block src's K and V rows (every layer) over block dst's.
    virtual void copy_kv_block(int32_t src, int32_t dst) = 0;
    // Copies recurrent state entry src (every recurrent layer's conv window and state) over dst.
    virtual void copy_state(int32_t src, int32_t dst) = 0;
    // Zeroes recurrent state entry e: the state before any token.
    virtual void clear_state(int32_t e) = 0;
    // Bytes the storage holds (KV pages + state entries).
    virtual size_t bytes() const = 0;
};

class SequenceMemory {
public:
    // Errors: bad sizes, or storage missing. The storage is owned from here on.
    static Expected<std::unique_ptr<SequenceMemory>> create(const SequenceMemoryOptions& opt,
                                                            std::unique_ptr<MemoryStorage> storage);

    // A new empty sequence. Errors: max_seqs already open.
    Expected<SeqId> open();
    // Frees the sequence's blocks (those it shares stay with the others) and its slot. Closing an
    // id that is not open is a no-op.
    void close(SeqId s);
    // Blocks for positions 0 .. n-1 (the length does not change). Errors: not open, n above
    // max_seq_tokens, the pool is out of blocks (then nothing was taken).
    Status reserve(SeqId s, int64_t n);
    // Drops positions >= n_keep and returns the length the sequence now has: n_keep, or, for a
    // recurrent model whose state after n_keep tokens is no longer on hand, the longest length it
    // could restore (the caller re-feeds tokens from there). n_keep >= length() changes nothing.
    int64_t truncate(SeqId s, int64_t n_keep);
    // Makes `to` (open and empty) a copy of `from`: shares its blocks and copies its recurrent
    // state. Errors: either not open, `to` not empty, the same id.
    Status fork(SeqId from, SeqId to);

    // ---- for executors ----
    // Positions pos .. pos+n-1 of s become writable: blocks reserved, shared blocks among them
    // copied (the table then names the copies). pos must be length(s). Errors as reserve.
    Status prepare_write(SeqId s, int64_t pos, int64_t n);
    // After a step wrote positions up to new_length - 1 of s (new_length > the pos given to
    // prepare_write) and, for a recurrent model, n_states state entries (state_write_entry(s, 0
    // .. n_states-1): the state after new_length - n_states + 1 + i tokens). 1 <= n_states <=
    // checkpoints, and for a step of more tokens than n_states only the last state is kept.
    void commit(SeqId s, int64_t new_length, int32_t n_states = 1);
    // Multi-token prediction (Executor::mtp_step): the MTP layers' K/V rows live in the same blocks, at the
    // positions the main model holds; mtp_length(s) positions of them are written (0 after open, the source's
    // after fork, at most length(s) after truncate). commit_mtp(s, n): positions 0 .. n-1 are written now
    // (n <= length(s); never shrinks it).
    int64_t mtp_length(SeqId s) const;
    void commit_mtp(SeqId s, int64_t n);
    // Positions pos .. pos+n-1 (all below length(s)) of s take MTP rows: shared blocks among them are copied.
    Status prepare_mtp_write(SeqId s, int64_t pos, int64_t n);
    // Entry holding the state after length(s) tokens (recurrent models).
    int32_t state_read_entry(SeqId s) const;
    // Entry the i-th state of the next step goes to (i < checkpoints).
    int32_t state_write_entry(SeqId s, int32_t i) const;

    bool is_open(SeqId s) const;
    int64_t length(SeqId s) const;
    std::span<const int32_t> block_table(SeqId s) const;  // [blocks reserved]
    int32_t block_tokens() const { return opt_.block_tokens; }
    int32_t max_seqs() const { return opt_.max_seqs; }
    int64_t max_seq_tokens() const { return opt_.max_seq_tokens; }
    int32_t checkpoints() const { return opt_.recurrent ? opt_.checkpoints : 0; }
    int32_t n_state_entries() const { return opt_.recurrent ? opt_.max_seqs * (opt_.checkpoints + 1) : 0; }
    int32_t n_blocks() const { return blocks_.n_blocks(); }
    int32_t n_free_blocks() const { return blocks_.n_free(); }
    int32_t block_refs(int32_t b) const { return blocks_.refs(b); }
    int64_t capacity_tokens() const { return int64_t{blocks_.n_blocks()} * opt_.block_tokens; }
    int32_t n_open() const { return n_open_; }
    MemoryStorage& storage() { return *storage_; }
    const MemoryStorage& storage() const { return *storage_; }

private:
    struct Seq {
        bool open = false;
        int64_t length = 0;
        int64_t mtp_length = 0;      // MTP rows written at positions 0 .. mtp_length-1
        std::vector<int32_t> table;  // capacity max_blocks_per_seq, reserved at create
        // Recurrent ring: cursor (0..R-1) of the entry holding the state after `length` tokens,
        // and the length each entry's state belongs to (-1: nothing restorable).
        int32_t cursor = 0;
        std::vector<int64_t> entry_len;  // [R]
    };
    SequenceMemory(const SequenceMemoryOptions& opt, std::unique_ptr<MemoryStorage> storage);
    Status check_open(SeqId s, const char* what) const;
    Status grow_table(Seq& q, int64_t n_blocks_needed);
    void shrink_table(Seq& q, int64_t n_blocks_kept);
    // Copies the shared blocks among those holding positions pos .. pos+n-1 (copy on write), after checking
    // the pool has them and `grow` more free. Errors: the pool is full (nothing copied then).
    Status copy_shared(Seq& q, int64_t pos, int64_t n, int64_t grow);
    int32_t ring() const { return opt_.checkpoints + 1; }
    int32_t entry(SeqId s, int32_t cursor) const { return s * ring() + cursor; }

    SequenceMemoryOptions opt_;
    std::unique_ptr<MemoryStorage> storage_;
    BlockPool blocks_;
    std::vector<Seq> seqs_;  // [max_seqs]
    int32_t n_open_ = 0;
};

}  // namespace pelican
