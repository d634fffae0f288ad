/* Building a byte-level BPE tokenizer from tokenizer.json: model (type BPE,
 * vocab, merges, ignore_merges, unk_token), added_tokens, normalizer (none or
 * NFC), pre_tokenizer (ByteLevel, Split, Sequence of them). Anything else is
 * refused with one line naming the field and the file. */
#define _POSIX_C_SOURCE 200809L
#include "formats/tokenizer_impl.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* GPT-2's pre-split pattern, used by ByteLevel with use_regex. */
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* The GPT-2 bytes_to_unicode table: printable bytes map to themselves, the
 * others to U+0100 + n in byte order; stored as UTF-8. */
static void make_byte_chars(vr_tokenizer *tk)
{
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        unsigned cp = keep ? (unsigned)b : 256u + (unsigned)n++;
        char *o = tk->byte_char[b];
        if (cp < 0x80) {
            o[0] = (char)cp;
            o[1] = 0;
        } else {
            o[0] = (char)(0xc0 | (cp >> 6));
            o[1] = (char)(0x80 | (cp & 0x3f));
            o[2] = 0;
        }
    }
}

static vr_status compile_re(vr_tokenizer *tk, const char *pattern, int literal, const char *field,
                            pcre2_code **out)
{
    int err;
    PCRE2_SIZE off;
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | (literal ? PCRE2_LITERAL : 0);
    *out = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, opts, &err, &off, NULL);
    if (!*out) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(err, msg, sizeof msg);
        return vr_error(VR_ERR_FORMAT, "%s: %s: regex does not compile at offset %zu: %s", tk->label, field,
                        (size_t)off, (const char *)msg);
    }
    return VR_OK;
}

static vr_status add_step(vr_tokenizer *tk, const cJSON *p, const char *field)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
    if (!cJSON_IsString(type)) return vr_error(VR_ERR_FORMAT, "%s: %s.type is missing", tk->label, field);
    if (!strcmp(type->valuestring, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(p, "pretokenizers");
        if (!cJSON_IsArray(list)) return vr_error(VR_ERR_FORMAT, "%s: %s.pretokenizers is not a list", tk->label, field);
        int i = 0;
        for (const cJSON *e = list->child; e; e = e->next, i++) {
            char sub[96];
            snprintf(sub, sizeof sub, "%s.pretokenizers[%d]", field, i);
            vr_status s = add_step(tk, e, sub);
            if (s != VR_OK) return s;
        }
        return VR_OK;
    }
    if (tk->n_steps == VR_TOK_MAX_STEPS)
        return vr_error(VR_ERR_UNSUPPORTED, "%s: %s: more than %d pre-tokenizer steps", tk->label, field,
                        VR_TOK_MAX_STEPS);
    vr_tok_step *st = &tk->steps[tk->n_steps];
    memset(st, 0, sizeof *st);
    if (!strcmp(type->valuestring, "ByteLevel")) {
        st->kind = VR_TOK_BYTELEVEL;
        st->add_prefix_space = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "add_prefix_space"));
        const cJSON *ur = cJSON_GetObjectItemCaseSensitive(p, "use_regex");
        if (!ur || cJSON_IsTrue(ur)) {
            vr_status s = compile_re(tk, GPT2_PATTERN, 0, field, &st->re);
            if (s != VR_OK) return s;
        }
        tk->byte_level = 1;
    } else if (!strcmp(type->valuestring, "Split")) {
        st->kind = VR_TOK_SPLIT;
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(p, "pattern");
        const cJSON *re = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
        const cJSON *lit = cJSON_GetObjectItemCaseSensitive(pat, "String");
        const cJSON *beh = cJSON_GetObjectItemCaseSensitive(p, "behavior");
        if (!cJSON_IsString(re) && !cJSON_IsString(lit))
            return vr_error(VR_ERR_FORMAT, "%s: %s.pattern has no \"Regex\" or \"String\"", tk->label, field);
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "invert")))
            return vr_error(VR_ERR_UNSUPPORTED, "%s: %s.invert true is not supported", tk->label, field);
        if (!cJSON_IsString(beh)) return vr_error(VR_ERR_FORMAT, "%s: %s.behavior is missing", tk->label, field);
        if (!strcmp(beh->valuestring, "Isolated")) st->behavior = VR_SPLIT_ISOLATED;
        else if (!strcmp(beh->valuestring, "Removed")) st->behavior = VR_SPLIT_REMOVED;
        else
            return vr_error(VR_ERR_UNSUPPORTED, "%s: %s.behavior \"%s\" is not supported (Isolated, Removed)",
                            tk->label, field, beh->valuestring);
        vr_status s = cJSON_IsString(re) ? compile_re(tk, re->valuestring, 0, field, &st->re)
                                         : compile_re(tk, lit->valuestring, 1, field, &st->re);
        if (s != VR_OK) return s;
    } else {
        return vr_error(VR_ERR_UNSUPPORTED, "%s: %s.type \"%s\" is not supported (ByteLevel, Split, Sequence)",
                        tk->label, field, type->valuestring);
    }
    tk->n_steps++;
    return VR_OK;
}

static int note_id(vr_tokenizer *tk, double v)
{
    if (!(v >= 0 && v <= 1e9) || v != (double)(int32_t)v) return 0; /* range (and NaN) before the cast */
    if ((int)v + 1 > tk->vocab_size) tk->vocab_size = (int)v + 1;
    return 1;
}

static vr_status load_vocab(vr_tokenizer *tk, const cJSON *model)
{
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    if (!cJSON_IsObject(vocab)) return vr_error(VR_ERR_FORMAT, "%s: model.vocab is not an object", tk->label);
    for (const cJSON *e = vocab->child; e; e = e->next) {
        if (!cJSON_IsNumber(e) || !note_id(tk, e->valuedouble))
            return vr_error(VR_ERR_FORMAT, "%s: model.vocab[\"%s\"] is not a token id", tk->label, e->string);
        if (vr__strmap_put(&tk->vocab, e->string, strlen(e->string), (int32_t)e->valuedouble) != 0)
            return vr_error(VR_ERR_OOM, "%s: out of host memory for the vocabulary", tk->label);
    }
    return VR_OK;
}

static vr_status load_merges(vr_tokenizer *tk, const cJSON *model)
{
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!merges || cJSON_IsNull(merges)) return VR_OK;
    if (!cJSON_IsArray(merges)) return vr_error(VR_ERR_FORMAT, "%s: model.merges is not a list", tk->label);
    int rank = 0;
    for (const cJSON *e = merges->child; e; e = e->next, rank++) {
        const char *a, *b;
        size_t la, lb;
        if (cJSON_IsString(e)) {
            const char *sp = strchr(e->valuestring, ' ');
            if (!sp || strchr(sp + 1, ' '))
                return vr_error(VR_ERR_FORMAT, "%s: model.merges[%d] \"%s\" is not \"left right\"", tk->label, rank,
                                e->valuestring);
            a = e->valuestring;
            la = (size_t)(sp - a);
            b = sp + 1;
            lb = strlen(b);
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(e->child) &&
                   cJSON_IsString(e->child->next)) {
            a = e->child->valuestring;
            la = strlen(a);
            b = e->child->next->valuestring;
            lb = strlen(b);
        } else {
            return vr_error(VR_ERR_FORMAT, "%s: model.merges[%d] is neither \"a b\" nor [a, b]", tk->label, rank);
        }
        char buf[1024];
        if (la + lb >= sizeof buf)
            return vr_error(VR_ERR_FORMAT, "%s: model.merges[%d] is too long", tk->label, rank);
        memcpy(buf, a, la);
        memcpy(buf + la, b, lb);
        int32_t ia = vr__strmap_get(&tk->vocab, a, la), ib = vr__strmap_get(&tk->vocab, b, lb);
        int32_t im = vr__strmap_get(&tk->vocab, buf, la + lb);
        if (ia < 0 || ib < 0 || im < 0)
            return vr_error(VR_ERR_FORMAT, "%s: model.merges[%d]: \"%.*s\", \"%.*s\" or their merge is not in model.vocab",
                            tk->label, rank, (int)la, a, (int)lb, b);
        if (vr__pairmap_put(&tk->merges, (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib, rank, im) != 0)
            return vr_error(VR_ERR_OOM, "%s: out of host memory for the merges", tk->label);
    }
    return VR_OK;
}

static int by_length_desc(const void *x, const void *y)
{
    const vr_tok_added *a = x, *b = y;
    return a->len < b->len ? 1 : a->len > b->len ? -1 : 0;
}

static vr_status load_added(vr_tokenizer *tk, const cJSON *root)
{
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (!list || cJSON_IsNull(list)) return VR_OK;
    if (!cJSON_IsArray(list)) return vr_error(VR_ERR_FORMAT, "%s: added_tokens is not a list", tk->label);
    int n = cJSON_GetArraySize(list), i = 0;
    tk->added = calloc((size_t)(n ? n : 1), sizeof *tk->added);
    if (!tk->added) return vr_error(VR_ERR_OOM, "%s: out of host memory", tk->label);
    for (const cJSON *e = list->child; e; e = e->next, i++) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (!cJSON_IsNumber(id) || !note_id(tk, id->valuedouble) || !cJSON_IsString(c) || !c->valuestring[0])
            return vr_error(VR_ERR_FORMAT, "%s: added_tokens[%d] needs an \"id\" and a non-empty \"content\"",
                            tk->label, i);
        vr_tok_added *a = &tk->added[tk->n_added++];
        a->len = strlen(c->valuestring);
        a->content = malloc(a->len + 1);
        if (!a->content) return vr_error(VR_ERR_OOM, "%s: out of host memory", tk->label);
        memcpy(a->content, c->valuestring, a->len + 1);
        a->id = (int32_t)id->valuedouble;
    }
    qsort(tk->added, (size_t)tk->n_added, sizeof *tk->added, by_length_desc);
    return VR_OK;
}

static vr_status build(vr_tokenizer *tk, const cJSON *root)
{
    if (!cJSON_IsObject(root)) return vr_error(VR_ERR_FORMAT, "%s: not a JSON object", tk->label);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (!cJSON_IsObject(model)) return vr_error(VR_ERR_FORMAT, "%s: missing object field \"model\"", tk->label);
    if (type && !cJSON_IsString(type)) return vr_error(VR_ERR_FORMAT, "%s: model.type is not a string", tk->label);
    if (type && strcmp(type->valuestring, "BPE"))
        return vr_error(VR_ERR_UNSUPPORTED, "%s: model.type \"%s\" is not supported (only BPE)", tk->label,
                        type->valuestring);
    if (!type && !cJSON_GetObjectItemCaseSensitive(model, "merges"))
        return vr_error(VR_ERR_UNSUPPORTED, "%s: model has no \"type\" and no \"merges\": not a BPE model", tk->label);
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    if (norm && !cJSON_IsNull(norm)) {
        const cJSON *nt = cJSON_GetObjectItemCaseSensitive(norm, "type");
        if (!cJSON_IsString(nt) || strcmp(nt->valuestring, "NFC"))
            return vr_error(VR_ERR_UNSUPPORTED, "%s: normalizer.type \"%s\" is not supported (null or NFC)", tk->label,
                            cJSON_IsString(nt) ? nt->valuestring : "?");
    }
    const cJSON *bf = cJSON_GetObjectItemCaseSensitive(model, "byte_fallback");
    if (cJSON_IsTrue(bf))
        return vr_error(VR_ERR_UNSUPPORTED, "%s: model.byte_fallback true (SentencePiece-style BPE) is not supported",
                        tk->label);
    tk->ignore_merges = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "ignore_merges"));
    vr_status s = load_vocab(tk, model);
    if (s == VR_OK) s = load_merges(tk, model);
    if (s == VR_OK) s = load_added(tk, root);
    if (s != VR_OK) return s;
    tk->unk_id = -1;
    const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    if (cJSON_IsString(unk)) tk->unk_id = vr__strmap_get(&tk->vocab, unk->valuestring, strlen(unk->valuestring));
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    if (pre && !cJSON_IsNull(pre)) s = add_step(tk, pre, "pre_tokenizer");
    if (s == VR_OK && tk->vocab_size == 0) s = vr_error(VR_ERR_FORMAT, "%s: model.vocab is empty", tk->label);
    return s;
}

vr_status vr_tokenizer_parse(const char *label, const char *json, size_t len, vr_tokenizer **out)
{
    *out = NULL;
    vr_tokenizer *tk = calloc(1, sizeof *tk);
    if (!tk || !(tk->label = malloc(strlen(label) + 1))) {
        free(tk);
        return vr_error(VR_ERR_OOM, "%s: out of host memory", label);
    }
    strcpy(tk->label, label);
    make_byte_chars(tk);
    cJSON *root = cJSON_ParseWithLength(json, len);
    vr_status s = root ? build(tk, root) : vr_error(VR_ERR_FORMAT, "%s: not valid JSON", label);
    cJSON_Delete(root);
    if (s != VR_OK) {
        vr_tokenizer_free(tk);
        return s;
    }
    *out = tk;
    return VR_OK;
}

vr_status vr_tokenizer_load(const char *path, vr_tokenizer **out)
{
    *out = NULL;
    char p[4096];
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) snprintf(p, sizeof p, "%s/tokenizer.json", path);
    else snprintf(p, sizeof p, "%s", path);
    FILE *f = fopen(p, "rb");
    if (!f) return vr_error(VR_ERR_IO, "%s: cannot open: %s", p, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n < 0 || n > (1L << 30)) {
        fclose(f);
        return vr_error(VR_ERR_FORMAT, "%s: a tokenizer of %ld bytes is not accepted", p, n);
    }
    char *buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        fclose(f);
        return vr_error(VR_ERR_IO, "%s: cannot read", p);
    }
    fclose(f);
    vr_status s = vr_tokenizer_parse(p, buf, (size_t)n, out);
    free(buf);
    return s;
}

void vr_tokenizer_free(vr_tokenizer *tk)
{
    if (!tk) return;
    vr__strmap_free(&tk->vocab);
    vr__pairmap_free(&tk->merges);
    for (int i = 0; i < tk->n_added; i++) free(tk->added[i].content);
    free(tk->added);
    for (int i = 0; i < tk->n_steps; i++) pcre2_code_free(tk->steps[i].re);
    free(tk->label);
    free(tk);
}

int vr_tokenizer_vocab_size(const vr_tokenizer *tk) { return tk->vocab_size; }

int vr_tokenizer_token_id(const vr_tokenizer *tk, const char *token)
{
    for (int i = 0; i < tk->n_added; i++)
        if (!strcmp(tk->added[i].content, token)) return tk->added[i].id;
    return vr__strmap_get(&tk->vocab, token, strlen(token));
}
