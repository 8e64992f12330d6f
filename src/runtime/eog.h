// End-of-generation tokens: the ids that end a generation when sampled.
#pragma once

#include <cstdint>
#include <vector>

namespace pelican {

class Model;
class Tokenizer;

// The union of: the tokenizer's EOS; GGUF tokenizer.ggml.{eos,eot,eom}_token_id; HF config.json and
// generation_config.json eos_token_id (int or list); and control tokens whose text is a well-known
// end-of-turn marker (<|eot_id|>, <|im_end|>, <|endoftext|>, <end_of_turn>, <|end|>, ...).
// Sorted, unique, all inside the vocabulary of n_vocab tokens.
std::vector<int32_t> find_end_of_generation_ids(const Model& model, const Tokenizer* tok, int64_t n_vocab);

}  // namespace pelican
