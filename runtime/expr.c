/* expr.c — mask_mod and score_mod in libheed (expr.h): a recursive-descent
 * parser of gen/expr.lua's grammar, its type rules, its normalize() (the
 * canonical text, so a problem's hash is the generator's) and an evaluator
 * with the semantics of the C the generator emits for the reference (reals
 * in double; ints as long long; floor // and % with a // 0 = 0, a % 0 = a;
 * min(a, b) = b < a ? b : a). Integers wrap rather than overflow (the
 * generator refuses expressions whose integers may leave +-2^53). Tensor
 * lookups (name[i]) read the declared tensors flat, 0 outside (hx_ti/hx_tf). */
#include "expr.h"
#include "heed.h"
#include "hrt_inline.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_LEN = 65536, MAX_DEPTH = 128, MAX_ARGS = 8 };
enum { T_INT, T_REAL, T_BOOL };
enum { N_NUM, N_VAR, N_CONST, N_UN, N_BIN, N_COND, N_CALL, N_NAME, N_IDX };
/* binary operators, with gen/expr.lua's PREC */
enum { O_OR, O_AND, O_EQ, O_NE, O_LT, O_LE, O_GT, O_GE, O_ADD, O_SUB, O_MUL, O_DIV, O_IDIV, O_MOD, O_NOT, O_NEG };
static const char *const OPS[] = { "||", "&&", "==", "!=", "<", "<=", ">", ">=", "+", "-", "*", "/", "//", "%", "!", "-" };
static const int PREC[] = { 2, 3, 4, 4, 5, 5, 5, 5, 6, 6, 7, 7, 7, 7 };
enum { P_COND = 1, P_UNARY = 8, P_PRIMARY = 9 };

static const char *const VARS[] = { "b", "h", "q", "k", "s" };
static const char *const CONSTS[] = { "lq", "lk", "heads", "heads_kv", "dk", "dv" };
static const char *const FUNCS[] = { "min", "max", "abs", "floor", "exp", "exp2", "log", "tanh", "sqrt" };
enum { F_MIN, F_MAX, F_ABS, F_FLOOR, F_EXP, F_EXP2, F_LOG, F_TANH, F_SQRT };
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

typedef struct node {
    int op, ty, o, pos;     /* o: operator (N_UN, N_BIN), variable, constant or function index */
    long long iv;
    double rv;
    int a, b, c;            /* children (cond: c ? a : b) */
    int nargs, args[MAX_ARGS];
    int name_at, name_len;  /* N_NAME, N_CALL, N_IDX: the name in the text */
} node;

struct hrt_expr {
    node *n;
    int count, root;
    const heed_tensor *decl;    /* the declared tensors (N_IDX: o is the index of one) */
};

typedef struct {
    const char *s;
    int len, i, depth;
    const char *field;
    int score;
    const heed_tensor *decl;
    int ndecl;
    node *n;
    int count, cap;
    char *why;
    size_t nwhy;
    int err;
} parser;

static void perr(parser *p, int pos, const char *fmt, ...)
{
    if (p->err) return;
    p->err = 1;
    if (!p->why || !p->nwhy) return;
    int len = snprintf(p->why, p->nwhy, "field '%s': at position %d: ", p->field, pos + 1);
    if (len < 0 || (size_t)len >= p->nwhy) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->why + len, p->nwhy - (size_t)len, fmt, ap);
    va_end(ap);
}

static int is_alpha(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_digit(int c) { return c >= '0' && c <= '9'; }

/* ", found 'x'" (gen/expr.lua found()) */
static void found(const parser *p, int i, char *buf, size_t n)
{
    buf[0] = '\0';
    if (i >= p->len) return;
    int l = 1;
    if (is_alpha(p->s[i]) || is_digit(p->s[i]))
        while (i + l < p->len && (is_alpha(p->s[i + l]) || is_digit(p->s[i + l]) || p->s[i + l] == '.')) l++;
    snprintf(buf, n, ", found '%.*s%s'", l > 20 ? 20 : l, p->s + i, l > 20 ? "..." : "");
}

static void expected(parser *p, int i, const char *what)
{
    char f[40];
    found(p, i, f, sizeof f);
    perr(p, i, "expected %s%s", what, f);
}

static void sp(parser *p)
{
    while (p->i < p->len && strchr(" \t\r\n", p->s[p->i])) p->i++;
}

static int tok(parser *p, const char *t)
{
    size_t l = strlen(t);
    if ((size_t)(p->len - p->i) >= l && !memcmp(p->s + p->i, t, l)) {
        p->i += (int)l;
        sp(p);
        return 1;
    }
    return 0;
}

static int add(parser *p, int op, int pos)
{
    if (p->count == p->cap) {
        int cap = p->cap ? 2 * p->cap : 64;
        node *m = realloc(p->n, (size_t)cap * sizeof *m);
        if (!m) {
            p->err = 2;
            if (p->why && p->nwhy) snprintf(p->why, p->nwhy, "out of memory");
            return -1;
        }
        p->n = m;
        p->cap = cap;
    }
    node *x = &p->n[p->count];
    memset(x, 0, sizeof *x);
    x->op = op;
    x->pos = pos;
    x->a = x->b = x->c = -1;
    return p->count++;
}

static int cond(parser *p);

/* digits of an exponent after [eE][+-]? */
static void exponent(parser *p, int *j)
{
    if (*j < p->len && (p->s[*j] == 'e' || p->s[*j] == 'E')) {
        int k = *j + 1;
        if (k < p->len && (p->s[k] == '+' || p->s[k] == '-')) k++;
        if (k >= p->len || !is_digit(p->s[k])) {
            expected(p, k, "digits of the exponent");
            return;
        }
        while (k < p->len && is_digit(p->s[k])) k++;
        *j = k;
    }
}

static int number(parser *p)
{
    const int at = p->i;
    int j = at, real = 0;
    while (j < p->len && is_digit(p->s[j])) j++;
    const int digits = j - at;
    if (j < p->len && p->s[j] == '.' && (digits > 0 || (j + 1 < p->len && is_digit(p->s[j + 1])))) {
        real = 1;
        j++;
        while (j < p->len && is_digit(p->s[j])) j++;
        exponent(p, &j);
    } else if (digits > 0 && j < p->len && (p->s[j] == 'e' || p->s[j] == 'E')) {
        real = 1;
        exponent(p, &j);
    }
    if (p->err) return -1;
    if (j == at) return -1;
    const int len = j - at;
    char text[48];
    int x;
    if (real) {
        if (len > 40) {
            perr(p, at, "expected a finite real literal of at most 40 characters");
            return -1;
        }
        memcpy(text, p->s + at, (size_t)len);
        text[len] = '\0';
        double v = strtod(text, NULL);
        if (!isfinite(v)) {
            perr(p, at, "expected a finite real literal of at most 40 characters");
            return -1;
        }
        if ((x = add(p, N_NUM, at)) < 0) return -1;
        p->n[x].ty = T_REAL;
        p->n[x].rv = v;
    } else {
        int k = at;
        while (k < j - 1 && p->s[k] == '0') k++;
        if (j - k > 15) {
            perr(p, at, "expected an int literal of at most 15 digits");
            return -1;
        }
        long long v = 0;
        for (; k < j; k++) v = v * 10 + (p->s[k] - '0');
        if ((x = add(p, N_NUM, at)) < 0) return -1;
        p->n[x].ty = T_INT;
        p->n[x].iv = v;
    }
    p->i = j;
    sp(p);
    return x;
}

/* A sub-expression that must come next: its node, or -1 with "expected WHAT". */
static int need_expr(parser *p, const char *what)
{
    const int a = cond(p);
    if (p->err) return -1;
    if (a < 0) expected(p, p->i, what);
    return a;
}

/* The token t that must come next: 0, or -1 with "expected WHAT". */
static int need_tok(parser *p, const char *t, const char *what)
{
    if (tok(p, t)) return 0;
    expected(p, p->i, what);
    return -1;
}

static int primary(parser *p)
{
    const int at = p->i;
    if (at >= p->len) return -1;
    const int c = p->s[at];
    if (is_digit(c) || (c == '.' && at + 1 < p->len && is_digit(p->s[at + 1]))) return number(p);
    if (is_alpha(c)) {
        int j = at;
        while (j < p->len && (is_alpha(p->s[j]) || is_digit(p->s[j]))) j++;
        const int nlen = j - at;
        p->i = j;
        sp(p);
        int x;
        if (tok(p, "(")) {
            int args[MAX_ARGS + 1], na = 0;
            do {
                const int a = need_expr(p, "an argument");
                if (a < 0) return -1;
                if (na == MAX_ARGS + 1) {
                    perr(p, at, "%.*s takes at most %d arguments", nlen, p->s + at, MAX_ARGS);
                    return -1;
                }
                args[na++] = a;
            } while (tok(p, ","));
            if (need_tok(p, ")", "')' closing the arguments") < 0) return -1;
            if ((x = add(p, N_CALL, at)) < 0) return -1;
            p->n[x].nargs = na;
            memcpy(p->n[x].args, args, (size_t)(na < MAX_ARGS ? na : MAX_ARGS) * sizeof args[0]);
            if (na > MAX_ARGS) p->n[x].nargs = MAX_ARGS + 1;
        } else if (tok(p, "[")) {
            const int a = need_expr(p, "an index");
            if (a < 0 || need_tok(p, "]", "']'") < 0) return -1;
            if ((x = add(p, N_IDX, at)) < 0) return -1;
            p->n[x].a = a;
        } else {
            if ((x = add(p, N_NAME, at)) < 0) return -1;
        }
        if (nlen > 64) {
            perr(p, at, "expected a name of at most 64 characters");
            return -1;
        }
        p->n[x].name_at = at;
        p->n[x].name_len = nlen;
        return x;
    }
    if (tok(p, "(")) {
        const int a = need_expr(p, "an expression after '('");
        return a < 0 || need_tok(p, ")", "')'") < 0 ? -1 : a;
    }
    return -1;
}

static int unary(parser *p)
{
    if (++p->depth > 4 * MAX_DEPTH) {
        perr(p, p->i, "the expression is nested more than %d deep", MAX_DEPTH);
        return -1;
    }
    int r;
    const int at = p->i;
    if (at < p->len && (p->s[at] == '-' || p->s[at] == '!')) {
        const int o = p->s[at] == '-' ? O_NEG : O_NOT;
        p->i++;
        sp(p);
        int a = unary(p);
        if (p->err) return -1;
        if (a < 0) {
            char what[40];
            snprintf(what, sizeof what, "an expression after '%s'", OPS[o]);
            expected(p, p->i, what);
            return -1;
        }
        if ((r = add(p, N_UN, at)) < 0) return -1;
        p->n[r].o = o;
        p->n[r].a = a;
    } else {
        r = primary(p);
    }
    p->depth--;
    return r;
}

/* One precedence level: operand (op operand)*, ops tried in order. */
static int level(parser *p, int lvl);
static const int LEVELS[][5] = {
    { O_OR, -1 }, { O_AND, -1 }, { O_EQ, O_NE, -1 }, { O_LE, O_GE, O_LT, O_GT, -1 }, { O_ADD, O_SUB, -1 },
    { O_IDIV, O_DIV, O_MUL, O_MOD, -1 },
};

static int operand(parser *p, int lvl) { return lvl + 1 < COUNT(LEVELS) ? level(p, lvl + 1) : unary(p); }

static int level(parser *p, int lvl)
{
    int acc = operand(p, lvl);
    if (acc < 0) return -1;
    for (;;) {
        int o = -1;
        const int at = p->i;
        for (int t = 0; LEVELS[lvl][t] >= 0 && o < 0; t++)
            if (tok(p, OPS[LEVELS[lvl][t]])) o = LEVELS[lvl][t];
        if (o < 0) return acc;
        int b = operand(p, lvl);
        if (p->err) return -1;
        if (b < 0) {
            char what[40];
            snprintf(what, sizeof what, "an expression after '%s'", OPS[o]);
            expected(p, p->i, what);
            return -1;
        }
        int x = add(p, N_BIN, at);
        if (x < 0) return -1;
        p->n[x].o = o;
        p->n[x].a = acc;
        p->n[x].b = b;
        acc = x;
    }
}

static int cond(parser *p)
{
    if (++p->depth > 4 * MAX_DEPTH) {
        perr(p, p->i, "the expression is nested more than %d deep", MAX_DEPTH);
        return -1;
    }
    int c = level(p, 0);
    if (c < 0) return -1;
    const int at = p->i;
    if (tok(p, "?")) {
        const int a = need_expr(p, "an expression after '?'");
        if (a < 0 || need_tok(p, ":", "':' of '?:'") < 0) return -1;
        const int b = need_expr(p, "an expression after ':'");
        if (b < 0) return -1;
        int x = add(p, N_COND, at);
        if (x < 0) return -1;
        p->n[x].c = c;
        p->n[x].a = a;
        p->n[x].b = b;
        c = x;
    }
    p->depth--;
    return c;
}

/* ---- types ------------------------------------------------------------------ */

static const char *const TYNAME[] = { "int", "real", "bool" };

static int is_num(int t) { return t == T_INT || t == T_REAL; }

/* where a subexpression starts (a binary node's pos is its operator's) */
static int start(const parser *p, int x)
{
    while (p->n[x].op == N_BIN || p->n[x].op == N_COND) x = p->n[x].op == N_BIN ? p->n[x].a : p->n[x].c;
    return p->n[x].pos;
}

static int lookup(const char *const *names, int count, const char *s, int len)
{
    for (int t = 0; t < count; t++)
        if ((int)strlen(names[t]) == len && !memcmp(names[t], s, (size_t)len)) return t;
    return -1;
}

/* The declared tensor named s[0 .. len), or -1. */
static int tensor_of(const parser *p, const char *s, int len)
{
    for (int t = 0; t < p->ndecl; t++)
        if (p->decl[t].name && (int)strlen(p->decl[t].name) == len && !memcmp(p->decl[t].name, s, (size_t)len))
            return t;
    return -1;
}

/* The declared tensors' names, space-separated (gen/expr.lua's tnames). */
static void tensor_names(const parser *p, char *buf, size_t n)
{
    buf[0] = '\0';
    for (int t = 0; t < p->ndecl; t++)
        snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", t ? " " : "", p->decl[t].name);
}

static int check(parser *p, int x, int depth)
{
    node *n = &p->n[x];
    if (depth > MAX_DEPTH) {
        perr(p, n->pos, "the expression is nested more than %d deep", MAX_DEPTH);
        return -1;
    }
    const char *nm = p->s + n->name_at;
    const int nl = n->name_len;
    switch (n->op) {
    case N_NUM:
        return n->ty;
    case N_NAME: {
        int t;
        if ((t = lookup(VARS, COUNT(VARS), nm, nl)) >= 0) {
            if (t == 4 && !p->score) {
                perr(p, n->pos, "'s' (the score) is only defined in score_mod");
                return -1;
            }
            n->op = N_VAR;
            n->o = t;
            return n->ty = t == 4 ? T_REAL : T_INT;
        }
        if ((t = lookup(CONSTS, COUNT(CONSTS), nm, nl)) >= 0) {
            n->op = N_CONST;
            n->o = t;
            return n->ty = T_INT;
        }
        char names[HEED_MAX_TENSORS * 66];
        tensor_names(p, names, sizeof names);
        if (lookup(FUNCS, COUNT(FUNCS), nm, nl) >= 0)
            perr(p, n->pos, "'%.*s' is a function: write %.*s(...)", nl, nm, nl, nm);
        else if (tensor_of(p, nm, nl) >= 0)
            perr(p, n->pos, "'%.*s' is a tensor: write %.*s[index]", nl, nm, nl, nm);
        else
            perr(p, n->pos, "unknown name '%.*s' (variables: b h q k%s; constants: lq lk heads heads_kv dk dv%s%s)", nl,
                 nm, p->score ? " s" : "", names[0] ? "; tensors: " : "", names);
        return -1;
    }
    case N_IDX: {
        const int t = tensor_of(p, nm, nl);
        if (t < 0) {
            char names[HEED_MAX_TENSORS * 66];
            tensor_names(p, names, sizeof names);
            perr(p, n->pos, "'%.*s' is not a tensor declared under 'tensors'%s%s%s", nl, nm,
                 names[0] ? " (declared: " : " (none are declared)", names, names[0] ? ")" : "");
            return -1;
        }
        const int ti = check(p, n->a, depth + 1);
        if (ti < 0) return -1;
        n = &p->n[x];
        if (ti != T_INT) {
            perr(p, start(p, n->a), "the index of '%.*s' must be an int, not %s", nl, nm, TYNAME[ti]);
            return -1;
        }
        n->o = t;
        return n->ty = p->decl[t].dtype == HEED_TENSOR_F32 ? T_REAL : T_INT;
    }
    case N_CALL: {
        const int f = lookup(FUNCS, COUNT(FUNCS), nm, nl);
        if (f < 0) {
            perr(p, n->pos, "unknown function '%.*s' (functions: abs exp exp2 floor log max min sqrt tanh)", nl, nm);
            return -1;
        }
        const int lo = f <= F_MAX ? 2 : 1, hi = f <= F_MAX ? MAX_ARGS : 1;
        if (n->nargs < lo || n->nargs > hi) {
            if (lo == hi)
                perr(p, n->pos, "%s takes 1 argument, not %d", FUNCS[f], n->nargs);
            else if (n->nargs > MAX_ARGS)
                perr(p, n->pos, "%s takes %d to %d arguments, not more", FUNCS[f], lo, hi);
            else
                perr(p, n->pos, "%s takes %d to %d arguments, not %d", FUNCS[f], lo, hi, n->nargs);
            return -1;
        }
        n->o = f;
        int all_int = 1;
        for (int j = 0; j < n->nargs; j++) {
            int t = check(p, p->n[x].args[j], depth + 1);
            if (t < 0) return -1;
            if (!is_num(t)) {
                perr(p, start(p, p->n[x].args[j]), "an argument of %s must be a number, not %s", FUNCS[f], TYNAME[t]);
                return -1;
            }
            if (t != T_INT) all_int = 0;
        }
        n = &p->n[x];
        return n->ty = (f <= F_FLOOR && all_int) ? T_INT : T_REAL;
    }
    case N_UN: {
        int t = check(p, n->a, depth + 1);
        if (t < 0) return -1;
        n = &p->n[x];
        if (n->o == O_NOT && t != T_BOOL) {
            perr(p, n->pos, "'!' takes a bool, not %s", TYNAME[t]);
            return -1;
        }
        if (n->o == O_NEG && !is_num(t)) {
            perr(p, n->pos, "'-' takes a number, not %s", TYNAME[t]);
            return -1;
        }
        return n->ty = t;
    }
    case N_COND: {
        int tc = check(p, n->c, depth + 1);
        if (tc < 0) return -1;
        if (tc != T_BOOL) {
            perr(p, p->n[x].pos, "the condition before '?' must be a bool, not %s", TYNAME[tc]);
            return -1;
        }
        int ta = check(p, p->n[x].a, depth + 1);
        if (ta < 0) return -1;
        int tb = check(p, p->n[x].b, depth + 1);
        if (tb < 0) return -1;
        n = &p->n[x];
        if ((ta == T_BOOL) != (tb == T_BOOL)) {
            perr(p, n->pos, "the branches of '?:' must both be bools or both numbers, not %s and %s", TYNAME[ta],
                 TYNAME[tb]);
            return -1;
        }
        return n->ty = ta == tb ? ta : T_REAL;
    }
    default: { /* N_BIN */
        int ta = check(p, n->a, depth + 1);
        if (ta < 0) return -1;
        int tb = check(p, p->n[x].b, depth + 1);
        if (tb < 0) return -1;
        n = &p->n[x];
        const int o = n->o, pr = PREC[o];
        if (o == O_AND || o == O_OR) {
            if (ta != T_BOOL || tb != T_BOOL) {
                perr(p, n->pos, "'%s' takes two bools, not %s and %s", OPS[o], TYNAME[ta], TYNAME[tb]);
                return -1;
            }
            return n->ty = T_BOOL;
        }
        if (pr == 4 || pr == 5) {
            if (!((is_num(ta) && is_num(tb)) || (pr == 4 && ta == T_BOOL && tb == T_BOOL))) {
                perr(p, n->pos, "'%s' compares %s, not %s and %s", OPS[o],
                     pr == 4 ? "two numbers or two bools" : "two numbers", TYNAME[ta], TYNAME[tb]);
                return -1;
            }
            return n->ty = T_BOOL;
        }
        if (!is_num(ta) || !is_num(tb)) {
            perr(p, n->pos, "'%s' takes two numbers, not %s and %s", OPS[o], TYNAME[ta], TYNAME[tb]);
            return -1;
        }
        return n->ty = (o != O_DIV && ta == T_INT && tb == T_INT) ? T_INT : T_REAL;
    }
    }
}

hrt_expr *hrt_expr_parse(const char *text, int score, const heed_tensor *decl, int ndecl, char *why, size_t n)
{
    parser p = { .s = text, .field = score ? "score_mod" : "mask_mod", .score = score, .why = why, .nwhy = n,
                 .decl = decl, .ndecl = decl && ndecl > 0 ? ndecl : 0 };
    if (why && n) why[0] = '\0';
    if (!text) {
        perr(&p, 0, "no expression (NULL)");
        return NULL;
    }
    size_t len = strlen(text);
    if (len > MAX_LEN) {
        perr(&p, MAX_LEN, "the expression is longer than %d characters", MAX_LEN);
        return NULL;
    }
    p.len = (int)len;
    int d = 0;
    for (int i = 0; i < p.len; i++) {
        const unsigned char c = (unsigned char)text[i];
        if (!(is_alpha(c) || is_digit(c) || strchr(" \t\n\v\f\r.+-*/%=!<>&|?:,()[]", c))) {
            if (c < 32 || c > 126)
                perr(&p, i, "unexpected character '\\%d'", c);
            else
                perr(&p, i, "unexpected character '%c'", c);
            return NULL;
        }
        if (c == '(' || c == '[') {
            if (++d > MAX_DEPTH) {
                perr(&p, i, "the expression is nested more than %d deep", MAX_DEPTH);
                return NULL;
            }
        } else if (c == ')' || c == ']') {
            d--;
        }
    }
    sp(&p);
    int root = cond(&p);
    if (!p.err && root < 0) expected(&p, p.i, "an expression");
    if (!p.err && p.i < p.len) expected(&p, p.i, "an operator or the end of the expression");
    int ty = p.err ? -1 : check(&p, root, 1);
    if (!p.err && !score && ty != T_BOOL)
        perr(&p, 0, "mask_mod must be a bool (a condition such as q >= k), not %s", TYNAME[ty]);
    if (!p.err && score && !is_num(ty)) perr(&p, 0, "score_mod must be a number (the new score), not bool");
    hrt_expr *e = p.err ? NULL : malloc(sizeof *e);
    if (!e) {
        if (!p.err && why && n) snprintf(why, n, "out of memory");
        free(p.n);
        return NULL;
    }
    e->n = p.n;
    e->count = p.count;
    e->root = root;
    e->decl = decl;
    return e;
}

void hrt_expr_free(hrt_expr *e)
{
    if (!e) return;
    free(e->n);
    free(e);
}

/* ---- canonical text (gen/expr.lua normalize) ------------------------------- */

typedef struct {
    char *buf;
    size_t n, len;
} out;

static void put(out *o, const char *s, size_t l)
{
    if (o->len < o->n) {
        size_t room = o->n - o->len - 1;
        memcpy(o->buf + o->len, s, l < room ? l : room);
        o->buf[o->len + (l < room ? l : room)] = '\0';
    }
    o->len += l;
}
static void puts_(out *o, const char *s) { put(o, s, strlen(s)); }

/* gen/expr.lua real_text: integral values below 2^53 as %.1f, else the
 * shortest %.Ng that reads back exactly, with ".0" when it has no '.' or 'e' */
static void real_text(double v, char *s, size_t n)
{
    if (v == floor(v) && v > -9007199254740992.0 && v < 9007199254740992.0) {
        snprintf(s, n, "%.1f", v);
        return;
    }
    for (int p = 1; p <= 17; p++) {
        snprintf(s, n, "%.*g", p, v);
        if (strtod(s, NULL) == v) break;
    }
    if (!strpbrk(s, ".e")) strncat(s, ".0", n - strlen(s) - 1);
}

static int prec_of(const node *x)
{
    if (x->op == N_BIN) return PREC[x->o];
    if (x->op == N_COND) return P_COND;
    if (x->op == N_UN) return P_UNARY;
    return P_PRIMARY;
}

static const char *node_name(const node *x)
{
    switch (x->op) {
    case N_VAR: return VARS[x->o];
    case N_CONST: return CONSTS[x->o];
    default: return FUNCS[x->o];
    }
}

static void norm(const hrt_expr *e, int x, out *o);

/* child x, parenthesized when paren */
static void sub(const hrt_expr *e, int x, int paren, out *o)
{
    if (paren) puts_(o, "(");
    norm(e, x, o);
    if (paren) puts_(o, ")");
}

static void norm(const hrt_expr *e, int x, out *o)
{
    const node *n = &e->n[x];
    char t[64];
    switch (n->op) {
    case N_NUM:
        if (n->ty == T_INT) snprintf(t, sizeof t, "%lld", n->iv);
        else real_text(n->rv, t, sizeof t);
        puts_(o, t);
        return;
    case N_VAR:
    case N_CONST:
        puts_(o, node_name(n));
        return;
    case N_IDX:
        puts_(o, e->decl[n->o].name);
        puts_(o, "[");
        norm(e, n->a, o);
        puts_(o, "]");
        return;
    case N_CALL:
        puts_(o, FUNCS[n->o]);
        puts_(o, "(");
        for (int j = 0; j < n->nargs; j++) {
            if (j) puts_(o, ", ");
            norm(e, n->args[j], o);
        }
        puts_(o, ")");
        return;
    case N_UN: {
        const node *a = &e->n[n->a];
        /* a minus before a negative operand: -(-x), as the Lua text test */
        int neg = n->o == O_NEG && ((a->op == N_UN && a->o == O_NEG) || (a->op == N_NUM && (a->ty == T_INT ? a->iv < 0 : signbit(a->rv))));
        puts_(o, OPS[n->o]);
        sub(e, n->a, prec_of(a) < P_UNARY || neg, o);
        return;
    }
    case N_COND:
        sub(e, n->c, prec_of(&e->n[n->c]) <= P_COND, o);
        puts_(o, " ? ");
        norm(e, n->a, o);
        puts_(o, " : ");
        norm(e, n->b, o);
        return;
    default: {
        const int p = PREC[n->o];
        sub(e, n->a, prec_of(&e->n[n->a]) < p, o);
        puts_(o, " ");
        puts_(o, OPS[n->o]);
        puts_(o, " ");
        sub(e, n->b, prec_of(&e->n[n->b]) <= p, o);
    }
    }
}

int hrt_expr_text(const hrt_expr *e, char *buf, size_t n)
{
    out o = { buf, n, 0 };
    if (buf && n) buf[0] = '\0';
    norm(e, e->root, &o);
    return (int)o.len;
}

int hrt_expr_canonical(const char *text, int score, const heed_tensor *decl, int ndecl, char **res, char *why,
                       size_t n)
{
    *res = NULL;
    if (!text) return HEED_OK;
    hrt_expr *e = hrt_expr_parse(text, score, decl, ndecl, why, n);
    if (!e) return why && n && !strcmp(why, "out of memory") ? HEED_ENOMEM : HEED_EEXPR;
    int len = hrt_expr_text(e, NULL, 0);
    *res = malloc((size_t)len + 1);
    if (*res) hrt_expr_text(e, *res, (size_t)len + 1);
    hrt_expr_free(e);
    return *res ? HEED_OK : HEED_ENOMEM;
}

/* ---- evaluation (the generator's C with reals in double) -------------------- */

typedef union {
    long long i;
    double r;
    int b;
} val;

static long long wrap(unsigned long long x) { return (long long)x; }

static long long idiv(long long a, long long b)
{
    if (b == 0) return 0;
    if (b == -1) return wrap(0ull - (unsigned long long)a);
    long long q = a / b, r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
}

static long long imod(long long a, long long b)
{
    if (b == 0) return a;
    if (b == -1) return 0;
    long long r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

static double dmod(double a, double b)
{
    double m = fmod(a, b);
    return (m != 0 && ((m < 0) != (b < 0))) ? m + b : m;
}

static val ev(const hrt_expr *e, int x, const hrt_expr_env *env);

static double as_real(const hrt_expr *e, int x, const hrt_expr_env *env)
{
    val v = ev(e, x, env);
    return e->n[x].ty == T_INT ? (double)v.i : v.r;
}

static val ev(const hrt_expr *e, int x, const hrt_expr_env *env)
{
    const node *n = &e->n[x];
    val r = { 0 };
    switch (n->op) {
    case N_NUM:
        if (n->ty == T_INT) r.i = n->iv;
        else r.r = n->rv;
        return r;
    case N_VAR: {
        const long long v[] = { env->b, env->h, env->q, env->k };
        if (n->o == 4) r.r = env->s;
        else r.i = v[n->o];
        return r;
    }
    case N_CONST: {
        const long long v[] = { env->lq, env->lk, env->heads, env->heads_kv, env->dk, env->dv };
        r.i = v[n->o];
        return r;
    }
    case N_IDX: { /* flat; outside the tensor (or without data) 0, as hx_ti / hx_tf */
        const long long i = ev(e, n->a, env).i;
        const heed_tensor *t = env->tensors ? &env->tensors[n->o] : NULL;
        const int in = t && t->data && i >= 0 && i < hrt_tensor_elems(t);
        if (n->ty == T_INT) r.i = in ? ((const int32_t *)t->data)[i] : 0;
        else r.r = in ? (double)((const float *)t->data)[i] : 0.0;
        return r;
    }
    case N_UN: {
        val a = ev(e, n->a, env);
        if (n->o == O_NOT) r.b = !a.b;
        else if (n->ty == T_INT) r.i = wrap(0ull - (unsigned long long)a.i);
        else r.r = -a.r;
        return r;
    }
    case N_COND:
        if (ev(e, n->c, env).b) {
            if (n->ty == T_REAL) r.r = as_real(e, n->a, env);
            else r = ev(e, n->a, env);
        } else {
            if (n->ty == T_REAL) r.r = as_real(e, n->b, env);
            else r = ev(e, n->b, env);
        }
        return r;
    case N_CALL: {
        const int f = n->o;
        if (n->ty == T_INT) {
            long long a = ev(e, n->args[0], env).i;
            if (f == F_ABS) a = a < 0 ? wrap(0ull - (unsigned long long)a) : a;
            for (int j = 1; j < n->nargs; j++) {
                long long b = ev(e, n->args[j], env).i;
                a = f == F_MIN ? (b < a ? b : a) : (b > a ? b : a);
            }
            r.i = a;
            return r;
        }
        double a = as_real(e, n->args[0], env);
        switch (f) {
        case F_MIN:
        case F_MAX:
            for (int j = 1; j < n->nargs; j++) {
                double b = as_real(e, n->args[j], env);
                a = f == F_MIN ? (b < a ? b : a) : (b > a ? b : a);
            }
            break;
        case F_ABS: a = fabs(a); break;
        case F_FLOOR: a = floor(a); break;
        case F_EXP: a = exp(a); break;
        case F_EXP2: a = exp2(a); break;
        case F_LOG: a = log(a); break;
        case F_TANH: a = tanh(a); break;
        default: a = sqrt(a); break;
        }
        r.r = a;
        return r;
    }
    default: break;
    }
    /* N_BIN */
    const int o = n->o;
    if (o == O_AND) {
        r.b = ev(e, n->a, env).b && ev(e, n->b, env).b;
        return r;
    }
    if (o == O_OR) {
        r.b = ev(e, n->a, env).b || ev(e, n->b, env).b;
        return r;
    }
    const int ta = e->n[n->a].ty, tb = e->n[n->b].ty;
    if (ta == T_BOOL) { /* == and != of two bools */
        int a = ev(e, n->a, env).b, b = ev(e, n->b, env).b;
        r.b = o == O_EQ ? a == b : a != b;
        return r;
    }
    if (ta == T_INT && tb == T_INT && o != O_DIV) {
        long long a = ev(e, n->a, env).i, b = ev(e, n->b, env).i;
        unsigned long long ua = (unsigned long long)a, ub = (unsigned long long)b;
        switch (o) {
        case O_EQ: r.b = a == b; break;
        case O_NE: r.b = a != b; break;
        case O_LT: r.b = a < b; break;
        case O_LE: r.b = a <= b; break;
        case O_GT: r.b = a > b; break;
        case O_GE: r.b = a >= b; break;
        case O_ADD: r.i = wrap(ua + ub); break;
        case O_SUB: r.i = wrap(ua - ub); break;
        case O_MUL: r.i = wrap(ua * ub); break;
        case O_IDIV: r.i = idiv(a, b); break;
        default: r.i = imod(a, b); break;
        }
        return r;
    }
    double a = as_real(e, n->a, env), b = as_real(e, n->b, env);
    switch (o) {
    case O_EQ: r.b = a == b; break;
    case O_NE: r.b = a != b; break;
    case O_LT: r.b = a < b; break;
    case O_LE: r.b = a <= b; break;
    case O_GT: r.b = a > b; break;
    case O_GE: r.b = a >= b; break;
    case O_ADD: r.r = a + b; break;
    case O_SUB: r.r = a - b; break;
    case O_MUL: r.r = a * b; break;
    case O_DIV: r.r = a / b; break;
    case O_IDIV: r.r = floor(a / b); break;
    default: r.r = dmod(a, b); break;
    }
    return r;
}

int hrt_expr_mask(const hrt_expr *e, const hrt_expr_env *env) { return ev(e, e->root, env).b; }

double hrt_expr_score(const hrt_expr *e, const hrt_expr_env *env)
{
    return e->n[e->root].ty == T_INT ? (double)ev(e, e->root, env).i : ev(e, e->root, env).r;
}

/* ---- tensor declarations (gen/spec.lua tensor_decl) -------------------------- */

/* C keywords (gen/spec.lua's RESERVED, its first lines): a tensor is a field of NAME_params */
static const char *const KEYWORDS[] = {
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum", "extern",
    "float", "for", "goto", "if", "inline", "int", "long", "register", "restrict", "return", "short", "signed",
    "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned", "void", "volatile", "while", "main",
    "bool", "true", "false", "nullptr", "alignas", "alignof", "static_assert", "thread_local", "typeof",
    "typeof_unqual", "constexpr", "asm", "fortran", "complex", "imaginary", "noreturn" };

int hrt_tensors_valid(const heed_tensor *t, int n, char *why, size_t nwhy)
{
    if (n < 0 || n > HEED_MAX_TENSORS)
        return hrt_bad(why, nwhy, "ntensors = %d (allowed: 0..%d)", n, HEED_MAX_TENSORS);
    if (n > 0 && !t) return hrt_bad(why, nwhy, "ntensors = %d with tensors NULL", n);
    for (int i = 0; i < n; i++) {
        const char *nm = t[i].name;
        size_t len = nm ? strlen(nm) : 0;
        int ok = len >= 1 && len <= 64 && nm[0] >= 'a' && nm[0] <= 'z';
        for (size_t j = 1; ok && j < len; j++)
            ok = (nm[j] >= 'a' && nm[j] <= 'z') || is_digit(nm[j]) || nm[j] == '_';
        if (!ok)
            return hrt_bad(why, nwhy, "tensors[%d]: name %s%s%s is not a tensor name (allowed: a lower-case "
                            "identifier [a-z][a-z0-9_]* of at most 64 characters)", i, nm ? "'" : "",
                            nm ? nm : "NULL", nm ? "'" : "");
        if (lookup(VARS, COUNT(VARS), nm, (int)len) >= 0 || lookup(CONSTS, COUNT(CONSTS), nm, (int)len) >= 0 ||
            lookup(FUNCS, COUNT(FUNCS), nm, (int)len) >= 0 || lookup(KEYWORDS, COUNT(KEYWORDS), nm, (int)len) >= 0)
            return hrt_bad(why, nwhy, "tensors[%d]: '%s' is not allowed as a tensor name (it is a variable, "
                            "constant or function of the expressions, or a C keyword)", i, nm);
        for (int j = 0; j < i; j++)
            if (!strcmp(t[j].name, nm)) return hrt_bad(why, nwhy, "tensors: '%s' is declared twice", nm);
        if (t[i].dtype != HEED_TENSOR_I32 && t[i].dtype != HEED_TENSOR_F32)
            return hrt_bad(why, nwhy, "tensors[%d] '%s': dtype %d (allowed: HEED_TENSOR_I32, HEED_TENSOR_F32)", i,
                            nm, (int)t[i].dtype);
        if (t[i].ndim < 1 || t[i].ndim > HEED_TENSOR_MAXDIM)
            return hrt_bad(why, nwhy, "tensors[%d] '%s': ndim %d (allowed: 1..%d)", i, nm, t[i].ndim,
                            HEED_TENSOR_MAXDIM);
        for (int d = 0; d < t[i].ndim; d++)
            if (t[i].shape[d] < 1 || t[i].shape[d] > 1048576)
                return hrt_bad(why, nwhy, "tensors[%d] '%s': shape[%d] = %d (allowed: 1..1048576)", i, nm, d,
                                t[i].shape[d]);
        if (hrt_tensor_elems(&t[i]) > 2147483647LL)
            return hrt_bad(why, nwhy, "tensors[%d] '%s': %lld elements (allowed: at most 2147483647)", i, nm,
                            hrt_tensor_elems(&t[i]));
    }
    return HEED_OK;
}

/* score_mod's derivative in s (hrt_expr_dscore): the same tree */
#include "expr_derive.c"
