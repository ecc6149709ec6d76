# embed.mk — generated kernels in a user's build (DESIGN.md "Embedding";
# docs/embedding.md). test-embed-flags builds the token slice tests/matrix.lua
# writes to $(B)/matrix/fastmath and the N-d small slice of tests/matrix_nd.lua ($(B)/nd-slice)
# (the token slice shared with mk/fastmath.mk: every score, norm, fuse, mask,
# method and N-d form) the way a project without OpenMP would:
#   gcc -std=c11 -O2 -march=native -Wall -Wextra -Werror, no -fopenmp
# (kernels, reference and drivers alike), checks no object calls OpenMP and
# every kernel, single-threaded, against the double-precision reference;
# compiles an eighth of both slices with clang and no -march, no -fopenmp,
# -Werror (the portable path); and checks that `-std=c99` stops at the
# kernel's `#error` (generated kernels need C11). The -ffast-math and -Ofast
# builds are test-fastmath's, clang with OpenMP test-clang's.
# Included by the Makefile (CC, CFLAGS, B, NPROC, RT_SRC; FM from fastmath.mk).

EF := $(B)/embed-flags
EF_FLAGS := -std=c11 -O2 -march=native -Wall -Wextra -Werror
EF_CLANG_FLAGS := -std=c11 -O2 -Wall -Wextra -Werror
EF_C11_ERROR := heed: generated kernels need C11 or later

.PHONY: test-embed-flags
TEST_TARGETS += test-embed-flags

test-embed-flags: $(B)/nd-slice/stamp
	@test -f $(B)/matrix/fastmath/table.c || { echo "$@: no $(B)/matrix/fastmath: run make test-generator first"; exit 1; }
	rm -rf $(EF) && mkdir -p $(EF)/tok $(EF)/nd $(EF)/ref/tok $(EF)/ref/nd $(EF)/clang
	cp $(B)/matrix/fastmath/*.c $(B)/matrix/fastmath/*.h $(EF)/tok/
	cp $(B)/nd-slice/*.c $(B)/nd-slice/*.h $(EF)/nd/
	cd $(EF)/tok && ls *.c | xargs -P $(NPROC) -n $(XN) $(CC) $(EF_FLAGS) -I. -I$(CURDIR)/runtime -c
	cd $(EF)/nd && ls *.c | xargs -P $(NPROC) -n $(XN) $(CC) $(EF_FLAGS) -I. -I$(CURDIR)/runtime -c
	cd $(EF)/ref/tok && $(CC) $(EF_FLAGS) -I$(CURDIR)/runtime -c $(addprefix $(CURDIR)/,$(RT_SRC) tune/check_main.c)
	cd $(EF)/ref/nd && $(CC) $(EF_FLAGS) -I$(CURDIR)/runtime -DHEED_CHECK_ND -c \
	    $(addprefix $(CURDIR)/,runtime/ref.c runtime/ref_nd.c tune/check_main.c)
	@! nm -u $(EF)/tok/*.o $(EF)/nd/*.o | grep -E '\b(omp_|GOMP_|__kmpc)' || { echo "$@: an object built without -fopenmp calls OpenMP (above)"; exit 1; }
	$(CC) $(EF_FLAGS) $(EF)/tok/*.o $(EF)/ref/tok/*.o -lm -o $(EF)/check
	$(CC) $(EF_FLAGS) $(EF)/nd/*.o $(EF)/ref/nd/*.o -lm -o $(EF)/nd_check
	@$(EF)/check 3 2 > $(EF)/check.log || { grep ': FAIL' $(EF)/check.log | head -20; exit 1; }
	@$(EF)/nd_check 2 2 > $(EF)/nd_check.log || { grep ': FAIL' $(EF)/nd_check.log | head -20; exit 1; }
	@echo "$@: without OpenMP ($(CC) $(EF_FLAGS)): $$(grep -c ': PASS' $(EF)/check.log) token and" \
	  "$$(grep -c ': PASS' $(EF)/nd_check.log) N-d kernels match the reference"
	cd $(EF)/clang && { ls $(CURDIR)/$(EF)/tok/*.c | grep -v '/table\.c$$' | awk 'NR % 8 == 1'; \
	    ls $(CURDIR)/$(EF)/nd/*.c | grep -v '/nd_table\.c$$' | awk 'NR % 8 == 1'; } \
	  | xargs -P $(NPROC) -n $(XN) $(CLANG) $(EF_CLANG_FLAGS) -I$(CURDIR)/runtime -c
	@echo "$@: $$(ls $(EF)/clang/*.o | wc -l) kernels compile with $(CLANG) $(EF_CLANG_FLAGS)"
	@for f in $$(ls $(EF)/tok/*.c | grep -v '/table\.c$$' | head -1) $$(ls $(EF)/nd/*.c | grep -v '/nd_table\.c$$' | head -1); do \
	    if $(CC) -std=c99 -I$$(dirname $$f) -c $$f -o $(EF)/c99.o > $(EF)/c99.log 2>&1; then \
	        echo "$@: $$f compiled with -std=c99: expected the C11 #error"; exit 1; fi; \
	    grep -q '#error "$(EF_C11_ERROR)' $(EF)/c99.log || { cat $(EF)/c99.log; echo "$@: -std=c99 failed without the C11 #error"; exit 1; }; \
	done
	@echo "$@: -std=c99 stops at the C11 #error"

# tests/test_embed.c: NAME.h's shape macros (guard-page buffers sized by
# them, against the reference), byte-identical output for one spec at
# different paths, sanitized comment text, heed --version.
EMB := $(B)/embed
.PHONY: test-embed
TEST_TARGETS += test-embed

$(EMB)/stamp: $(GEN_SRC) tests/embed/generate.lua $(wildcard tests/embed/*.lua)
	rm -rf $(EMB) && HEED_ROOT=. $(LUA) tests/embed/generate.lua $(EMB)
	touch $@

$(EMB)/test_embed: $(EMB)/stamp tests/test_embed.c tests/guard.h runtime/ref.c runtime/ref_nd.c runtime/heed.h runtime/ref_nd.h
	$(CC) $(CFLAGS) -Werror -DHEED_ROOT='"$(CURDIR)"' -I$(EMB) -Iruntime -Itests tests/test_embed.c \
	  $(EMB)/*.c runtime/ref.c runtime/ref_nd.c -lcriterion -lm -o $@

test-embed: $(EMB)/test_embed
	$(EMB)/test_embed -j2
	@test "$$(./heed --version)" = "heed $(HEED_VERSION)" || { echo "$@: heed --version is not heed.h's $(HEED_VERSION)"; exit 1; }
	@echo "$@: heed --version, heed.h and heed.pc say $(HEED_VERSION)"
