/* TensorBoard event files, read back by a decoder of this test's own written
 * from the format's definition (TFRecord framing with masked CRC-32C, the
 * Event and Summary protobufs of tensorflow's event.proto and summary.proto,
 * decoded field by field from the protobuf wire format): CRC-32C's published
 * check value; every record's two checksums; the first event's
 * file_version; and, for a run with --report-to tensorboard and a held-out
 * eval, every scalar of every event equal (as the float TensorBoard keeps)
 * to its value in metrics.jsonl or eval.jsonl, and every value of those
 * files that has a tag present in the events. */
#include "test_util.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/tb_events.h"

/* ---- the decoder ---------------------------------------------------------- */

/* CRC-32C bit by bit (Castagnoli, reflected polynomial 0x82F63B78). */
static uint32_t crc32c_bitwise(const unsigned char *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
    }
    return ~c;
}

static uint32_t masked(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; }

static uint64_t le(const unsigned char *p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

typedef struct Scalar {
    char tag[64];
    float value;
} Scalar;

typedef struct Event {
    int64_t step;
    double wall_time;
    char file_version[32];
    Scalar scalars[256];
    int n_scalars;
} Event;

typedef struct Reader {
    const unsigned char *p, *end;
} Reader;

static uint64_t varint(Reader *r) {
    uint64_t v = 0;
    for (int shift = 0; r->p < r->end && shift < 64; shift += 7) {
        unsigned char b = *r->p++;
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) return v;
    }
    fail_msg("truncated varint");
    return 0;
}

/* The next field: its number and wire type; the bytes of a length-delimited
 * one in *sub; the value of a varint, fixed64 or fixed32 one in *fixed. */
static int next_field(Reader *r, int *type, Reader *sub, uint64_t *fixed) {
    uint64_t key = varint(r);
    *type = (int)(key & 7);
    switch (*type) {
    case 0: *fixed = varint(r); break;
    case 1: assert_true(r->end - r->p >= 8); *fixed = le(r->p, 8); r->p += 8; break;
    case 5: assert_true(r->end - r->p >= 4); *fixed = le(r->p, 4); r->p += 4; break;
    case 2: {
        uint64_t n = varint(r);
        assert_true((uint64_t)(r->end - r->p) >= n);
        *sub = (Reader){r->p, r->p + n};
        r->p += n;
        break;
    }
    default: fail_msg("wire type %d", *type);
    }
    return (int)(key >> 3);
}

static void decode_value(Reader v, Scalar *s) {
    int have_tag = 0, have_value = 0, type;
    Reader sub;
    uint64_t fixed;
    while (v.p < v.end) {
        int field = next_field(&v, &type, &sub, &fixed);
        if (field == 1 && type == 2) {
            size_t n = (size_t)(sub.end - sub.p);
            assert_true(n < sizeof s->tag);
            memcpy(s->tag, sub.p, n);
            s->tag[n] = '\0';
            have_tag = 1;
        } else if (field == 2 && type == 5) {
            uint32_t bits = (uint32_t)fixed;
            memcpy(&s->value, &bits, 4);
            have_value = 1;
        }
    }
    assert_true(have_tag && have_value);
}

static void decode_event(Reader r, Event *e) {
    memset(e, 0, sizeof *e);
    int type;
    Reader sub, value;
    uint64_t fixed;
    while (r.p < r.end) {
        int field = next_field(&r, &type, &sub, &fixed);
        if (field == 1 && type == 1) memcpy(&e->wall_time, &fixed, 8);
        else if (field == 2 && type == 0) e->step = (int64_t)fixed;
        else if (field == 3 && type == 2) {
            size_t n = (size_t)(sub.end - sub.p);
            assert_true(n < sizeof e->file_version);
            memcpy(e->file_version, sub.p, n);
        } else if (field == 5 && type == 2) { /* Summary: repeated Value value = 1 */
            while (sub.p < sub.end) {
                int f = next_field(&sub, &type, &value, &fixed);
                assert_int_equal(f, 1);
                assert_true(e->n_scalars < 256);
                decode_value(value, &e->scalars[e->n_scalars++]);
            }
        }
    }
}

/* Every record of the file, its checksums checked; the events (caller frees). */
static Event *read_events(const char *path, int *n_events) {
    size_t size = 0;
    unsigned char *data = (unsigned char *)df_test_read_file(path, &size);
    assert_non_null(data);
    Event *events = NULL;
    int n = 0;
    for (size_t at = 0; at < size;) {
        assert_true(size - at >= 12);
        uint64_t len = le(data + at, 8);
        if ((uint32_t)le(data + at + 8, 4) != masked(crc32c_bitwise(data + at, 8)))
            fail_msg("%s: record at byte %zu: bad length checksum", path, at);
        assert_true(size - at - 12 >= len + 4);
        const unsigned char *body = data + at + 12;
        if ((uint32_t)le(body + len, 4) != masked(crc32c_bitwise(body, (size_t)len)))
            fail_msg("%s: record at byte %zu: bad data checksum", path, at);
        events = realloc(events, (size_t)(n + 1) * sizeof *events);
        decode_event((Reader){body, body + len}, &events[n++]);
        at += 12 + (size_t)len + 4;
    }
    free(data);
    *n_events = n;
    return events;
}

/* ---- tests ---------------------------------------------------------------- */

static void test_crc32c_check_value(void **state) {
    const char *check = "123456789";
    assert_int_equal(crc32c_bitwise((const unsigned char *)check, 9), 0xE3069283u); /* the published check value */
    assert_int_equal(df_crc32c(check, 9), 0xE3069283u);
    unsigned char buf[1000];
    for (int i = 0; i < 1000; i++) buf[i] = (unsigned char)(i * 131 + 7);
    for (size_t n = 0; n <= 1000; n += 37) assert_int_equal(df_crc32c(buf, n), crc32c_bitwise(buf, n));
    assert_int_equal(df_tb_masked_crc(0x12345678u), masked(0x12345678u));
}

static void test_writer_round_trip(void **state) {
    char *dir = df_test_tmpdir("tb-unit"), sub[1024];
    snprintf(sub, sizeof sub, "%s/tb", dir);
    DfError err = {{0}};
    DfTbWriter *w = df_tb_open(sub, &err);
    if (!w) fail_msg("%s", err.msg);
    const char *tags[] = {"a/x", "b/yy"};
    const double values[] = {1.5, -3e-7};
    assert_int_equal(df_tb_write_scalars(w, 300, 1700000000.25, tags, values, 2, &err), 0);
    char path[1024];
    snprintf(path, sizeof path, "%s", df_tb_path(w));
    assert_non_null(strstr(path, "/tb/events.out.tfevents."));
    df_tb_close(w);
    int n;
    Event *e = read_events(path, &n);
    assert_int_equal(n, 2);
    assert_string_equal(e[0].file_version, "brain.Event:2");
    assert_int_equal(e[1].step, 300);
    assert_true(e[1].wall_time == 1700000000.25);
    assert_int_equal(e[1].n_scalars, 2);
    assert_string_equal(e[1].scalars[1].tag, "b/yy");
    assert_true(e[1].scalars[0].value == 1.5f && e[1].scalars[1].value == (float)-3e-7);
    free(e);
    df_test_rmtree(dir);
    free(dir);
}

/* Whether an event has tag; its value in *v. */
static int find_scalar(const Event *e, const char *tag, float *v) {
    for (int i = 0; i < e->n_scalars; i++)
        if (strcmp(e->scalars[i].tag, tag) == 0) return *v = e->scalars[i].value, 1;
    return 0;
}

/* The JSON number key[index] (index < 0: key itself; key "a.b": object a's b). */
static int json_number(const cJSON *j, const char *key, int index, double *v) {
    char first[64];
    const char *dot = strchr(key, '.');
    snprintf(first, sizeof first, "%.*s", dot ? (int)(dot - key) : (int)strlen(key), key);
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, first);
    if (x && dot) x = cJSON_GetObjectItemCaseSensitive(x, dot + 1);
    if (x && index >= 0) x = cJSON_GetArrayItem(x, index);
    if (!cJSON_IsNumber(x)) return 0;
    *v = x->valuedouble;
    return 1;
}

/* A tag's JSON key: "train/acc_pos_3" -> acc[2], "stage_ms/load" -> stage_ms.load. */
static void json_key_of(const char *tag, char *key, size_t cap, int *index) {
    static const struct {
        const char *tag_prefix, *key;
    } MAP[] = {{"train/loss", "loss"},       {"train/tau", "train_tau"},       {"train/acc_pos_", "acc"},
               {"train/lr", "lr"},           {"train/grad_norm", "grad_norm"}, {"perf/tokens_per_s", "tokens_per_s"},
               {"perf/seqs_per_s", "seqs_per_s"}, {"perf/tflops", "tflops"},  {"perf/busy", "busy"},
               {"perf/mfu", "mfu"},          {"eval/tau_prompt_mean", "tau_prompt_mean"}, {"eval/tau", "tau"},
               {"eval/accept_pos_", "accept_by_position"}};
    *index = -1;
    if (strncmp(tag, "stage_ms/", 9) == 0) {
        snprintf(key, cap, "stage_ms.%s", tag + 9);
        return;
    }
    for (size_t i = 0; i < sizeof MAP / sizeof MAP[0]; i++) {
        size_t n = strlen(MAP[i].tag_prefix);
        int prefix = MAP[i].tag_prefix[n - 1] == '_';
        if (prefix ? strncmp(tag, MAP[i].tag_prefix, n) == 0 : strcmp(tag, MAP[i].tag_prefix) == 0) {
            snprintf(key, cap, "%s", MAP[i].key);
            if (prefix) *index = atoi(tag + n) - 1;
            return;
        }
    }
    fail_msg("tag %s has no JSON field", tag);
}

/* Every scalar of the events at the lines' steps (events whose first tag
 * starts with `group`) equals its JSON value; returns the scalars compared. */
static int compare(const Event *ev, int n_events, const char *jsonl, const char *group) {
    int compared = 0, lines = 0;
    char *text = strdup(jsonl);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"), lines++) {
        cJSON *j = cJSON_Parse(line);
        assert_non_null(j);
        int64_t step = (int64_t)cJSON_GetObjectItem(j, "step")->valuedouble;
        const Event *e = NULL;
        for (int i = 0; i < n_events && !e; i++)
            if (ev[i].step == step && ev[i].n_scalars > 0 && strncmp(ev[i].scalars[0].tag, group, strlen(group)) == 0)
                e = &ev[i];
        if (!e) fail_msg("no %s event at step %lld", group, (long long)step);
        for (int s = 0; s < e->n_scalars; s++) {
            char key[96];
            int index;
            double want = 0;
            json_key_of(e->scalars[s].tag, key, sizeof key, &index);
            if (!json_number(j, key, index, &want)) fail_msg("step %lld: %s: no %s in %s", (long long)step, e->scalars[s].tag, key, line);
            if (e->scalars[s].value != (float)want)
                fail_msg("step %lld: %s = %.9g, the JSON's %s = %.17g", (long long)step, e->scalars[s].tag,
                         (double)e->scalars[s].value, key, want);
            compared++;
        }
        /* the JSON's values of the event's kinds are all there */
        float v;
        const char *must[] = {"train/loss", "train/lr", "train/grad_norm", "train/acc_pos_1", "stage_ms/target",
                              "eval/tau", "eval/accept_pos_1"};
        for (size_t k = 0; k < sizeof must / sizeof must[0]; k++)
            if (strncmp(must[k], group, strlen(group)) == 0 && !find_scalar(e, must[k], &v))
                fail_msg("step %lld: no %s", (long long)step, must[k]);
        cJSON_Delete(j);
    }
    free(text);
    assert_true(lines > 0);
    return compared;
}

static void test_run_events_equal_metrics(void **state) {
    DfTestRunDir *r;
    df_test_run_dir_setup((void **)&r, "tb-run");
    char args[4096];
    snprintf(args, sizeof args,
             "train --target '%s' --data '%s' --output run " DF_TEST_TINY_TRAIN_OPTIONS
             " --steps 4 --report-to tensorboard --eval-data '%s' --eval-every 2 --eval-prompts 2 "
             "--eval-max-new-tokens 16",
             df_test_path("assets/coder-tiny"), r->data, r->data);
    if (df_test_dflash_in(r, 2, args) != 0) fail_msg("dflash %s:\n%s", args, r->out);
    char dir[1024], path[2048] = "";
    snprintf(dir, sizeof dir, "%s/run/tb", r->dir);
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));)
        if (strncmp(e->d_name, "events.out.tfevents.", 20) == 0) snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    closedir(d);
    assert_true(path[0]);
    int n;
    Event *ev = read_events(path, &n);
    assert_string_equal(ev[0].file_version, "brain.Event:2");
    assert_int_equal(n, 1 + 4 + 2); /* the version, 4 steps, 2 evals */
    char *metrics = df_test_read_in(r, "run/metrics.jsonl"), *evals = df_test_read_in(r, "run/eval.jsonl");
    int steps = compare(ev, n, metrics, "train/"), evs = compare(ev, n, evals, "eval/");
    assert_true(steps >= 4 * (7 + 5 + 8)); /* block 8: 7 positions; 5 more train/perf; 8 stages */
    assert_true(evs >= 2 * (2 + 7));
    free(metrics);
    free(evals);
    free(ev);
    df_test_run_dir_teardown((void **)&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c_check_value),
        cmocka_unit_test(test_writer_round_trip),
        cmocka_unit_test(test_run_events_equal_metrics),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
