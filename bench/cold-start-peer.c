/*
 * The llama.cpp side of the cold-start comparison (bench/cold-start-side-by-side.py): the
 * same steps as `pocketperf cold-probe`, on llama.cpp's library. Loads MODEL with a load mode
 * (mmap, none = read into memory like `--no-mmap`, mmap+mlock like `--mlock`), generates 32
 * greedy tokens of the same plain prompt, and prints one JSON line of CLOCK_MONOTONIC stamps
 * (ns): main entered, model loaded and context made, first token, last token; with the page
 * faults of this process (getrusage) from main to the last token.
 *
 * Built by the side-by-side script against the peer build of bench/llamacpp-peer.sh:
 *   cc -O2 bench/cold-start-peer.c -I SRC/include -I SRC/ggml/include -L BUILD/bin \
 *      -lllama -lggml -lggml-base -Wl,-rpath,BUILD/bin -o cold-start-peer
 * Usage: cold-start-peer MODEL THREADS LOAD_MODE PROMPT
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "llama.h"

#define TOKENS 32

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void faults(long *major, long *minor) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    *major = ru.ru_majflt;
    *minor = ru.ru_minflt;
}

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)level;
    (void)text;
    (void)user;
}

/* One token at position `pos`, logits wanted. */
static void one_token(struct llama_batch_ext *b, llama_token t, llama_pos pos) {
    llama_batch_ext_clear(b);
    int32_t i = llama_batch_ext_add_token(b, 0, t);
    llama_batch_ext_set_pos(b, i, &pos);
    llama_batch_ext_set_output_logits(b, i, true);
}

int main(int argc, char **argv) {
    uint64_t t_main = now_ns();
    long maj0, min0;
    faults(&maj0, &min0);
    if (argc != 5) {
        fprintf(stderr, "usage: %s MODEL THREADS LOAD_MODE PROMPT\n", argv[0]);
        return 2;
    }
    const char *model_path = argv[1];
    int threads = atoi(argv[2]);
    /* llama_load_mode_from_str throws on an unknown name: check it here first. */
    const char *known[] = {"mmap", "none", "mmap+mlock", "mlock"};
    int ok = 0;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        ok |= strcmp(argv[3], known[i]) == 0;
    }
    if (!ok || threads < 1) {
        fprintf(stderr, "cold-start-peer: load mode must be mmap, none, mlock or mmap+mlock; threads >= 1\n");
        return 2;
    }
    enum llama_load_mode mode = llama_load_mode_from_str(argv[3]);
    const char *prompt = argv[4];

    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.load_mode = mode;
    struct llama_model *model = llama_model_load_from_file(model_path, mp);
    if (!model) {
        fprintf(stderr, "cold-start-peer: cannot load %s\n", model_path);
        return 2;
    }
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    int32_t n_prompt = -llama_tokenize(vocab, prompt, (int32_t)strlen(prompt), NULL, 0, true, false);
    if (n_prompt <= 0) {
        fprintf(stderr, "cold-start-peer: cannot tokenize the prompt\n");
        return 2;
    }
    llama_token *ids = calloc((size_t)n_prompt, sizeof(llama_token));
    if (!ids || llama_tokenize(vocab, prompt, (int32_t)strlen(prompt), ids, n_prompt, true, false) < 0) {
        fprintf(stderr, "cold-start-peer: cannot tokenize the prompt\n");
        return 2;
    }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(n_prompt + TOKENS + 1);
    cp.n_batch = (uint32_t)n_prompt;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "cold-start-peer: cannot make a context\n");
        return 2;
    }
    uint64_t t_mapped = now_ns();

    struct llama_sampler *smpl = llama_sampler_chain_init(llama_sampler_chain_default_params());
    llama_sampler_chain_add(smpl, llama_sampler_init_greedy());
    struct llama_batch_ext *batch = llama_batch_ext_init(ctx);
    llama_batch_ext_clear(batch);
    for (int32_t i = 0; i < n_prompt; i++) {
        int32_t k = llama_batch_ext_add_token(batch, 0, ids[i]);
        llama_pos pos = i;
        llama_batch_ext_set_pos(batch, k, &pos);
    }
    llama_batch_ext_set_output_logits(batch, n_prompt - 1, true);

    uint64_t t_first = 0, t_last = 0;
    int generated = 0;
    llama_pos pos = n_prompt;
    /* Like the pocketperf probe, generation does not stop at an end-of-generation token. */
    while (generated < TOKENS) {
        if (llama_process(ctx, LLAMA_PROCESS_TYPE_DECODE, batch) != 0) {
            fprintf(stderr, "cold-start-peer: decode failed at token %d\n", generated);
            return 2;
        }
        llama_token t = llama_sampler_sample(smpl, ctx, -1);
        t_last = now_ns();
        if (generated == 0) {
            t_first = t_last;
        }
        generated++;
        one_token(batch, t, pos++);
    }
    long maj1, min1;
    faults(&maj1, &min1);
    printf("{\"t_main_ns\":%llu,\"t_mapped_ns\":%llu,\"t_first_token_ns\":%llu,"
           "\"t_last_token_ns\":%llu,\"prompt_tokens\":%d,\"generated\":%d,"
           "\"major_faults\":%ld,\"minor_faults\":%ld,\"load_mode\":\"%s\"}\n",
           (unsigned long long)t_main, (unsigned long long)t_mapped, (unsigned long long)t_first,
           (unsigned long long)t_last, n_prompt, generated, maj1 - maj0, min1 - min0,
           llama_load_mode_name(mode));
    llama_batch_ext_free(batch);
    llama_sampler_free(smpl);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    free(ids);
    return 0;
}
