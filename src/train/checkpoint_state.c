/* vram's resumable training state file: header, section table, sections, each
 * with a zlib crc32 (layout in include/vram/train_state.h). Little-endian hosts. */
#define _POSIX_C_SOURCE 200809L
#include "vram/train_state.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "vram/atomic_file.h"
#include "train/file_io.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the training state format is little-endian; add byte swaps for this host"
#endif

static const char MAGIC[8] = "VRSTATE";
enum { HEADER_BYTES = 32, ENTRY_BYTES = 48, META_FIXED = 2 * VR_STATE_NAME_MAX + 8 * 9 + 4 + 4, /* names, 9 u64, f32, u32 */
       FIELD_BYTES = VR_STATE_NAME_MAX + 8, MAX_SECTIONS = 1 + VR_STATE_MAX_BUFFERS };

typedef struct entry {
    char name[VR_STATE_NAME_MAX];
    uint64_t offset, bytes;
    uint32_t crc;
} entry;

/* ---- small helpers ------------------------------------------------------ */

static uint32_t crc_update(uint32_t crc, const void *p, uint64_t n)
{
    const Bytef *b = p;
    while (n) {
        uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = (uint32_t)crc32(crc, b, k);
        b += k;
        n -= k;
    }
    return crc;
}

static void copy_name(char dst[VR_STATE_NAME_MAX], const char *src)
{
    memset(dst, 0, VR_STATE_NAME_MAX);
    size_t n = src ? strlen(src) : 0;
    memcpy(dst, src, n < VR_STATE_NAME_MAX - 1 ? n : VR_STATE_NAME_MAX - 1);
}

static void put(uint8_t **p, const void *v, size_t n) { memcpy(*p, v, n); *p += n; }
static void get(const uint8_t **p, void *v, size_t n) { memcpy(v, *p, n); *p += n; }

/* ---- building a state ---------------------------------------------------- */

vr_status vr_state_set_config(vr_train_state *s, const char *name, int64_t value)
{
    for (int i = 0; i < s->nconfig; i++)
        if (strncmp(s->config[i].name, name, VR_STATE_NAME_MAX - 1) == 0) {
            s->config[i].value = value;
            return VR_OK;
        }
    if (s->nconfig >= VR_STATE_MAX_CONFIG)
        return vr_error(VR_ERR_INVALID, "training state: more than %d config fields", VR_STATE_MAX_CONFIG);
    copy_name(s->config[s->nconfig].name, name);
    s->config[s->nconfig++].value = value;
    return VR_OK;
}

int vr_state_get_config(const vr_train_state *s, const char *name, int64_t *value)
{
    for (int i = 0; i < s->nconfig; i++)
        if (strncmp(s->config[i].name, name, VR_STATE_NAME_MAX - 1) == 0) {
            *value = s->config[i].value;
            return 1;
        }
    return 0;
}

vr_status vr_state_add_buffer(vr_train_state *s, const char *name, void *data, uint64_t bytes)
{
    if (s->nbuffers >= VR_STATE_MAX_BUFFERS)
        return vr_error(VR_ERR_INVALID, "training state: more than %d buffers", VR_STATE_MAX_BUFFERS);
    if (!name || !*name || strcmp(name, "meta") == 0)
        return vr_error(VR_ERR_INVALID, "training state: bad buffer name '%s'", name ? name : "");
    vr_state_buffer *b = &s->buffers[s->nbuffers++];
    copy_name(b->name, name);
    b->data = data;
    b->bytes = bytes;
    return VR_OK;
}

/* ---- the meta section ---------------------------------------------------- */

static size_t meta_bytes(const vr_train_state *s) { return META_FIXED + (size_t)s->nconfig * FIELD_BYTES; }

static void meta_encode(const vr_train_state *s, uint8_t *p)
{
    char name[VR_STATE_NAME_MAX];
    copy_name(name, s->model);
    put(&p, name, sizeof name);
    copy_name(name, s->optimizer);
    put(&p, name, sizeof name);
    put(&p, &s->step, 8);
    put(&p, &s->tokens_seen, 8);
    put(&p, s->rng, 32);
    put(&p, &s->data_seed, 8);
    put(&p, &s->data_pos.epoch, 8);
    put(&p, &s->data_pos.batch, 8);
    put(&p, &s->loss_scale, 4);
    uint32_t n = (uint32_t)s->nconfig;
    put(&p, &n, 4);
    for (int i = 0; i < s->nconfig; i++) {
        copy_name(name, s->config[i].name);
        put(&p, name, sizeof name);
        put(&p, &s->config[i].value, 8);
    }
}

static vr_status meta_decode(const char *path, const uint8_t *p, uint64_t bytes, vr_train_state *s)
{
    if (bytes < META_FIXED) return vr_error(VR_ERR_FORMAT, "%s: meta section is too short", path);
    get(&p, s->model, VR_STATE_NAME_MAX);
    get(&p, s->optimizer, VR_STATE_NAME_MAX);
    s->model[VR_STATE_NAME_MAX - 1] = s->optimizer[VR_STATE_NAME_MAX - 1] = '\0';
    get(&p, &s->step, 8);
    get(&p, &s->tokens_seen, 8);
    get(&p, s->rng, 32);
    get(&p, &s->data_seed, 8);
    get(&p, &s->data_pos.epoch, 8);
    get(&p, &s->data_pos.batch, 8);
    get(&p, &s->loss_scale, 4);
    uint32_t n;
    get(&p, &n, 4);
    if (n > VR_STATE_MAX_CONFIG || bytes != META_FIXED + (uint64_t)n * FIELD_BYTES)
        return vr_error(VR_ERR_FORMAT, "%s: meta section holds a bad config count %u", path, n);
    s->nconfig = (int)n;
    for (uint32_t i = 0; i < n; i++) {
        get(&p, s->config[i].name, VR_STATE_NAME_MAX);
        s->config[i].name[VR_STATE_NAME_MAX - 1] = '\0';
        get(&p, &s->config[i].value, 8);
    }
    return VR_OK;
}

/* ---- save ---------------------------------------------------------------- */

vr_status vr_state_save(const char *path, const vr_train_state *s)
{
    if (s->nconfig < 0 || s->nconfig > VR_STATE_MAX_CONFIG || s->nbuffers < 0 ||
        s->nbuffers > VR_STATE_MAX_BUFFERS)
        return vr_error(VR_ERR_INVALID, "%s: training state has bad counts", path);
    uint32_t nsec = 1 + (uint32_t)s->nbuffers;
    size_t mb = meta_bytes(s);
    uint8_t *meta = malloc(mb);
    if (!meta) return vr_error(VR_ERR_OOM, "%s: out of host memory", path);
    meta_encode(s, meta);

    entry e[MAX_SECTIONS];
    uint64_t off = HEADER_BYTES + (uint64_t)nsec * ENTRY_BYTES;
    copy_name(e[0].name, "meta");
    e[0].offset = off;
    e[0].bytes = mb;
    e[0].crc = crc_update(0, meta, mb);
    off += mb;
    for (int i = 0; i < s->nbuffers; i++) {
        const vr_state_buffer *b = &s->buffers[i];
        copy_name(e[1 + i].name, b->name);
        e[1 + i].offset = off;
        e[1 + i].bytes = b->bytes;
        e[1 + i].crc = crc_update(0, b->data, b->bytes);
        off += b->bytes;
    }

    uint8_t head[HEADER_BYTES + MAX_SECTIONS * ENTRY_BYTES], *p = head;
    uint32_t version = VR_STATE_VERSION, zero = 0, crc;
    put(&p, MAGIC, 8);
    put(&p, &version, 4);
    put(&p, &nsec, 4);
    put(&p, &off, 8); /* file bytes */
    uint8_t *crc_at = p;
    put(&p, &zero, 4);
    put(&p, &zero, 4);
    for (uint32_t i = 0; i < nsec; i++) {
        put(&p, e[i].name, VR_STATE_NAME_MAX);
        put(&p, &e[i].offset, 8);
        put(&p, &e[i].bytes, 8);
        put(&p, &e[i].crc, 4);
        put(&p, &zero, 4);
    }
    crc = crc_update(0, head, (uint64_t)(p - head));
    memcpy(crc_at, &crc, 4);

    vr_atomic_file af;
    vr_status st = vr_atomic_open(&af, path);
    if (st == VR_OK) {
        vr_atomic_write(&af, head, (size_t)(p - head));
        vr_atomic_write(&af, meta, mb);
        for (int i = 0; i < s->nbuffers; i++) vr_atomic_write(&af, s->buffers[i].data, s->buffers[i].bytes);
        st = vr_atomic_commit(&af);
    }
    free(meta);
    return st;
}

/* ---- load ---------------------------------------------------------------- */

/* Opens path and reads + checks header and table; *f is left open on success. */
static vr_status read_table(const char *path, FILE **f, entry *e, uint32_t *nsec)
{
    uint64_t size;
    vr_status s = vr__file_open_read(path, f, &size);
    if (s != VR_OK) return s;
    uint8_t head[HEADER_BYTES + MAX_SECTIONS * ENTRY_BYTES];
    const uint8_t *p = head;
    if (size < HEADER_BYTES || fread(head, 1, HEADER_BYTES, *f) != HEADER_BYTES)
        return vr_error(VR_ERR_FORMAT, "%s: %llu bytes is too small for a training state header: truncated",
                        path, (unsigned long long)size);
    char magic[8];
    uint32_t version, crc, zero = 0;
    uint64_t file_bytes;
    get(&p, magic, 8);
    get(&p, &version, 4);
    get(&p, nsec, 4);
    get(&p, &file_bytes, 8);
    get(&p, &crc, 4);
    if (memcmp(magic, MAGIC, 8) != 0)
        return vr_error(VR_ERR_FORMAT, "%s: wrong magic (not a vram training state file)", path);
    if (version != VR_STATE_VERSION)
        return vr_error(VR_ERR_FORMAT, "%s: unsupported training state version %u (this build reads %d)", path,
                        version, VR_STATE_VERSION);
    if (file_bytes != size)
        return vr_error(VR_ERR_FORMAT, "%s: file is %llu bytes but its header says %llu%s", path,
                        (unsigned long long)size, (unsigned long long)file_bytes,
                        size < file_bytes ? ": truncated" : "");
    if (*nsec < 1 || *nsec > MAX_SECTIONS)
        return vr_error(VR_ERR_FORMAT, "%s: bad section count %u (corrupt header)", path, *nsec);
    size_t table = (size_t)*nsec * ENTRY_BYTES;
    if (size < HEADER_BYTES + table || fread(head + HEADER_BYTES, 1, table, *f) != table)
        return vr_error(VR_ERR_FORMAT, "%s: truncated section table", path);
    memcpy(head + 24, &zero, 4); /* the crc covers the header with its crc field zeroed */
    if (crc_update(0, head, HEADER_BYTES + table) != crc)
        return vr_error(VR_ERR_FORMAT, "%s: header crc32 mismatch (file corrupt)", path);
    p = head + HEADER_BYTES;
    for (uint32_t i = 0; i < *nsec; i++) {
        get(&p, e[i].name, VR_STATE_NAME_MAX);
        e[i].name[VR_STATE_NAME_MAX - 1] = '\0';
        get(&p, &e[i].offset, 8);
        get(&p, &e[i].bytes, 8);
        get(&p, &e[i].crc, 4);
        p += 4;
        if (e[i].offset > size || e[i].bytes > size - e[i].offset)
            return vr_error(VR_ERR_FORMAT, "%s: section '%s' lies outside the file (corrupt)", path, e[i].name);
    }
    if (strcmp(e[0].name, "meta") != 0)
        return vr_error(VR_ERR_FORMAT, "%s: first section is '%s', expected 'meta'", path, e[0].name);
    return VR_OK;
}

/* Reads section e into dst (bytes = e->bytes) and checks its crc32. */
static vr_status read_section(const char *path, FILE *f, const entry *e, void *dst)
{
    if (fseeko(f, (off_t)e->offset, SEEK_SET) != 0 || fread(dst, 1, e->bytes, f) != e->bytes)
        return vr_error(VR_ERR_IO, "%s: cannot read section '%s'", path, e->name);
    if (crc_update(0, dst, e->bytes) != e->crc)
        return vr_error(VR_ERR_FORMAT, "%s: section '%s' crc32 mismatch (file corrupt)", path, e->name);
    return VR_OK;
}

/* Reads header, table and meta into *out; leaves f open for the buffers. */
static vr_status read_meta(const char *path, FILE **f, entry *e, uint32_t *nsec, vr_train_state *out)
{
    memset(out, 0, sizeof *out);
    vr_status s = read_table(path, f, e, nsec);
    if (s != VR_OK) return s;
    uint8_t *meta = malloc(e[0].bytes ? e[0].bytes : 1);
    if (!meta) return vr_error(VR_ERR_OOM, "%s: out of host memory", path);
    s = read_section(path, *f, &e[0], meta);
    if (s == VR_OK) s = meta_decode(path, meta, e[0].bytes, out);
    free(meta);
    return s;
}

vr_status vr_state_read_meta(const char *path, vr_train_state *out)
{
    FILE *f = NULL;
    entry e[MAX_SECTIONS];
    uint32_t nsec = 0;
    vr_status s = read_meta(path, &f, e, &nsec, out);
    for (uint32_t i = 1; s == VR_OK && i < nsec; i++) {
        vr_state_buffer *b = &out->buffers[out->nbuffers++];
        memcpy(b->name, e[i].name, VR_STATE_NAME_MAX);
        b->data = NULL;
        b->bytes = e[i].bytes;
    }
    if (f) fclose(f);
    return s;
}

vr_status vr_state_config_match(const char *path, const vr_train_state *file, const vr_train_state *model)
{
    for (int i = 0; i < model->nconfig; i++) {
        const vr_state_field *m = &model->config[i];
        int64_t v;
        if (!vr_state_get_config(file, m->name, &v))
            return vr_error(VR_ERR_FORMAT, "%s: the checkpoint has no %s (the model's is %lld)", path, m->name,
                            (long long)m->value);
        if (v != m->value)
            return vr_error(VR_ERR_FORMAT, "%s: %s is %lld in the checkpoint but %lld in the model", path,
                            m->name, (long long)v, (long long)m->value);
    }
    return VR_OK;
}

vr_status vr_state_load(const char *path, vr_train_state *s)
{
    FILE *f = NULL;
    entry e[MAX_SECTIONS];
    uint32_t nsec = 0;
    vr_train_state *meta = malloc(sizeof *meta);
    if (!meta) return vr_error(VR_ERR_OOM, "%s: out of host memory", path);
    vr_status st = read_meta(path, &f, e, &nsec, meta);
    for (int i = 0; st == VR_OK && i < s->nbuffers; i++) {
        const vr_state_buffer *b = &s->buffers[i];
        const entry *found = NULL;
        for (uint32_t j = 1; j < nsec && !found; j++)
            if (strcmp(e[j].name, b->name) == 0) found = &e[j];
        if (!found)
            st = vr_error(VR_ERR_FORMAT, "%s: the checkpoint has no buffer '%s'", path, b->name);
        else if (found->bytes != b->bytes)
            st = vr_error(VR_ERR_FORMAT, "%s: buffer '%s' is %llu bytes in the checkpoint but %llu in the model",
                          path, b->name, (unsigned long long)found->bytes, (unsigned long long)b->bytes);
        else
            st = read_section(path, f, found, b->data);
    }
    if (st == VR_OK) {
        /* keep the caller's buffer list; take everything else from the file */
        memcpy(meta->buffers, s->buffers, sizeof s->buffers);
        meta->nbuffers = s->nbuffers;
        *s = *meta;
    }
    if (f) fclose(f);
    free(meta);
    return st;
}
