/* Reading safetensors: one file, an in-memory file, or a directory (sharded
 * through model.safetensors.index.json, else model.safetensors). Each header is
 * validated entirely (lengths, dtypes, shapes, offsets in bounds, no overlap)
 * before any tensor is returned. */
#define _POSIX_C_SOURCE 200809L
#include "vram/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct vr_safetensors {
    vr_st_tensor *t;
    int n, cap;
    char **files;         /* owned paths (or the label of a memory file) */
    int nfiles;
    cJSON *meta;          /* first file's __metadata__ (owned copy) or NULL */
    const uint8_t *mem;   /* whole file in memory, or NULL (read from files) */
    size_t mem_size;
};

static vr_status grow(vr_safetensors *st)
{
    if (st->n < st->cap) return VR_OK;
    int cap = st->cap ? st->cap * 2 : 64;
    vr_st_tensor *t = realloc(st->t, (size_t)cap * sizeof *t);
    if (!t) return vr_error(VR_ERR_OOM, "safetensors: out of host memory for the tensor list");
    st->t = t;
    st->cap = cap;
    return VR_OK;
}

static int dtype_of(const char *s, vr_dtype *dt)
{
    if (!strcmp(s, "F32")) *dt = VR_F32;
    else if (!strcmp(s, "BF16")) *dt = VR_BF16;
    else if (!strcmp(s, "F16")) *dt = VR_F16;
    else return 0;
    return 1;
}

static int by_offset(const void *a, const void *b)
{
    const vr_st_tensor *x = *(const vr_st_tensor *const *)a, *y = *(const vr_st_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Parses one header (json of hlen bytes) of a file of file_size bytes whose
 * data starts at byte 8 + hlen; appends its tensors to st. */
static vr_status parse_header(vr_safetensors *st, const char *file, const char *json, size_t hlen,
                              uint64_t file_size)
{
    uint64_t data_size = file_size - 8 - hlen;
    cJSON *root = cJSON_ParseWithLength(json, hlen);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return vr_error(VR_ERR_FORMAT, "%s: the safetensors header is not a JSON object", file);
    }
    int first = st->n;
    vr_status s = VR_OK;
    for (cJSON *e = root->child; e && s == VR_OK; e = e->next) {
        const char *name = e->string ? e->string : "";
        if (!strcmp(name, "__metadata__")) {
            if (!cJSON_IsObject(e)) {
                s = vr_error(VR_ERR_FORMAT, "%s: \"__metadata__\" is not an object", file);
                break;
            }
            for (cJSON *m = e->child; m; m = m->next)
                if (!cJSON_IsString(m)) {
                    s = vr_error(VR_ERR_FORMAT, "%s: \"__metadata__\" value \"%s\" is not a string", file,
                                 m->string ? m->string : "");
                    break;
                }
            if (s == VR_OK && !st->meta) st->meta = cJSON_Duplicate(e, 1);
            continue;
        }
        if (!cJSON_IsObject(e)) {
            s = vr_error(VR_ERR_FORMAT, "%s: tensor \"%s\": entry is not an object", file, name);
            break;
        }
        for (int j = 0; j < st->n; j++)
            if (!strcmp(st->t[j].name, name)) {
                s = vr_error(VR_ERR_FORMAT, "%s: tensor \"%s\" appears twice (also in %s)", file, name,
                             st->t[j].file);
                break;
            }
        if (s != VR_OK) break;
        cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
        cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
        cJSON *of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
        vr_st_tensor t = {0};
        if (!cJSON_IsString(dt)) {
            s = vr_error(VR_ERR_FORMAT, "%s: tensor \"%s\": missing string field \"dtype\"", file, name);
            break;
        }
        if (!dtype_of(dt->valuestring, &t.dtype)) {
            s = vr_error(VR_ERR_UNSUPPORTED, "%s: tensor \"%s\": dtype \"%s\" is not supported (F32, BF16, F16)",
                         file, name, dt->valuestring);
            break;
        }
        if (!cJSON_IsArray(sh) || cJSON_GetArraySize(sh) > VR_ST_MAX_DIMS) {
            s = vr_error(VR_ERR_FORMAT, "%s: tensor \"%s\": \"shape\" is not an array of at most %d sizes",
                         file, name, VR_ST_MAX_DIMS);
            break;
        }
        t.numel = 1;
        for (cJSON *d = sh->child; d; d = d->next) {
            double v = cJSON_IsNumber(d) ? d->valuedouble : -1;
            if (!(v >= 0 && v <= 9.0e15) || v != (double)(int64_t)v) { /* range (and NaN) before the cast */
                s = vr_error(VR_ERR_FORMAT, "%s: tensor \"%s\": \"shape\" entry %d is not a non-negative integer",
                             file, name, t.ndim);
                break;
            }
            t.shape[t.ndim++] = (int64_t)v;
            if (v > 0 && t.numel > UINT64_MAX / 8 / (uint64_t)v) {
                s = vr_error(VR_ERR_FORMAT, "%s: tensor \"%s\": \"shape\" overflows", file, name);
                break;
            }
            t.numel *= (uint64_t)v;
        }
        if (s != VR_OK) break;
        if (!cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2 || !cJSON_IsNumber(of->child) ||
            !cJSON_IsNumber(of->child->next)) {
            s = vr_error(VR_ERR_FORMAT, "%s: tensor \"%s\": \"data_offsets\" is not [begin, end]", file, name);
            break;
        }
        double b = of->child->valuedouble, en = of->child->next->valuedouble;
        if (!(b >= 0 && en >= b && en <= (double)data_size) || b != (double)(uint64_t)b || en != (double)(uint64_t)en) {
            s = vr_error(VR_ERR_FORMAT,
                         "%s: tensor \"%s\": \"data_offsets\" [%.0f, %.0f] lie outside the %llu data bytes",
                         file, name, b, en, (unsigned long long)data_size);
            break;
        }
        t.nbytes = t.numel * vr_dtype_size(t.dtype);
        if ((uint64_t)en - (uint64_t)b != t.nbytes) {
            s = vr_error(VR_ERR_FORMAT,
                         "%s: tensor \"%s\": \"data_offsets\" span %llu bytes but shape x %s needs %llu",
                         file, name, (unsigned long long)((uint64_t)en - (uint64_t)b),
                         vr_dtype_name(t.dtype), (unsigned long long)t.nbytes);
            break;
        }
        t.offset = 8 + hlen + (uint64_t)b;
        t.file = st->files[st->nfiles - 1];
        if ((s = grow(st)) != VR_OK) break;
        t.name = strdup(name);
        if (!t.name) {
            s = vr_error(VR_ERR_OOM, "%s: out of host memory", file);
            break;
        }
        st->t[st->n++] = t;
    }
    cJSON_Delete(root);
    if (s != VR_OK) return s;
    /* No two tensors of this file may overlap. */
    int k = st->n - first;
    if (k > 1) {
        vr_st_tensor **o = malloc((size_t)k * sizeof *o);
        if (!o) return vr_error(VR_ERR_OOM, "%s: out of host memory", file);
        for (int i = 0; i < k; i++) o[i] = &st->t[first + i];
        qsort(o, (size_t)k, sizeof *o, by_offset);
        for (int i = 1; i < k && s == VR_OK; i++)
            if (o[i]->nbytes && o[i - 1]->offset + o[i - 1]->nbytes > o[i]->offset)
                s = vr_error(VR_ERR_FORMAT, "%s: tensors \"%s\" and \"%s\" overlap", file, o[i - 1]->name,
                             o[i]->name);
        free(o);
    }
    return s;
}

static vr_status add_file_name(vr_safetensors *st, const char *path)
{
    char **f = realloc(st->files, (size_t)(st->nfiles + 1) * sizeof *f);
    if (!f) return vr_error(VR_ERR_OOM, "%s: out of host memory", path);
    st->files = f;
    if (!(f[st->nfiles] = strdup(path))) return vr_error(VR_ERR_OOM, "%s: out of host memory", path);
    st->nfiles++;
    return VR_OK;
}

/* Reads and parses the header of one file on disk. */
static vr_status load_file(vr_safetensors *st, const char *path)
{
    vr_status s = add_file_name(st, path);
    if (s != VR_OK) return s;
    FILE *f = fopen(path, "rb");
    if (!f) return vr_error(VR_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0) {
        fclose(f);
        return vr_error(VR_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    }
    uint64_t size = (uint64_t)sb.st_size;
    uint8_t h8[8];
    if (size < 8 || fread(h8, 1, 8, f) != 8) {
        fclose(f);
        return vr_error(VR_ERR_FORMAT, "%s: %llu bytes is too small for a safetensors file", path,
                        (unsigned long long)size);
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | h8[i];
    if (hlen > VR_ST_MAX_HEADER || hlen > size - 8) {
        fclose(f);
        return vr_error(VR_ERR_FORMAT, "%s: header length %llu exceeds the file (%llu bytes) or the %u-byte limit",
                        path, (unsigned long long)hlen, (unsigned long long)size, VR_ST_MAX_HEADER);
    }
    char *json = malloc(hlen ? hlen : 1);
    if (!json) {
        fclose(f);
        return vr_error(VR_ERR_OOM, "%s: out of host memory for a %llu-byte header", path,
                        (unsigned long long)hlen);
    }
    if (fread(json, 1, hlen, f) != hlen) {
        free(json);
        fclose(f);
        return vr_error(VR_ERR_IO, "%s: short read of the header", path);
    }
    fclose(f);
    s = parse_header(st, path, json, hlen, size);
    free(json);
    return s;
}

vr_status vr_st_open_memory(const char *label, const void *data, size_t size, vr_safetensors **out)
{
    *out = NULL;
    vr_safetensors *st = calloc(1, sizeof *st);
    if (!st) return vr_error(VR_ERR_OOM, "%s: out of host memory", label);
    st->mem = data;
    st->mem_size = size;
    vr_status s = add_file_name(st, label);
    uint64_t hlen = 0;
    if (s == VR_OK && size < 8)
        s = vr_error(VR_ERR_FORMAT, "%s: %zu bytes is too small for a safetensors file", label, size);
    if (s == VR_OK) {
        for (int i = 7; i >= 0; i--) hlen = hlen << 8 | st->mem[i];
        if (hlen > VR_ST_MAX_HEADER || hlen > size - 8)
            s = vr_error(VR_ERR_FORMAT, "%s: header length %llu exceeds the file (%zu bytes) or the limit",
                         label, (unsigned long long)hlen, size);
    }
    if (s == VR_OK) s = parse_header(st, label, (const char *)st->mem + 8, (size_t)hlen, size);
    if (s != VR_OK) {
        vr_st_close(st);
        return s;
    }
    *out = st;
    return VR_OK;
}

/* Sharded: every shard named by weight_map, loaded once; each tensor must be
 * in the shard the map names. */
static vr_status load_index(vr_safetensors *st, const char *dir, const char *index)
{
    FILE *f = fopen(index, "rb");
    if (!f) return vr_error(VR_ERR_IO, "%s: cannot open: %s", index, strerror(errno));
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (len < 0 || len > (long)VR_ST_MAX_HEADER) {
        fclose(f);
        return vr_error(VR_ERR_FORMAT, "%s: index file of %ld bytes is not accepted", index, len);
    }
    char *txt = malloc((size_t)len + 1);
    if (!txt || fread(txt, 1, (size_t)len, f) != (size_t)len) {
        free(txt);
        fclose(f);
        return vr_error(VR_ERR_IO, "%s: cannot read", index);
    }
    fclose(f);
    cJSON *root = cJSON_ParseWithLength(txt, (size_t)len);
    free(txt);
    cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    vr_status s = VR_OK;
    if (!cJSON_IsObject(wm)) s = vr_error(VR_ERR_FORMAT, "%s: missing object field \"weight_map\"", index);
    for (cJSON *e = wm ? wm->child : NULL; e && s == VR_OK; e = e->next) {
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/')) {
            s = vr_error(VR_ERR_FORMAT, "%s: weight_map entry \"%s\" is not a shard file name", index, e->string);
            break;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->valuestring);
        int seen = 0;
        for (int i = 0; i < st->nfiles; i++) seen |= !strcmp(st->files[i], path);
        if (!seen) s = load_file(st, path);
    }
    for (cJSON *e = wm ? wm->child : NULL; e && s == VR_OK; e = e->next) {
        const vr_st_tensor *t = vr_st_find(st, e->string);
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->valuestring);
        if (!t) s = vr_error(VR_ERR_FORMAT, "%s: tensor \"%s\" is not in its shard %s", index, e->string, path);
        else if (strcmp(t->file, path))
            s = vr_error(VR_ERR_FORMAT, "%s: tensor \"%s\" is in %s, not in %s as weight_map says", index,
                         e->string, t->file, path);
    }
    cJSON_Delete(root);
    return s;
}

vr_status vr_st_open(const char *path, vr_safetensors **out)
{
    *out = NULL;
    vr_safetensors *st = calloc(1, sizeof *st);
    if (!st) return vr_error(VR_ERR_OOM, "%s: out of host memory", path);
    struct stat sb;
    vr_status s;
    if (stat(path, &sb) != 0) {
        s = vr_error(VR_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    } else if (S_ISDIR(sb.st_mode)) {
        char p[4096];
        snprintf(p, sizeof p, "%s/model.safetensors.index.json", path);
        if (stat(p, &sb) == 0) {
            s = load_index(st, path, p);
        } else {
            snprintf(p, sizeof p, "%s/model.safetensors", path);
            if (stat(p, &sb) == 0) s = load_file(st, p);
            else s = vr_error(VR_ERR_IO, "%s: no model.safetensors.index.json nor model.safetensors", path);
        }
    } else {
        s = load_file(st, path);
    }
    if (s != VR_OK) {
        vr_st_close(st);
        return s;
    }
    *out = st;
    return VR_OK;
}

void vr_st_close(vr_safetensors *st)
{
    if (!st) return;
    for (int i = 0; i < st->n; i++) free((char *)st->t[i].name);
    for (int i = 0; i < st->nfiles; i++) free(st->files[i]);
    free(st->files);
    free(st->t);
    cJSON_Delete(st->meta);
    free(st);
}

int vr_st_count(const vr_safetensors *st) { return st->n; }

const vr_st_tensor *vr_st_tensor_at(const vr_safetensors *st, int i)
{
    return i >= 0 && i < st->n ? &st->t[i] : NULL;
}

const vr_st_tensor *vr_st_find(const vr_safetensors *st, const char *name)
{
    for (int i = 0; i < st->n; i++)
        if (!strcmp(st->t[i].name, name)) return &st->t[i];
    return NULL;
}

const char *vr_st_metadata(const vr_safetensors *st, const char *key)
{
    cJSON *v = cJSON_GetObjectItemCaseSensitive(st->meta, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

vr_status vr_st_read(const vr_safetensors *st, const char *name, vr_dtype dtype, void *dst,
                     size_t dst_bytes)
{
    const vr_st_tensor *t = vr_st_find(st, name);
    if (!t) return vr_error(VR_ERR_INVALID, "%s: no tensor \"%s\"", st->nfiles ? st->files[0] : "safetensors", name);
    if (dtype != VR_F32 && dtype != VR_BF16 && dtype != VR_F16)
        return vr_error(VR_ERR_INVALID, "%s: tensor \"%s\": cannot convert to %s", t->file, name,
                        vr_dtype_name(dtype));
    if (t->numel > dst_bytes / vr_dtype_size(dtype))
        return vr_error(VR_ERR_INVALID, "%s: tensor \"%s\": %llu elements of %s do not fit %zu bytes", t->file,
                        name, (unsigned long long)t->numel, vr_dtype_name(dtype), dst_bytes);
    if (st->mem) {
        vr_convert(dtype, dst, t->dtype, st->mem + t->offset, (size_t)t->numel);
        return VR_OK;
    }
    FILE *f = fopen(t->file, "rb");
    if (!f) return vr_error(VR_ERR_IO, "%s: cannot open: %s", t->file, strerror(errno));
    vr_status s = VR_OK;
    if (fseeko(f, (off_t)t->offset, SEEK_SET) != 0) s = vr_error(VR_ERR_IO, "%s: cannot seek", t->file);
    if (s == VR_OK && dtype == t->dtype) {
        if (fread(dst, 1, (size_t)t->nbytes, f) != t->nbytes)
            s = vr_error(VR_ERR_IO, "%s: tensor \"%s\": short read (file changed?)", t->file, name);
    } else if (s == VR_OK) {
        /* Convert in chunks of 64 Ki elements. */
        size_t es = vr_dtype_size(t->dtype), chunk = 65536;
        void *buf = malloc(chunk * es);
        if (!buf) s = vr_error(VR_ERR_OOM, "%s: out of host memory", t->file);
        for (uint64_t i = 0; s == VR_OK && i < t->numel; i += chunk) {
            size_t k = t->numel - i < chunk ? (size_t)(t->numel - i) : chunk;
            if (fread(buf, es, k, f) != k)
                s = vr_error(VR_ERR_IO, "%s: tensor \"%s\": short read (file changed?)", t->file, name);
            else
                vr_convert(dtype, (char *)dst + i * vr_dtype_size(dtype), t->dtype, buf, k);
        }
        free(buf);
    }
    fclose(f);
    return s;
}
