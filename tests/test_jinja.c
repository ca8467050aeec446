/* The Jinja engine against Python's jinja2 (configured as transformers
 * configures it): tests/jinja/cases.inc holds templates reaching every
 * construct the engine implements, with the text jinja2 rendered for them
 * (tests/jinja/make_cases.py remakes it). Also: errors name line and column,
 * unsupported tags are refused by name, the step budget and recursion limit
 * stop runaway templates, raise_exception is told apart, and tagged strings
 * are reported where they land in the output. */
#include "test_util.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja/from_json.h"
#include "text/jinja/jinja.h"

#include "jinja/cases.inc"

static int render(const char *tpl, const char *vars_json, const DfJinjaOptions *opt, DfJinjaOutput *out,
                  DfError *err) {
    DfJinja *t = df_jinja_compile(tpl, strlen(tpl), err);
    if (!t) return -1;
    cJSON *vars = cJSON_Parse(vars_json ? vars_json : "{}");
    assert_non_null(vars);
    JArena a = {0};
    JVal d = jv_from_cjson(&a, vars, 0);
    int rc = df_jinja_render(t, &a, d.u.d, opt, out, err);
    jv_arena_free(&a);
    cJSON_Delete(vars);
    df_jinja_free(t);
    return rc;
}

static void test_cases_match_jinja2(void **state) {
    (void)state;
    DfJinjaOptions opt = {.now = 1700000000};
    int bad = 0;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        DfJinjaOutput out = {0};
        DfError err = {{0}};
        if (render(CASES[i].tpl, VARS_JSON, &opt, &out, &err) != 0) {
            printf("case %zu: %s\n  template: %s\n", i, err.msg, CASES[i].tpl);
            bad++;
        } else if (strcmp(out.text.p, CASES[i].want) != 0) {
            printf("case %zu differs\n  template: %s\n  got:  [%s]\n  want: [%s]\n", i, CASES[i].tpl, out.text.p,
                   CASES[i].want);
            bad++;
        }
        df_jinja_output_free(&out);
    }
    assert_int_equal(bad, 0);
}

static void expect_error(const char *tpl, const char *vars, const char *want) {
    DfJinjaOutput out = {0};
    DfError err = {{0}};
    DfJinjaOptions opt = {.max_steps = 100000, .max_depth = 50};
    int rc = render(tpl, vars, &opt, &out, &err);
    if (rc == 0) fail_msg("rendered [%s] without error, want '%s'", out.text.p, want);
    if (!strstr(err.msg, want)) fail_msg("error '%s' does not say '%s'", err.msg, want);
    df_jinja_output_free(&out);
}

static void test_errors_name_place_and_construct(void **state) {
    (void)state;
    expect_error("a\n  {{ 1 + }}", NULL, "template line 2 column");
    expect_error("{% if x %}", NULL, "end of template before '{% endif %}'");
    expect_error("x\n{% include 'other.j' %}", NULL, "line 2 column 4: the 'include' tag is not supported");
    expect_error("{% extends 'base' %}", NULL, "the 'extends' tag is not supported");
    expect_error("{% do x %}", NULL, "the 'do' tag is not supported");
    expect_error("{{ x | frobnicate }}", NULL, "the filter 'frobnicate' is not supported");
    expect_error("{{ x is frob }}", NULL, "the test 'frob' is not supported");
    expect_error("{{ x.y }}", NULL, "line 1 column 5: 'y' of an undefined value");
    expect_error("{{ 1 / 0 }}", NULL, "division by zero");
    expect_error("{{ 'a' + 1 }}", NULL, "unsupported operand types for +: 'str' and 'int'");
    expect_error("{% for x in recursive_loop recursive %}{% endfor %}", NULL, "'recursive' loops are not supported");
}

static void test_runaway_templates_are_stopped(void **state) {
    (void)state;
    expect_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", NULL,
                 "more than 100000 evaluation steps");
    expect_error("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", NULL, "macro calls nested deeper than 50");
    expect_error("{{ range(1000000) }}", NULL, "range of more than 100000 items");
    char deep[2000] = "{{ ";
    for (int i = 0; i < 300; i++) strcat(deep, "(");
    strcat(deep, "1");
    for (int i = 0; i < 300; i++) strcat(deep, ")");
    strcat(deep, " }}");
    expect_error(deep, NULL, "nested deeper than 200 levels");
}

static void test_raise_exception_is_told_apart(void **state) {
    (void)state;
    DfJinjaOutput out = {0};
    DfError err = {{0}};
    int rc = render("{% if messages[0].role != 'user' %}{{ raise_exception('Roles must alternate') }}{% endif %}",
                    "{\"messages\": [{\"role\": \"system\"}]}", NULL, &out, &err);
    assert_int_equal(rc, DF_JINJA_RAISED);
    assert_string_equal(err.msg, "Roles must alternate");
    df_jinja_output_free(&out);
}

/* Strings tagged 0 are the variables'; their pieces are reported where they land. */
static void test_tagged_strings_are_tracked(void **state) {
    (void)state;
    DfJinjaOutput out = {0};
    DfError err = {{0}};
    const char *tpl = "{% macro body(m) %}<{{ m.content.strip() }}>{% endmacro %}"
                      "[{{ 'x' + body(messages[0]) + 'y' }}]{% generation %}G{{ messages[0].content[1:3] }}{% endgeneration %}";
    assert_int_equal(render(tpl, "{\"messages\": [{\"content\": \"  abcd \"}]}", NULL, &out, &err), 0);
    assert_string_equal(out.text.p, "[x<abcd>y]G a");
    assert_int_equal(out.tagged.n, 2);
    assert_int_equal(out.tagged.v[0].s, 3);
    assert_int_equal(out.tagged.v[0].e, 7);
    assert_int_equal(out.tagged.v[1].s, 11);
    assert_int_equal(out.tagged.v[1].e, 13);
    assert_int_equal(out.generation.n, 1);
    assert_int_equal(out.generation.v[0].s, 10);
    assert_int_equal(out.generation.v[0].e, 13);
    df_jinja_output_free(&out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases_match_jinja2),
        cmocka_unit_test(test_errors_name_place_and_construct),
        cmocka_unit_test(test_runaway_templates_are_stopped),
        cmocka_unit_test(test_raise_exception_is_told_apart),
        cmocka_unit_test(test_tagged_strings_are_tracked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
