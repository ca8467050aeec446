/* dflash inspect PATH: what a safetensors file or a model directory holds
 * (tensors, dtypes, shapes, parameter count) and, for a directory with a
 * config.json, the fields the target forward will use. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "formats/model_config.h"
#include "formats/safetensors.h"

static void print_shape(const DfTensorInfo *t) {
    char buf[160];
    size_t n = (size_t)snprintf(buf, sizeof buf, "[");
    for (int d = 0; d < t->ndim && n < sizeof buf; d++)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (n < sizeof buf) snprintf(buf + n, sizeof buf - n, "]");
    printf("%s", buf);
}

static void print_tensors(const DfSafetensors *st, int list) {
    long long params = 0, bytes = 0;
    int per_dtype[DF_DTYPE_BOOL + 1] = {0};
    for (int i = 0; i < st->n_tensors; i++) {
        const DfTensorInfo *t = &st->tensors[i];
        params += (long long)(t->nbytes / df_dtype_size(t->dtype));
        bytes += (long long)t->nbytes;
        per_dtype[t->dtype]++;
        if (list) {
            printf("  %-56s %-5s ", t->name, df_dtype_name(t->dtype));
            print_shape(t);
            printf("\n");
        }
    }
    printf("files: %d\ntensors: %d\nparameters: %lld (%.2f M)\ndata: %lld bytes (%.2f MiB)\ndtypes:", st->n_files,
           st->n_tensors, params, params / 1e6, bytes, bytes / 1048576.0);
    for (int d = 0; d <= DF_DTYPE_BOOL; d++)
        if (per_dtype[d]) printf(" %s x%d", df_dtype_name((DfDtype)d), per_dtype[d]);
    printf("\n");
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
    printf("\n  bos %d, eos", c->bos_token_id);
    for (int i = 0; i < c->n_eos; i++) printf(" %d", c->eos_token_ids[i]);
    printf("%s\n", c->n_eos ? "" : " none");
}

int df_cmd_inspect(int argc, char **argv) {
    int summary_only = 0;
    const DfOption options[] = {
        {"summary", DF_OPT_FLAG, &summary_only, NULL, "print the totals only, not one line per tensor", 0},
    };
    const DfCommandSpec spec = {
        "inspect", "summarize a safetensors file or a model directory (tensors, shapes, parameters, config)", "PATH",
        "PATH: a .safetensors file, a model.safetensors.index.json, or a model directory (with config.json).",
        options, DF_COUNT(options),
    };
    DfParsedArgs args;
    DfError err = {0};
    if (df_parse_args(&spec, argc, argv, &args, &err) != 0) {
        fprintf(stderr, "dflash: %s\n", err.msg);
        return 2;
    }
    if (args.help_shown) return 0;
    if (args.n_positional != 1) {
        fprintf(stderr, "dflash: inspect: expected one PATH (see 'dflash inspect --help')\n");
        return 2;
    }
    const char *path = args.positional[0];
    DfSafetensors st;
    if (df_safetensors_open(&st, path, &err) != 0) {
        fprintf(stderr, "dflash: %s\n", err.msg);
        return 1;
    }
    print_tensors(&st, !summary_only);
    df_safetensors_close(&st);
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        DfModelConfig cfg;
        if (df_model_config_load(&cfg, path, &err) != 0) {
            fprintf(stderr, "dflash: %s\n", err.msg);
            return 1;
        }
        print_config(&cfg);
    }
    return 0;
}
