/* Loading NCCL at run time, on a machine without a GPU: the library at
 * /usr/local/cuda/lib64/libnccl.so.2 (skipped where there is none) loads
 * through DFLASH_NCCL_LIB and through the fallback search, and its version
 * agrees with NCCL_VERSION_CODE of the toolkit's nccl.h (an independent
 * source, where present); a unique id can be made; a bad DFLASH_NCCL_LIB path
 * and a library that is not NCCL fail with messages naming them; version
 * codes of both encodings print right; NCCL_NVLS_ENABLE defaults to 0 but a
 * user's value stays. (Comm init needs GPUs: tools/nccl_check.c.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist/nccl.h"
#include "test_util.h"

#define CUDA_NCCL "/usr/local/cuda/lib64/libnccl.so.2"
#define CUDA_NCCL_H "/usr/local/cuda/include/nccl.h"

static void test_version_strings(void **state) {
    (void)state;
    char buf[32];
    df_nccl_version_string(22809, buf, sizeof buf);
    assert_string_equal(buf, "2.28.9");
    df_nccl_version_string(21903, buf, sizeof buf);
    assert_string_equal(buf, "2.19.3");
    df_nccl_version_string(2708, buf, sizeof buf); /* 2.7.8, the pre-2.9 encoding */
    assert_string_equal(buf, "2.7.8");
}

/* NCCL_VERSION_CODE from the toolkit's nccl.h next to the library, or -1. */
static int header_version_code(void) {
    char *text = df_test_read_file(CUDA_NCCL_H, NULL);
    if (!text) return -1;
    const char *p = strstr(text, "#define NCCL_VERSION_CODE ");
    int code = p ? atoi(p + strlen("#define NCCL_VERSION_CODE ")) : -1;
    free(text);
    return code;
}

static void test_load_real_library(void **state) {
    (void)state;
    if (access(CUDA_NCCL, R_OK) != 0) skip();
    int header_code = header_version_code();

    setenv("DFLASH_NCCL_LIB", CUDA_NCCL, 1);
    DfNcclLib lib;
    DfError err = {{0}};
    if (df_nccl_load(&lib, &err)) print_error("%s\n", err.msg);
    assert_string_equal(lib.path, CUDA_NCCL);
    if (header_code > 0) assert_int_equal(lib.version, header_code);
    char v[32];
    df_nccl_version_string(lib.version, v, sizeof v);
    assert_true(v[0] == '2' && v[1] == '.'); /* NCCL 2.x */
    assert_non_null(lib.api.AllReduce);
    assert_string_equal(lib.api.GetErrorString(0), "no error");

    /* a unique id: no GPU needed, 128 bytes not all zero, a new one each time */
    DfNcclUniqueId a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    if (df_nccl_get_unique_id(&lib, &a, &err) == 0) {
        assert_int_equal(df_nccl_get_unique_id(&lib, &b, &err), 0);
        DfNcclUniqueId zero = {{0}};
        assert_memory_not_equal(&a, &zero, sizeof a);
        assert_memory_not_equal(&a, &b, sizeof a);
    } else {
        print_message("ncclGetUniqueId failed here (no network interface for NCCL?): %s\n", err.msg);
    }
    df_nccl_unload(&lib);

    /* without DFLASH_NCCL_LIB: the default search, then /usr/local/cuda/lib64 */
    unsetenv("DFLASH_NCCL_LIB");
    assert_int_equal(df_nccl_load(&lib, &err), 0);
    if (header_code > 0) assert_int_equal(lib.version, header_code);
    df_nccl_unload(&lib);
}

static void test_bad_paths(void **state) {
    (void)state;
    DfNcclLib lib;
    DfError err = {{0}};
    setenv("DFLASH_NCCL_LIB", "/nonexistent/libnccl.so.2", 1);
    assert_int_equal(df_nccl_load(&lib, &err), -1);
    assert_non_null(strstr(err.msg, "cannot load NCCL from DFLASH_NCCL_LIB=/nonexistent/libnccl.so.2"));
    assert_non_null(strstr(err.msg, "No such file"));
    /* a real library that is not NCCL */
    setenv("DFLASH_NCCL_LIB", "libm.so.6", 1);
    assert_int_equal(df_nccl_load(&lib, &err), -1);
    assert_non_null(strstr(err.msg, "libm.so.6: no symbol ncclGetVersion"));
    unsetenv("DFLASH_NCCL_LIB");
}

static void test_nvls_default(void **state) {
    (void)state;
    unsetenv("NCCL_NVLS_ENABLE");
    df_nccl_default_env();
    assert_string_equal(getenv("NCCL_NVLS_ENABLE"), "0");
    setenv("NCCL_NVLS_ENABLE", "1", 1);
    df_nccl_default_env();
    assert_string_equal(getenv("NCCL_NVLS_ENABLE"), "1");
    unsetenv("NCCL_NVLS_ENABLE");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version_strings),
        cmocka_unit_test(test_load_real_library),
        cmocka_unit_test(test_bad_paths),
        cmocka_unit_test(test_nvls_default),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
