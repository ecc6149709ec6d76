/* The target's scalar primitives (gen/target.lua) this kernel calls. */
$(SCALAR_PRIMS)

