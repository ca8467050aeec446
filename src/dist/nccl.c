#include "dist/nccl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Values from nccl.h. */
enum { NCCL_SUCCESS = 0, NCCL_IN_PROGRESS = 7 };
enum { NCCL_SUM = 0 };
enum { NCCL_FLOAT32 = 7, NCCL_BFLOAT16 = 9 };

#define CUDA_LIB64_NCCL "/usr/local/cuda/lib64/libnccl.so.2"

static int nccl_type(DfNcclType t) { return t == DF_NCCL_BF16 ? NCCL_BFLOAT16 : NCCL_FLOAT32; }

/* Resolves one entry point; -1 naming it when the library lacks it. */
static int resolve(DfNcclLib *lib, void **slot, const char *name, int required, DfError *err) {
    *slot = dlsym(lib->handle, name);
    if (!*slot && required) return df_fail(err, "%s: no symbol %s (not an NCCL library?)", lib->path, name);
    return 0;
}

static int resolve_all(DfNcclLib *lib, DfError *err) {
    DfNcclApi *a = &lib->api;
    struct {
        void **slot;
        const char *name;
        int required;
    } table[] = {
        {(void **)&a->GetVersion, "ncclGetVersion", 1},
        {(void **)&a->GetUniqueId, "ncclGetUniqueId", 1},
        {(void **)&a->CommInitRank, "ncclCommInitRank", 1},
        {(void **)&a->CommDestroy, "ncclCommDestroy", 1},
        {(void **)&a->CommAbort, "ncclCommAbort", 1},
        {(void **)&a->CommGetAsyncError, "ncclCommGetAsyncError", 1},
        {(void **)&a->GetErrorString, "ncclGetErrorString", 1},
        {(void **)&a->GetLastError, "ncclGetLastError", 0},
        {(void **)&a->AllReduce, "ncclAllReduce", 1},
        {(void **)&a->Broadcast, "ncclBroadcast", 1},
        {(void **)&a->Send, "ncclSend", 1},
        {(void **)&a->Recv, "ncclRecv", 1},
        {(void **)&a->GroupStart, "ncclGroupStart", 1},
        {(void **)&a->GroupEnd, "ncclGroupEnd", 1},
    };
    for (size_t i = 0; i < sizeof table / sizeof *table; i++)
        if (resolve(lib, table[i].slot, table[i].name, table[i].required, err)) return -1;
    if (a->GetVersion(&lib->version) != NCCL_SUCCESS) return df_fail(err, "%s: ncclGetVersion failed", lib->path);
    return 0;
}

/* One candidate: 0 when loaded and complete; else -1, err says why. */
static int try_load(DfNcclLib *lib, const char *path, DfError *err) {
    memset(lib, 0, sizeof *lib);
    snprintf(lib->path, sizeof lib->path, "%s", path);
    lib->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib->handle) {
        const char *why = dlerror();
        return df_fail(err, "%s", why ? why : path);
    }
    if (resolve_all(lib, err) == 0) return 0;
    dlclose(lib->handle);
    lib->handle = NULL;
    return -1;
}

int df_nccl_load(DfNcclLib *lib, DfError *err) {
    const char *forced = getenv("DFLASH_NCCL_LIB");
    if (forced && *forced) {
        if (try_load(lib, forced, err) == 0) return 0;
        return df_context(err, "cannot load NCCL from DFLASH_NCCL_LIB=%s", forced);
    }
    DfError first;
    if (try_load(lib, "libnccl.so.2", &first) == 0) return 0;
    if (try_load(lib, CUDA_LIB64_NCCL, err) == 0) return 0;
    char second[DF_ERROR_MAX];
    snprintf(second, sizeof second, "%s", err->msg);
    return df_fail(err, "cannot load NCCL: tried libnccl.so.2 (%.400s) and %s (%.400s); set DFLASH_NCCL_LIB to the "
                        "library's path (with PyTorch: the nvidia/nccl/lib folder of its Python packages)",
                   first.msg, CUDA_LIB64_NCCL, second);
}

/* The library stays mapped: threads NCCL starts (ncclGetUniqueId's
 * bootstrap root, a communicator's proxy) may outlive every call into it,
 * and would crash in unmapped code after a dlclose. */
void df_nccl_unload(DfNcclLib *lib) { memset(lib, 0, sizeof *lib); }

void df_nccl_version_string(int code, char *buf, size_t cap) {
    int major, minor, patch;
    if (code >= 10000) { /* NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z since 2.9 */
        major = code / 10000;
        minor = code / 100 % 100;
    } else { /* X*1000 + Y*100 + Z before */
        major = code / 1000;
        minor = code / 100 % 10;
    }
    patch = code % 100;
    snprintf(buf, cap, "%d.%d.%d", major, minor, patch);
}

void df_nccl_default_env(void) { setenv("NCCL_NVLS_ENABLE", "0", 0); }

/* The message for a failed call: NCCL's words for the code, and its last
 * error text when it has one. */
static int nccl_fail(const DfNcclLib *lib, void *comm, DfNcclResult rc, DfError *err, const char *what) {
    const char *last = lib->api.GetLastError ? lib->api.GetLastError(comm) : NULL;
    return df_fail(err, "NCCL %s: %s (code %d)%s%s", what, lib->api.GetErrorString(rc), rc, last && *last ? ": " : "",
                   last && *last ? last : "");
}

int df_nccl_get_unique_id(const DfNcclLib *lib, DfNcclUniqueId *id, DfError *err) {
    DfNcclResult rc = lib->api.GetUniqueId(id);
    return rc == NCCL_SUCCESS ? 0 : nccl_fail(lib, NULL, rc, err, "get unique id");
}

int df_nccl_comm_init(DfNcclComm *c, const DfNcclLib *lib, int nranks, int rank, const DfNcclUniqueId *id,
                      DfError *err) {
    memset(c, 0, sizeof *c);
    df_nccl_default_env();
    DfNcclResult rc = lib->api.CommInitRank(&c->comm, nranks, *id, rank);
    if (rc != NCCL_SUCCESS) {
        char what[64];
        snprintf(what, sizeof what, "comm init (rank %d of %d)", rank, nranks);
        return nccl_fail(lib, NULL, rc, err, what);
    }
    c->lib = lib;
    c->rank = rank;
    c->nranks = nranks;
    return 0;
}

void df_nccl_comm_abort(DfNcclComm *c) {
    if (c->comm) c->lib->api.CommAbort(c->comm);
    c->comm = NULL;
}

int df_nccl_comm_destroy(DfNcclComm *c, DfError *err) {
    if (!c->comm) return 0;
    DfNcclResult rc = c->lib->api.CommDestroy(c->comm);
    c->comm = NULL;
    return rc == NCCL_SUCCESS ? 0 : nccl_fail(c->lib, NULL, rc, err, "comm destroy");
}

int df_nccl_check_async(DfNcclComm *c, DfError *err) {
    DfNcclResult async = NCCL_SUCCESS;
    DfNcclResult rc = c->lib->api.CommGetAsyncError(c->comm, &async);
    if (rc != NCCL_SUCCESS) return nccl_fail(c->lib, c->comm, rc, err, "get async error");
    if (async == NCCL_SUCCESS || async == NCCL_IN_PROGRESS) return 0;
    return nccl_fail(c->lib, c->comm, async, err, "asynchronous error");
}

/* Message for a failed collective: which one, which rank, how much. */
static int op_fail(DfNcclComm *c, DfNcclResult rc, const char *op, size_t count, DfError *err) {
    char what[128];
    snprintf(what, sizeof what, "%s (rank %d of %d, %zu elements)", op, c->rank, c->nranks, count);
    return nccl_fail(c->lib, c->comm, rc, err, what);
}

int df_nccl_all_reduce_sum(DfNcclComm *c, const void *send, void *recv, size_t count, DfNcclType type, void *stream,
                           DfError *err) {
    DfNcclResult rc = c->lib->api.AllReduce(send, recv, count, nccl_type(type), NCCL_SUM, c->comm, stream);
    return rc == NCCL_SUCCESS ? 0 : op_fail(c, rc, "all-reduce", count, err);
}

int df_nccl_broadcast(DfNcclComm *c, const void *send, void *recv, size_t count, DfNcclType type, int root,
                      void *stream, DfError *err) {
    DfNcclResult rc = c->lib->api.Broadcast(send, recv, count, nccl_type(type), root, c->comm, stream);
    return rc == NCCL_SUCCESS ? 0 : op_fail(c, rc, "broadcast", count, err);
}

int df_nccl_group_start(const DfNcclLib *lib, DfError *err) {
    DfNcclResult rc = lib->api.GroupStart();
    return rc == NCCL_SUCCESS ? 0 : nccl_fail(lib, NULL, rc, err, "group start");
}

int df_nccl_group_end(const DfNcclLib *lib, DfError *err) {
    DfNcclResult rc = lib->api.GroupEnd();
    return rc == NCCL_SUCCESS ? 0 : nccl_fail(lib, NULL, rc, err, "group end");
}

int df_nccl_send(DfNcclComm *c, const void *buf, size_t count, DfNcclType type, int peer, void *stream, DfError *err) {
    DfNcclResult rc = c->lib->api.Send(buf, count, nccl_type(type), peer, c->comm, stream);
    return rc == NCCL_SUCCESS ? 0 : op_fail(c, rc, "send", count, err);
}

int df_nccl_recv(DfNcclComm *c, void *buf, size_t count, DfNcclType type, int peer, void *stream, DfError *err) {
    DfNcclResult rc = c->lib->api.Recv(buf, count, nccl_type(type), peer, c->comm, stream);
    return rc == NCCL_SUCCESS ? 0 : op_fail(c, rc, "recv", count, err);
}
