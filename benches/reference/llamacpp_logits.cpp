// llama.cpp's next-token distributions for a model file: one JSON line per prompt.
//
// For each prompt (one per line of the prompts file; "\n" in a line is a newline) the prompt is
// tokenized as llama.cpp does (BOS when the model adds one), evaluated in one batch with logits at
// every position, then continued greedily for N tokens, one token per decode. At every position
// (prompt positions first, then each greedy step) the line holds the 10 most likely next tokens with
// their log-probabilities (logit minus the log-sum-exp over the whole vocabulary).
//
// Build and run: benches/reference/llamacpp_logits.sh (links libllama from a llama.cpp build).

#include "llama.h"
#include "reference_common.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

static std::string json_escape(const std::string & s) {
    std::string o;
    for (unsigned char c : s) {
        switch (c) {
            case '"': o += "\\\""; break;
            case '\\': o += "\\\\"; break;
            case '\n': o += "\\n"; break;
            case '\t': o += "\\t"; break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    snprintf(buf, sizeof buf, "\\u%04x", c);
                    o += buf;
                } else {
                    o += (char) c;
                }
        }
    }
    return o;
}

// "[[id,logprob],...]" for the 10 most likely tokens of one position.
static std::string top10(const float * logits, int n_vocab) {
    double mx = -INFINITY;
    for (int i = 0; i < n_vocab; i++) mx = std::max(mx, (double) logits[i]);
    double sum = 0;
    for (int i = 0; i < n_vocab; i++) sum += std::exp((double) logits[i] - mx);
    const double lse = mx + std::log(sum);
    std::vector<int> idx(n_vocab);
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + 10, idx.end(),
                      [&](int a, int b) { return logits[a] > logits[b]; });
    std::string o = "[";
    for (int k = 0; k < 10; k++) {
        char buf[64];
        snprintf(buf, sizeof buf, "%s[%d,%.6f]", k ? "," : "", idx[k], logits[idx[k]] - lse);
        o += buf;
    }
    return o + "]";
}

static int argmax(const float * logits, int n_vocab) {
    return (int) (std::max_element(logits, logits + n_vocab) - logits);
}

int main(int argc, char ** argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s MODEL.gguf PROMPTS.txt N_GREEDY\n", argv[0]);
        return 2;
    }
    const int n_greedy = std::stoi(argv[3]);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512;
    cp.n_batch = 512;
    cp.n_threads = 1;
    cp.n_threads_batch = 1;
    llama_context * ctx = llama_init_from_model(model, cp);
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);

    for (const std::string & prompt : read_prompts(argv[2])) {
        std::vector<llama_token> toks = tokenize(vocab, prompt);
        const int n = (int) toks.size();
        if (n == 0) return 1;
        llama_memory_clear(llama_get_memory(ctx), true);

        llama_batch batch = sequence_batch(toks, 0);
        if (llama_decode(ctx, batch) != 0) return 1;
        std::string positions;
        for (int i = 0; i < n; i++) {
            positions += (i ? "," : "") + top10(llama_get_logits_ith(ctx, i), n_vocab);
        }
        llama_batch_free(batch);

        std::vector<llama_token> greedy;
        llama_token next = argmax(llama_get_logits_ith(ctx, n - 1), n_vocab);
        for (int s = 0; s < n_greedy; s++) {
            greedy.push_back(next);
            llama_batch one = sequence_batch({next}, n + s);
            if (llama_decode(ctx, one) != 0) return 1;
            const float * lg = llama_get_logits_ith(ctx, 0);
            positions += "," + top10(lg, n_vocab);
            next = argmax(lg, n_vocab);
            llama_batch_free(one);
        }

        std::string ids, gids;
        for (int i = 0; i < n; i++) ids += (i ? "," : "") + std::to_string(toks[i]);
        for (size_t i = 0; i < greedy.size(); i++) gids += (i ? "," : "") + std::to_string(greedy[i]);
        printf("{\"prompt\":\"%s\",\"prompt_tokens\":[%s],\"greedy\":[%s],\"positions\":[%s]}\n",
               json_escape(prompt).c_str(), ids.c_str(), gids.c_str(), positions.c_str());
    }
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
