/* The standard descriptors at start-up. A process started with fd 0, 1 or 2
 * closed hands that number to the first file it opens, so log lines written
 * to stdout or stderr would land inside an output (a token store, a JSONL
 * file). Each closed one is opened on /dev/null before anything else is. */
#ifndef DF_BASE_STD_FDS_H
#define DF_BASE_STD_FDS_H

/* 0 when fds 0-2 are all open afterwards; -1 when /dev/null could not be
 * opened on one of them (the caller stops: outputs are not safe to write). */
int df_guard_std_fds(void);

#endif
