/* A group of the trailing ranks of a parent group: ranks first..W-1 of the
 * parent form one of their own (a second rendezvous, dist/rendezvous.h),
 * around parent rank `first`, on a free port it picks and shares. The split
 * training layout's drafter ranks reduce over such a group. */
#ifndef DF_DIST_SUBGROUP_H
#define DF_DIST_SUBGROUP_H

#include "base/error.h"
#include "dist/rendezvous.h"

/* Every rank of parent calls it (it holds an all-gather of the parent); a
 * rank >= first gets its group in *out (rank - first of W - first), the
 * others NULL. local_rank goes into the new group's environment. */
int df_dist_subgroup_create(DfDistGroup *parent, int first, int local_rank, DfDistGroup **out, DfError *err);

#endif
