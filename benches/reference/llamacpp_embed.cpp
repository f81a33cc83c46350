// llama.cpp's embeddings for a GGUF embedding model (one whose `{arch}.pooling_type` is set): one
// JSON line per text of the prompts file ("\n" in a line is a newline) with its tokens and its
// pooled, L2-normalized vector, as `llama-embedding` computes it. A model without a pooling type
// prints nothing.
//
// Build and run: benches/reference/llamacpp_logits.sh (links libllama from a llama.cpp build).

#include "llama.h"
#include "reference_common.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char ** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s MODEL.gguf PROMPTS.txt\n", argv[0]);
        return 2;
    }
    llama_backend_init();
    llama_model * model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!model) {
        fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512;
    cp.n_batch = 512;
    cp.n_ubatch = 512;
    cp.n_threads = 1;
    cp.n_threads_batch = 1;
    cp.embeddings = true;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (llama_pooling_type(ctx) == LLAMA_POOLING_TYPE_NONE) {
        return 0;
    }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_embd = llama_model_n_embd(model);

    for (const std::string & text : read_prompts(argv[2])) {
        std::vector<llama_token> toks = tokenize(vocab, text);
        const int n = (int) toks.size();
        if (n == 0) return 1;
        llama_memory_clear(llama_get_memory(ctx), true);
        llama_batch batch = sequence_batch(toks, 0);
        if (llama_decode(ctx, batch) != 0) return 1;
        const float * e = llama_get_embeddings_seq(ctx, 0);
        if (!e) return 1;
        double norm = 0;
        for (int i = 0; i < n_embd; i++) norm += (double) e[i] * e[i];
        norm = std::sqrt(norm);
        std::string ids, vec;
        for (int i = 0; i < n; i++) ids += (i ? "," : "") + std::to_string(toks[i]);
        for (int i = 0; i < n_embd; i++) {
            char buf[32];
            snprintf(buf, sizeof buf, "%s%.7g", i ? "," : "", norm > 0 ? e[i] / norm : e[i]);
            vec += buf;
        }
        printf("{\"tokens\":[%s],\"embedding\":[%s]}\n", ids.c_str(), vec.c_str());
        llama_batch_free(batch);
    }
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
