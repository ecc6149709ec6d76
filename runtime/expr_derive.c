/* expr_derive.c — score_mod's derivative in s for libheed's backward
 * (hrt_expr_dscore, runtime/expr.h): the expression's tree evaluated forward
 * with gen/expr_derive.lua's rules. Part of expr.c (which includes it at its
 * end, and so of ref.c's translation unit): it reads expr.c's nodes. */

/* ---- the derivative in s (gen/expr.lua's derive, evaluated forward) --------- */

/* d node x / d s at env: what does not read s (ints, positions, constants,
 * tensor reads) is 0; floor and // are 0; a real % is a' - b' floor(a / b);
 * min / max follow the argument they return (a tie: the earlier), abs at 0
 * is +1, ?: the branch taken (gen/expr.lua's rules, docs/backward.md). */
static double dev(const hrt_expr *e, int x, const hrt_expr_env *env)
{
    const node *n = &e->n[x];
    if (n->ty != T_REAL) return 0.0;
    switch (n->op) {
    case N_VAR: return n->o == 4 ? 1.0 : 0.0;
    case N_UN: return -dev(e, n->a, env);
    case N_COND: return dev(e, ev(e, n->c, env).b ? n->a : n->b, env);
    case N_CALL: {
        const int f = n->o;
        if (f == F_MIN || f == F_MAX) {
            int at = n->args[0];
            double a = as_real(e, at, env);
            for (int j = 1; j < n->nargs; j++) {
                const double b = as_real(e, n->args[j], env);
                if (f == F_MIN ? b < a : b > a) a = b, at = n->args[j];
            }
            return dev(e, at, env);
        }
        if (f == F_FLOOR) return 0.0;
        const double a = as_real(e, n->args[0], env), da = dev(e, n->args[0], env);
        switch (f) {
        case F_ABS: return a < 0 ? -da : da;
        case F_EXP: return exp(a) * da;
        case F_EXP2: return exp2(a) * 0.69314718055994530942 * da;
        case F_LOG: return da / a;
        case F_TANH: { const double t = tanh(a); return (1.0 - t * t) * da; }
        default: return da / (2.0 * sqrt(a));
        }
    }
    case N_BIN: {
        const int o = n->o;
        if (o == O_IDIV) return 0.0;
        const double da = dev(e, n->a, env), db = dev(e, n->b, env);
        switch (o) {
        case O_ADD: return da + db;
        case O_SUB: return da - db;
        case O_MUL: return da * as_real(e, n->b, env) + as_real(e, n->a, env) * db;
        case O_DIV: {
            const double a = as_real(e, n->a, env), b = as_real(e, n->b, env);
            return (da * b - a * db) / (b * b);
        }
        case O_MOD: return da - db * floor(as_real(e, n->a, env) / as_real(e, n->b, env));
        default: return 0.0;
        }
    }
    default: return 0.0;    /* numbers, tensor reads */
    }
}

double hrt_expr_dscore(const hrt_expr *e, const hrt_expr_env *env) { return dev(e, e->root, env); }
