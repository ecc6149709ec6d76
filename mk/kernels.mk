# kernels.mk — the portable path of the generated kernels. tests/matrix.lua
# also writes a subset of the test matrix to $(B)/matrix/scalar (its own
# kernel table); this builds it for plain x86-64, without AVX2 and FMA, so the
# kernels take their non-intrinsic branch, and checks every kernel against
# the double-precision reference (tune/check_main.c, batch 3, 2 seeds).

SCALAR_CFLAGS ?= -std=c11 -O2 -march=x86-64 -mno-avx2 -mno-fma -fopenmp -Wall -Wextra

.PHONY: test-scalar
TEST_TARGETS += test-scalar

test-scalar:
	@test -f $(B)/matrix/scalar/table.c || { echo "test-scalar: no $(B)/matrix/scalar: run make test-generator first"; exit 1; }
	$(call matrix_objs,$(B)/matrix/scalar,$(SCALAR_CFLAGS))
	$(CC) $(SCALAR_CFLAGS) -Iruntime $(B)/matrix/scalar/*.o $(RT_SRC) tune/check_main.c -lm -o $(B)/matrix/scalar/check
	@$(B)/matrix/scalar/check 3 2 > $(B)/matrix/scalar/check.log || { grep FAIL $(B)/matrix/scalar/check.log; exit 1; }
	@echo "test-scalar: $$(grep -c PASS $(B)/matrix/scalar/check.log) kernels match the reference without AVX2/FMA"
