/* Lane vectors: a vf holds T floats, one query of a strip per lane (the
 * target's vectors, gen/target.lua). The kernel is written once against
 * these primitives. */
$(fragment("simd.c"))

