/* dflash inspect PATH: what a safetensors file or a model directory holds
 * (tensors, dtypes, shapes, parameter count) and, for a directory with a
 * config.json, the fields the target forward will use; what a token store
 * holds (counts, length histogram, loss-token fraction; --dump N prints
 * samples as JSON lines); what an Arrow file or datasets folder holds
 * (schema, rows, batches). A drafter directory (config.json listing
 * DFlashDraftModel) gets the drafter's config; a training checkpoint its
 * step and the drafter's parameter count, without the optimizer's moments. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/args.h"
#include "base/input_file.h"
#include "cli/commands.h"
#include "formats/arrow_dataset.h"
#include "target/model_config.h"
#include "formats/safetensors.h"
#include "formats/token_store.h"
#include "model/drafter_io.h"
#include "train/checkpoint.h"

static void print_shape(const DfTensorInfo *t) {
    char buf[160];
    size_t n = (size_t)snprintf(buf, sizeof buf, "[");
    for (int d = 0; d < t->ndim && n < sizeof buf; d++)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (n < sizeof buf) snprintf(buf + n, sizeof buf - n, "]");
    printf("%s", buf);
}

/* A training checkpoint's optimizer moments and progress counters: state,
 * not parameters of the model. */
static int is_training_state(const char *name) {
    return strncmp(name, "adam.", 5) == 0 || strncmp(name, "progress.", 9) == 0;
}

static int is_checkpoint(const DfSafetensors *st) {
    return df_safetensors_find(st, "params") && df_safetensors_find(st, "adam.exp_avg");
}

static void print_tensors(const DfSafetensors *st, int list) {
    long long params = 0, bytes = 0;
    int per_dtype[DF_DTYPE_BOOL + 1] = {0}, checkpoint = is_checkpoint(st);
    for (int i = 0; i < st->n_tensors; i++) {
        const DfTensorInfo *t = &st->tensors[i];
        if (!(checkpoint && is_training_state(t->name))) params += (long long)(t->nbytes / df_dtype_size(t->dtype));
        bytes += (long long)t->nbytes;
        per_dtype[t->dtype]++;
        if (list) {
            printf("  %-56s %-5s ", t->name, df_dtype_name(t->dtype));
            print_shape(t);
            printf("\n");
        }
    }
    printf("files: %d\ntensors: %d\nparameters: %lld (%.2f M)%s\ndata: %lld bytes (%.2f MiB)\ndtypes:", st->n_files,
           st->n_tensors, params, params / 1e6, checkpoint ? " (the drafter's; the AdamW moments are not counted)" : "",
           bytes, bytes / 1048576.0);
    for (int d = 0; d <= DF_DTYPE_BOOL; d++)
        if (per_dtype[d]) printf(" %s x%d", df_dtype_name((DfDtype)d), per_dtype[d]);
    printf("\n");
}

/* Layer types as runs ("3 linear, 1 full, ..."), the DeltaNet sizes, partial rotary. */
static void print_hybrid(const DfModelConfig *c) {
    printf(", partial rotary %d of %d dims\n  hybrid layers:", c->rotary_dim, c->head_dim);
    int n_linear = 0;
    for (int i = 0; i < c->num_layers; i++) {
        n_linear += c->layer_is_linear[i];
        if (i < 64) printf("%s", c->layer_is_linear[i] ? " L" : " F");
    }
    if (c->num_layers > 64) printf(" ...");
    const DfLinearAttnConfig *l = &c->linear;
    printf(" (%d linear_attention, %d full_attention, gated attention output)\n", n_linear, c->num_layers - n_linear);
    printf("  gated deltanet: key heads %d x %d, value heads %d x %d, conv kernel %d; tensors under %s",
           l->num_key_heads, l->key_head_dim, l->num_value_heads, l->value_head_dim, l->conv_kernel, c->weight_prefix);
}

static void print_config(const DfModelConfig *c) {
    printf("config: %s (qk_norm %s), dtype %s\n", c->architecture_name, c->has_qk_norm ? "yes" : "no",
           c->torch_dtype[0] ? c->torch_dtype : "unspecified");
    printf("  hidden %d, intermediate %d, layers %d, heads %d, kv heads %d, head_dim %d\n", c->hidden_size,
           c->intermediate_size, c->num_layers, c->num_heads, c->num_kv_heads, c->head_dim);
    printf("  vocab %d, max positions %d, rms_norm_eps %g, tied embeddings %s\n", c->vocab_size,
           c->max_position_embeddings, c->rms_norm_eps, c->tie_word_embeddings ? "yes" : "no");
    printf("  rope theta %g", c->rope.theta);
    if (c->rope.type == DF_ROPE_LLAMA3)
        printf(", llama3 scaling: factor %g, low_freq %g, high_freq %g, original max positions %d", c->rope.factor,
               c->rope.low_freq_factor, c->rope.high_freq_factor, c->rope.original_max_position_embeddings);
    if (c->is_hybrid) print_hybrid(c);
    printf("\n  bos %d, eos", c->bos_token_id);
    for (int i = 0; i < c->n_eos; i++) printf(" %d", c->eos_token_ids[i]);
    printf("%s\n", c->n_eos ? "" : " none");
}

static void print_drafter_config(const DfDrafterConfig *c) {
    printf("drafter: DFlashDraftModel, %d layers, hidden %d, intermediate %d, heads %d, kv heads %d, head_dim %d\n",
           c->num_layers, c->hidden_size, c->intermediate_size, c->num_heads, c->num_kv_heads, c->head_dim);
    printf("  block size %d, mask token %d, vocab %d, target layers %d, taps (target_layer_ids):", c->block_size,
           c->mask_token_id, c->vocab_size, c->num_target_layers);
    for (int i = 0; i < c->n_taps; i++) printf(" %d", c->target_layer_ids[i]);
    printf("\n  rope theta %g, rms_norm_eps %g, max positions %d", c->rope.theta, c->rms_norm_eps,
           c->max_position_embeddings);
    if (c->sliding_window > 0) printf(", sliding window %d", c->sliding_window);
    printf("\n");
}

/* A drafter directory: its config.json lists DFlashDraftModel. */
static int is_drafter_dir(const char *dir) {
    char path[4200], text[8192];
    snprintf(path, sizeof path, "%s/config.json", dir);
    DfError ignored;
    FILE *f = df_fopen_regular(path, &ignored);
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[n] = '\0';
    return strstr(text, "\"DFlashDraftModel\"") != NULL;
}

/* A drafter directory or a checkpoint: read as the trainer reads them
 * (every tensor checked; a checkpoint's checksum verified). */
static int inspect_drafter(const char *path, int checkpoint, DfError *err) {
    DfDrafterConfig cfg;
    DfDrafterLayout layout;
    float *params = NULL;
    int64_t step = 0;
    int rc = checkpoint ? df_checkpoint_read_drafter(path, &cfg, &layout, &params, &step, err)
                        : df_drafter_load(path, &cfg, &layout, &params, err);
    if (rc != 0) return -1;
    if (checkpoint) printf("checkpoint: training state after step %lld (checksum verified)\n", (long long)step);
    print_drafter_config(&cfg);
    free(params);
    df_drafter_layout_free(&layout);
    return 0;
}

/* ---- token stores ------------------------------------------------------- */

static int is_token_store(const char *path) {
    char magic[8];
    DfError ignored;
    FILE *f = df_fopen_regular(path, &ignored);
    size_t n = f ? fread(magic, 1, sizeof magic, f) : 0;
    if (f) fclose(f);
    return n == sizeof magic && memcmp(magic, DF_TOKEN_STORE_MAGIC, sizeof magic) == 0;
}

static void print_store_summary(const DfTokenStore *s) {
    int64_t n = df_token_store_num_samples(s), tokens = df_token_store_num_tokens(s);
    int64_t loss = df_token_store_num_loss_tokens(s), min_len = n ? INT64_MAX : 0, max_len = 0;
    int64_t buckets[64] = {0}; /* bucket b > 0: lengths in [2^(b-1), 2^b); bucket 0: empty samples */
    for (int64_t i = 0; i < n; i++) {
        int64_t len = df_token_store_sample_length(s, i);
        min_len = len < min_len ? len : min_len;
        max_len = len > max_len ? len : max_len;
        int b = 0;
        while (b < 63 && ((int64_t)1 << b) <= len) b++;
        buckets[b]++;
    }
    printf("token store: %s\nsamples: %lld\ntokens: %lld\nloss tokens: %lld (%.2f%%)\n", df_token_store_path(s),
           (long long)n, (long long)tokens, (long long)loss, tokens ? 100.0 * (double)loss / (double)tokens : 0.0);
    printf("vocabulary: %d\ntokenizer fingerprint: %016llx\n", df_token_store_vocab_size(s),
           (unsigned long long)df_token_store_fingerprint(s));
    printf("length: min %lld, mean %.1f, max %lld\nlength histogram:\n", (long long)min_len,
           n ? (double)tokens / (double)n : 0.0, (long long)max_len);
    for (int b = 0; b < 64; b++) {
        if (!buckets[b]) continue;
        long long lo = b ? (long long)1 << (b - 1) : 0, hi = b ? ((long long)1 << b) - 1 : 0;
        printf("  %8lld .. %-8lld %10lld  %5.1f%%\n", lo, hi, (long long)buckets[b],
               100.0 * (double)buckets[b] / (double)n);
    }
}

static int dump_samples(const DfTokenStore *s, int count, DfError *err) {
    int64_t n = df_token_store_num_samples(s);
    for (int64_t i = 0; i < n && i < count; i++) {
        const int32_t *ids;
        const uint8_t *mask;
        int64_t len;
        if (df_token_store_sample(s, i, &ids, &mask, &len, err) != 0) return -1;
        printf("{\"input_ids\": [");
        for (int64_t k = 0; k < len; k++) printf("%s%d", k ? ", " : "", ids[k]);
        printf("], \"loss_mask\": [");
        for (int64_t k = 0; k < len; k++) printf("%s%d", k ? ", " : "", mask[k]);
        printf("]}\n");
    }
    return 0;
}

static int inspect_store(const char *path, int dump, DfError *err) {
    DfTokenStore *s = df_token_store_open(path, 0, err);
    if (!s) return -1;
    int rc = 0;
    if (dump > 0) rc = dump_samples(s, dump, err);
    else print_store_summary(s);
    df_token_store_close(s);
    return rc;
}

/* ---- Arrow ---------------------------------------------------------------- */

static void print_shard(const DfArrowReader *r, int64_t rows, int64_t batches) {
    printf("  %s: %s format, %lld rows in %lld batches, compression %s\n", df_arrow_path(r),
           df_arrow_is_file_format(r) ? "file" : "stream", (long long)rows, (long long)batches, df_arrow_compression(r));
}

static int inspect_arrow(const char *path, DfError *err) {
    DfArrowDataset *ds = df_arrow_dataset_open(path, err);
    if (!ds) return -1;
    const DfArrowSchema *schema = df_arrow_dataset_schema(ds);
    printf("arrow: %s\nfiles: %d%s\ncolumns: %d\n", path, df_arrow_dataset_num_files(ds),
           df_arrow_dataset_has_info(ds) ? " (datasets folder with dataset_info.json)" : "", schema->n_fields);
    for (int i = 0; i < schema->n_fields; i++) {
        char type[512];
        df_arrow_type_string(&schema->fields[i], type, sizeof type);
        printf("  %-24s %s%s\n", schema->fields[i].name, type, schema->fields[i].nullable ? " (nullable)" : "");
    }
    const DfArrowBatch *b;
    const DfArrowReader *shard, *last = NULL;
    int64_t rows = 0, batches = 0, shard_rows = 0, shard_batches = 0;
    int rc;
    while ((rc = df_arrow_dataset_next_batch(ds, &b, &shard, err)) == 1) {
        if (shard != last) {
            if (last) print_shard(last, shard_rows, shard_batches);
            shard_rows = shard_batches = 0, last = shard;
        }
        rows += b->length, batches++;
        shard_rows += b->length, shard_batches++;
    }
    if (rc == 0) {
        if (last) print_shard(last, shard_rows, shard_batches);
        printf("rows: %lld\nbatches: %lld\n", (long long)rows, (long long)batches);
    }
    df_arrow_dataset_close(ds);
    return rc;
}

/* ---- the command ------------------------------------------------------------ */

int df_cmd_inspect(int argc, char **argv) {
    int summary_only = 0, dump = 0;
    const DfOption options[] = {
        {"summary", DF_OPT_FLAG, &summary_only, NULL, "print the totals only, not one line per tensor", 0},
        {"dump", DF_OPT_INT, &dump, "N", "token store: print the first N samples as JSON lines {input_ids, loss_mask}", 0, DF_RANGE(0, INT_MAX)},
    };
    const DfCommandSpec spec = {
        "inspect", "summarize a model, a token store or an Arrow dataset", "PATH",
        "PATH: a .safetensors file, a model.safetensors.index.json, or a model directory (with config.json);\n"
        "a token store (counts, length histogram, loss-token fraction; --dump N prints samples as JSON lines);\n"
        "an .arrow file or a Hugging Face datasets folder (schema, rows, batches).",
        options, DF_COUNT(options),
    };
    DfParsedArgs args;
    DfError err = {0};
    int exit_code;
    if (df_parse_command_line(&spec, argc, argv, &args, &exit_code)) return exit_code;
    if (args.n_positional != 1) {
        fprintf(stderr, "dflash: inspect: expected one PATH (see 'dflash inspect --help')\n");
        return 2;
    }
    const char *path = args.positional[0];
    struct stat state_st;
    char state[4096];
    snprintf(state, sizeof state, "%s/state.json", path);
    int store = is_token_store(path), arrow = !store && (df_arrow_is_arrow_path(path) && (stat(state, &state_st) == 0 ||
                                                                                     strstr(path, ".arrow")));
    if (df_option_given(&spec, &args, "dump") && !store) {
        fprintf(stderr, "dflash: inspect: --dump N needs a token store; %s is not one\n", path);
        return 2;
    }
    if (store || arrow) {
        int rc = store ? inspect_store(path, dump, &err) : inspect_arrow(path, &err);
        if (rc != 0) fprintf(stderr, "dflash: %s\n", err.msg);
        return rc == 0 ? 0 : 1;
    }
    DfSafetensors st;
    if (df_safetensors_open(&st, path, &err) != 0) {
        fprintf(stderr, "dflash: %s\n", err.msg);
        return 1;
    }
    print_tensors(&st, !summary_only);
    int checkpoint = is_checkpoint(&st);
    df_safetensors_close(&st);
    struct stat sb;
    int dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    if (checkpoint || (dir && is_drafter_dir(path))) {
        if (inspect_drafter(path, checkpoint, &err) == 0) return 0;
        fprintf(stderr, "dflash: %s\n", err.msg);
        return 1;
    }
    if (dir) {
        DfModelConfig cfg;
        if (df_model_config_load(&cfg, path, &err) != 0) {
            fprintf(stderr, "dflash: %s\n", err.msg);
            return 1;
        }
        print_config(&cfg);
    }
    return 0;
}
