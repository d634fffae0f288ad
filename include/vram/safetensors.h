/* vram — Hugging Face safetensors checkpoints: read (one file, or a directory
 * with model.safetensors or a sharded model.safetensors.index.json) and write.
 *
 * A file is an 8-byte little-endian header length N, N bytes of JSON
 * {"name": {"dtype": "F32"|"BF16"|"F16", "shape": [...], "data_offsets": [b, e]},
 *  "__metadata__": {str: str}}, then the data (offsets relative to its start).
 * Every field is validated before use; errors name the file and the tensor. */
#ifndef VRAM_SAFETENSORS_H
#define VRAM_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "vram/convert.h"
#include "vram/graph.h"
#include "vram/status.h"
#include "vram/export.h"

#ifdef __cplusplus
extern "C" {
#endif
VR_API_BEGIN

#define VR_ST_MAX_DIMS 8
#define VR_ST_MAX_HEADER (100u * 1024 * 1024) /* bytes of JSON header accepted */

/* One tensor of an opened checkpoint. */
typedef struct vr_st_tensor {
    const char *name;               /* e.g. "model.norm.weight" */
    vr_dtype dtype;                 /* VR_F32, VR_BF16 or VR_F16 */
    int ndim;                       /* 0..VR_ST_MAX_DIMS */
    int64_t shape[VR_ST_MAX_DIMS];  /* elements per dimension */
    uint64_t numel;                 /* product of shape (1 for a scalar) */
    uint64_t offset;                /* byte offset of the data in its file */
    uint64_t nbytes;                /* numel * dtype size */
    const char *file;               /* the file holding it */
} vr_st_tensor;

typedef struct vr_safetensors vr_safetensors;

/* Opens a .safetensors file, or a directory holding model.safetensors.index.json
 * (sharded) or model.safetensors; reads and validates every header. */
vr_status vr_st_open(const char *path, vr_safetensors **out);

/* Parses a whole safetensors file held in memory (data is borrowed and must
 * outlive *out); label names it in errors. */
vr_status vr_st_open_memory(const char *label, const void *data, size_t size, vr_safetensors **out);

/* Frees an opened checkpoint (NULL is fine). */
void vr_st_close(vr_safetensors *st);

/* Number of tensors and the i-th one (in header order, shard by shard). */
int vr_st_count(const vr_safetensors *st);
const vr_st_tensor *vr_st_tensor_at(const vr_safetensors *st, int i);

/* The tensor of that name, or NULL. */
const vr_st_tensor *vr_st_find(const vr_safetensors *st, const char *name);

/* The "__metadata__" value for key of the (first) file, or NULL. */
const char *vr_st_metadata(const vr_safetensors *st, const char *key);

/* Reads tensor name converted to dtype (VR_F32, VR_BF16 or VR_F16) into dst,
 * which holds dst_bytes (must be >= numel * dtype size). */
vr_status vr_st_read(const vr_safetensors *st, const char *name, vr_dtype dtype, void *dst,
                     size_t dst_bytes);

/* One tensor to write: data holds numel(shape) elements of dtype. */
typedef struct vr_st_write_tensor {
    const char *name;
    vr_dtype dtype;                 /* VR_F32, VR_BF16 or VR_F16 */
    int ndim;
    int64_t shape[VR_ST_MAX_DIMS];
    const void *data;
} vr_st_write_tensor;

/* Writes the tensors (names unique) to path atomically (temp file + rename),
 * data in the given order, 8-byte aligned; meta_keys/meta_values (n_meta
 * pairs, may be 0) go into "__metadata__" (e.g. "format": "pt"). */
vr_status vr_st_write(const char *path, const vr_st_write_tensor *tensors, int n,
                      const char *const *meta_keys, const char *const *meta_values, int n_meta);

VR_API_END
#ifdef __cplusplus
}
#endif
#endif
