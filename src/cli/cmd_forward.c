/* dflash forward: runs the target over token-id records packed into one
 * batch and writes the tap features (and logits) to a safetensors file. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buffer.h"
#include "base/input_file.h"
#include "backend/select.h"
#include "base/clock.h"
#include "base/paths_apart.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "formats/safetensors.h"
#include "model/drafter_config.h"
#include "target/target.h"
#include "json/json_parse.h"

#define MAX_TAPS 64

typedef struct ForwardInput {
    DfI32Vec ids;
    DfI32Vec starts; /* [n_seqs + 1] */
} ForwardInput;

/* "1,3,5" -> taps; each in 0..num_layers-1. */
static int parse_layers(const char *text, int num_layers, int *taps, int *n, DfError *err) {
    *n = 0;
    const char *p = text;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || (*end && *end != ','))
            return df_fail(err, "--layers: expected comma-separated integers, got '%s'", text);
        if (v < 0 || v >= num_layers) return df_fail(err, "--layers: layer %ld is outside 0..%d", v, num_layers - 1);
        if (*n == MAX_TAPS) return df_fail(err, "--layers: more than %d layers", MAX_TAPS);
        taps[(*n)++] = (int)v;
        p = *end ? end + 1 : end;
    }
    if (*n == 0) return df_fail(err, "--layers: empty list");
    return 0;
}

static int parse_record(const char *path, long line_no, const char *line, int vocab, ForwardInput *in, DfError *err) {
    cJSON *rec = NULL;
    if (df_json_parse(line, strlen(line), path, line_no, &rec, err) != DF_JSON_OK) return -1;
    int rc = 0;
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(rec, "ids");
    if (!cJSON_IsArray(ids) || cJSON_GetArraySize(ids) == 0) {
        rc = df_fail(err, "%s:%ld: expected {\"ids\": [...]} with at least one id", path, line_no);
        goto done;
    }
    int i = 0;
    const cJSON *id;
    cJSON_ArrayForEach(id, ids) {
        double v = cJSON_IsNumber(id) ? id->valuedouble : -1;
        if (!cJSON_IsNumber(id) || v != (double)(long)v || v < 0 || v >= vocab) {
            rc = df_fail(err, "%s:%ld: ids[%d] is not a token id in [0, %d)", path, line_no, i, vocab);
            goto done;
        }
        if (in->ids.len >= INT32_MAX) {
            rc = df_fail(err, "%s:%ld: more than %d tokens in all", path, line_no, INT32_MAX);
            goto done;
        }
        df_i32vec_push(&in->ids, (int32_t)v);
        i++;
    }
    df_i32vec_push(&in->starts, (int32_t)in->ids.len);
done:
    cJSON_Delete(rec);
    return rc;
}

static int read_input(const char *path, int vocab, ForwardInput *in, DfError *err) {
    FILE *fp = df_fopen_regular(path, err);
    if (!fp) return -1;
    df_i32vec_push(&in->starts, 0);
    char *line = NULL;
    size_t cap = 0;
    long line_no = 0;
    int rc = 0;
    while (getline(&line, &cap, fp) >= 0) {
        line_no++;
        if (strspn(line, " \t\r\n") == strlen(line)) continue;
        if ((rc = parse_record(path, line_no, line, vocab, in, err)) != 0) break;
    }
    if (rc == 0 && ferror(fp)) rc = df_fail_errno(err, "reading %s", path);
    if (rc == 0 && in->starts.len < 2) rc = df_fail(err, "%s: no records", path);
    free(line);
    fclose(fp);
    return rc;
}

static int write_output(const char *path, const char *target, const ForwardInput *in, const int *taps, int n_taps,
                        int hidden, const float *features, const float *logits, int vocab, DfError *err) {
    int64_t t = (int64_t)in->ids.len, nseq = (int64_t)in->starts.len - 1;
    int32_t layer_ids[MAX_TAPS];
    for (int i = 0; i < n_taps; i++) layer_ids[i] = taps[i];
    DfTensorOut out[5] = {
        {"features", DF_DTYPE_F32, 2, {t, (int64_t)n_taps * hidden}, features},
        {"target_layer_ids", DF_DTYPE_I32, 1, {n_taps}, layer_ids},
        {"input_ids", DF_DTYPE_I32, 1, {t}, in->ids.data},
        {"seq_starts", DF_DTYPE_I32, 1, {nseq + 1}, in->starts.data},
        {"logits", DF_DTYPE_F32, 2, {t, vocab}, logits},
    };
    cJSON *meta = cJSON_CreateObject();
    cJSON_AddStringToObject(meta, "target", target);
    cJSON_AddStringToObject(meta, "format", "dflash forward: features [T, n*H] = outputs of target_layer_ids");
    char *meta_json = cJSON_PrintUnformatted(meta);
    int rc = df_safetensors_write(path, out, logits ? 5 : 4, meta_json, err);
    cJSON_free(meta_json);
    cJSON_Delete(meta);
    return rc;
}

/* A NaN or infinity in x [T, width] (the logits or the tap features) names
 * the target, the record and the position: a broken target is refused, not
 * written out. */
static int check_finite(const char *target, const ForwardInput *in, const float *x, size_t width, const char *what,
                        DfError *err) {
    size_t t = in->ids.len;
    for (size_t row = 0; row < t; row++)
        for (size_t j = 0; j < width; j++) {
            if (isfinite(x[row * width + j])) continue;
            size_t rec = 0;
            while (rec + 2 < in->starts.len && (size_t)in->starts.data[rec + 1] <= row) rec++;
            return df_fail(err, "target %s: its %s are not finite (NaN or infinity) at record %zu, position %zu", target,
                           what, rec + 1, row - (size_t)in->starts.data[rec]);
        }
    return 0;
}

static int run_forward(const char *target, const char *input, const char *output, const char *layers, int want_logits,
                       const char *device, DfError *err) {
    DfModelConfig cfg;
    if (df_model_config_load(&cfg, target, err)) return -1;
    int taps[MAX_TAPS], n_taps = 3;
    if (layers) {
        if (parse_layers(layers, cfg.num_layers, taps, &n_taps, err)) return -1;
    } else { /* no layer tapped twice on a small target */
        if (n_taps > df_drafter_max_taps(&cfg)) n_taps = df_drafter_max_taps(&cfg);
        df_default_target_layer_ids(cfg.num_layers, n_taps, taps);
    }
    ForwardInput in = {0};
    DfBackend *be = NULL;
    DfTargetModel model = {0};
    float *features = NULL, *logits = NULL;
    int rc = -1;
    if (read_input(input, cfg.vocab_size, &in, err)) goto done;
    if (!(be = df_backend_create(device, err))) goto done;
    int n_layers = df_target_layers_needed(&cfg, taps, n_taps, want_logits);
    if (df_target_load(&model, be, target, n_layers, want_logits, err)) goto done;
    size_t t = in.ids.len;
    features = df_xmalloc(t * (size_t)n_taps * cfg.hidden_size * sizeof *features, "features");
    if (want_logits) logits = df_xmalloc(t * (size_t)cfg.vocab_size * sizeof *logits, "logits");
    double t0 = df_now_seconds();
    if (df_target_forward(&model, in.ids.data, in.starts.data, (int)in.starts.len - 1, taps, n_taps, features, logits,
                          err))
        goto done;
    double secs = df_now_seconds() - t0;
    if ((logits && check_finite(target, &in, logits, (size_t)cfg.vocab_size, "logits", err)) ||
        check_finite(target, &in, features, (size_t)n_taps * cfg.hidden_size, "tap features", err))
        goto done;
    fprintf(stderr, "forward: %zu sequences, %zu tokens, %d layers on %s in %.2fs (%.0f tokens/s)\n",
            in.starts.len - 1, t, model.layers_run, be->ops->name, secs, (double)t / secs);
    if (write_output(output, target, &in, taps, n_taps, cfg.hidden_size, features, logits, cfg.vocab_size, err))
        goto done;
    rc = 0;
done:
    free(features);
    free(logits);
    df_target_free(&model);
    df_backend_destroy(be);
    df_i32vec_free(&in.ids);
    df_i32vec_free(&in.starts);
    return rc;
}

typedef struct ForwardArgs {
    const char *target, *input, *output, *layers, *device;
    int want_logits;
} ForwardArgs;

#define DF_OPTION(name, kind, field, ...) DF_OPTION_TYPE_CHECK(((ForwardArgs *)0)->field, kind, name);
#include "cli/forward_options.def"
#undef DF_OPTION

static void forward_args_default(ForwardArgs *a) {
    memset(a, 0, sizeof *a);
#define DF_OPTION(name, kind, field, value, ...) a->field = (value);
#include "cli/forward_options.def"
#undef DF_OPTION
}

int df_cmd_forward(int argc, char **argv) {
    ForwardArgs a, defaults;
    forward_args_default(&a);
    forward_args_default(&defaults);
    const DfOption options[] = {
#define DF_OPTION(name, kind, field, value, metavar, help, ...) \
    DF_OPTION_ENTRY(a.field, defaults.field, name, kind, metavar, help, __VA_ARGS__),
#include "cli/forward_options.def"
#undef DF_OPTION
    };
    const DfCommandSpec spec = {
        "forward", "run the target on token ids, write tap features (and logits)", NULL,
        "All records are packed into one batch (positions restart at 0 in each). The output holds features\n"
        "[T, n*H] (the output of each tap layer, in the order given), target_layer_ids, input_ids, seq_starts\n"
        "and, with --logits, logits [T, V]. Without --logits only layers 0..max tap are loaded and run.",
        options, DF_COUNT(options)};
    DfParsedArgs args;
    DfError err;
    int exit_code;
    if (df_parse_command_line(&spec, argc, argv, &args, &exit_code)) return exit_code;
    const DfPathArg ins[] = {{"--target", a.target}, {"--input", a.input}}, outs[] = {{"--output", a.output}};
    if ((exit_code = df_paths_apart_or_usage("forward", ins, 2, outs, 1)) != 0) return exit_code;
    if (run_forward(a.target, a.input, a.output, a.layers, a.want_logits, a.device, &err)) {
        fprintf(stderr, "dflash forward: %s\n", err.msg);
        return 1;
    }
    return 0;
}
