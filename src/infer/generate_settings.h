/* What made a generate output: the target and the settings that decide its
 * records, kept beside it in OUTPUT.generate.json (the JSONL itself stays
 * plain records, for prepare, train and other tools). A rerun that would
 * append to records made by another target or other settings is refused,
 * naming what differs; an output that holds records but no such file (not
 * made by generate, or by an older version) is refused as well. --batch and
 * --device are not recorded: they do not change the records. */
#ifndef DF_INFER_GENERATE_SETTINGS_H
#define DF_INFER_GENERATE_SETTINGS_H

#include <stdint.h>

#include "base/error.h"

typedef struct DfGenerateSettings {
    const char *target;     /* the target directory (recorded as an absolute path) */
    uint64_t tokenizer_fingerprint;
    int max_new_tokens;
    double temperature, top_p;
    int seed;
    const char *chat_date;  /* NULL: the template's */
    const char *chat_template; /* --chat-template FILE, NULL: the target's */
    const char *chat_kwargs;   /* --chat-template-kwargs JSON, NULL: none */
    const int32_t *eos_ids; /* every id that ends a response */
    int n_eos;
    int random_weights;     /* the target's weights were random (recorded as "target_weights": "random"; real
                               ones are not recorded, as in files made before the option) */
} DfGenerateSettings;

/* The settings as a JSON object (heap text, cJSON_free), or NULL with err set
 * when the target's config.json cannot be read (its checksum is recorded). */
char *df_generate_settings_text(const DfGenerateSettings *s, DfError *err);

/* Fails unless `output` is absent or empty, or its settings file records
 * `text`. */
int df_generate_settings_check(const char *output, const char *text, DfError *err);

/* Writes `text` as output's settings file (atomically). */
int df_generate_settings_write(const char *output, const char *text, DfError *err);

#endif
