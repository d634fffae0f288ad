/* Encoding: added tokens split the text first (leftmost, longest), each other
 * span goes through the pre-tokenizer steps (regex splits, ByteLevel prefix
 * space), each piece is mapped to the byte-level alphabet and merged by BPE
 * rank (lowest rank first, leftmost among equals). */
#include "formats/tokenizer_impl.h"

#include <stdlib.h>
#include <string.h>

typedef struct { const char *s; size_t len; } piece;

typedef struct {
    int32_t *v;
    size_t n, cap;
} ids;

typedef struct {
    piece *p;
    size_t n, cap;
} pieces;

static int push_id(ids *o, int32_t id)
{
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 256;
        int32_t *v = realloc(o->v, cap * sizeof *v);
        if (!v) return -1;
        o->v = v;
        o->cap = cap;
    }
    o->v[o->n++] = id;
    return 0;
}

static int push_piece(pieces *o, const char *s, size_t len)
{
    if (!len) return 0;
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        piece *p = realloc(o->p, cap * sizeof *p);
        if (!p) return -1;
        o->p = p;
        o->cap = cap;
    }
    o->p[o->n++] = (piece){s, len};
    return 0;
}

static size_t utf8_len(unsigned char c)
{
    return c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
}

/* Splits p by re into out: matches and the gaps between them (Isolated), or
 * the gaps only (Removed). */
static int split_re(const pcre2_code *re, vr_split_behavior beh, piece p, pcre2_match_data *md, pieces *out)
{
    size_t at = 0, gap = 0;
    while (at <= p.len) {
        int rc = pcre2_match(re, (PCRE2_SPTR)p.s, p.len, at, 0, md, NULL);
        if (rc < 0) break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t b = ov[0], e = ov[1];
        if (e == b) { /* empty match: step one character */
            if (b >= p.len) break;
            at = b + utf8_len((unsigned char)p.s[b]);
            if (at > p.len) at = p.len;
            continue;
        }
        if (push_piece(out, p.s + gap, b - gap) != 0) return -1;
        if (beh == VR_SPLIT_ISOLATED && push_piece(out, p.s + b, e - b) != 0) return -1;
        gap = at = e;
    }
    return push_piece(out, p.s + gap, p.len - gap);
}

/* BPE of one piece already in the vocabulary's alphabet (sym, n bytes). */
static vr_status bpe(const vr_tokenizer *tk, const char *sym, size_t n, ids *out)
{
    int32_t whole = vr__strmap_get(&tk->vocab, sym, n);
    if (tk->ignore_merges && whole >= 0) return push_id(out, whole) ? vr_error(VR_ERR_OOM, "out of host memory") : VR_OK;
    int32_t *v = malloc(n * sizeof *v);
    if (!v) return vr_error(VR_ERR_OOM, "%s: out of host memory", tk->label);
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t l = utf8_len((unsigned char)sym[i]);
        if (i + l > n) l = n - i;
        int32_t id = vr__strmap_get(&tk->vocab, sym + i, l);
        if (id < 0) id = tk->unk_id;
        if (id < 0) {
            free(v);
            return vr_error(VR_ERR_FORMAT, "%s: no token for \"%.*s\" (no unk_token)", tk->label, (int)l, sym + i);
        }
        v[k++] = id;
        i += l;
    }
    for (;;) {
        int32_t best_rank = INT32_MAX, best_id = -1, rank, id;
        size_t best = 0;
        for (size_t i = 0; i + 1 < k; i++)
            if (vr__pairmap_get(&tk->merges, (uint64_t)(uint32_t)v[i] << 32 | (uint32_t)v[i + 1], &rank, &id) &&
                rank < best_rank) {
                best_rank = rank;
                best_id = id;
                best = i;
            }
        if (best_id < 0) break;
        v[best] = best_id;
        memmove(v + best + 1, v + best + 2, (k - best - 2) * sizeof *v);
        k--;
    }
    vr_status s = VR_OK;
    for (size_t i = 0; i < k && s == VR_OK; i++)
        if (push_id(out, v[i]) != 0) s = vr_error(VR_ERR_OOM, "%s: out of host memory", tk->label);
    free(v);
    return s;
}

/* Pre-tokenizes and encodes one span without added tokens. */
static vr_status encode_span(const vr_tokenizer *tk, const char *text, size_t len, pcre2_match_data *md, ids *out)
{
    pieces cur = {0}, next = {0};
    char **owned = NULL; /* prefix-space copies */
    size_t n_owned = 0;
    vr_status s = VR_OK;
    if (push_piece(&cur, text, len) != 0) s = vr_error(VR_ERR_OOM, "%s: out of host memory", tk->label);
    for (int k = 0; k < tk->n_steps && s == VR_OK; k++) {
        const vr_tok_step *st = &tk->steps[k];
        next.n = 0;
        for (size_t i = 0; i < cur.n && s == VR_OK; i++) {
            piece p = cur.p[i];
            if (st->kind == VR_TOK_BYTELEVEL && st->add_prefix_space && p.s[0] != ' ') {
                char **o = realloc(owned, (n_owned + 1) * sizeof *o);
                char *c = malloc(p.len + 1);
                if (!o || !c) {
                    if (o) owned = o;
                    free(c);
                    s = vr_error(VR_ERR_OOM, "%s: out of host memory", tk->label);
                    break;
                }
                owned = o;
                owned[n_owned++] = c;
                c[0] = ' ';
                memcpy(c + 1, p.s, p.len);
                p = (piece){c, p.len + 1};
            }
            int r = st->re ? split_re(st->re, st->kind == VR_TOK_SPLIT ? st->behavior : VR_SPLIT_ISOLATED, p, md, &next)
                           : push_piece(&next, p.s, p.len);
            if (r != 0) s = vr_error(VR_ERR_OOM, "%s: out of host memory", tk->label);
        }
        pieces t = cur;
        cur = next;
        next = t;
    }
    char *buf = NULL;
    size_t cap = 0;
    for (size_t i = 0; i < cur.n && s == VR_OK; i++) {
        piece p = cur.p[i];
        size_t need = tk->byte_level ? 2 * p.len : p.len, m = 0;
        if (need > cap) {
            char *b = realloc(buf, need);
            if (!b) {
                s = vr_error(VR_ERR_OOM, "%s: out of host memory", tk->label);
                break;
            }
            buf = b;
            cap = need;
        }
        if (tk->byte_level) {
            for (size_t j = 0; j < p.len; j++)
                for (const char *c = tk->byte_char[(unsigned char)p.s[j]]; *c; c++) buf[m++] = *c;
        } else {
            memcpy(buf, p.s, p.len);
            m = p.len;
        }
        s = bpe(tk, buf, m, out);
    }
    free(buf);
    for (size_t i = 0; i < n_owned; i++) free(owned[i]);
    free(owned);
    free(cur.p);
    free(next.p);
    return s;
}

vr_status vr_tokenizer_encode(const vr_tokenizer *tk, const char *text, size_t len, int32_t **out_ids, size_t *n)
{
    *out_ids = NULL;
    *n = 0;
    ids out = {0};
    unsigned char first[256] = {0};
    for (int i = 0; i < tk->n_added; i++) first[(unsigned char)tk->added[i].content[0]] = 1;
    pcre2_match_data *md = pcre2_match_data_create(4, NULL);
    if (!md) return vr_error(VR_ERR_OOM, "%s: out of host memory", tk->label);
    vr_status s = VR_OK;
    size_t start = 0;
    for (size_t i = 0; i <= len && s == VR_OK; i++) {
        const vr_tok_added *hit = NULL;
        if (i < len && first[(unsigned char)text[i]])
            for (int a = 0; a < tk->n_added && !hit; a++) /* longest first */
                if (tk->added[a].len <= len - i && !memcmp(text + i, tk->added[a].content, tk->added[a].len))
                    hit = &tk->added[a];
        if (!hit && i < len) continue;
        if (i > start) s = encode_span(tk, text + start, i - start, md, &out);
        if (hit && s == VR_OK) {
            if (push_id(&out, hit->id) != 0) s = vr_error(VR_ERR_OOM, "%s: out of host memory", tk->label);
            start = i + hit->len;
            i = start - 1;
        }
    }
    pcre2_match_data_free(md);
    if (s != VR_OK) {
        free(out.v);
        return s;
    }
    *out_ids = out.v ? out.v : malloc(sizeof(int32_t));
    *n = out.n;
    return *out_ids ? VR_OK : vr_error(VR_ERR_OOM, "%s: out of host memory", tk->label);
}
