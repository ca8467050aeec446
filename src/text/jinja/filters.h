/* The two halves of the filter set; each returns 0, -1 on an error, or 1
 * when it does not know the filter. */
#ifndef DF_TEXT_JINJA_FILTERS_H
#define DF_TEXT_JINJA_FILTERS_H

#include "text/jinja/interp.h"

int jx_filter_scalar(JCtx *c, const JNode *at, const char *name, JVal v, JArgs *args, JVal *out);
int jx_filter_seq(JCtx *c, const JNode *at, const char *name, JVal v, JArgs *args, JVal *out);

#endif
