# neon.mk — the NEON (aarch64) target, tested on this x86 machine: its
# kernels cross-compiled by Debian's gcc-aarch64-linux-gnu and run under
# qemu-user (scripts/deps.sh installs both).
#   $(B)/matrix/neon   tests/matrix.lua's neon slice (every score, norm, fuse,
#                      mask and method; every register block of the row),
#                      written by test-generator
#   $(B)/neon/nd       tests/matrix_nd.lua's small slice written --target neon
#                      (every form; strips of 4 lanes are q registers, other
#                      lane counts portable vectors)
# Both are built with -Werror together with the double-precision references
# and tests/test_neon.c, which checks every kernel (tolerance at batch 0, 1,
# 3; NaN inputs; rows without keys) and prints the counts. Also:
#   - the golden files (avx2, scalar, neon, N-d) compile for aarch64;
#   - the neon slice runs on x86-64: its portable path at 4 lanes
#     (mk/kernels.mk's check_matrix), all but the schedule points, of which
#     those that bring a schedule value the rest lack, and a large magnitude
#     of each norm and fuse ($(B)/matrix/neon-x86);
#   - heed check runs its check program under the emulator (HEED_EXEC), also
#     for kernels built with -O3 -ffast-math (vit_pool: exp2;
#     tests/neon_exp.lua: exp), and fails when the runner does;
#   - heed tune under HEED_EXEC writes the checked default and no wisdom;
#     heed bench refuses to time;
#   - the FMA peak (tune/peak.c) builds NEON chains for aarch64 and runs.
# Included by the Makefile (CC, CFLAGS, B, LUA, NPROC) after mk/kernels.mk (check_matrix).

NEON_CC     ?= aarch64-linux-gnu-gcc
NEON_EXEC   ?= qemu-aarch64 -L /usr/aarch64-linux-gnu
NEON_CFLAGS ?= -std=c11 -O2 -fopenmp -Wall -Wextra -Werror
NEON        := $(B)/neon
# a user's build that lets the compiler reassociate: exp and exp2 must survive it
NEON_FAST   := -std=c11 -O3 -ffast-math -fopenmp -Wall -Wextra -Werror

.PHONY: test-neon
TEST_TARGETS += test-neon

# $(call neon_objs,DIR,CC,FLAGS): compiles DIR/*.c into DIR/*.o
define neon_objs
	cd $(1) && $(CURDIR)/scripts/cc-objs.sh $(NPROC) $(XN) $(2) $(3) -I. -I$(CURDIR)/runtime
endef

test-neon:
	@test -f $(B)/matrix/neon/table.c || { echo "test-neon: no $(B)/matrix/neon: run make test-generator first"; exit 1; }
	@! grep -l '_mm\|immintrin' $(B)/matrix/neon/*.c || { echo "test-neon: x86 intrinsics in a neon kernel (above)"; exit 1; }
	rm -rf $(NEON) && mkdir -p $(NEON)/nd $(NEON)/golden $(NEON)/x86
	HEED_ROOT=. $(LUA) tests/matrix_nd.lua $(NEON)/nd small neon >/dev/null
	rm -rf $(NEON)/nd/tok
	$(call neon_objs,$(B)/matrix/neon,$(NEON_CC),$(NEON_CFLAGS))
	$(call neon_objs,$(NEON)/nd,$(NEON_CC),$(NEON_CFLAGS))
	$(NEON_CC) $(NEON_CFLAGS) -Iruntime $(B)/matrix/neon/*.o $(NEON)/nd/*.o runtime/ref.c runtime/ref_nd.c \
		runtime/verify.c tests/test_neon.c -lm -o $(NEON)/test_neon
	@start=$$(date +%s); $(NEON_EXEC) $(NEON)/test_neon > $(NEON)/test_neon.log; rc=$$?; \
	    grep FAIL $(NEON)/test_neon.log | head -20; tail -1 $(NEON)/test_neon.log; \
	    echo "test-neon: $$(($$(date +%s) - start)) s under $(NEON_EXEC)"; exit $$rc
	cd $(NEON)/golden && $(NEON_CC) $(NEON_CFLAGS) -I$(CURDIR)/tests/golden -I$(CURDIR)/runtime \
		-c $(CURDIR)/tests/golden/*.c
	cd $(B)/matrix/neon && for f in decode_*.c; do \
	    $(NEON_CC) $(NEON_CFLAGS:-O2=-O1) -I. -I$(CURDIR)/runtime -c $$f -o /dev/null || exit 1; done
	@echo "test-neon: the decode kernels compile at -O1 -Werror too (their 16-bit widening inlined on constant sizes)"
	@echo "test-neon: the golden files (avx2, scalar, neon, N-d) compile for aarch64"
	cp $(B)/matrix/neon-x86/*.c $(B)/matrix/neon-x86/*.h $(NEON)/x86/
	$(call check_matrix,$(NEON)/x86,$(CFLAGS),on x86-64: the neon kernels' portable path (4 lanes))
	HEED_EXEC="$(NEON_EXEC)" HEED_CC=$(NEON_CC) ./heed check examples/vit_pool.lua --target neon
	HEED_EXEC="$(NEON_EXEC)" HEED_CC=$(NEON_CC) ./heed check examples/nd_patches.lua
	HEED_EXEC="$(NEON_EXEC)" HEED_CC=$(NEON_CC) HEED_CFLAGS="$(NEON_FAST)" ./heed check examples/vit_pool.lua --target neon
	HEED_EXEC="$(NEON_EXEC)" HEED_CC=$(NEON_CC) HEED_CFLAGS="$(NEON_FAST)" ./heed check tests/neon_exp.lua --target neon
	@! HEED_EXEC=false HEED_CC=$(NEON_CC) ./heed check examples/vit_pool.lua --target neon >/dev/null 2>&1 \
	    || { echo "test-neon: heed check passed with HEED_EXEC=false: the runner is not used"; exit 1; }
	HEED_EXEC="$(NEON_EXEC)" HEED_CC=$(NEON_CC) HEED_CACHE=$(CURDIR)/$(NEON)/cache ./heed tune examples/vit_pool.lua \
		--budget 5 -o $(NEON)/tune
	@grep -q 'target:    neon' $(NEON)/tune/vit_pool.c && test ! -e $(NEON)/cache/wisdom \
	    || { echo "test-neon: heed tune under HEED_EXEC did not write a neon kernel, or wrote wisdom"; exit 1; }
	@HEED_EXEC="$(NEON_EXEC)" ./heed bench examples/vit_pool.lua 2>&1 | grep -q "bench: HEED_EXEC is set" \
	    || { echo "test-neon: heed bench did not refuse to time under HEED_EXEC"; exit 1; }
	@echo "test-neon: heed check and heed tune run the target's programs under HEED_EXEC; heed bench refuses"
	$(NEON_CC) $(NEON_CFLAGS) -Itune bench/peak_main.c tune/peak.c tune/timer.c -lm -o $(NEON)/peak
	@aarch64-linux-gnu-objdump -d $(NEON)/peak | grep -q 'fmla.*v[0-9]*\.4s' \
	    || { echo "test-neon: tune/peak.c has no NEON FMA chains for aarch64"; exit 1; }
	@$(NEON_EXEC) $(NEON)/peak 1 | grep -Eq 'GFLOP/s' || { echo "test-neon: the FMA peak did not run under $(NEON_EXEC)"; exit 1; }
	@echo "test-neon: the FMA peak has NEON chains and runs on aarch64"
