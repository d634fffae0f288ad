/* vram — resumable training state files (vram's own format).
 *
 * One file holds everything needed to continue a run bit-exactly: the model
 * config as named integers, the step, the optimizer kind, the RNG state, the
 * data position, the loss scale, and named byte buffers (params, optimizer
 * m and v, ...). Layout (little-endian):
 *   header   magic "VRSTATE\0", u32 version, u32 nsections, u64 file bytes,
 *            u32 crc32 of header+table (with this field 0), u32 reserved
 *   table    nsections x {char name[24], u64 offset, u64 bytes, u32 crc32, u32 0}
 *   payload  section "meta" (the scalars and config), then one per buffer.
 * Every section carries a zlib crc32, so truncation and corruption are found
 * on load. Saves are atomic (see atomic_file.h). */
#ifndef VRAM_TRAIN_STATE_H
#define VRAM_TRAIN_STATE_H

#include <stddef.h>
#include <stdint.h>
#include "vram/data.h"
#include "vram/status.h"
#include "vram/export.h"

#ifdef __cplusplus
extern "C" {
#endif
VR_API_BEGIN

#define VR_STATE_VERSION 1
#define VR_STATE_NAME_MAX 24  /* names, including the terminating NUL */
#define VR_STATE_MAX_CONFIG 48
#define VR_STATE_MAX_BUFFERS 16

typedef struct vr_state_field {
    char name[VR_STATE_NAME_MAX]; /* e.g. "channels" */
    int64_t value;
} vr_state_field;

typedef struct vr_state_buffer {
    char name[VR_STATE_NAME_MAX]; /* e.g. "params", "adam.m", "adam.v" */
    void *data;                   /* host memory: source on save, destination on load */
    uint64_t bytes;
} vr_state_buffer;

typedef struct vr_train_state {
    char model[VR_STATE_NAME_MAX];     /* model kind, e.g. "gpt2", "mlp" */
    char optimizer[VR_STATE_NAME_MAX]; /* e.g. "adamw", "sgd" */
    int64_t step;                      /* optimizer steps completed */
    uint64_t tokens_seen;
    uint64_t rng[4];                   /* the training RNG's state, opaque here */
    uint64_t data_seed;                /* the loader's seed, checked on resume */
    vr_data_pos data_pos;              /* the next training batch */
    float loss_scale;                  /* fp16 dynamic loss scale; 1 otherwise */
    int nconfig;
    vr_state_field config[VR_STATE_MAX_CONFIG];
    int nbuffers;
    vr_state_buffer buffers[VR_STATE_MAX_BUFFERS];
} vr_train_state;

/* Appends a named config integer (name truncated to 23 chars). */
vr_status vr_state_set_config(vr_train_state *s, const char *name, int64_t value);

/* Looks a config integer up; returns 0 if absent, 1 and *value if present. */
int vr_state_get_config(const vr_train_state *s, const char *name, int64_t *value);

/* Appends a named buffer; on save it is read from data, on load written to it. */
vr_status vr_state_add_buffer(vr_train_state *s, const char *name, void *data, uint64_t bytes);

/* Writes the state and its buffers to path atomically. */
vr_status vr_state_save(const char *path, const vr_train_state *s);

/* Reads and checks the header, table and meta section (not the buffers): fills
 * the scalars and config, and lists the buffers with data = NULL and their sizes. */
vr_status vr_state_read_meta(const char *path, vr_train_state *out);

/* Errors naming the field ("state.bin: channels is 768 in the checkpoint but 512
 * in the model") unless every config integer of `model` is in `file` and equal. */
vr_status vr_state_config_match(const char *path, const vr_train_state *file, const vr_train_state *model);

/* Loads a state: the meta into *s (keeping s's buffer list), then each of s's
 * buffers from the section of the same name, checking sizes and crc32s (file
 * buffers not asked for are skipped). On failure the buffers may be partly
 * written and must not be used. */
vr_status vr_state_load(const char *path, vr_train_state *s);

VR_API_END
#ifdef __cplusplus
}
#endif
#endif
