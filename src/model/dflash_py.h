/* dflash.py (src/model/dflash.py): the PyTorch module of the drafter that
 * config.json's auto_map names (dflash.DFlashDraftModel), embedded in the
 * binary at build time (scripts/embed_text.sh) and written by every export
 * next to config.json, so that transformers' trust_remote_code loads the
 * directory as it is. */
#ifndef DF_MODEL_DFLASH_PY_H
#define DF_MODEL_DFLASH_PY_H

extern const char df_dflash_py[];

#endif
