/* The trainer's place among the processes (train/trainer_internal.h):
 * joining the data-parallel group, this rank's role in the split layout and
 * its groups and feature links, the checks that every rank starts from the
 * same state, and leaving the group. */
#include "train/trainer_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/select.h"
#include "base/hash64.h"
#include "dist/subgroup.h"

/* The group the drafter's reductions run over: every rank (colocated) or the
 * drafter ranks (split). */
DfDistGroup *df_trainer_reduce_group(const Trainer *t) { return t->split.role == ROLE_DRAFTER ? t->split.drafters : t->group; }

/* Data parallel: joins the group (blocks until every rank is there) and
 * picks this rank's device ("cuda" means cuda:LOCAL_RANK). */
int df_trainer_join_group(Trainer *t, DfError *err) {
    const DfDistEnv *env = t->opt->dist;
    t->world = t->split.share_world = 1;
    snprintf(t->device, sizeof t->device, "%s", t->opt->device ? t->opt->device : "cpu");
    if (t->opt->layout == DF_LAYOUT_SPLIT) {
        int world = env ? env->world_size : 1, targets = t->opt->target_ranks;
        if (targets < 1 || targets >= world)
            return df_fail(err, "--layout split with --target-ranks %d needs more processes than target ranks (this "
                                "group has %d: start them with RANK, WORLD_SIZE, ... as torchrun does)",
                           targets, world);
        if (targets > world - targets)
            return df_fail(err, "--layout split: %d target ranks for %d drafter ranks would leave target ranks idle "
                                "(each serves drafter ranks d with d %% T equal to its rank)",
                           targets, world - targets);
        t->split.role = env->rank < targets ? ROLE_TARGET : ROLE_DRAFTER;
        t->split.writer = targets;
        t->split.share_rank = env->rank - targets;
        t->split.share_world = world - targets;
        if (t->split.role == ROLE_TARGET) t->split.share_rank = 0; /* a target rank plays each of its drafter ranks' parts */
    }
    if (!env || env->world_size <= 1) return 0;
    t->rank = env->rank;
    t->world = env->world_size;
    if (t->split.role == ROLE_COLOCATED) t->split.share_rank = t->rank, t->split.share_world = t->world;
    df_device_for_local_rank(t->opt->device, env->local_rank, t->device, sizeof t->device);
    fprintf(stderr, "train: rank %d of %d (device %s, started by %s): joining the group at %s:%d\n", t->rank,
            t->world, t->device, env->launcher ? env->launcher : "torchrun", env->master_addr, env->master_port);
    if (!(t->group = df_dist_group_create(env, NULL, err))) return df_context(err, "data parallel");
    return 0;
}

/* Every rank must start from the same step, schedule and weights (they read
 * the same checkpoint, or start from the same seed). */
int df_trainer_check_replicas_agree(Trainer *t, DfError *err) {
    DfDistGroup *g = df_trainer_reduce_group(t);
    int world = g ? df_dist_world_size(g) : 1;
    if (world == 1) return 0;
    uint64_t mine[3] = {(uint64_t)t->progress.step, (uint64_t)t->total_steps,
                        df_hash64_chunked(t->params, t->drafter.layout.total * sizeof *t->params)};
    uint64_t *all = df_xmalloc((size_t)world * sizeof mine, "replica states");
    int rc = df_dist_all_gather(g, mine, sizeof mine, all, err);
    for (int r = 1; rc == 0 && r < world; r++)
        if (memcmp(all + 3 * r, all, sizeof mine) != 0)
            rc = df_fail(err,
                         "%srank %d starts at step %llu of %llu with weights %016llx, rank 0 at step %llu of %llu "
                         "with %016llx: every rank must see the same OUTPUT (its checkpoints) and be given the same "
                         "options",
                         t->split.role == ROLE_DRAFTER ? "drafter " : "", r, (unsigned long long)all[3 * r],
                         (unsigned long long)all[3 * r + 1],
                         (unsigned long long)all[3 * r + 2], (unsigned long long)all[0], (unsigned long long)all[1],
                         (unsigned long long)all[2]);
    free(all);
    return rc;
}

/* Split layout: the drafter ranks' group and the feature links (every rank,
 * in the same order: both hold collectives of the whole group). */
int df_trainer_connect_split(Trainer *t, DfError *err) {
    if (df_dist_subgroup_create(t->group, t->opt->target_ranks, t->opt->dist->local_rank, &t->split.drafters, err))
        return df_context(err, "split layout: the drafter ranks' group");
    t->split.have_links = 1;
    if (df_feature_links_open(&t->split.links, t->group, t->be, t->opt->target_ranks, err))
        return df_context(err, "split layout: the feature links");
    int peer = t->split.role == ROLE_DRAFTER ? df_feature_link_target_of(t->rank, t->opt->target_ranks) : -1;
    char what[64] = "serving drafter rank(s)";
    if (peer >= 0) snprintf(what, sizeof what, "fed by target rank %d", peer);
    fprintf(stderr, "train: rank %d of %d: split layout, %s rank %s, features over %s\n", t->rank, t->world,
            t->split.role == ROLE_TARGET ? "target" : "drafter", what, t->split.links.use_nccl ? "nccl" : "TCP");
    return 0;
}

/* Split layout: every rank learns the position the first drafter rank
 * starts from (fresh or resumed); the target ranks start there too. */
int df_trainer_share_position(Trainer *t, DfError *err) {
    int64_t mine[4] = {t->progress.step, t->progress.epoch, t->progress.batch_in_epoch, t->total_steps};
    int64_t *all = df_xmalloc((size_t)t->world * sizeof mine, "positions");
    int rc = df_dist_all_gather(t->group, mine, sizeof mine, all, err);
    const int64_t *w = all + 4 * t->split.writer;
    if (rc == 0 && w[3] != t->total_steps)
        rc = df_fail(err, "rank %d plans %lld steps, the first drafter rank %d plans %lld: give every rank the same "
                          "options",
                     t->rank, (long long)t->total_steps, t->split.writer, (long long)w[3]);
    if (rc == 0 && t->split.role == ROLE_TARGET) {
        t->progress.step = w[0];
        t->progress.epoch = w[1];
        t->progress.batch_in_epoch = w[2];
        t->progress.total_steps = t->total_steps;
    }
    free(all);
    return rc;
}

/* Leaves the group: after an error, telling the others (so they stop now
 * instead of waiting for this rank); else after a barrier (no rank leaves
 * while another still needs it). */
void df_trainer_leave_group(Trainer *t, int failed, const DfError *err) {
    if (!t->group) return;
    if (failed) {
        df_comm_abort(&t->comm);
        if (t->split.have_links) df_feature_links_abort(&t->split.links);
        df_dist_abort(t->split.drafters, err->msg);
        df_dist_abort(t->group, err->msg);
    } else {
        DfError ignored = {{0}};
        if (t->split.drafters) df_dist_barrier(t->split.drafters, &ignored);
        df_dist_barrier(t->group, &ignored);
    }
    /* the communicators unhook themselves from the groups: before these go */
    df_comm_free(&t->comm);
    if (t->split.have_links) df_feature_links_close(&t->split.links);
    t->split.have_links = 0;
    df_dist_group_close(t->split.drafters);
    t->split.drafters = NULL;
    df_dist_group_close(t->group);
    t->group = NULL;
}
