/* A target with random weights built straight on a backend, with no model
 * file: for benchmarks at the shape of a model whose weights are not at hand
 * (e.g. a Qwen3-8B-shaped target on a GPU). */
#ifndef DF_TARGET_TARGET_RANDOM_H
#define DF_TARGET_TARGET_RANDOM_H

#include <stdint.h>

#include "target/target.h"

/* The weights' seed of a run given --random-target-weights and --seed S:
 * train's target and generate's alike, so that train --prompts regenerates
 * with the target it then trains on. */
static inline uint64_t df_target_random_weights_seed(uint64_t run_seed) { return run_seed + 1; }

/* Allocates every layer of cfg (and with_head: the final norm and lm head,
 * tied to the embedding when cfg says so) on be and fills them: matrices
 * uniform with variance 1/fan_in, norm weights 1 +- 0.1, the embedding
 * uniform in [-1, 1]; a hybrid target's layers as its loader lays them out
 * (small parameters F32, see fill_gated_deltanet in target_random.c for
 * their values). Values are a function of (seed, tensor, index) alone.
 * The model is then used and freed like a loaded one. */
int df_target_init_random(DfTargetModel *m, DfBackend *be, const DfModelConfig *cfg, uint64_t seed, int with_head,
                          DfError *err);

/* The same with layers 0..n_layers-1 only (0..num_layers), as df_target_load
 * loads them: those layers, the embedding and the head have the values the
 * full build gives them. Logits then need all layers (as for a load). */
int df_target_init_random_layers(DfTargetModel *m, DfBackend *be, const DfModelConfig *cfg, uint64_t seed,
                                 int n_layers, int with_head, DfError *err);

#endif
