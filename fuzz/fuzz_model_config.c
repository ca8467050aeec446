/* libFuzzer target: src/target/model_config.c on one config.json. A config
 * that loads must be usable: the tap defaults are computed for it. */
#include "fuzz_file.h"

#include "target/model_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FuzzFile f;
    fuzz_file_make(&f, data, size);
    DfModelConfig cfg;
    DfError err = {{0}};
    if (df_model_config_load(&cfg, f.path, &err) == 0) {
        if (cfg.num_layers < 1 || cfg.hidden_size < 1 || cfg.vocab_size < 1) abort();
        int taps[8];
        int n = cfg.num_layers < 8 ? cfg.num_layers : 8;
        df_default_target_layer_ids(cfg.num_layers, n, taps);
    } else if (err.msg[0] == '\0') {
        abort();
    }
    fuzz_file_drop(&f);
    return 0;
}
