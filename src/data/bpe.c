/* bpe.c — GPT-2 byte-level BPE (bpe.h): tokenizer.json parsed and checked, the split pattern
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * matched by hand over UTF-8 code points (unicode_tables.h), merges applied lowest rank first (leftmost
 * among equals, as `tokenizers` does), and a direct-mapped cache of recent words.
 * This file encodes; bpe_load.c reads tokenizer.json into the tables (bpe_impl.h). */
#include "data/bpe_impl.h"

#include "data/unicode_tables.h"

/* ---------------------------------------------------------------- encoding */

static int in_ranges(const uint32_t (*r)[2], size_t n, uint32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid][0])
            hi = mid;
        else if (cp > r[mid][1])
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

enum { CL_OTHER = 0, CL_LETTER, CL_NUMBER, CL_SPACE, CL_END };

/* Unicode White_Space (what \s matches in the `tokenizers` regex). */
static int is_space(int32_t cp) {
    return (cp >= 9 && cp <= 13) || cp == 32 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

static int cp_class(int32_t cp) {
    if (cp < 0) return CL_OTHER; /* an invalid byte */
    if (cp < 128) {
        if ((cp | 32) >= 'a' && (cp | 32) <= 'z') return CL_LETTER;
        if (cp >= '0' && cp <= '9') return CL_NUMBER;
        return is_space(cp) ? CL_SPACE : CL_OTHER;
    }
    if (is_space(cp)) return CL_SPACE;
    if (in_ranges(fsdp_uni_letter, sizeof fsdp_uni_letter / sizeof fsdp_uni_letter[0], (uint32_t)cp))
        return CL_LETTER;
    if (in_ranges(fsdp_uni_number, sizeof fsdp_uni_number / sizeof fsdp_uni_number[0], (uint32_t)cp))
        return CL_NUMBER;
    return CL_OTHER;
}

char fsdp_bpe_char_class(uint32_t cp) {
    static const char names[] = {'O', 'L', 'N', 'S'};
    return cp > 0x10FFFF ? 'O' : names[cp_class((int32_t)cp)];
}

int fsdp_bpe_char_numeric(uint32_t cp) {
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    return in_ranges(fsdp_uni_number_rust, sizeof fsdp_uni_number_rust / sizeof fsdp_uni_number_rust[0], cp);
}

/* Class and length of the code point at s[i] (CL_END at the end). */
static int class_at(const unsigned char *s, size_t n, size_t i, size_t *len) {
    if (i >= n) {
        *len = 0;
        return CL_END;
    }
    if (s[i] < 0x80) {
        *len = 1;
        return cp_class(s[i]);
    }
    return cp_class(utf8_next(s + i, n - i, len));
}

/* Length in bytes of the pre-token starting at s[i]. */
static size_t pretoken(const unsigned char *s, size_t n, size_t i) {
    size_t l0, l1;
    int c0 = class_at(s, n, i, &l0);
    if (s[i] == '\'' && i + 1 < n) { /* 's 't 'm 'd 're 've 'll */
        unsigned char a = s[i + 1], b = i + 2 < n ? s[i + 2] : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    }
    size_t j = i;
    int run = c0;
    if (s[i] == ' ') {
        int c1 = class_at(s, n, i + 1, &l1);
        if (c1 != CL_SPACE && c1 != CL_END) { /* " ?X+" with the space */
            run = c1;
            j = i + 1;
        }
    }
    if (run != CL_SPACE) {
        size_t l;
        while (j < n && class_at(s, n, j, &l) == run)
            j += l;
        return j - i;
    }
    /* \s+(?!\S) then \s+: a run of white space, less its last character when a non-space follows. */
    size_t last = i, l;
    while (j < n && class_at(s, n, j, &l) == CL_SPACE) {
        last = j;
        j += l;
    }
    if (j < n && last > i) return last - i;
    return j - i;
}

static int is_crlf(unsigned char c) { return c == '\r' || c == '\n'; }

/* Length of the pre-token at s[i] under Llama 3's Split pattern (LLAMA3_PATTERN; maxdig 3) or Qwen2's
 * (maxdig 1), its alternatives tried in order as the regex does:
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d) | [^\r\n\p{L}\p{N}]?\p{L}+ | \p{N}{1,maxdig} | ' '?[^\s\p{L}\p{N}]+[\r\n]*
 *   | \s*[\r\n]+ | \s+(?!\S) | \s+                                                                   */
static size_t split_llama3(const unsigned char *s, size_t n, size_t i, int maxdig) {
    size_t l0, l1, l, j;
    if (s[i] == '\'' && i + 1 < n) {
        unsigned char a = s[i + 1] | 0x20, c = i + 2 < n ? s[i + 2] | 0x20 : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
        if ((a == 'r' && c == 'e') || (a == 'v' && c == 'e') || (a == 'l' && c == 'l')) return 3;
    }
    int c0 = class_at(s, n, i, &l0);
    if (c0 == CL_LETTER || (c0 != CL_NUMBER && !is_crlf(s[i]) && class_at(s, n, i + l0, &l1) == CL_LETTER)) {
        j = c0 == CL_LETTER ? i : i + l0;
        while (j < n && class_at(s, n, j, &l) == CL_LETTER)
            j += l;
        return j - i;
    }
    if (c0 == CL_NUMBER) {
        j = i;
        for (int d = 0; d < maxdig && j < n && class_at(s, n, j, &l) == CL_NUMBER; d++)
            j += l;
        return j - i;
    }
    j = s[i] == ' ' && class_at(s, n, i + 1, &l1) == CL_OTHER ? i + 1 : i;
    if (class_at(s, n, j, &l) == CL_OTHER) {
        while (j < n && class_at(s, n, j, &l) == CL_OTHER)
            j += l;
        while (j < n && is_crlf(s[j]))
            j++;
        return j - i;
    }
    /* white space: the run [i, j); through its last CR/LF if it has one; else less its last character
     * when a non-space follows (and the run is longer than that character) */
    size_t last_nl = 0, last = i;
    int nl = 0;
    for (j = i; j < n && class_at(s, n, j, &l) == CL_SPACE; j += l) {
        if (is_crlf(s[j])) last_nl = j, nl = 1;
        last = j;
    }
    if (nl) return last_nl + 1 - i;
    if (j < n && last > i) return last - i;
    return j - i;
}

static int is_numeric_rust(const unsigned char *s, size_t n, size_t i, size_t *len) {
    if (s[i] < 0x80) {
        *len = 1;
        return s[i] >= '0' && s[i] <= '9';
    }
    int32_t cp = utf8_next(s + i, n - i, len);
    return cp >= 0 && fsdp_bpe_char_numeric((uint32_t)cp);
}

/* The Digits pre-tokenizer (Rust's char::is_numeric): each number alone (individual) or runs of numbers,
 * and the runs of other characters between them. */
static size_t split_digits(const unsigned char *s, size_t n, size_t i, int individual) {
    size_t l, j = i;
    int num = is_numeric_rust(s, n, i, &l);
    if (num && individual) return l;
    while (j < n && is_numeric_rust(s, n, j, &l) == num)
        j += l;
    return j - i;
}

/* ---------------------------------------------------------------- NFC */

static int ccc_of(uint32_t cp) {
    if (cp < 0x300) return 0;
    const uint32_t(*r)[3] = fsdp_uni_ccc;
    size_t lo = 0, hi = sizeof fsdp_uni_ccc / sizeof fsdp_uni_ccc[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid][0])
            hi = mid;
        else if (cp > r[mid][1])
            lo = mid + 1;
        else
            return (int)r[mid][2];
    }
    return 0;
}

enum {
    H_SBASE = 0xAC00,
    H_LBASE = 0x1100,
    H_VBASE = 0x1161,
    H_TBASE = 0x11A7,
    H_LCOUNT = 19,
    H_VCOUNT = 21,
    H_TCOUNT = 28,
    H_NCOUNT = 588,
    H_SCOUNT = 11172
};
#define NFC_RAW                                                                                              \
    0x110000u /* + byte: an invalid UTF-8 byte kept as it is (a starter that composes with nothing) */

/* The full canonical decomposition of cp appended at d[*k] (room for 4). */
static void decompose(uint32_t cp, uint32_t *d, size_t *k) {
    if (cp >= H_SBASE && cp < H_SBASE + H_SCOUNT) {
        uint32_t si = cp - H_SBASE;
        d[(*k)++] = H_LBASE + si / H_NCOUNT;
        d[(*k)++] = H_VBASE + (si % H_NCOUNT) / H_TCOUNT;
        if (si % H_TCOUNT) d[(*k)++] = H_TBASE + si % H_TCOUNT;
        return;
    }
    if (cp >= 0xC0 && cp < NFC_RAW) {
        size_t lo = 0, hi = sizeof fsdp_uni_decomp / sizeof fsdp_uni_decomp[0];
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (fsdp_uni_decomp[mid][0] < cp)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo < sizeof fsdp_uni_decomp / sizeof fsdp_uni_decomp[0] && fsdp_uni_decomp[lo][0] == cp) {
            for (uint32_t t = 0; t < fsdp_uni_decomp[lo][2]; t++)
                d[(*k)++] = fsdp_uni_decomp_pool[fsdp_uni_decomp[lo][1] + t];
            return;
        }
    }
    d[(*k)++] = cp;
}

/* The primary composite of a + b, or 0. */
static uint32_t compose(uint32_t a, uint32_t b) {
    if (a >= H_LBASE && a < H_LBASE + H_LCOUNT && b >= H_VBASE && b < H_VBASE + H_VCOUNT)
        return H_SBASE + ((a - H_LBASE) * H_VCOUNT + (b - H_VBASE)) * H_TCOUNT;
    if (a >= H_SBASE && a < H_SBASE + H_SCOUNT && (a - H_SBASE) % H_TCOUNT == 0 && b > H_TBASE &&
        b < H_TBASE + H_TCOUNT)
        return a + (b - H_TBASE);
    size_t lo = 0, hi = sizeof fsdp_uni_compose / sizeof fsdp_uni_compose[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const uint32_t *e = fsdp_uni_compose[mid];
        if (e[0] < a || (e[0] == a && e[1] < b))
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < sizeof fsdp_uni_compose / sizeof fsdp_uni_compose[0] && fsdp_uni_compose[lo][0] == a &&
        fsdp_uni_compose[lo][1] == b)
        return fsdp_uni_compose[lo][2];
    return 0;
}

/* NFC of s[0..n) into b->norm (*out, *n_out bytes; at most 3n: Unicode's bound for NFC in UTF-8).
 * Decompose, order the marks canonically, recompose (UAX #15's algorithm); invalid bytes pass through. */
static fsdp_status nfc(fsdp_bpe *b, const unsigned char *s, size_t n, const unsigned char **out,
                       size_t *n_out) {
    size_t need = 4 * n + 4;
    if (need > b->cap_norm) {
        uint32_t *cp = realloc(b->norm_cp, need * sizeof *cp);
        if (cp) b->norm_cp = cp;
        unsigned char *t = realloc(b->norm, need);
        if (t) b->norm = t;
        if (!cp || !t) return FSDP_ERR(FSDP_ENOMEM, "no memory to normalize %zu bytes", n);
        b->cap_norm = need;
    }
    uint32_t *d = b->norm_cp;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t l;
        int32_t cp = utf8_next(s + i, n - i, &l);
        size_t at = k;
        decompose(cp < 0 ? NFC_RAW + s[i] : (uint32_t)cp, d, &k);
        /* canonical order: insert each new mark behind the marks of a higher class before it */
        for (size_t q = at; q < k; q++) {
            int c = ccc_of(d[q]);
            if (!c) continue;
            for (size_t r = q; r > 0 && ccc_of(d[r - 1]) > c; r--) {
                uint32_t t = d[r];
                d[r] = d[r - 1], d[r - 1] = t;
            }
        }
        i += l;
    }
    if (k) {
        size_t starter = 0, w = 1;
        int last = ccc_of(d[0]) ? 256 : 0;
        for (size_t r = 1; r < k; r++) {
            uint32_t ch = d[r], comp;
            int c = ccc_of(ch);
            if (d[starter] < NFC_RAW && ch < NFC_RAW && (last < c || last == 0) &&
                (comp = compose(d[starter], ch))) {
                d[starter] = comp;
                continue;
            }
            if (c == 0) starter = w;
            last = c;
            d[w++] = ch;
        }
        k = w;
    }
    unsigned char *t = b->norm;
    size_t m = 0;
    for (size_t q = 0; q < k; q++) {
        uint32_t c = d[q];
        if (c >= NFC_RAW)
            t[m++] = (unsigned char)(c - NFC_RAW);
        else if (c < 0x80)
            t[m++] = (unsigned char)c;
        else if (c < 0x800)
            t[m++] = (unsigned char)(0xC0 | c >> 6), t[m++] = (unsigned char)(0x80 | (c & 0x3F));
        else if (c < 0x10000)
            t[m++] = (unsigned char)(0xE0 | c >> 12), t[m++] = (unsigned char)(0x80 | ((c >> 6) & 0x3F)),
            t[m++] = (unsigned char)(0x80 | (c & 0x3F));
        else
            t[m++] = (unsigned char)(0xF0 | c >> 18), t[m++] = (unsigned char)(0x80 | ((c >> 12) & 0x3F)),
            t[m++] = (unsigned char)(0x80 | ((c >> 6) & 0x3F)), t[m++] = (unsigned char)(0x80 | (c & 0x3F));
    }
    *out = t;
    *n_out = m;
    return FSDP_OK;
}

static fsdp_status grow_scratch(fsdp_bpe *b, size_t n) {
    if (n > b->cap_sym) {
        size_t cap = n < 256 ? 256 : n * 2;
        int32_t *sy = realloc(b->sym, cap * sizeof *sy);
        if (sy) b->sym = sy;
        int32_t *pv = realloc(b->prev, cap * sizeof *pv);
        if (pv) b->prev = pv;
        int32_t *nx = realloc(b->next, cap * sizeof *nx);
        if (nx) b->next = nx;
        if (!sy || !pv || !nx) return FSDP_ERR(FSDP_ENOMEM, "no memory for a word of %zu bytes", n);
        b->cap_sym = cap;
    }
    return FSDP_OK;
}

/* (rank, pos) order of the merge queue: lowest rank first, leftmost among equal ranks (`tokenizers`). */
static int cand_less(const merge_cand *x, const merge_cand *y) {
    return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos);
}

static fsdp_status heap_push(fsdp_bpe *b, size_t *n, merge_cand c) {
    if (*n == b->cap_heap) {
        size_t cap = b->cap_heap ? 2 * b->cap_heap : 256;
        merge_cand *h = realloc(b->heap, cap * sizeof *h);
        if (!h) return FSDP_ERR(FSDP_ENOMEM, "no memory for %zu merge candidates", cap);
        b->heap = h, b->cap_heap = cap;
    }
    merge_cand *h = b->heap;
    size_t i = (*n)++;
    while (i > 0 && cand_less(&c, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = c;
    return FSDP_OK;
}

static merge_cand heap_pop(merge_cand *h, size_t *n) {
    merge_cand top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, m = l;
        if (l >= *n) break;
        if (l + 1 < *n && cand_less(&h[l + 1], &h[l])) m = l + 1;
        if (!cand_less(&h[m], &last)) break;
        h[i] = h[m];
        i = m;
    }
    if (*n) h[i] = last;
    return top;
}

static int32_t pair_rank(const fsdp_bpe *b, int32_t x, int32_t y, int32_t *id) {
    uint64_t key = ((uint64_t)(uint32_t)x << 32 | (uint32_t)y) + 1;
    for (size_t i = fnv(&key, 8) & b->pair_mask;; i = (i + 1) & b->pair_mask) {
        const pair_slot *p = &b->pairs[i];
        if (p->key == key) {
            *id = p->id;
            return p->rank;
        }
        if (p->key == 0) return INT32_MAX;
    }
}

/* BPE of one pre-token's bytes; appends the ids to out, returns their number. */
static fsdp_status bpe_word(fsdp_bpe *b, const unsigned char *w, size_t n, int32_t *out, size_t *n_out) {
    uint64_t h = fnv(w, n);
    cache_slot *cs = n <= CACHE_WORD ? &b->cache[h & (CACHE_SIZE - 1)] : NULL;
    if (cs && cs->n && cs->hash == h && cs->len == n && !memcmp(cs->word, w, n)) {
        memcpy(out, cs->ids, cs->n * sizeof *out);
        *n_out = cs->n;
        return FSDP_OK;
    }
    *n_out = 0;
    if (n == 0) return FSDP_OK;
    if (b->ignore_merges) {
        int32_t whole = str_get(&b->bytes_id, (const char *)w, n);
        if (whole >= 0) {
            out[0] = whole;
            *n_out = 1;
            return FSDP_OK;
        }
    }
    FSDP_TRY(grow_scratch(b, n));
    /* Symbols i = 0..n-1 start as the bytes; a merge of i with next[i] keeps i and unlinks the right one.
     * Each merge pushes at most two candidates, so the work is O(n log n) in the word's length. */
    int32_t *sym = b->sym, *prev = b->prev, *next = b->next, id;
    size_t nh = 0, m = n;
    for (size_t i = 0; i < n; i++) {
        sym[i] = b->byte_id[w[i]];
        if (sym[i] < 0)
            return fsdp_set_error(
                FSDP_EFORMAT,
                "the text holds the byte 0x%02X, which is not UTF-8 and has no token in this "
                "vocabulary",
                w[i]);
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        int32_t r = pair_rank(b, sym[i], sym[i + 1], &id);
        if (r != INT32_MAX) FSDP_TRY(heap_push(b, &nh, (merge_cand){r, (int32_t)i, sym[i], sym[i + 1]}));
    }
    while (nh) {
        merge_cand c = heap_pop(b->heap, &nh);
        int32_t p = c.pos, q = next[p];
        if (sym[p] != c.left || q < 0 || sym[q] != c.right) continue; /* stale: p or its neighbour merged */
        pair_rank(b, sym[p], sym[q], &id);
        sym[p] = id;
        sym[q] = -1;
        next[p] = next[q];
        if (next[q] >= 0) prev[next[q]] = p;
        m--;
        int32_t l = prev[p], r = next[p], rr;
        if (l >= 0 && (rr = pair_rank(b, sym[l], sym[p], &id)) != INT32_MAX)
            FSDP_TRY(heap_push(b, &nh, (merge_cand){rr, l, sym[l], sym[p]}));
        if (r >= 0 && (rr = pair_rank(b, sym[p], sym[r], &id)) != INT32_MAX)
            FSDP_TRY(heap_push(b, &nh, (merge_cand){rr, p, sym[p], sym[r]}));
    }
    size_t k = 0;
    for (int32_t i = 0; i >= 0; i = next[i])
        out[k++] = sym[i];
    *n_out = m;
    if (cs) {
        cs->hash = h;
        cs->len = (uint8_t)n;
        cs->n = (uint8_t)m;
        memcpy(cs->word, w, n);
        memcpy(cs->ids, out, m * sizeof *out);
    }
    return FSDP_OK;
}

/* Pre-token split k (b->stage[k]) over s[0..n), each piece on to the next split, the last ones to BPE. */
static fsdp_status encode_stage(fsdp_bpe *b, int k, const unsigned char *s, size_t n, int32_t *out,
                                size_t *kk) {
    if (k == b->n_stage) {
        size_t got;
        FSDP_TRY(bpe_word(b, s, n, out + *kk, &got));
        *kk += got;
        return FSDP_OK;
    }
    for (size_t i = 0; i < n;) {
        size_t l;
        switch (b->stage[k]) {
        case STAGE_GPT2: l = pretoken(s, n, i); break;
        case STAGE_LLAMA3: l = split_llama3(s, n, i, 3); break;
        case STAGE_QWEN2: l = split_llama3(s, n, i, 1); break;
        case STAGE_DIGIT: l = split_digits(s, n, i, 1); break;
        default: l = split_digits(s, n, i, 0); break;
        }
        FSDP_TRY(encode_stage(b, k + 1, s + i, l, out, kk));
        i += l;
    }
    return FSDP_OK;
}

/* Text between added tokens: normalized (NFC, when the tokenizer has it), split, BPE. */
static fsdp_status encode_plain(fsdp_bpe *b, const unsigned char *s, size_t n, int32_t *out, size_t *k) {
    if (b->nfc) {
        size_t i = 0;
        while (i < n && s[i] < 0x80)
            i++;
        if (i < n) FSDP_TRY(nfc(b, s, n, &s, &n)); /* ASCII is its own NFC */
    }
    return encode_stage(b, 0, s, n, out, k);
}

fsdp_status fsdp_bpe_encode(fsdp_bpe *b, const char *text, size_t n, int32_t *out, size_t *n_out) {
    if (!b || (!text && n) || !out || !n_out) return FSDP_ERR(FSDP_EINVAL, "fsdp_bpe_encode: NULL argument");
    const unsigned char *s = (const unsigned char *)text;
    size_t k = 0, pos = 0;
    while (pos < n) {
        /* The next added token: the earliest start, the longest among those starting there (`tokenizers`'
         * leftmost-longest), found by walking the trie from each position whose byte can start one. */
        size_t start = pos, len = 0;
        int bi = -1;
        for (; start < n; start++) {
            if (!b->first[s[start]]) continue;
            int32_t node = 0;
            for (size_t e = start; e < n && (node = trie_child(b, node, s[e])) >= 0; e++)
                if (b->term[node] >= 0) bi = b->term[node], len = e + 1 - start;
            if (bi >= 0) break;
        }
        size_t end = bi >= 0 ? start : n;
        FSDP_TRY(encode_plain(b, s + pos, end - pos, out, &k));
        if (bi < 0) break;
        out[k++] = b->added_id[bi];
        pos = end + len;
    }
    *n_out = k;
    return FSDP_OK;
}
