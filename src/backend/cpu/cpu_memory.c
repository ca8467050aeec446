/* CPU backend memory helpers used by training: zero fill and int32 download. */
#include <string.h>

#include "backend/cpu/cpu_ops.h"

void df_cpu_fill_zero(DfBackend *be, DfBuffer buf) {
    (void)be;
    if (buf.ptr) memset(buf.ptr, 0, buf.count * (size_t)buf.elem_size);
}

int df_cpu_download_i32(DfBackend *be, int32_t *dst, DfBuffer src, DfError *err) {
    (void)be;
    if (src.kind != DF_BUF_I32) return df_fail(err, "cpu backend: download_i32 from a float buffer");
    if (src.count) memcpy(dst, src.ptr, src.count * sizeof(int32_t));
    return 0;
}
