/* String helpers shared by methods and filters (Python's semantics). */
#ifndef DF_TEXT_JINJA_METHODS_H
#define DF_TEXT_JINJA_METHODS_H

#include "text/jinja/interp.h"

JVal jx_strip(JCtx *c, JVal s, const JVal *chars, int left, int right);
JVal jx_case(JCtx *c, JVal s, int mode); /* 0 lower, 1 upper, 2 title, 3 capitalize */
JVal jx_replace(JCtx *c, JVal s, JVal old, JVal new_, int64_t count);
JVal jx_split(JCtx *c, JVal s, const JVal *sep, int64_t maxsplit, int from_right);

#endif
