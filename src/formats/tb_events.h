/* TensorBoard event files: scalars as TensorBoard (and tbparse, and
 * tf.summary readers) read them, written without TensorFlow or protobuf.
 *
 * A file is a sequence of TFRecords, each:
 *   u64 length n (little-endian), u32 masked CRC-32C of those 8 bytes,
 *   n bytes of data, u32 masked CRC-32C of the data,
 * where CRC-32C is the Castagnoli CRC (reflected polynomial 0x82F63B78, as in
 * iSCSI) and masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 (mod 2^32).
 * Each record holds one tensorflow.Event protobuf (event.proto):
 *   field 1 wall_time (double, fixed64), 2 step (int64, varint),
 *   3 file_version (string; the first record: "brain.Event:2"),
 *   5 summary (tensorflow.Summary: repeated field 1 Value, each with
 *     1 tag (string) and 2 simple_value (float, fixed32)).
 * The file is named events.out.tfevents.<unix seconds>.<host>.<pid>, the
 * pattern TensorBoard looks for in a log directory. */
#ifndef DF_FORMATS_TB_EVENTS_H
#define DF_FORMATS_TB_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef struct DfTbWriter DfTbWriter;

/* Creates dir (one level) when missing and a new event file in it, with
 * its file_version record. */
DfTbWriter *df_tb_open(const char *dir, DfError *err);

/* One event at `step` with n scalars tags[i] = values[i] (stored as
 * float), flushed to the file. */
int df_tb_write_scalars(DfTbWriter *w, int64_t step, double wall_time, const char *const *tags, const double *values,
                        int n, DfError *err);

const char *df_tb_path(const DfTbWriter *w);

/* Closes the file; NULL is allowed. */
void df_tb_close(DfTbWriter *w);

/* The CRC-32C of data, and its TFRecord mask. */
uint32_t df_crc32c(const void *data, size_t n);
uint32_t df_tb_masked_crc(uint32_t crc);

#endif
