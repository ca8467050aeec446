/* A Hugging Face `datasets` folder (what Dataset.save_to_disk writes):
 * state.json lists the shards under "_data_files" (each {"filename": ...},
 * an .arrow IPC stream in the folder), dataset_info.json describes the
 * features. The shards are read in the listed order as one sequence of
 * record batches; every shard must have the first one's schema. A single
 * .arrow file is accepted too, as a dataset of one shard. */
#ifndef DF_FORMATS_ARROW_DATASET_H
#define DF_FORMATS_ARROW_DATASET_H

#include "formats/arrow.h"

typedef struct DfArrowDataset DfArrowDataset;

/* path: a datasets folder or an .arrow file. */
DfArrowDataset *df_arrow_dataset_open(const char *path, DfError *err);
void df_arrow_dataset_close(DfArrowDataset *ds);

const DfArrowSchema *df_arrow_dataset_schema(const DfArrowDataset *ds);
int df_arrow_dataset_num_files(const DfArrowDataset *ds);
const char *df_arrow_dataset_file(const DfArrowDataset *ds, int i);
/* 1 when path was a folder with a dataset_info.json (its "features" keys are
 * then in the schema too, checked at open). */
int df_arrow_dataset_has_info(const DfArrowDataset *ds);

/* The next record batch of the current shard or the shards after it: 1, 0
 * at the end of the last shard, -1 on error. *shard (may be NULL) is the
 * reader the batch came from (its path, compression). */
int df_arrow_dataset_next_batch(DfArrowDataset *ds, const DfArrowBatch **batch, const DfArrowReader **shard,
                                DfError *err);

/* Is path an Arrow input for prepare/inspect: a folder, or a file whose name
 * ends in .arrow? */
int df_arrow_is_arrow_path(const char *path);

#endif
