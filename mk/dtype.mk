# dtype.mk — make test-dtype: the 16-bit storage conversions of generated
# kernels (gen/target.lua's widen_*/narrow_* and their scalar functions)
# against runtime/dtype.h, every 16-bit pattern and every rounding case, for
# the default target (F16C / AVX-512 where the build has them) and the
# portable scalar target. The bf16/f16 kernels themselves are in the test
# matrix (tests/matrix.lua section 4b: test-unit, test-scalar, test-targets).

.PHONY: test-dtype
TEST_TARGETS += test-dtype

DT := $(B)/dtype

test-dtype: tests/test_dtype.c runtime/dtype.h tests/dtype/bf16_in.lua tests/dtype/f16_in.lua $(GEN_SRC)
	rm -rf $(DT) && mkdir -p $(DT)/native $(DT)/scalar
	./heed gen tests/dtype/bf16_in.lua tests/dtype/f16_in.lua -o $(DT)/native
	./heed gen tests/dtype/bf16_in.lua tests/dtype/f16_in.lua --target scalar -o $(DT)/scalar
	for t in native scalar; do \
	    $(CC) $(CFLAGS) -Werror -Iruntime -I$(DT)/$$t -DKERNEL_C='"dt_bf16_in.c"' -DIN_BF16 tests/test_dtype.c \
	        -lcriterion -lm -o $(DT)/test_bf16_in_$$t && \
	    $(CC) $(CFLAGS) -Werror -Iruntime -I$(DT)/$$t -DKERNEL_C='"dt_f16_in.c"' -DIN_F16 tests/test_dtype.c \
	        -lcriterion -lm -o $(DT)/test_f16_in_$$t || exit 1; \
	done
	for t in $(DT)/test_*; do $$t -j2 || exit 1; done
