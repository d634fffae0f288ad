/* Trace reader: gzip'd (or plain) CSV through zlib's gz* functions, one line
 * at a time, strict about form. Every problem is one line of error naming the
 * file and line number; nothing in the input can crash it. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "alloc/trace.h"

#define MAX_LINE 4096

/* ------------------------------------------------ address -> live allocation id */

typedef struct slot {
    uint64_t addr;
    uint32_t id;
    uint32_t used;
    uint64_t line;   /* where it was allocated */
} slot;

typedef struct addr_map {
    slot *s;
    size_t cap, count;
} addr_map;

static size_t hash(uint64_t a, size_t cap) { return (size_t)((a * 0x9E3779B97F4A7C15ull) >> 17) & (cap - 1); }

static slot *map_find(addr_map *m, uint64_t addr)
{
    if (!m->cap)
        return NULL;
    for (size_t i = hash(addr, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (!m->s[i].used)
            return NULL;
        if (m->s[i].addr == addr)
            return &m->s[i];
    }
}

static bool map_put(addr_map *m, uint64_t addr, uint32_t id, uint64_t line)
{
    if ((m->count + 1) * 2 > m->cap) {
        size_t ncap = m->cap ? m->cap * 2 : 1024;
        slot *ns = calloc(ncap, sizeof *ns);
        if (!ns)
            return false;
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->s[i].used)
                continue;
            size_t j = hash(m->s[i].addr, ncap);
            while (ns[j].used)
                j = (j + 1) & (ncap - 1);
            ns[j] = m->s[i];
        }
        free(m->s);
        m->s = ns;
        m->cap = ncap;
    }
    size_t i = hash(addr, m->cap);
    while (m->s[i].used)
        i = (i + 1) & (m->cap - 1);
    m->s[i] = (slot){addr, id, 1, line};
    m->count++;
    return true;
}

/* Removes slot e, shifting later entries of its probe run back (no tombstones). */
static void map_remove(addr_map *m, slot *e)
{
    size_t i = (size_t)(e - m->s), mask = m->cap - 1;
    m->s[i].used = 0;
    for (size_t j = (i + 1) & mask; m->s[j].used; j = (j + 1) & mask) {
        size_t h = hash(m->s[j].addr, m->cap);
        /* move j into the hole at i when its home h is not in (i, j] */
        if (((j - h) & mask) >= ((j - i) & mask)) {
            m->s[i] = m->s[j];
            m->s[j].used = 0;
            i = j;
        }
    }
    m->count--;
}

/* ------------------------------------------------ parsing */

static bool parse_u64(const char *s, uint64_t *out)
{
    if (!*s)
        return false;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return false;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

static const char *const known_actions[] = {
    "alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
    "segment_map", "segment_unmap", "oom", "snapshot", "user_defined",
};

/* A JSON number that is a byte count or a count: finite, integral, in [0, 2^63). */
static bool json_count(const cJSON *n, uint64_t *out)
{
    double v = n->valuedouble;
    if (!isfinite(v) || v < 0 || v >= 9223372036854775808.0 || v != floor(v))
        return false;
    *out = (uint64_t)v;
    return true;
}

/* Reads PyTorch's figures from the "# {...}" line; false when it is not JSON (*bad NULL) or a number
 * field is out of range (*bad names it). */
static bool header(vra_trace *t, const char *json, const char **bad)
{
    *bad = NULL;
    while (*json == ' ')
        json++;
    if (*json != '{')
        return true; /* a plain comment */
    cJSON *h = cJSON_Parse(json);
    if (!h)
        return false;
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(h, "workload");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(h, "torch");
    const cJSON *pa = cJSON_GetObjectItemCaseSensitive(h, "peak_allocated");
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(h, "peak_reserved");
    const cJSON *re = cJSON_GetObjectItemCaseSensitive(h, "num_alloc_retries");
    const cJSON *wu = cJSON_GetObjectItemCaseSensitive(h, "warmup_ops");
    if (cJSON_IsString(w))
        snprintf(t->workload, sizeof t->workload, "%s", w->valuestring);
    if (cJSON_IsString(v))
        snprintf(t->torch_version, sizeof t->torch_version, "%s", v->valuestring);
    uint64_t a = 0, r = 0, n = 0, wo = 0;
    if (cJSON_IsNumber(pa) && !json_count(pa, &a))
        *bad = "peak_allocated";
    else if (cJSON_IsNumber(pr) && !json_count(pr, &r))
        *bad = "peak_reserved";
    else if (cJSON_IsNumber(re) && !json_count(re, &n))
        *bad = "num_alloc_retries";
    else if (cJSON_IsNumber(wu) && !json_count(wu, &wo))
        *bad = "warmup_ops";
    if (!*bad)
        t->warmup_ops = wo;
    if (!*bad && cJSON_IsNumber(pa) && cJSON_IsNumber(pr)) {
        t->have_torch = true;
        t->peak_allocated = a;
        t->peak_reserved = r;
    }
    if (!*bad && cJSON_IsNumber(re))
        t->alloc_retries = (int64_t)n;
    cJSON_Delete(h);
    return !*bad;
}

static bool push(vra_trace *t, vra_op op)
{
    if (t->nops == t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 4096;
        vra_op *n = realloc(t->ops, ncap * sizeof *n);
        if (!n)
            return false;
        t->ops = n;
        t->cap = ncap;
    }
    t->ops[t->nops++] = op;
    return true;
}

/* Parses one data line (no newline) into t; returns an error naming path:line. */
static vr_status parse_line(vra_trace *t, addr_map *live, const char *path, uint64_t ln, char *line)
{
    char *f[5];
    int n = 0;
    for (char *p = line; n < 5;) {
        f[n++] = p;
        char *c = strchr(p, ',');
        if (!c)
            break;
        *c = '\0';
        p = c + 1;
    }
    if (n != 4)
        return vr_error(VR_ERR_FORMAT, "%s:%llu: expected 4 fields (action,addr,size,stream), found %s", path,
                        (unsigned long long)ln, n > 4 ? "more" : n == 1 ? "1" : n == 2 ? "2" : "3");
    bool known = false;
    for (size_t i = 0; i < sizeof known_actions / sizeof known_actions[0]; i++)
        known |= !strcmp(f[0], known_actions[i]);
    if (!known)
        return vr_error(VR_ERR_FORMAT, "%s:%llu: unknown action '%.40s' (expected alloc, free_requested, "
                        "free_completed, segment_alloc, segment_free, ...)", path, (unsigned long long)ln, f[0]);
    uint64_t addr, size, stream;
    static const char *const names[3] = {"address", "size", "stream"};
    uint64_t *vals[3] = {&addr, &size, &stream};
    for (int i = 0; i < 3; i++)
        if (!parse_u64(f[i + 1], vals[i]))
            return vr_error(VR_ERR_FORMAT, "%s:%llu: %s '%.40s' is not a non-negative integer", path,
                            (unsigned long long)ln, names[i], f[i + 1]);
    if (!strcmp(f[0], "alloc")) {
        slot *e = map_find(live, addr);
        if (e)
            return vr_error(VR_ERR_FORMAT, "%s:%llu: alloc at %llu, which is still allocated (line %llu) with no "
                            "free_completed in between", path, (unsigned long long)ln, (unsigned long long)addr,
                            (unsigned long long)e->line);
        if (t->nallocs == UINT32_MAX || !map_put(live, addr, t->nallocs, ln) ||
            !push(t, (vra_op){t->nallocs, false, size, (vr_stream)stream, ln}))
            return vr_error(VR_ERR_OOM, "%s:%llu: out of host memory reading the trace", path, (unsigned long long)ln);
        t->nallocs++;
    } else if (!strcmp(f[0], "free_completed")) {
        slot *e = map_find(live, addr);
        if (!e)
            return vr_error(VR_ERR_FORMAT, "%s:%llu: free_completed of address %llu, which no earlier alloc handed out",
                            path, (unsigned long long)ln, (unsigned long long)addr);
        if (!push(t, (vra_op){e->id, true, 0, (vr_stream)stream, ln}))
            return vr_error(VR_ERR_OOM, "%s:%llu: out of host memory reading the trace", path, (unsigned long long)ln);
        map_remove(live, e);
    }
    return VR_OK;
}

/* zlib's error for gz (without the path it prefixes), or NULL when none. */
static const char *gz_problem(gzFile gz, const char *path)
{
    int zerr = Z_OK;
    const char *msg = gzerror(gz, &zerr);
    if (zerr == Z_OK || zerr == Z_STREAM_END)
        return NULL;
    if (zerr == Z_ERRNO)
        return strerror(errno);
    size_t n = strlen(path);
    if (!strncmp(msg, path, n) && !strncmp(msg + n, ": ", 2))
        msg += n + 2;
    return msg;
}

vr_status vra_trace_read(const char *path, vra_trace *t)
{
    memset(t, 0, sizeof *t);
    struct stat sb; /* before gzopen: a FIFO would block it, a directory reads as an odd error */
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return vr_error(VR_ERR_IO, "%s: is a directory, not a trace file", path);
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return vr_error(VR_ERR_IO, "%s: is not a regular file", path);
    errno = 0;
    gzFile gz = gzopen(path, "rb");
    if (!gz)
        return vr_error(VR_ERR_IO, "%s: cannot open: %s", path, errno ? strerror(errno) : "out of memory");
    gzbuffer(gz, 1 << 17);
    addr_map live = {0};
    char *line = malloc(MAX_LINE);
    vr_status st = line ? VR_OK : vr_error(VR_ERR_OOM, "%s: out of host memory", path);
    bool seen_data = false, gz_reported = false;
    while (st == VR_OK && gzgets(gz, line, MAX_LINE)) {
        uint64_t ln = ++t->lines;
        size_t len = strlen(line);
        if (len == MAX_LINE - 1 && line[len - 1] != '\n' && !gzeof(gz)) {
            st = vr_error(VR_ERR_FORMAT, "%s:%llu: line longer than %d bytes", path, (unsigned long long)ln, MAX_LINE - 2);
            break;
        }
        const char *zproblem = len && line[len - 1] != '\n' ? gz_problem(gz, path) : NULL;
        if (zproblem) { /* the data ended early */
            st = vr_error(VR_ERR_FORMAT, "%s:%llu: corrupt or truncated gzip data (zlib: %s)", path,
                          (unsigned long long)ln, zproblem);
            gz_reported = true;
            break;
        }
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (len == 0)
            continue;
        if (line[0] == '#') {
            const char *bad = NULL;
            if (!seen_data && !t->workload[0] && !t->have_torch && !header(t, line + 1, &bad)) {
                if (bad)
                    st = vr_error(VR_ERR_FORMAT, "%s:%llu: header field %s is not a count in [0, 2^63)", path,
                                  (unsigned long long)ln, bad);
                else
                    st = vr_error(VR_ERR_FORMAT, "%s:%llu: header line is not valid JSON", path,
                                  (unsigned long long)ln);
                break;
            }
            continue;
        }
        if (!seen_data && !strncmp(line, "action,", 7)) {
            if (strcmp(line, "action,addr,size,stream")) {
                st = vr_error(VR_ERR_FORMAT, "%s:%llu: column header '%.60s' is not action,addr,size,stream", path,
                              (unsigned long long)ln, line);
                break;
            }
            seen_data = true;
            continue;
        }
        seen_data = true;
        st = parse_line(t, &live, path, ln, line);
    }
    if (st == VR_ERR_FORMAT && !gz_reported && !gzdirect(gz)) {
        /* A bad line inside gzip data may be corruption: read on to find out. */
        while (gzread(gz, line, MAX_LINE) > 0)
            ;
        const char *zproblem = gz_problem(gz, path);
        if (zproblem) {
            char first[512];
            snprintf(first, sizeof first, "%s", vr_last_error());
            st = vr_error(VR_ERR_FORMAT, "%s: corrupt or truncated gzip data (zlib: %s); first unreadable line: %s",
                          path, zproblem, first);
        }
    }
    if (st == VR_OK) {
        const char *zproblem = gz_problem(gz, path);
        if (zproblem)
            st = vr_error(VR_ERR_FORMAT, "%s:%llu: corrupt or truncated gzip data (zlib: %s)", path,
                          (unsigned long long)t->lines + 1, zproblem);
    }
    gzclose(gz);
    free(line);
    free(live.s);
    if (st == VR_OK && !seen_data)
        st = vr_error(VR_ERR_FORMAT, "%s: no trace events (expected lines like alloc,ADDR,SIZE,STREAM)", path);
    if (st == VR_OK && t->warmup_ops > t->nops)
        st = vr_error(VR_ERR_FORMAT, "%s: header field warmup_ops is %llu, more than the trace's %zu allocs and frees",
                      path, (unsigned long long)t->warmup_ops, t->nops);
    if (st != VR_OK)
        vra_trace_free(t);
    return st;
}

void vra_trace_free(vra_trace *t)
{
    free(t->ops);
    t->ops = NULL;
    t->nops = t->cap = 0;
}
