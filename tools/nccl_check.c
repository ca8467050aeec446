/* nccl_check: a smoke test of the distributed pieces on a machine with GPUs.
 * Every process reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
 * MASTER_PORT, joins the TCP rendezvous (dist/rendezvous.h), takes GPU
 * LOCAL_RANK, gets rank 0's ncclUniqueId through the rendezvous broadcast,
 * and joins an NCCL communicator (NCCL loaded at run time, dist/nccl.h).
 * Then, checked element by element against values computed on the host:
 *   all-reduce (sum) of a 64 MiB fp32 buffer, and of a bf16 one;
 *   broadcast from rank 0; a ring of grouped send/recv;
 * and the all-reduce's time, algorithm and bus bandwidth (bus = algorithm *
 * 2 (n-1) / n, as nccl-tests reports it). Exit status 0 when every check
 * passed on this rank. Built by `make nccl-check` (needs CUDA).
 *
 * With NCCL_CHECK_DIE_RANK=k, rank k exits without a word 1 s after the
 * checks, while the others keep all-reducing, waiting on their stream the way
 * the trainer will: polling the stream and df_dist_poll_failure. They must
 * learn within 10 s that rank k is gone, abort NCCL (an all-reduce left
 * waiting for a dead peer would never end) and exit; exit status 0 when they
 * did. */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/numeric.h"
#include "dist/nccl.h"
#include "dist/rendezvous.h"

#define ALLREDUCE_BYTES (64u << 20)
#define SMALL_COUNT (1u << 20)
#define WARMUP 3
#define ITERS 10

typedef struct Check {
    DfDistGroup *g;
    DfNcclLib lib;
    DfNcclComm comm;
    cudaStream_t stream;
    int rank, world;
} Check;

static int cuda_ok(cudaError_t rc, const char *what, DfError *err) {
    return rc == cudaSuccess ? 0 : df_fail(err, "CUDA %s: %s", what, cudaGetErrorString(rc));
}

/* rank r's value at i; the sum over ranks is exact in fp32 (below 2^24). */
static float value(int r, size_t i) { return (float)(i % 251) + 1000.0f * (float)r; }

static int check_all_reduce_f32(Check *c, DfError *err) {
    size_t n = ALLREDUCE_BYTES / sizeof(float);
    float *h = malloc(ALLREDUCE_BYTES), *d = NULL;
    for (size_t i = 0; i < n; i++) h[i] = value(c->rank, i);
    int rc = cuda_ok(cudaMalloc((void **)&d, ALLREDUCE_BYTES), "malloc", err) ||
             cuda_ok(cudaMemcpy(d, h, ALLREDUCE_BYTES, cudaMemcpyHostToDevice), "copy", err) ||
             df_nccl_all_reduce_sum(&c->comm, d, d, n, DF_NCCL_F32, c->stream, err) ||
             cuda_ok(cudaStreamSynchronize(c->stream), "sync", err) ||
             cuda_ok(cudaMemcpy(h, d, ALLREDUCE_BYTES, cudaMemcpyDeviceToHost), "copy back", err);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        float want = (float)c->world * (float)(i % 251) + 1000.0f * (float)(c->world * (c->world - 1) / 2);
        if (h[i] != want) rc = df_fail(err, "fp32 all-reduce: element %zu is %g, expected %g", i, h[i], want);
    }
    /* timing: in place, values grow but stay finite over these few rounds */
    cudaEvent_t e0, e1;
    float ms = 0;
    if (rc == 0) {
        cudaEventCreate(&e0);
        cudaEventCreate(&e1);
        for (int k = 0; k < WARMUP && rc == 0; k++)
            rc = df_nccl_all_reduce_sum(&c->comm, d, d, n, DF_NCCL_F32, c->stream, err);
        cudaEventRecord(e0, c->stream);
        for (int k = 0; k < ITERS && rc == 0; k++)
            rc = df_nccl_all_reduce_sum(&c->comm, d, d, n, DF_NCCL_F32, c->stream, err);
        cudaEventRecord(e1, c->stream);
        if (rc == 0) rc = cuda_ok(cudaEventSynchronize(e1), "sync", err);
        cudaEventElapsedTime(&ms, e0, e1);
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
    }
    if (rc == 0) {
        double t = ms / 1e3 / ITERS, algbw = ALLREDUCE_BYTES / t / 1e9;
        double busbw = algbw * 2.0 * (c->world - 1) / c->world;
        printf("rank %d: all-reduce fp32 %u MiB: %.3f ms, algbw %.1f GB/s, busbw %.1f GB/s\n", c->rank,
               ALLREDUCE_BYTES >> 20, t * 1e3, algbw, busbw);
    }
    cudaFree(d);
    free(h);
    return rc;
}

static int check_all_reduce_bf16(Check *c, DfError *err) {
    size_t n = SMALL_COUNT;
    uint16_t *h = malloc(n * sizeof *h), *d = NULL;
    for (size_t i = 0; i < n; i++) h[i] = df_f32_to_bf16((float)(c->rank + 1) * (float)(i % 8)); /* exact in bf16 */
    int rc = cuda_ok(cudaMalloc((void **)&d, n * sizeof *h), "malloc", err) ||
             cuda_ok(cudaMemcpy(d, h, n * sizeof *h, cudaMemcpyHostToDevice), "copy", err) ||
             df_nccl_all_reduce_sum(&c->comm, d, d, n, DF_NCCL_BF16, c->stream, err) ||
             cuda_ok(cudaStreamSynchronize(c->stream), "sync", err) ||
             cuda_ok(cudaMemcpy(h, d, n * sizeof *h, cudaMemcpyDeviceToHost), "copy back", err);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        float want = (float)(c->world * (c->world + 1) / 2) * (float)(i % 8);
        if (df_bf16_to_f32(h[i]) != want)
            rc = df_fail(err, "bf16 all-reduce: element %zu is %g, expected %g", i, df_bf16_to_f32(h[i]), want);
    }
    cudaFree(d);
    free(h);
    return rc;
}

static int check_broadcast(Check *c, DfError *err) {
    size_t n = SMALL_COUNT;
    float *h = malloc(n * sizeof *h), *d = NULL;
    for (size_t i = 0; i < n; i++) h[i] = c->rank == 0 ? value(7, i) : -1.0f;
    int rc = cuda_ok(cudaMalloc((void **)&d, n * sizeof *h), "malloc", err) ||
             cuda_ok(cudaMemcpy(d, h, n * sizeof *h, cudaMemcpyHostToDevice), "copy", err) ||
             df_nccl_broadcast(&c->comm, d, d, n, DF_NCCL_F32, 0, c->stream, err) ||
             cuda_ok(cudaStreamSynchronize(c->stream), "sync", err) ||
             cuda_ok(cudaMemcpy(h, d, n * sizeof *h, cudaMemcpyDeviceToHost), "copy back", err);
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (h[i] != value(7, i)) rc = df_fail(err, "broadcast: element %zu is %g, expected %g", i, h[i], value(7, i));
    cudaFree(d);
    free(h);
    return rc;
}

/* Each rank sends its values to the next and receives the previous one's. */
static int check_send_recv(Check *c, DfError *err) {
    size_t n = SMALL_COUNT, bytes = n * sizeof(float);
    int next = (c->rank + 1) % c->world, prev = (c->rank + c->world - 1) % c->world;
    float *h = malloc(bytes), *dsend = NULL, *drecv = NULL;
    for (size_t i = 0; i < n; i++) h[i] = value(c->rank, i);
    int rc = cuda_ok(cudaMalloc((void **)&dsend, bytes), "malloc", err) ||
             cuda_ok(cudaMalloc((void **)&drecv, bytes), "malloc", err) ||
             cuda_ok(cudaMemcpy(dsend, h, bytes, cudaMemcpyHostToDevice), "copy", err) ||
             df_nccl_group_start(&c->lib, err) ||
             df_nccl_send(&c->comm, dsend, n, DF_NCCL_F32, next, c->stream, err) ||
             df_nccl_recv(&c->comm, drecv, n, DF_NCCL_F32, prev, c->stream, err) ||
             df_nccl_group_end(&c->lib, err) || cuda_ok(cudaStreamSynchronize(c->stream), "sync", err) ||
             cuda_ok(cudaMemcpy(h, drecv, bytes, cudaMemcpyDeviceToHost), "copy back", err);
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (h[i] != value(prev, i))
            rc = df_fail(err, "send/recv from rank %d: element %zu is %g, expected %g", prev, i, h[i], value(prev, i));
    cudaFree(dsend);
    cudaFree(drecv);
    free(h);
    return rc;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Waits for the stream, watching the group: 1 when a peer was lost (err
 * says which), 0 when the stream finished, -1 on a CUDA error. */
static int wait_watching(Check *c, DfError *err) {
    for (;;) {
        cudaError_t q = cudaStreamQuery(c->stream);
        if (q == cudaSuccess) return 0;
        if (q != cudaErrorNotReady) return cuda_ok(q, "stream query", err);
        if (df_dist_poll_failure(c->g, err) || df_nccl_check_async(&c->comm, err)) return 1;
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* The lost-rank drill (NCCL_CHECK_DIE_RANK): 0 when this rank noticed in time. */
static int lost_rank_drill(Check *c, int die_rank, DfError *err) {
    double t_start = now_s();
    if (c->rank == die_rank) {
        struct timespec ts = {1, 0};
        nanosleep(&ts, NULL);
        printf("rank %d: exiting on purpose (NCCL_CHECK_DIE_RANK)\n", c->rank);
        fflush(stdout);
        _exit(0);
    }
    size_t n = SMALL_COUNT;
    float *d = NULL;
    if (cuda_ok(cudaMalloc((void **)&d, n * sizeof *d), "malloc", err)) return -1;
    cudaMemset(d, 0, n * sizeof *d);
    int rc = -1;
    while (now_s() - t_start < 30) {
        if (df_nccl_all_reduce_sum(&c->comm, d, d, n, DF_NCCL_F32, c->stream, err)) break;
        int w = wait_watching(c, err);
        if (w < 0) break;
        if (w == 1) {
            double took = now_s() - t_start - 1.0; /* since the other rank's exit */
            printf("rank %d: learned %.2f s after the exit: %s\n", c->rank, took, err->msg);
            df_nccl_comm_abort(&c->comm);
            rc = took < 10 ? 0 : df_fail(err, "took %.1f s to notice the lost rank", took);
            break;
        }
    }
    if (rc && !err->msg[0]) df_fail(err, "rank %d never noticed that rank %d was gone", c->rank, die_rank);
    if (c->comm.comm == NULL) { /* aborted: the stream may hold a dead kernel; leave at once */
        if (rc) fprintf(stderr, "nccl_check rank %d: FAILED: %s\n", c->rank, err->msg);
        else printf("rank %d: lost-rank drill OK\n", c->rank);
        fflush(stdout);
        fflush(stderr);
        _exit(rc ? 1 : 0);
    }
    cudaFree(d);
    return rc;
}

static int setup(Check *c, const DfDistEnv *env, DfError *err) {
    int devices = 0;
    if (cuda_ok(cudaGetDeviceCount(&devices), "device count", err)) return -1;
    if (env->local_rank >= devices)
        return df_fail(err, "LOCAL_RANK=%d but this process sees %d GPU(s)", env->local_rank, devices);
    if (cuda_ok(cudaSetDevice(env->local_rank), "set device", err) ||
        cuda_ok(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "stream", err))
        return -1;
    if (df_nccl_load(&c->lib, err)) return -1;
    DfNcclUniqueId id;
    memset(&id, 0, sizeof id);
    if (c->rank == 0 && df_nccl_get_unique_id(&c->lib, &id, err)) return -1;
    if (df_dist_broadcast(c->g, &id, sizeof id, err)) return -1;
    if (c->rank == 0) {
        char v[32];
        df_nccl_version_string(c->lib.version, v, sizeof v);
        printf("NCCL %s from %s; %d ranks\n", v, c->lib.path, c->world);
    }
    return df_nccl_comm_init(&c->comm, &c->lib, c->world, c->rank, &id, err);
}

int main(void) {
    DfDistEnv env;
    DfError err = {{0}};
    if (df_dist_env_read(&env, &err)) {
        fprintf(stderr, "nccl_check: %s\n", err.msg);
        return 2;
    }
    Check c = {.rank = env.rank, .world = env.world_size};
    c.g = df_dist_group_create(&env, NULL, &err);
    if (!c.g) {
        fprintf(stderr, "nccl_check rank %d: %s\n", env.rank, err.msg);
        return 1;
    }
    int rc = setup(&c, &env, &err) || check_all_reduce_f32(&c, &err) || check_all_reduce_bf16(&c, &err) ||
             check_broadcast(&c, &err) || check_send_recv(&c, &err) || df_nccl_check_async(&c.comm, &err) ||
             df_dist_barrier(c.g, &err);
    const char *die = getenv("NCCL_CHECK_DIE_RANK");
    if (rc == 0 && die && *die) {
        printf("rank %d: checks passed; lost-rank drill with rank %s\n", c.rank, die);
        fflush(stdout);
        rc = lost_rank_drill(&c, atoi(die), &err);
    }
    if (rc) {
        fprintf(stderr, "nccl_check rank %d: FAILED: %s\n", c.rank, err.msg);
        df_dist_abort(c.g, err.msg); /* the others stop instead of waiting */
        df_nccl_comm_abort(&c.comm);
    } else {
        printf("rank %d: all-reduce fp32 and bf16, broadcast, send/recv: OK\n", c.rank);
        rc = df_nccl_comm_destroy(&c.comm, &err);
    }
    df_dist_group_close(c.g);
    df_nccl_unload(&c.lib);
    return rc ? 1 : 0;
}
