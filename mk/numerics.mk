# numerics.mk — make test-numerics: the token kernels on inputs at the edges
# of float32 (NaN, ±inf, rows of norm 1e20 and 1e-25, scores beyond float
# range) against the double-precision reference, or against the behaviour
# docs/numerics.md documents where float32 cannot follow it. A slice of the
# test matrix (every method; dot and cosine scores, every norm, fuse none,
# sum, max, masks none and causal; the bf16/f16 kernels of section 4b and
# the decode method's of section 3c', whose NaN and inf bit patterns must
# propagate the same way), its objects shared
# with test-unit.

.PHONY: test-numerics
TEST_TARGETS += test-numerics

NUM_RE := ^k_(dot|cosine)_[a-z]+_(none|sum|max)_(none|causal)$$|^k_cosine_none_mean_none$$|^k_general_none_sum_none$$|^k_dot_relu_sum_local2$$|^dt_(bf16|f16)_[0-9]_|^dt_amx_|^decode_dm[0-9]+_(bf16|f16)_

test-numerics: runtime/ref.c runtime/verify.c runtime/generic.c tests/test_numerics.c tests/numerics_table.awk
	@test -f $(B)/matrix/table.c || { echo "test-numerics: no $(B)/matrix: run make test-generator first"; exit 1; }
	awk -v RE='$(NUM_RE)' -f tests/numerics_table.awk $(B)/matrix/table.c > $(B)/matrix/numerics_table.c.tmp
	mv $(B)/matrix/numerics_table.c.tmp $(B)/numerics_table.c
	cd $(B)/matrix && for f in $$(sed -n 's/^#include "\(.*\)\.h"$$/\1/p' ../numerics_table.c | grep -v '^kernel_table$$\|^dtype$$'); do \
	    test $$f.o -nt $$f.c || echo $$f.c; done | xargs -r -P $(NPROC) -n 8 $(CC) $(CFLAGS) -Werror -I. -I$(CURDIR)/runtime -c
	$(CC) $(CFLAGS) -Iruntime -I$(B)/matrix $(B)/numerics_table.c \
	    $$(sed -n 's,^#include "\(k_.*\|dt_.*\|decode_.*\)\.h"$$,$(B)/matrix/\1.o,p' $(B)/numerics_table.c) \
	    $(RT_SRC) runtime/generic.c tests/test_numerics.c -lcriterion -lm -o $(B)/test_numerics
	$(B)/test_numerics -j2
