/* ---- vectors of $(LANES) floats: target $(ISA) ------------------------------
 * The tile code below works on vf, LANES query lanes at a time.
 * $(ISA_DOC).
 * Only the operations this kernel calls are here. */
enum { LANES = $(LANES) };

> if ISA_GUARD then
#if $(ISA_GUARD)
$(ISA_INCLUDE)
> if ISA_PRAGMA then
$(ISA_PRAGMA)
> end

$(ISA_PRIMS)
> for _, x in ipairs(ISA_EXTS or {}) do

#if $(x.macro)
$(x.prims)
#endif
> end
#else
/* Without $(ISA): vf is a plain array of LANES floats and every operation a
 * short loop the compiler may vectorize for whatever the target has. Both
 * paths compute the same thing. */
$(PORTABLE_PRIMS)
#endif
> else
$(PORTABLE_PRIMS)
> end
