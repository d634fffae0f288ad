/* Writing safetensors: header JSON padded with spaces to a multiple of 8 bytes,
 * tensors in the caller's order, written atomically (vram/atomic_file.h). */
#define _POSIX_C_SOURCE 200809L
#include "vram/safetensors.h"

#include "vram/atomic_file.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *st_dtype_name(vr_dtype dt)
{
    return dt == VR_F32 ? "F32" : dt == VR_BF16 ? "BF16" : dt == VR_F16 ? "F16" : NULL;
}

/* The header JSON of the tensors (data back to back from offset 0). */
static vr_status build_header(const char *path, const vr_st_write_tensor *t, int n,
                              const char *const *mk, const char *const *mv, int n_meta, char **out)
{
    cJSON *root = cJSON_CreateObject();
    if (!root) return vr_error(VR_ERR_OOM, "%s: out of host memory", path);
    if (n_meta > 0) {
        cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
        for (int i = 0; i < n_meta; i++) cJSON_AddStringToObject(m, mk[i], mv[i]);
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const char *dn = st_dtype_name(t[i].dtype);
        if (!t[i].name || !t[i].name[0] || !strcmp(t[i].name, "__metadata__") ||
            cJSON_GetObjectItemCaseSensitive(root, t[i].name)) {
            cJSON_Delete(root);
            return vr_error(VR_ERR_INVALID, "%s: tensor %d: name \"%s\" is empty, reserved or repeated", path, i,
                            t[i].name ? t[i].name : "");
        }
        if (!dn || t[i].ndim < 0 || t[i].ndim > VR_ST_MAX_DIMS) {
            cJSON_Delete(root);
            return vr_error(VR_ERR_INVALID, "%s: tensor \"%s\": dtype must be f32/bf16/f16 and ndim 0..%d", path,
                            t[i].name, VR_ST_MAX_DIMS);
        }
        cJSON *e = cJSON_AddObjectToObject(root, t[i].name);
        cJSON_AddStringToObject(e, "dtype", dn);
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        uint64_t numel = 1;
        for (int d = 0; d < t[i].ndim; d++) {
            if (t[i].shape[d] < 0) {
                cJSON_Delete(root);
                return vr_error(VR_ERR_INVALID, "%s: tensor \"%s\": negative size in dimension %d", path,
                                t[i].name, d);
            }
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t[i].shape[d]));
            numel *= (uint64_t)t[i].shape[d];
        }
        uint64_t nb = numel * vr_dtype_size(t[i].dtype);
        cJSON *of = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)(off + nb)));
        off += nb;
    }
    *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return *out ? VR_OK : vr_error(VR_ERR_OOM, "%s: out of host memory for the header", path);
}

vr_status vr_st_write(const char *path, const vr_st_write_tensor *t, int n,
                      const char *const *meta_keys, const char *const *meta_values, int n_meta)
{
    char *json = NULL;
    vr_status s = build_header(path, t, n, meta_keys, meta_values, n_meta, &json);
    if (s != VR_OK) return s;
    size_t jl = strlen(json), hlen = (jl + 7) / 8 * 8;
    vr_atomic_file af;
    if ((s = vr_atomic_open(&af, path)) != VR_OK) {
        free(json);
        return s;
    }
    uint8_t h8[8];
    for (int i = 0; i < 8; i++) h8[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    vr_atomic_write(&af, h8, 8);
    vr_atomic_write(&af, json, jl);
    free(json);
    static const char pad[8] = "        ";
    vr_atomic_write(&af, pad, hlen - jl);
    for (int i = 0; i < n; i++) {
        uint64_t numel = 1;
        for (int d = 0; d < t[i].ndim; d++) numel *= (uint64_t)t[i].shape[d];
        vr_atomic_write(&af, t[i].data, (size_t)(numel * vr_dtype_size(t[i].dtype)));
    }
    return vr_atomic_commit(&af);
}
