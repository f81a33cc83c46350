// Shared by the llama.cpp reference tools: the prompts file and one sequence's batch.
#pragma once

#include "llama.h"

#include <fstream>
#include <string>
#include <vector>

// The prompts file's texts, one per non-empty line; "\n" in a line is a newline.
static std::vector<std::string> read_prompts(const char * path) {
    std::vector<std::string> out;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty()) continue;
        std::string text;
        for (size_t i = 0; i < line.size(); i++) {
            if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == 'n') {
                text += '\n';
                i++;
            } else {
                text += line[i];
            }
        }
        out.push_back(text);
    }
    return out;
}

// `text` tokenized as llama.cpp does for a model's input (BOS/EOS as the vocabulary says).
static std::vector<llama_token> tokenize(const llama_vocab * vocab, const std::string & text) {
    std::vector<llama_token> toks(text.size() + 8);
    int n = llama_tokenize(vocab, text.c_str(), (int) text.size(), toks.data(), (int) toks.size(),
                           true, false);
    toks.resize(n < 0 ? 0 : n);
    return toks;
}

// `toks` at positions `pos0..` of sequence 0, with output at every position.
static llama_batch sequence_batch(const std::vector<llama_token> & toks, int pos0) {
    llama_batch batch = llama_batch_init((int) toks.size(), 0, 1);
    for (size_t i = 0; i < toks.size(); i++) {
        batch.token[i] = toks[i];
        batch.pos[i] = pos0 + (int) i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = true;
    }
    batch.n_tokens = (int) toks.size();
    return batch;
}
