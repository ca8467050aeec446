/* The hybrid Qwen3.5 / Qwen3.6 fields of a config.json: the hybrid
 * family's read_config (target_family.h): layer types, Gated DeltaNet sizes, partial rotary, the
 * attention output gate and the (1 + w) norms. */
#ifndef DF_TARGET_HYBRID_CONFIG_H
#define DF_TARGET_HYBRID_CONFIG_H

#include <cjson/cJSON.h>

#include "json/json_fields.h"
#include "target/model_config.h"

/* obj: the text model's fields (top level or text_config), after the common
 * sizes and rope were read. Fills the hybrid fields of cfg and rotary_dim;
 * refuses what the dense family does not define (a layer type other than
 * linear_attention / full_attention, an ungated attention, an activation
 * other than silu) with the file and the field. */
int df_hybrid_config_read(const DfJsonReader *r, const cJSON *obj, DfModelConfig *cfg);

#endif
