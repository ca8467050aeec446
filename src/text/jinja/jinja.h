/* A Jinja engine for chat templates: the subset of Jinja2 that Hugging Face
 * chat templates use, rendered as transformers renders them (trim_blocks,
 * lstrip_blocks, loop controls, its tojson, raise_exception, strftime_now).
 * Bounded: a step budget, a recursion limit and a memory limit, so that no
 * template can run forever. Errors name the template's line and column; a
 * construct the engine does not implement is refused naming it.
 *
 * Rendering variables are values of text/jinja/value.h built by the caller
 * in the rendering's arena. A string value's tag (>= 0) is reported back with
 * the byte ranges of the output it reached, through slicing, stripping and
 * concatenation, so that a caller can tell where a message's content landed. */
#ifndef DF_TEXT_JINJA_JINJA_H
#define DF_TEXT_JINJA_JINJA_H

#include <stddef.h>
#include <time.h>

#include "base/error.h"
#include "text/jinja/value.h"

enum { DF_JINJA_RAISED = -2 }; /* render's result when the template called raise_exception */

typedef struct DfJinjaOptions {
    long max_steps;   /* evaluation steps; 0: 10 million */
    int max_depth;    /* nested macro calls; 0: 100 */
    size_t max_bytes; /* arena bytes; 0: 1 GiB */
    time_t now;       /* strftime_now's time; 0: the current time */
} DfJinjaOptions;

/* Bytes [s, e) of an output came from a string tagged `tag`. */
typedef struct JSpan {
    int32_t tag;
    size_t s, e;
} JSpan;

typedef struct JSpanList {
    JSpan *v;
    size_t n, cap;
} JSpanList;

typedef struct DfJinjaOutput {
    JBuf text;
    JSpanList tagged;     /* where tagged strings landed, in output order */
    JSpanList generation; /* the {% generation %} blocks' ranges */
} DfJinjaOutput;

typedef struct DfJinja DfJinja;

DfJinja *df_jinja_compile(const char *src, size_t len, DfError *err);
void df_jinja_free(DfJinja *t);

/* Renders into out (cleared first, its buffers reused). Returns 0, -1 on an
 * error, or DF_JINJA_RAISED with err holding the template's message. Values
 * are allocated in arena; the caller frees it (jv_arena_free) when done with
 * vars and out. */
int df_jinja_render(const DfJinja *t, JArena *arena, const JDict *vars, const DfJinjaOptions *opt,
                    DfJinjaOutput *out, DfError *err);
void df_jinja_output_free(DfJinjaOutput *out);

#endif
