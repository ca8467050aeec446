/* The bench harness's entry (bench.h): the device's default sizes, the
 * figure family asked for, the JSON file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/select.h"
#include "bench/bench_internal.h"

int df_bench_require_timing(DfBackend *be, const char *device, DfError *err) {
    if (df_backend_has(be, DF_CAP_TIMING | DF_CAP_PROFILE)) return 0;
    return df_fail(err, "--device %s: the %s backend has no device timers or op profile for these figures", device,
                   be->ops->name);
}

int df_bench_parse_batches(const char *text, int *batches, int *n, DfError *err) {
    *n = 0;
    const char *p = text;
    if (!*p) return df_fail(err, "--batch: an empty list (give batches such as 1,64,256)");
    for (;;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || (*end && *end != ',') || (*end == ',' && !end[1]) || *p == ' ' || *p == '+')
            return df_fail(err, "--batch: expected batches separated by commas (e.g. 1,64,256), got '%s'", text);
        if (v < 1 || v > DF_BENCH_MAX_BATCH)
            return df_fail(err, "--batch: %ld is outside 1..%d", v, DF_BENCH_MAX_BATCH);
        for (int i = 0; i < *n; i++)
            if (batches[i] == v) return df_fail(err, "--batch: %ld is listed twice in '%s'", v, text);
        if (*n == DF_BENCH_MAX_BATCHES) return df_fail(err, "--batch: more than %d batches", DF_BENCH_MAX_BATCHES);
        batches[(*n)++] = (int)v;
        if (!*end) return 0;
        p = end + 1;
    }
}

static void resolve_sizes(DfBenchOptions *o, int gpu) {
    if (o->seq_len == 0) o->seq_len = gpu ? DF_BENCH_GPU_SEQ_LEN : DF_BENCH_CPU_SEQ_LEN;
    if (o->n_seqs == 0) o->n_seqs = gpu ? DF_BENCH_GPU_SEQS : DF_BENCH_CPU_SEQS;
    if (o->repeat == 0) o->repeat = gpu ? DF_BENCH_GPU_REPEAT : DF_BENCH_CPU_REPEAT;
    if (o->train_seqs == 0) o->train_seqs = DF_BENCH_TRAIN_SEQS;
    if (o->train_repeat == 0) o->train_repeat = DF_BENCH_TRAIN_REPEAT;
    if (o->prompt_len == 0) o->prompt_len = DF_BENCH_PROMPT_LEN;
    if (o->new_tokens == 0) o->new_tokens = DF_BENCH_NEW_TOKENS;
    if (o->hybrid_layers == 0) o->hybrid_layers = DF_BENCH_HYBRID_LAYERS;
    if (o->n_decode_batches == 0) {
        DfError ignored; /* the default list parses */
        df_bench_parse_batches(DF_BENCH_DECODE_BATCHES, o->decode_batches, &o->n_decode_batches, &ignored);
    }
}

static int run_figures(const DfBenchOptions *o, int gpu, cJSON *json, DfError *err) {
    if (o->decode) {
        if (o->prompt_len < 1 || o->new_tokens < 16)
            return df_fail(err, "--prompt-len must be positive and --new-tokens at least 16");
        if (o->hybrid && !gpu) return df_fail(err, "--decode --hybrid needs --device cuda (the Qwen3.6-27B shape)");
        return df_bench_decode_figures(o, json, err);
    }
    if (o->hybrid && (!gpu || o->hybrid_layers < 4 || o->hybrid_layers > 64))
        return df_fail(err, "--hybrid needs --device cuda and --hybrid-layers in 4..64");
    if (gpu) /* df_backend_create says when this dflash was built without CUDA */
        return o->hybrid ? df_bench_hybrid(o, json, err) : df_bench_gpu(o, json, err);
    return df_bench_cpu(o, json, err);
}

static int write_json(const cJSON *json, const char *path, DfError *err) {
    char *text = cJSON_Print(json);
    FILE *f = fopen(path, "w");
    int rc = 0;
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) rc = df_fail_errno(err, "%s: cannot write", path);
    free(text);
    return rc;
}

int df_bench(const DfBenchOptions *given, DfError *err) {
    DfBenchOptions o = *given;
    int gpu = df_device_kind(o.device) == DF_DEVICE_ACCELERATOR;
    resolve_sizes(&o, gpu);
    cJSON *json = cJSON_CreateObject();
    int rc = run_figures(&o, gpu, json, err);
    if (rc == 0 && o.json_out) rc = write_json(json, o.json_out, err);
    cJSON_Delete(json);
    return rc;
}
