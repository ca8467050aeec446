/* A closed set of names for the values 0..n-1 of an int, written as one
 * string with '|' between the names, in value order ("colocated|split":
 * colocated is 0, split is 1). A command line takes the names (cli/args.h's
 * DF_OPT_CHOICE, whose metavar is that string) and a record writes them
 * (train/run_record.c). */
#ifndef DF_BASE_CHOICE_NAMES_H
#define DF_BASE_CHOICE_NAMES_H

#include <stddef.h>

/* The value `name` (len bytes) stands for, or -1 when it is none of them. */
int df_choice_value(const char *names, const char *name, size_t len);

/* The name of value into out[cap]: 0, or -1 (out "") when the value has no
 * name (e.g. an "automatic" value past the named ones). */
int df_choice_name(const char *names, int value, char *out, size_t cap);

/* "a, b or c": the names as a message lists them. */
void df_choice_list_text(const char *names, char *out, size_t cap);

#endif
