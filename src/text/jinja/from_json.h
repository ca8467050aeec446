/* Template values from parsed JSON (conversations, tools, kwargs). */
#ifndef DF_TEXT_JINJA_FROM_JSON_H
#define DF_TEXT_JINJA_FROM_JSON_H

#include <cjson/cJSON.h>

#include "text/jinja/value.h"

/* Strings point into j and carry tag; integral numbers become ints. */
JVal jv_from_cjson(JArena *a, const cJSON *j, int tag);

#endif
