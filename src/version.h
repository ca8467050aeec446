#ifndef DF_VERSION_H
#define DF_VERSION_H

#define DF_VERSION "0.1.0"

/* The backends built in: df_backends_built_in() (backend/select.h). */

#endif
