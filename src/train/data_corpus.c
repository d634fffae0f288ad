/* The built-in corpus: English-like sentences from a small grammar.
 *
 * Made to be learnable by a tiny byte-level model in a minute: words come from
 * short lists (so spelling is learnable from bigrams), and some structure needs
 * context — subject-verb agreement ("the cat sees" / "the cats see"), "a" vs
 * "an", "does"/"do" in questions, and counting lines ("three, four, five.").
 * Integer-only RNG, so the bytes are identical everywhere for a given seed. */
#include "vram/data.h"

#include <string.h>

#include "train/rng.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

typedef struct noun { const char *one, *many; } noun;
typedef struct verb { const char *one, *many; } verb; /* "sees" / "see" */

static const noun animate[] = {
    {"cat", "cats"}, {"dog", "dogs"}, {"bird", "birds"}, {"child", "children"},
    {"man", "men"}, {"woman", "women"}, {"fox", "foxes"}, {"horse", "horses"},
    {"teacher", "teachers"}, {"farmer", "farmers"}, {"owl", "owls"}, {"elephant", "elephants"},
};
static const noun thing[] = {
    {"apple", "apples"}, {"ball", "balls"}, {"book", "books"}, {"box", "boxes"},
    {"tree", "trees"}, {"house", "houses"}, {"river", "rivers"}, {"garden", "gardens"},
    {"letter", "letters"}, {"egg", "eggs"}, {"island", "islands"}, {"umbrella", "umbrellas"},
};
static const char *names[] = {"Anna", "Ben", "Clara", "David", "Emma", "Frank", "Grace", "Oscar"};
static const verb transitive[] = {
    {"sees", "see"}, {"finds", "find"}, {"likes", "like"}, {"carries", "carry"},
    {"watches", "watch"}, {"wants", "want"}, {"opens", "open"}, {"paints", "paint"},
    {"follows", "follow"}, {"reads", "read"},
};
static const verb intransitive[] = {
    {"sleeps", "sleep"}, {"runs", "run"}, {"sings", "sing"},
    {"waits", "wait"}, {"laughs", "laugh"}, {"walks", "walk"},
};
static const char *adjectives[] = {"small", "big", "red", "old", "young", "happy", "green",
                                   "quiet", "brown", "orange", "empty", "angry"};
static const char *adverbs[] = {"quietly", "slowly", "today", "again", "at night", "in the morning"};
static const char *preps[] = {"near", "under", "behind", "beside", "in", "on"};
static const char *numbers[] = {"one", "two", "three", "four", "five", "six", "seven",
                                "eight", "nine", "ten", "eleven", "twelve"};

#define PICK(r, a) ((a)[vr_rng_below((r), COUNT(a))])

typedef struct text { char buf[256]; size_t n; } text;

static void put(text *t, const char *s)
{
    size_t k = strlen(s);
    if (t->n + k < sizeof t->buf) {
        memcpy(t->buf + t->n, s, k);
        t->n += k;
    }
}

static void word(text *t, const char *s)
{
    if (t->n) put(t, " ");
    put(t, s);
}

static int starts_with_vowel(const char *s) { return strchr("aeiouAEIOU", s[0]) != NULL; }

/* A noun phrase from `list`; returns 1 if plural. Names only when `names_ok`. */
static int noun_phrase(text *t, vr_rng *r, const noun *list, size_t n, int names_ok)
{
    if (names_ok && vr_rng_below(r, 5) == 0) {
        word(t, PICK(r, names));
        return 0;
    }
    int plural = (int)vr_rng_below(r, 2);
    const char *adj = vr_rng_below(r, 2) ? PICK(r, adjectives) : NULL;
    const noun *nn = &list[vr_rng_below(r, n)];
    const char *first = adj ? adj : nn->one;
    if (plural) {
        static const char *dets[] = {"the", "some", "many", "two", "three"};
        word(t, PICK(r, dets));
    } else {
        static const char *dets[] = {"the", "a", "one", "this", "every"};
        const char *d = PICK(r, dets);
        if (strcmp(d, "a") == 0 && starts_with_vowel(first)) d = "an";
        word(t, d);
    }
    if (adj) word(t, adj);
    word(t, plural ? nn->many : nn->one);
    return plural;
}

static void any_object(text *t, vr_rng *r)
{
    if (vr_rng_below(r, 2)) noun_phrase(t, r, thing, COUNT(thing), 0);
    else noun_phrase(t, r, animate, COUNT(animate), 1);
}

static void sentence(text *t, vr_rng *r)
{
    uint64_t kind = vr_rng_below(r, 10);
    if (kind < 4) { /* The small cat sees a red ball near the old house. */
        int pl = noun_phrase(t, r, animate, COUNT(animate), 1);
        const verb *v = &PICK(r, transitive);
        word(t, pl ? v->many : v->one);
        any_object(t, r);
        if (vr_rng_below(r, 3) == 0) {
            word(t, PICK(r, preps));
            noun_phrase(t, r, thing, COUNT(thing), 0);
        }
        put(t, ".");
    } else if (kind < 6) { /* The dogs sleep quietly. */
        int pl = noun_phrase(t, r, animate, COUNT(animate), 1);
        const verb *v = &PICK(r, intransitive);
        word(t, pl ? v->many : v->one);
        word(t, PICK(r, adverbs));
        put(t, ".");
    } else if (kind < 7) { /* The boxes are empty. */
        int pl = noun_phrase(t, r, thing, COUNT(thing), 0);
        word(t, pl ? "are" : "is");
        word(t, PICK(r, adjectives));
        put(t, ".");
    } else if (kind < 9) { /* Does the fox want an apple? */
        text subj = {{0}, 0};
        int pl = noun_phrase(&subj, r, animate, COUNT(animate), 1);
        word(t, pl ? "do" : "does");
        word(t, subj.buf);
        word(t, PICK(r, transitive).many);
        any_object(t, r);
        put(t, "?");
    } else { /* three, four, five, six. */
        size_t start = vr_rng_below(r, COUNT(numbers) - 3);
        size_t len = 3 + vr_rng_below(r, 4);
        for (size_t i = start; i < start + len && i < COUNT(numbers); i++) {
            if (i > start) put(t, ",");
            word(t, numbers[i]);
        }
        put(t, ".");
    }
    if (t->buf[0] >= 'a' && t->buf[0] <= 'z') t->buf[0] = (char)(t->buf[0] - 'a' + 'A');
}

void vr_corpus_generate(uint64_t seed, uint8_t *out, size_t n)
{
    vr_rng r = vr_rng_seed(seed);
    size_t at = 0;
    while (at < n) {
        size_t sentences = 3 + vr_rng_below(&r, 5);
        for (size_t s = 0; s < sentences && at < n; s++) {
            text t = {{0}, 0};
            sentence(&t, &r);
            put(&t, s + 1 < sentences ? " " : "\n");
            size_t k = t.n < n - at ? t.n : n - at;
            memcpy(out + at, t.buf, k);
            at += k;
        }
    }
}
