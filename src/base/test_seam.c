#include "base/test_seam.h"

#include <stddef.h>

/* The installed callback (base/test_seam.h): set only by tests. */
static struct {
    DfSeamCallback cb;
    void *ctx;
} g_seam;

void df_test_seam_set(DfSeamCallback cb, void *ctx) {
    g_seam.cb = cb;
    g_seam.ctx = ctx;
}

int df_test_seam(DfSeamPoint point, void *data, DfError *err) {
    return g_seam.cb ? g_seam.cb(g_seam.ctx, point, data, err) : 0;
}
