# fastmath.mk — generated kernels stay correct whatever the user's build
# flags (DESIGN.md "Embedding"): the token slice tests/matrix.lua writes to
# $(B)/matrix/fastmath (every score, norm, fuse, mask, method, dtype and
# out_dtype, scores up to about ±80 and near 0, rows that see no key) and the
# N-d fastmath slice of tests/matrix_nd.lua (inputs in [-1, 1] and, as
# test_nd.c, [-3, 3]), their kernels compiled with
#   gcc   -O3 -ffast-math -march=native
#   clang -Ofast -march=native
#   gcc   -Ofast, no -march (the portable path of every file)
# and checked against the double-precision reference, which is built with
# $(CFLAGS) (no fast-math): only the kernel objects get the flags. Each
# program is linked with its build's flags, so it runs with the
# flush-to-zero mode -ffast-math's startup file sets, as a user's would.
# Included by the Makefile (CC, CFLAGS, B, NPROC, LUA, RT_SRC).

FM := $(B)/fastmath
# The token and N-d kernels the builds take: the slices (make test), or the
# whole matrices (test-fastmath-full, not in make test: about ten times as long).
# -ffast-math changes how a kernel rounds and sums and treats NaN, Inf and
# denormals, not which code it runs: each build needs every code path once,
# with the inputs that break first (exp at ±80 and near 0, rows that see no
# key, 16-bit loads), not every pair of values. The token slice
# (tests/matrix_fastmath.lua): of each group of candidates (magnitudes ±80,
# near 0, rows that see no key, 16-bit storage, the backward's tiles, the
# rest) the kernels that bring a score, norm, fuse, mask, method, dtype,
# out_dtype or no-key value the group lacks, and those that bring a schedule
# value but the tiles, the OpenMP axis and prefetching; the generator fails
# if a value is missing, and $(FM_TOK_SRC)/coverage.txt, printed here, counts
# them. The N-d slice (tests/matrix_nd.lua fastmath): the global pair of each
# form, every value of each axis (form, ndim, score, norm, fuse, dtypes,
# bias, heads, mask, causal rows, padding, halo, shift, stride, lanes, cols,
# the backward's rows...) but the tiles bq and bk, and every pair of the pass
# (forward, backward) with a form, score, norm, fuse, dtype or mask value
# (asserted by the generator).
FM_TOK_SRC ?= $(B)/matrix/fastmath
FM_ND_SRC  ?= $(B)/nd-fastmath
FM_BUILDS := gcc clang plain
FM_CC_gcc      := $(CC)
FM_FLAGS_gcc   := -std=c11 -O3 -ffast-math -march=native -fopenmp
FM_CC_clang    := $(or $(CLANG),clang)
FM_FLAGS_clang := -std=c11 -Ofast -march=native -fopenmp
FM_CC_plain    := $(CC)
FM_FLAGS_plain := -std=c11 -Ofast -fopenmp
FM_WARN := -Wall -Wextra -Werror

.PHONY: test-fastmath
TEST_TARGETS += test-fastmath

# The N-d slice's clang build here is also test-nd's clang -Werror check
# (mk/nd.mk, nd_compilers: the small slice goes through plain gcc there).
$(B)/nd-fastmath/stamp: $(GEN_SRC) tests/matrix_nd.lua
	rm -rf $(B)/nd-fastmath && HEED_ROOT=. luajit tests/matrix_nd.lua $(B)/nd-fastmath fastmath
	touch $@

# $(call fm_check,BUILD): the token and N-d slices with BUILD's compiler and
# flags, each against the reference; prints the counts.
define fm_check
	rm -rf $(FM)/$(1) && mkdir -p $(FM)/$(1)/tok $(FM)/$(1)/nd
	cp $(FM_TOK_SRC)/*.c $(FM_TOK_SRC)/*.h $(FM)/$(1)/tok/
	cp $(FM_ND_SRC)/*.c $(FM_ND_SRC)/*.h $(FM)/$(1)/nd/
	cd $(FM)/$(1)/tok && ls *.c | grep -v '^table\.c$$' | xargs -P $(NPROC) -n $(XN) \
	    $(FM_CC_$(1)) $(FM_FLAGS_$(1)) $(FM_WARN) -I. -I$(CURDIR)/runtime -c
	cd $(FM)/$(1)/nd && ls *.c | grep -v '^nd_table\.c$$' | xargs -P $(NPROC) -n $(XN) \
	    $(FM_CC_$(1)) $(FM_FLAGS_$(1)) $(FM_WARN) -I. -I$(CURDIR)/runtime -c
	$(CC) $(CFLAGS) -Iruntime -I$(FM)/$(1)/tok -c $(FM)/$(1)/tok/table.c -o $(FM)/$(1)/tok/table.o
	$(CC) $(CFLAGS) -Iruntime -I$(FM)/$(1)/nd -c $(FM)/$(1)/nd/nd_table.c -o $(FM)/$(1)/nd/nd_table.o
	$(FM_CC_$(1)) $(FM_FLAGS_$(1)) $(FM)/$(1)/tok/*.o $(FM)/ref/tok/*.o -lm -o $(FM)/$(1)/check
	$(FM_CC_$(1)) $(FM_FLAGS_$(1)) $(FM)/$(1)/nd/*.o $(FM)/ref/nd/*.o -lm -o $(FM)/$(1)/nd_check
	@st=0; $(FM)/$(1)/check 3 2 > $(FM)/$(1)/check.log || st=1; \
	  $(FM)/$(1)/nd_check 2 2 > $(FM)/$(1)/nd_check.log || st=1; \
	  $(FM)/$(1)/nd_check 1 2 3 > $(FM)/$(1)/nd_check_big.log || st=1; \
	  cd $(FM)/$(1) && echo "test-fastmath $(1) ($(FM_CC_$(1)) $(FM_FLAGS_$(1))):" \
	    "token $$(grep -c ': PASS' check.log) pass, $$(grep -c ': FAIL' check.log) fail;" \
	    "N-d $$(grep -c ': PASS' nd_check.log) pass, $$(grep -c ': FAIL' nd_check.log) fail;" \
	    "N-d at magnitude 3: $$(grep -c ': PASS' nd_check_big.log) pass, $$(grep -c ': FAIL' nd_check_big.log) fail"; \
	  grep -h ': FAIL' check.log nd_check.log nd_check_big.log | head -20; exit $$st

endef

# The reference and the check drivers, built once without fast-math.
$(FM)/ref/stamp: $(RT_SRC) runtime/ref_nd.c tune/check_main.c runtime/heed.h runtime/ref_nd.h \
  runtime/verify.h runtime/hrt_inline.h
	rm -rf $(FM)/ref && mkdir -p $(FM)/ref/tok $(FM)/ref/nd
	cd $(FM)/ref/tok && $(CC) $(CFLAGS) -I$(CURDIR)/runtime -c $(addprefix $(CURDIR)/,$(RT_SRC) tune/check_main.c)
	cd $(FM)/ref/nd && $(CC) $(CFLAGS) -I$(CURDIR)/runtime -DHEED_CHECK_ND -c \
	    $(addprefix $(CURDIR)/,runtime/ref.c runtime/ref_nd.c tune/check_main.c)
	touch $@

# One target a build (make -k test-fastmath reports all three).
FM_TARGETS := $(addprefix test-fastmath-,$(FM_BUILDS))
.PHONY: $(FM_TARGETS)

$(FM_TARGETS): test-fastmath-%: $(FM_ND_SRC)/stamp $(FM)/ref/stamp
	@test -f $(FM_TOK_SRC)/table.c || { echo "$@: no $(FM_TOK_SRC): run make test-generator first"; exit 1; }
	$(call fm_check,$*)

test-fastmath: $(FM_TARGETS)
	@! test -f $(FM_TOK_SRC)/coverage.txt || cat $(FM_TOK_SRC)/coverage.txt
	@echo "test-fastmath: every kernel of $(FM_TOK_SRC) and $(FM_ND_SRC) matches the reference under $(FM_BUILDS)"

# The whole token matrix (test-unit's) and N-d matrix (test-nd's) under the three builds.
.PHONY: test-fastmath-full
test-fastmath-full: $(B)/nd/stamp
	$(MAKE) --no-print-directory test-fastmath FM_TOK_SRC=$(B)/matrix FM_ND_SRC=$(B)/nd
