/* dflash tokenize: JSONL {"text"} records -> {"ids"} lines, or with --decode
 * {"ids"} records -> {"text"} lines, with a tokenizer.json. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/atomic_file.h"
#include "base/input_file.h"
#include "base/paths_apart.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "text/json_string.h"
#include "text/tokenizer.h"

typedef struct TokenizeArgs {
    const char *tokenizer, *input, *output;
    int decode;
} TokenizeArgs;

static int is_blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n') return 0;
    return 1;
}

static int encode_line(const DfTokenizer *tok, const char *line, size_t len, DfByteBuf *out, DfError *err) {
    DfByteBuf text = {0};
    DfI32Vec ids = {0};
    int rc = df_json_get_string(line, len, "text", &text, err);
    if (rc == 1) rc = df_fail(err, "missing field \"text\"");
    if (rc == 0) rc = df_tokenizer_encode(tok, text.data ? text.data : "", text.len, &ids, err);
    if (rc == 0) {
        df_bytebuf_append(out, "{\"ids\": [", 9);
        for (size_t i = 0; i < ids.len; i++) {
            char num[16];
            int n = snprintf(num, sizeof num, i ? ", %d" : "%d", (int)ids.data[i]);
            df_bytebuf_append(out, num, (size_t)n);
        }
        df_bytebuf_append(out, "]}\n", 3);
    }
    df_bytebuf_free(&text);
    df_i32vec_free(&ids);
    return rc;
}

static int read_ids(const char *line, size_t len, DfI32Vec *ids, DfError *err) {
    cJSON *rec = cJSON_ParseWithLength(line, len);
    if (!rec) return df_fail(err, "invalid JSON");
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(rec, "ids");
    int rc = 0;
    if (!cJSON_IsArray(arr)) rc = df_fail(err, "missing field \"ids\" (an array of token ids)");
    size_t i = 0;
    for (const cJSON *e = arr ? arr->child : NULL; rc == 0 && e; e = e->next, i++) {
        double v = e->valuedouble;
        if (!cJSON_IsNumber(e) || v != (double)(int32_t)v) rc = df_fail(err, "ids[%zu] is not an integer", i);
        else df_i32vec_push(ids, (int32_t)v);
    }
    cJSON_Delete(rec);
    return rc;
}

static int decode_line(const DfTokenizer *tok, const char *line, size_t len, DfByteBuf *out, DfError *err) {
    DfI32Vec ids = {0};
    DfByteBuf text = {0};
    int rc = read_ids(line, len, &ids, err);
    if (rc == 0) rc = df_tokenizer_decode(tok, ids.data, ids.len, &text, err);
    if (rc == 0) {
        df_bytebuf_append(out, "{\"text\": ", 9);
        df_json_append_string(out, text.data, text.len);
        df_bytebuf_append(out, "}\n", 2);
    }
    df_i32vec_free(&ids);
    df_bytebuf_free(&text);
    return rc;
}

/* Converts every record of the input into `out`; errors name file and line. */
static int convert(const DfTokenizer *tok, const TokenizeArgs *a, FILE *out, DfError *err) {
    FILE *in = df_fopen_regular(a->input, err);
    if (!in) return -1;
    char *line = NULL;
    size_t cap = 0, line_no = 0;
    ssize_t got;
    int rc = 0;
    DfByteBuf buf = {0};
    while (rc == 0 && (got = getline(&line, &cap, in)) >= 0) {
        line_no++;
        if (is_blank(line, (size_t)got)) continue;
        buf.len = 0;
        rc = a->decode ? decode_line(tok, line, (size_t)got, &buf, err) : encode_line(tok, line, (size_t)got, &buf, err);
        if (rc < 0) df_context(err, "%s:%zu", a->input, line_no);
        else if (fwrite(buf.data, 1, buf.len, out) != buf.len) rc = df_fail_errno(err, "write error");
    }
    if (rc == 0 && ferror(in)) rc = df_fail_errno(err, "%s: read error", a->input);
    free(line);
    df_bytebuf_free(&buf);
    fclose(in);
    return rc;
}

int df_cmd_tokenize(int argc, char **argv) {
    TokenizeArgs a = {0};
    const DfOption options[] = {
        {"tokenizer", DF_OPT_STRING, &a.tokenizer, "PATH", "tokenizer.json, or a directory holding one", 1},
        {"input", DF_OPT_STRING, &a.input, "FILE", "JSONL: {\"text\": ...} records ({\"ids\": [...]} with --decode)", 1},
        {"output", DF_OPT_STRING, &a.output, "FILE", "JSONL output, written atomically (default: stdout)", 0},
        {"decode", DF_OPT_FLAG, &a.decode, NULL, "decode ids to text instead of encoding", 0},
    };
    const DfCommandSpec spec = {
        "tokenize", "encode JSONL text to token ids, or decode ids to text", NULL,
        "Each input line gives one output line: {\"ids\": [...]} for each {\"text\"}, as Hugging Face's\n"
        "encode(text, add_special_tokens=False); with --decode, {\"text\"} for each {\"ids\"}. A bad line stops\n"
        "the command with its line number, and --output is then not written.",
        options, DF_COUNT(options)};
    DfParsedArgs parsed;
    DfError err = {0};
    int exit_code;
    if (df_parse_command_line(&spec, argc, argv, &parsed, &exit_code)) return exit_code;
    const DfPathArg ins[] = {{"--tokenizer", a.tokenizer}, {"--input", a.input}}, outs[] = {{"--output", a.output}};
    if ((exit_code = df_paths_apart_or_usage("tokenize", ins, 2, outs, 1)) != 0) return exit_code;
    DfTokenizer *tok = df_tokenizer_load(a.tokenizer, &err);
    if (!tok) {
        fprintf(stderr, "dflash tokenize: %s\n", err.msg);
        return 1;
    }
    DfAtomicFile file;
    int rc = a.output ? df_atomic_open(&file, a.output, &err) : 0;
    if (rc == 0) {
        rc = convert(tok, &a, a.output ? file.fp : stdout, &err);
        if (a.output) {
            if (rc == 0) rc = df_atomic_commit(&file, &err);
            else df_atomic_abort(&file);
        } else if (fflush(stdout) != 0) {
            rc = df_fail_errno(&err, "stdout: write error");
        }
    }
    df_tokenizer_free(tok);
    if (rc < 0) fprintf(stderr, "dflash tokenize: %s\n", err.msg);
    return rc < 0 ? 1 : 0;
}
