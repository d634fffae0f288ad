/* Internal: loads the whole token stream of a data source into host memory. */
#ifndef VRAM_TRAIN_DATA_SOURCE_H
#define VRAM_TRAIN_DATA_SOURCE_H

#include "vram/data.h"

/* Loads every token of cfg's source (before any split) into *tok (malloc'd,
 * caller frees), checking each is < vocab. *vocab gets the bound used. */
vr_status vr_data_load_source(const vr_data_config *cfg, uint32_t **tok, uint64_t *n, int *vocab);

#endif
