/* The CUDA backend's kernel variants by name (backend_ops.def set_variant,
 * variants; the knobs themselves: cuda_variants.h), for benchmarks that
 * compare kernel shapes and for tests. Every knob's default is 0. */
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda_matmul_plan.h"

extern "C" void df_cuda_set_lm_head_chunk_rows(DfBackend *be, int rows) {
    df_cuda_state(be)->lm_chunk_rows = rows > 0 ? rows : 0;
}

extern "C" void df_cuda_set_lm_head_logits_bf16(DfBackend *be, int on) {
    df_cuda_state(be)->lm_logits_bf16 = on != 0;
}

extern "C" void df_cuda_set_gemm_algo(DfBackend *be, int rank) {
    DfCudaState *st = df_cuda_state(be);
    int value = rank > 0 ? rank : 0;
    if (value == st->gemm_algo) return;
    st->gemm_algo = value;
    df_cuda_matmul_plans_free(st); /* every plan chooses again */
}

extern "C" void df_cuda_set_attention_mma_sync(DfBackend *be, int on) {
    df_cuda_state(be)->attn_mma_sync = on != 0;
}

extern "C" void df_cuda_set_block_attention_mma_sync(DfBackend *be, int on) {
    df_cuda_state(be)->block_attn_mma_sync = on != 0;
}

extern "C" void df_cuda_set_block_attention_forward_pairs(DfBackend *be, int on) {
    df_cuda_state(be)->block_attn_fwd_pairs = on != 0;
}

extern "C" void df_cuda_set_block_attention_dq_q_regs(DfBackend *be, int on) {
    df_cuda_state(be)->block_attn_dq_q_regs = on != 0;
}

extern "C" void df_cuda_set_rmsnorm_backward_two_pass(DfBackend *be, int on) {
    df_cuda_state(be)->rmsnorm_bwd_two_pass = on != 0;
}

extern "C" void df_cuda_set_delta_rule_recurrent(DfBackend *be, int on) {
    df_cuda_state(be)->delta_rule_recurrent = on != 0;
}

extern "C" void df_cuda_set_gemm_search(DfBackend *be, int on) {
    DfCudaState *st = df_cuda_state(be);
    if ((on != 0) == st->gemm_search) return;
    st->gemm_search = on != 0;
    df_cuda_matmul_plans_free(st); /* every plan chooses again */
}

/* skinny_gemm as a variant value: 0 (the default) auto, 1 off, 2 always. */
static DfCudaSkinnyGemm skinny_mode(int value) {
    return value == 1 ? DF_SKINNY_GEMM_OFF : value == 2 ? DF_SKINNY_GEMM_ALWAYS : DF_SKINNY_GEMM_AUTO;
}

static int skinny_value(int mode) {
    return mode == DF_SKINNY_GEMM_OFF ? 1 : mode == DF_SKINNY_GEMM_ALWAYS ? 2 : 0;
}

static void reset_all(DfBackend *be) {
    df_cuda_set_attention_rows_per_warp(be, 0);
    df_cuda_set_attention_mma_sync(be, 0);
    df_cuda_set_lm_head_chunk_rows(be, 0);
    df_cuda_set_lm_head_logits_bf16(be, 0);
    df_cuda_set_skinny_gemm(be, DF_SKINNY_GEMM_AUTO);
    df_cuda_set_kv_attention_blocks_per_sm(be, 0);
    df_cuda_set_gemm_algo(be, 0);
    df_cuda_set_gemm_search(be, 0);
    df_cuda_set_block_attention_mma_sync(be, 0);
    df_cuda_set_block_attention_forward_pairs(be, 0);
    df_cuda_set_block_attention_dq_q_regs(be, 0);
    df_cuda_set_rmsnorm_backward_two_pass(be, 0);
    df_cuda_set_delta_rule_recurrent(be, 0);
}

extern "C" int df_cuda_set_variant(DfBackend *be, const char *name, int value, DfError *err) {
    if (!name) {
        reset_all(be);
        return 0;
    }
    if (strcmp(name, "attention_rows_per_warp") == 0) {
        if (value != 0 && value != 16 && value != 32)
            return df_fail(err, "cuda variant attention_rows_per_warp: %d (expected 0, 16 or 32)", value);
        df_cuda_set_attention_rows_per_warp(be, value);
    } else if (strcmp(name, "attention_mma_sync") == 0) {
        df_cuda_set_attention_mma_sync(be, value);
    } else if (strcmp(name, "lm_head_chunk_rows") == 0) {
        df_cuda_set_lm_head_chunk_rows(be, value);
    } else if (strcmp(name, "lm_head_logits_bf16") == 0) {
        df_cuda_set_lm_head_logits_bf16(be, value);
    } else if (strcmp(name, "skinny_gemm") == 0) {
        df_cuda_set_skinny_gemm(be, skinny_mode(value));
    } else if (strcmp(name, "gemm_algo") == 0) {
        if (value < 0 || value > DF_GEMM_CANDIDATES)
            return df_fail(err, "cuda variant gemm_algo: %d (expected 0 to %d)", value, DF_GEMM_CANDIDATES);
        df_cuda_set_gemm_algo(be, value);
    } else if (strcmp(name, "gemm_search") == 0) {
        df_cuda_set_gemm_search(be, value);
    } else if (strcmp(name, "block_attention_mma_sync") == 0) {
        df_cuda_set_block_attention_mma_sync(be, value);
    } else if (strcmp(name, "block_attention_forward_pairs") == 0) {
        df_cuda_set_block_attention_forward_pairs(be, value);
    } else if (strcmp(name, "block_attention_dq_q_regs") == 0) {
        df_cuda_set_block_attention_dq_q_regs(be, value);
    } else if (strcmp(name, "rmsnorm_backward_two_pass") == 0) {
        df_cuda_set_rmsnorm_backward_two_pass(be, value);
    } else if (strcmp(name, "delta_rule_recurrent") == 0) {
        df_cuda_set_delta_rule_recurrent(be, value);
    } else if (strcmp(name, "kv_attention_blocks_per_sm") == 0) {
        df_cuda_set_kv_attention_blocks_per_sm(be, value);
    } else {
        return df_fail(err, "the cuda backend has no kernel variant '%s'", name);
    }
    return 0;
}

extern "C" void df_cuda_variants(DfBackend *be, char *buf, size_t cap) {
    const DfCudaState *st = df_cuda_state(be);
    snprintf(buf, cap,
             "attention_rows_per_warp=%d attention_mma_sync=%d lm_head_chunk_rows=%d lm_head_logits_bf16=%d skinny_gemm=%d "
             "kv_attention_blocks_per_sm=%d gemm_algo=%d gemm_search=%d block_attention_mma_sync=%d "
             "block_attention_forward_pairs=%d block_attention_dq_q_regs=%d rmsnorm_backward_two_pass=%d "
             "delta_rule_recurrent=%d",
             st->attn_rows_per_warp, st->attn_mma_sync, st->lm_chunk_rows, st->lm_logits_bf16, skinny_value(st->skinny_gemm),
             st->kv_blocks_per_sm, st->gemm_algo, st->gemm_search, st->block_attn_mma_sync,
             st->block_attn_fwd_pairs, st->block_attn_dq_q_regs, st->rmsnorm_bwd_two_pass, st->delta_rule_recurrent);
}
