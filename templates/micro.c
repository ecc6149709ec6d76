> -- The register-blocked micro-kernels, unrolled here for a register block of
> -- MR query lanes (MRV vectors of 8) by KN keys or value columns (KN·MRV
> -- accumulators), the reduction loop unrolled UNROLL times. Rendered for the
> -- schedule's block (KN = NR) and, with SUFFIX "_tail", for the narrower
> -- blocks that end a tile exactly (WANT_QK / WANT_PV say which are needed).
> local function at(base, x, v)       -- "base + x * BQP + 8v", without the zero terms
>   local s = base
>   if x > 0 then s = s .. " + " .. x .. " * BQP" end
>   if v > 0 then s = s .. " + " .. 8 * v end
>   return s
> end
> local function each_v(f)
>   local t = {}
>   for v = 0, MRV - 1 do t[#t + 1] = f(v) end
>   return table.concat(t, ", ")
> end
> local function stores(acc, x, base)
>   local t = {}
>   for v = 0, MRV - 1 do t[#t + 1] = "vf_store(" .. at(base, x, v) .. ", " .. acc .. x .. "_" .. v .. ");" end
>   return table.concat(t, " ")
> end
> local function fmas(acc, x)
>   local t = {}
>   for v = 0, MRV - 1 do t[#t + 1] = acc .. x .. "_" .. v .. " = vf_fma(a" .. v .. ", b, " .. acc .. x .. "_" .. v .. ");" end
>   return table.concat(t, " ")
> end
> local function idx(e) return e:find(" ") and "(" .. e .. ")" or e end
> -- One step of the reduction, its lines indented by ind.
> local function qk_step(c, ind)
$(ind)const float *restrict qc = qt + (size_t)$(idx(c)) * BQP;
$(ind)const vf $(each_v(function(v) return "a" .. v .. " = vf_load(" .. at("qc", 0, v) .. ")" end));
$(ind)vf b;
>   for x = 0, KN - 1 do
$(ind)b = vf_bcast(k + $(x == 0 and "" or x .. " * DK + ")$(c)); $(fmas("s", x))
>   end
> end
> local function pv_step(j, ind)
$(ind)const float *restrict pj = p + (size_t)$(idx(j)) * BQP, *restrict vj = v + (size_t)$(idx(j)) * DV;
$(ind)const vf $(each_v(function(v) return "a" .. v .. " = vf_load(" .. at("pj", 0, v) .. ")" end));
$(ind)vf b;
>   for x = 0, KN - 1 do
$(ind)b = vf_bcast(vj$(x == 0 and "" or " + " .. x)); $(fmas("o", x))
>   end
> end
> -- The reduction loop over var < bound (bound's value, when known, is
> -- known): UNROLL steps at a time, each in its own block, then one at a time.
> local function unrolled(var, bound, known, body)
>   if UNROLL > 1 then
    int $(var) = 0;
    for (; $(var) + $(UNROLL) <= $(bound); $(var) += $(UNROLL)) {
>     for u = 0, UNROLL - 1 do
        {
>       body(u == 0 and var or var .. " + " .. u, "            ")
        }
>     end
    }
>     if not known or known % UNROLL ~= 0 then
    for (; $(var) < $(bound); $(var)++) {
>       body(var, "        ")
    }
>     end
>   else
    for (int $(var) = 0; $(var) < $(bound); $(var)++) {
>     body(var, "        ")
    }
>   end
> end
> if WANT_QK then
/* One register block of Sᵀ: s[x][q] = Σ_c k[x][c] · qt[c][q] for the $(KN) key
 * rows at k and the MR query lanes of qt (a column panel of the tile's Qᵀ). */
static inline void qk_block$(SUFFIX)(const float *restrict qt, const float *restrict k, float *restrict s)
{
> for x = 0, KN - 1 do
    vf $(each_v(function(v) return "s" .. x .. "_" .. v .. " = vf_zero()" end));
> end
> unrolled("c", "DK", DK_N, qk_step)
> for x = 0, KN - 1 do
    $(stores("s", x, "s"))
> end
}
> end
> if WANT_QK and WANT_PV then

> end
> if WANT_PV then
/* One register block of Oᵀ: o[x][q] += Σ_j v[j][x] · p[j][q] over nk keys,
 * for the $(KN) value columns from v and the MR query lanes of p (a column
 * panel of the tile's Pᵀ). */
static inline void pv_block$(SUFFIX)(const float *restrict p, const float *restrict v, int nk, float *restrict o)
{
> for x = 0, KN - 1 do
    vf $(each_v(function(v) return "o" .. x .. "_" .. v .. " = vf_load(" .. at("o", x, v) .. ")" end));
> end
> unrolled("j", "nk", nil, pv_step)
> for x = 0, KN - 1 do
    $(stores("o", x, "o"))
> end
}
> end
