#include "cli/generate_options.h"

#include <limits.h>
#include <string.h>

#include "cli/args.h"

/* Each field has the C type of its option's kind (what the parser writes). */
#define DF_OPTION(name, kind, field, ...) DF_OPTION_TYPE_CHECK(((DfGenerateJobOptions *)0)->field, kind, name);
#include "cli/generate_options.def"
#undef DF_OPTION

void df_generate_options_default(DfGenerateJobOptions *o) {
    memset(o, 0, sizeof *o);
#define DF_OPTION(name, kind, field, value, ...) o->field = (value);
#include "cli/generate_options.def"
#undef DF_OPTION
}
