#include "dist/group_nccl.h"

#include <string.h>

/* The group's failure hook: may run on its monitor thread. */
static void abort_once(void *ctx) {
    DfGroupNccl *n = ctx;
    if (!atomic_exchange(&n->aborted, 1)) df_nccl_comm_abort(&n->comm);
}

int df_group_nccl_open(DfGroupNccl *n, DfDistGroup *group, const char *purpose, DfError *err) {
    memset(n, 0, sizeof *n);
    n->group = group;
    if (df_nccl_load(&n->lib, err)) return df_context(err, "%s needs NCCL", purpose);
    DfNcclUniqueId id;
    memset(&id, 0, sizeof id);
    int rank = df_dist_rank(group), world = df_dist_world_size(group);
    if (rank == 0 && df_nccl_get_unique_id(&n->lib, &id, err)) return -1;
    if (df_dist_broadcast(group, &id, sizeof id, err)) return df_context(err, "sharing the NCCL id of %s", purpose);
    if (df_nccl_comm_init(&n->comm, &n->lib, world, rank, &id, err)) return -1;
    n->open = 1;
    df_dist_set_failure_hook(group, abort_once, n);
    return 0;
}

void df_group_nccl_abort(DfGroupNccl *n) {
    if (!n->open) return;
    df_dist_set_failure_hook(n->group, NULL, NULL);
    abort_once(n);
    n->open = 0;
}

void df_group_nccl_close(DfGroupNccl *n) {
    if (n->open) {
        df_dist_set_failure_hook(n->group, NULL, NULL);
        DfError ignored = {{0}};
        if (!atomic_load(&n->aborted)) df_nccl_comm_destroy(&n->comm, &ignored);
    }
    memset(n, 0, sizeof *n);
}
