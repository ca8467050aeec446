#include "dist/subgroup.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "dist/tcp.h"

/* The address rank `first` listens on, as every rank receives it, and the
 * subgroup's job token: random bytes of rank `first`, sent over the parent
 * group's connections, so that only the parent's ranks can join. */
enum { ADDRESS_BYTES = 64 };
typedef struct Endpoint {
    char addr[ADDRESS_BYTES];
    int32_t port;
    uint8_t token[DF_JOB_TOKEN_BYTES];
} Endpoint;

int df_dist_subgroup_create(DfDistGroup *parent, int first, int local_rank, DfDistGroup **out, DfError *err) {
    int rank = df_dist_rank(parent), world = df_dist_world_size(parent);
    *out = NULL;
    Endpoint mine;
    memset(&mine, 0, sizeof mine);
    if (rank == first && world - first > 1) {
        int fd = df_tcp_listen(0, err); /* a free port, released for the rendezvous to listen on */
        if (fd < 0) return -1;
        mine.port = df_tcp_local_port(fd);
        close(fd);
        if (df_dist_local_address(parent, mine.addr, sizeof mine.addr, err)) return -1;
        if (getrandom(mine.token, sizeof mine.token, 0) != (ssize_t)sizeof mine.token)
            return df_fail_errno(err, "subgroup: no random bytes for its job token");
    }
    Endpoint *all = df_xmalloc((size_t)world * sizeof *all, "subgroup address");
    int rc = df_dist_all_gather(parent, &mine, sizeof mine, all, err);
    if (rc == 0 && rank >= first) {
        DfDistEnv env = {.rank = rank - first, .world_size = world - first, .local_rank = local_rank,
                         .master_port = all[first].port};
        memcpy(env.master_addr, all[first].addr, sizeof all[first].addr);
        env.master_addr[sizeof all[first].addr - 1] = '\0';
        memcpy(env.token.bytes, all[first].token, DF_JOB_TOKEN_BYTES);
        env.token.source = "the parent group";
        if (env.world_size == 1) snprintf(env.master_addr, sizeof env.master_addr, "-");
        if (!(*out = df_dist_group_create(&env, NULL, err))) rc = -1;
    }
    free(all);
    return rc;
}
