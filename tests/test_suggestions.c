/* "Did you mean": the edit distance (against hand-counted cases, swaps of
 * neighbours as one edit), the closest name within a typo's reach (and none
 * for another word), and on the command line: a misspelt command or option
 * gets the suggestion and exit 2; `dflash help CMD` prints CMD's --help. */
#include "test_util.h"

#include <stdio.h>
#include <string.h>

#include "base/edit_distance.h"

static int dist(const char *a, const char *b) { return df_edit_distance(a, strlen(a), b, strlen(b), 10); }

static void test_distances(void **state) {
    (void)state;
    assert_int_equal(dist("train", "train"), 0);
    assert_int_equal(dist("trian", "train"), 1); /* a swap */
    assert_int_equal(dist("tain", "train"), 1);  /* a deletion */
    assert_int_equal(dist("trainn", "train"), 1);
    assert_int_equal(dist("max-lenght", "max-length"), 1);
    assert_int_equal(dist("kitten", "sitting"), 3);
    assert_int_equal(dist("", "eval"), 4);
    assert_int_equal(df_edit_distance("abcdef", 6, "uvwxyz", 6, 2), 3); /* over the limit: limit + 1 */
}

static void test_closest(void **state) {
    (void)state;
    const char *names[] = {"prepare", "generate", "train", "eval", "bench"};
    assert_string_equal(df_closest_name("trian", 5, names, 5), "train");
    assert_string_equal(df_closest_name("genrate", 7, names, 5), "generate");
    assert_null(df_closest_name("forward", 7, names, 5)); /* another word, not a typo */
    assert_null(df_closest_name("x", 1, names, 5));
}

static void expect_output(const char *args, int want_rc, const char *want) {
    char cmd[1024], out[16384];
    snprintf(cmd, sizeof cmd, "%s %s", df_test_path("dflash"), args);
    int rc = df_test_run(cmd, out, sizeof out);
    if (rc != want_rc || !strstr(out, want)) fail_msg("dflash %s: exit %d (want %d), no '%s' in:\n%s", args, rc, want_rc, want, out);
}

static void test_command_line(void **state) {
    (void)state;
    expect_output("trian", 2, "did you mean 'train'?");
    expect_output("train --max-lenght 5", 2, "did you mean '--max-length'?");
    expect_output("eval --max-new-tokns 5", 2, "did you mean '--max-new-tokens'?");
    expect_output("train --zzz", 2, "unknown option '--zzz' (see");
    expect_output("help prepare", 0, "usage: dflash prepare");
    expect_output("help trian", 2, "did you mean 'train'?");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_distances),
        cmocka_unit_test(test_closest),
        cmocka_unit_test(test_command_line),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
