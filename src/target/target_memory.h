/* The target's memory on its backend, in bytes, as pure functions of the
 * config: what a memory plan needs before anything is loaded. No backend is
 * asked: `act_elem` is the size of a DF_BUF_ACT element on the backend that
 * will hold the target (2: bf16 on CUDA; 4: fp32 on the CPU); F32 and I32
 * elements are 4 bytes everywhere. Bytes are count * element size per
 * buffer, the way the CUDA backend counts them (the memory_info in_use of the op table) and
 * the CPU backend too (df_cpu_bytes_in_use, backend/cpu/cpu_memory.h); the
 * CPU's rounding of each allocation to 64 bytes is not included.
 *
 * The forward's workspace is sized here and nowhere else: target_workspace.c
 * allocates the buffers these specs describe, and the rope tables take their
 * row count from df_target_rope_positions. The weights' shapes are the
 * loaders' (dense_load.c, hybrid_load.c, target_random.c), checked against
 * them by tests/test_target_memory.c. */
#ifndef DF_TARGET_TARGET_MEMORY_H
#define DF_TARGET_TARGET_MEMORY_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "target/model_config.h"

/* One buffer to allocate: its kind and element count. */
typedef struct DfBufSpec {
    DfBufKind kind;
    size_t count;
} DfBufSpec;

/* count * (act_elem for ACT, 4 for F32 and I32). */
size_t df_buf_spec_bytes(DfBufSpec s, size_t act_elem);

/* --- weights --------------------------------------------------------------- */

/* Decoder layer `layer`'s weights as df_target_load and df_target_init_random
 * allocate them. Dense: input and post norms, the fused q/k/v and gate/up
 * owners (target_layer_storage.c), o_proj, down_proj, q/k norms (Qwen3), all
 * ACT. Hybrid: (1 + w) norms F32; full attention: the gated q_proj of twice
 * the width, k, v, o ACT, q/k norms F32; linear attention (Gated DeltaNet):
 * in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, out_proj ACT, conv1d, dt_bias,
 * A_log and the gated norm F32; then the MLP, ACT. */
size_t df_target_layer_weight_bytes(const DfModelConfig *cfg, int layer, size_t act_elem);

/* Everything df_target_load(dir, n_layers, with_head) and
 * df_target_init_random_layers(cfg, n_layers, with_head) allocate: the
 * embedding [V, H], layers 0..n_layers-1, and with_head the final norm [H]
 * (F32 for a (1 + w) norm, else ACT) and, untied, the lm head [V, H] (a tied
 * head is the embedding: nothing more). df_target_init_random builds all
 * cfg->num_layers layers: n_layers = cfg->num_layers. */
size_t df_target_weight_bytes(const DfModelConfig *cfg, int n_layers, int with_head, size_t act_elem);

/* --- the forward's activations ------------------------------------------------ */

/* DfTargetWorkspace's buffers for n_tokens rows, in the order of its fields
 * (ids, x, h, q, k, v, attn, gate, up). */
#define DF_TARGET_WS_BUFFERS 9
void df_target_workspace_specs(const DfModelConfig *cfg, int n_tokens, DfBufSpec out[DF_TARGET_WS_BUFFERS]);

/* DfHybridWorkspace's buffers (a hybrid target only), in the order of its
 * fields (qg, attn_gate, mixed, conv, z, beta, decay, core). */
#define DF_HYBRID_WS_BUFFERS 8
void df_hybrid_workspace_specs(const DfModelConfig *cfg, int n_tokens, DfBufSpec out[DF_HYBRID_WS_BUFFERS]);

/* Both workspaces (the hybrid one only for a hybrid target) for n_tokens
 * rows: what the model holds after a forward of n_tokens tokens (the
 * workspace grows to the largest batch seen and is kept). */
size_t df_target_workspace_bytes(const DfModelConfig *cfg, int n_tokens, size_t act_elem);

/* --- decoding state ---------------------------------------------------------- */

/* A Gated DeltaNet layer's convolution channels: its q, k and v inputs
 * (2 * key heads * key dim + value heads * value dim). */
size_t df_target_conv_channels(const DfLinearAttnConfig *la);

/* Decoder layers with a KV cache: all of a dense target's, a hybrid's full-attention ones. */
int df_target_kv_layers(const DfModelConfig *cfg);

/* A hybrid target's Gated DeltaNet state of one slot in one linear layer, in
 * F32 values: the convolution window [kernel - 1, conv_dim] and the delta
 * rule's state [value_heads, key_dim, value_dim] (target/hybrid_state.h);
 * 0 for a dense target. */
size_t df_target_recurrent_floats(const DfModelConfig *cfg);

/* A hybrid target's Gated DeltaNet layers per decoder slot: the
 * convolution window and the delta rule's state (F32), each kept twice
 * (the rollback's snapshot), and the recorded step's inputs of record_rows
 * rows (ACT) (target/hybrid_state.h); 0 for a dense target. */
size_t df_target_recurrent_state_bytes(const DfModelConfig *cfg, int64_t record_rows, size_t act_elem);

/* One target decoder slot (target/target_decode.h) of slot_rows rows: its
 * K and V rows in every layer with a KV cache and, for a hybrid target, its
 * convolution window and delta-rule state in every Gated DeltaNet layer;
 * with rollback_rows > 0 (df_target_decoder_enable_rollback) also their
 * snapshots and the recorded step's inputs (df_target_recurrent_state_bytes). */
size_t df_target_decoder_slot_bytes(const DfModelConfig *cfg, int64_t slot_rows, int64_t rollback_rows,
                                    size_t act_elem);

/* The target decoder's workspace for `rows` rows and n_taps taps
 * (target_decode.c): a dense target's layers run fused (qkv and gate_up in
 * place of k, v and up), a hybrid's split, with the hybrid layers' own
 * activations (DfHybridWorkspace). */
size_t df_target_decoder_workspace_bytes(const DfModelConfig *cfg, int n_taps, size_t rows, size_t act_elem);

/* Values of a head that RoPE turns: head_dim, or a hybrid target's rotary_dim. */
int df_target_rope_dim(const DfModelConfig *cfg);

/* Rows of the rope tables once a sequence of max_len tokens came, when
 * `have` rows were there (0: none yet): 256, doubled until max_len fits. */
int df_target_rope_positions(int have, int max_len);

/* The F32 cos and sin tables [rope_positions, rope_dim / 2] the forward
 * builds on the backend (ensure_rope_tables) for sequences up to max_len. */
size_t df_target_rope_table_bytes(const DfModelConfig *cfg, int max_len);

/* A DfPackedBatch's backend buffers (df_packed_batch_init): I32 seq_starts
 * [n_seqs + 1] and positions [n_tokens]. The caller makes the batch. */
size_t df_packed_batch_bytes(int n_tokens, int n_seqs);

/* What one df_target_forward_batch over a packed batch of n_tokens tokens,
 * n_seqs sequences, the longest max_len, adds to the backend beyond the
 * weights, on any backend: the workspaces, the rope tables and the packed
 * batch. Not counted: the features and logits buffers (the caller's), and
 * the CUDA ops' scratch (df_target_forward_cuda_scratch_bytes). */
size_t df_target_forward_workspace_bytes(const DfModelConfig *cfg, int n_tokens, int n_seqs, int max_len,
                                         size_t act_elem);

/* CUDA only: scratch the forward's ops take from the backend, beyond its
 * buffers. Of those ops (embedding, linear, rmsnorm, rope, flash attention,
 * swiglu, copy2d, and a hybrid target's causal conv, gated delta rule, gated
 * norm, sigmoid gate, partial rope) only linear allocates: a product of at
 * most DF_SKINNY_GEMM_MAX_M (64) rows may take the skinny GEMM
 * (cuda_skinny_gemm.cu), whose split-K partial sums go into the backend's
 * shared scratch (df_cuda_scratch: grown, kept, reused by every op that
 * takes scratch, so its size is a maximum over ops, not a sum) and whose
 * arrival counters are kept in the backend state. Flash attention and the
 * delta rule keep everything in registers and shared memory. This returns
 * a bound on that scratch for n_tokens rows on a GPU of sm_count SMs: 0 for
 * more than 64 rows, else n_tokens * 1024 * sm_count bytes of partial sums
 * (splits * weight rows <= 2 blocks per SM * 128 rows a block, 4 bytes
 * each) plus 2 * sm_count int counters (one per row block, at most sm_count
 * row blocks split, the count grown by doubling). The backend's fixed memory (cuBLASLt workspace,
 * staging) is made at its creation and is not the target's. */
size_t df_target_forward_cuda_scratch_bytes(int n_tokens, int sm_count);

#endif
