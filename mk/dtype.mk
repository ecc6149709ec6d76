# dtype.mk — make test-dtype: the 16-bit storage conversions of generated
# kernels (gen/target.lua's widen_*/narrow_* and their scalar functions)
# against runtime/dtype.h, every 16-bit pattern and every rounding case, for
# the default target (F16C / AVX-512 where the build has them) and the
# portable scalar target. The bf16/f16 kernels themselves are in the test
# matrix (tests/matrix.lua section 4b: test-unit, test-scalar, test-targets).

.PHONY: test-dtype
TEST_TARGETS += test-dtype

DT := $(B)/dtype

DT_SPECS := $(wildcard tests/dtype/*.lua)

# Each kernel file of tests/dtype/ for both targets: dt_*_in, the decode
# method (converts as it loads); dt_*_flash, standard attention converting
# tiles as it packs them (TILE: no narrowing row, each output rounded);
# dt_*_entry, fused, behind templates/storage.c's converting entry point.
test-dtype: tests/test_dtype.c tests/guard.h runtime/dtype.h $(DT_SPECS) $(GEN_SRC)
	rm -rf $(DT) && mkdir -p $(DT)/native $(DT)/scalar
	./heed gen $(DT_SPECS) -o $(DT)/native
	./heed gen $(DT_SPECS) --target scalar -o $(DT)/scalar
	for t in native scalar; do \
	    for k in bf16_in f16_in bf16_flash f16_flash bf16_amx bf16_entry f16_entry; do \
	        d=-DIN_$$(echo $${k%%_*} | tr a-z A-Z); N=$$(echo dt_$$k | tr a-z A-Z); \
	        case $$k in *_flash|*_amx) d="$$d -DTILE";; esac; \
	        $(CC) $(CFLAGS) -Werror -Iruntime -I$(DT)/$$t -DKERNEL_C="\"dt_$$k.c\"" $$d -DKNAME=dt_$$k \
	            "-DELEMS(x)=$${N}_##x##_ELEMS" tests/test_dtype.c -lcriterion -lm -o $(DT)/test_$${k}_$$t || exit 1; \
	    done; \
	done
	for t in $(DT)/test_*; do $$t -j2 || exit 1; done

# The fuller sweep (not in make test: 768 kernels, half an hour on 2 cores): every
# score × norm × fuse × mask in bf16 and f16 against the reference on the
# same rounded inputs (heed check's program, tune/check_main.c).
.PHONY: test-dtype-sweep
test-dtype-sweep: tests/dtype_sweep.lua $(GEN_SRC) runtime/dtype.h $(RT_SRC) tune/check_main.c
	rm -rf $(DT)/sweep
	HEED_ROOT=. $(LUA) tests/dtype_sweep.lua $(DT)/sweep
	cd $(DT)/sweep && ls *.c | grep -v '^table\.c$$' | xargs -P $(NPROC) -n $(XN) $(CC) $(CFLAGS) -Werror -I. -I$(CURDIR)/runtime -c
	$(CC) $(CFLAGS) -Iruntime -I$(DT)/sweep $(DT)/sweep/*.o $(DT)/sweep/table.c $(RT_SRC) tune/check_main.c -lm \
	    -o $(DT)/sweep/check
	$(DT)/sweep/check 2 > $(DT)/sweep/check.log || { grep FAIL $(DT)/sweep/check.log; exit 1; }
	@echo "test-dtype-sweep: $$(grep -c PASS $(DT)/sweep/check.log) kernels PASS"
