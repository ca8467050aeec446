/* NCCL loaded at run time (dlopen), so that dflash builds and runs without
 * it and finds the copy a machine has: $DFLASH_NCCL_LIB when set (only that
 * one), else libnccl.so.2 from the default search (LD_LIBRARY_PATH, the
 * cache), else /usr/local/cuda/lib64/libnccl.so.2. On machines with PyTorch
 * it is in the nvidia-nccl wheel:
 *   DFLASH_NCCL_LIB=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))')/lib/libnccl.so.2
 *
 * The few types used are declared here with nccl.h's ABI (no header needed
 * at build time). Nothing here needs CUDA: streams are passed as opaque
 * cudaStream_t values; the caller selects the device before init. */
#ifndef DF_DIST_NCCL_H
#define DF_DIST_NCCL_H

#include <stddef.h>

#include "base/error.h"

#define DF_NCCL_UNIQUE_ID_BYTES 128 /* NCCL_UNIQUE_ID_BYTES */

typedef struct DfNcclUniqueId {
    char internal[DF_NCCL_UNIQUE_ID_BYTES];
} DfNcclUniqueId;

typedef enum DfNcclType { DF_NCCL_F32, DF_NCCL_BF16 } DfNcclType;

/* ncclResult_t and the entry points, as in nccl.h. */
typedef int DfNcclResult;
typedef struct DfNcclApi {
    DfNcclResult (*GetVersion)(int *version);
    DfNcclResult (*GetUniqueId)(DfNcclUniqueId *id);
    DfNcclResult (*CommInitRank)(void **comm, int nranks, DfNcclUniqueId id, int rank);
    DfNcclResult (*CommDestroy)(void *comm);
    DfNcclResult (*CommAbort)(void *comm);
    DfNcclResult (*CommGetAsyncError)(void *comm, DfNcclResult *async_error);
    const char *(*GetErrorString)(DfNcclResult result);
    const char *(*GetLastError)(void *comm); /* NULL before NCCL 2.13 */
    DfNcclResult (*AllReduce)(const void *send, void *recv, size_t count, int type, int op, void *comm, void *stream);
    DfNcclResult (*Broadcast)(const void *send, void *recv, size_t count, int type, int root, void *comm,
                              void *stream);
    DfNcclResult (*Send)(const void *send, size_t count, int type, int peer, void *comm, void *stream);
    DfNcclResult (*Recv)(void *recv, size_t count, int type, int peer, void *comm, void *stream);
    DfNcclResult (*GroupStart)(void);
    DfNcclResult (*GroupEnd)(void);
} DfNcclApi;

typedef struct DfNcclLib {
    void *handle;
    char path[512]; /* what was loaded (as given to dlopen) */
    int version;    /* NCCL_VERSION_CODE, e.g. 22809 for 2.28.9 */
    DfNcclApi api;
} DfNcclLib;

typedef struct DfNcclComm {
    const DfNcclLib *lib;
    void *comm;
    int rank, nranks;
} DfNcclComm;

/* Loads NCCL (see above) and resolves every entry point; the error lists
 * each place tried and why it failed. */
int df_nccl_load(DfNcclLib *lib, DfError *err);
/* Forgets lib; the library itself stays loaded until the process ends (NCCL's
 * own threads may still run in it). */
void df_nccl_unload(DfNcclLib *lib);

/* "2.28.9" from a version code (both the old and the 2.9+ encodings). */
void df_nccl_version_string(int code, char *buf, size_t cap);

/* Sets NCCL_NVLS_ENABLE=0 in this process's environment unless the user set
 * it (NVLink multicast is off on the machines this runs on); called by
 * df_nccl_comm_init, before NCCL reads its environment. */
void df_nccl_default_env(void);

int df_nccl_get_unique_id(const DfNcclLib *lib, DfNcclUniqueId *id, DfError *err);

/* Joins the communicator (blocks until every rank has called it); the CUDA
 * device of this rank must be current. */
int df_nccl_comm_init(DfNcclComm *c, const DfNcclLib *lib, int nranks, int rank, const DfNcclUniqueId *id,
                      DfError *err);
/* Tears down without waiting for peers: after a lost rank (NCCL calls in
 * flight return). */
void df_nccl_comm_abort(DfNcclComm *c);
int df_nccl_comm_destroy(DfNcclComm *c, DfError *err);
/* 0, or -1 with the message when NCCL has recorded an asynchronous error
 * (a peer gone, a network failure). */
int df_nccl_check_async(DfNcclComm *c, DfError *err);

/* Collectives, enqueued on stream (a cudaStream_t, NULL for the default). */
int df_nccl_all_reduce_sum(DfNcclComm *c, const void *send, void *recv, size_t count, DfNcclType type, void *stream,
                           DfError *err);
int df_nccl_broadcast(DfNcclComm *c, const void *send, void *recv, size_t count, DfNcclType type, int root,
                      void *stream, DfError *err);
/* Point-to-point: put every send and recv of one exchange between
 * group_start and group_end (they progress together). */
int df_nccl_group_start(const DfNcclLib *lib, DfError *err);
int df_nccl_group_end(const DfNcclLib *lib, DfError *err);
int df_nccl_send(DfNcclComm *c, const void *buf, size_t count, DfNcclType type, int peer, void *stream, DfError *err);
int df_nccl_recv(DfNcclComm *c, void *buf, size_t count, DfNcclType type, int peer, void *stream, DfError *err);

#endif
