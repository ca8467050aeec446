/* Plain {"text": ...} records: the text tokenized as the tokenizer encodes
 * it on its own, every token trained on; a text that is not a string is a
 * wrong-type record naming the field; prompt/response wins over text in a
 * record that has both. */
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

#include "data/prepare_record.h"
#include "text/tokenizer.h"

typedef struct Fixture {
    DfTokenizer *tok;
    DfRecordRules rules;
    DfPreparedRecord r;
} Fixture;

static int setup(void **state) {
    Fixture *f = calloc(1, sizeof *f);
    DfError err = {{0}};
    f->tok = df_tokenizer_load(df_test_path("assets/coder-tiny"), &err);
    if (!f->tok) fail_msg("%s", err.msg);
    f->rules = (DfRecordRules){.tok = f->tok, .vocab_size = df_tokenizer_vocab_size(f->tok), .max_length = 4096,
                               .chat_error = "no chat template loaded"};
    *state = f;
    return 0;
}

static int teardown(void **state) {
    Fixture *f = *state;
    df_prepared_record_free(&f->r);
    df_tokenizer_free(f->tok);
    free(f);
    return 0;
}

static void prepare(Fixture *f, const char *record) { df_prepare_record(&f->rules, record, strlen(record), &f->r); }

static void test_text_record_trains_every_token(void **state) {
    Fixture *f = *state;
    const char *text = "def add(a, b):\n    return a + b\n";
    DfI32Vec want = {0};
    DfError err = {{0}};
    assert_int_equal(df_tokenizer_encode(f->tok, text, strlen(text), &want, &err), 0);
    assert_true(want.len > 5);
    prepare(f, "{\"text\": \"def add(a, b):\\n    return a + b\\n\", \"source\": \"x\"}");
    if (f->r.bad != DF_RECORD_OK) fail_msg("refused: %s", f->r.msg);
    assert_int_equal(f->r.ids.len, want.len);
    assert_memory_equal(f->r.ids.data, want.data, want.len * sizeof *want.data);
    assert_int_equal(f->r.mask.len, want.len);
    for (size_t i = 0; i < f->r.mask.len; i++) assert_int_equal(f->r.mask.data[i], 1);
    df_i32vec_free(&want);
}

static void test_text_not_a_string(void **state) {
    Fixture *f = *state;
    prepare(f, "{\"text\": 42}");
    assert_int_equal(f->r.bad, DF_BAD_WRONG_TYPE);
    assert_non_null(strstr(f->r.msg, "\"text\""));
    prepare(f, "{\"txt\": \"a\"}");
    assert_int_equal(f->r.bad, DF_BAD_MISSING_FIELD);
    assert_non_null(strstr(f->r.msg, "\"text\"")); /* named among the shapes accepted */
}

static void test_prompt_response_wins_over_text(void **state) {
    Fixture *f = *state;
    prepare(f, "{\"prompt\": \"a\", \"response\": \"b\", \"text\": \"ab\"}");
    assert_int_equal(f->r.bad, DF_RECORD_OK);
    assert_int_equal(f->r.mask.data[0], 0); /* the prompt is not trained on */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_text_record_trains_every_token, setup, teardown),
        cmocka_unit_test_setup_teardown(test_text_not_a_string, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prompt_response_wins_over_text, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
