# kernels.mk — the portable path of the generated kernels, and the matrix
# (a slice of it in make test, all of it in test-clang-full) under clang. tests/matrix.lua writes two portable subsets of the test
# matrix, each with its own kernel table:
#   $(B)/matrix/scalar         kernels of the matrix's target (avx512 or avx2),
#                              built here for plain x86-64 (no AVX2, no FMA,
#                              no AVX-512) so they take their portable branch;
#   $(B)/matrix/scalar-target  the same problems written for --target scalar
#                              (no intrinsics in the file), built natively;
#   $(B)/matrix/target-ISA     the same problems for each SIMD target other
#                              than the matrix's own (test-targets).
# Both are checked against the double-precision reference (tune/check_main.c,
# batch 3, 2 seeds).

SCALAR_CFLAGS ?= -std=c11 -O2 -march=x86-64 -mno-avx2 -mno-fma -fopenmp -Wall -Wextra
CLANG ?= clang
CLANG_CFLAGS ?= -std=c11 -O2 -march=native -fopenmp -Wall -Wextra -Werror

.PHONY: test-scalar test-targets test-clang
TEST_TARGETS += test-scalar test-targets test-clang

# $(call check_matrix,DIR,FLAGS,WHAT): builds DIR's kernels and table with
# FLAGS and checks every kernel against the reference.
define check_matrix
	@test -f $(1)/table.c || { echo "test-scalar: no $(1): run make test-generator first"; exit 1; }
	$(call matrix_pch,$(1),$(2))
	$(CC) $(2) -Iruntime $(1)/*.o $(RT_SRC) tune/check_main.c -lm -o $(1)/check
	@$(1)/check 3 2 > $(1)/check.log || { grep FAIL $(1)/check.log; exit 1; }
	@echo "test-scalar: $$(grep -c PASS $(1)/check.log) kernels match the reference $(3)"
endef

test-scalar:
	$(call check_matrix,$(B)/matrix/scalar,$(SCALAR_CFLAGS),without AVX2/FMA)
	@! grep -l '_mm\|immintrin\|__AVX' $(B)/matrix/scalar-target/*.c || { echo "test-scalar: intrinsics in a scalar-target kernel (above)"; exit 1; }
	$(call check_matrix,$(B)/matrix/scalar-target,$(CFLAGS),with --target scalar)

# Each other SIMD target's slice, built with its own flags added (so its
# intrinsics are compiled even where this machine lacks them) and checked
# against the reference where this machine runs the target (its runs file).
test-targets:
	@test -f $(B)/matrix/table.c || { echo "test-targets: no $(B)/matrix: run make test-generator first"; exit 1; }
	@for d in $(B)/matrix/target-*; do \
	    test -d "$$d" || continue; \
	    isa=$${d##*/target-}; flags="$(CFLAGS) $$(cat $$d/cflags)"; \
	    (cd $$d && $(CURDIR)/scripts/cc-objs.sh $(NPROC) $(XN) $(CC) $$flags -Werror -I. -I$(CURDIR)/runtime) || exit 1; \
	    $(CC) $$flags -Iruntime $$d/*.o $(RT_SRC) tune/check_main.c -lm -o $$d/check || exit 1; \
	    n=$$(ls $$d/*.c | grep -vc '/table\.c$$'); \
	    if [ "$$(cat $$d/runs)" = 1 ]; then \
	        $$d/check 3 2 > $$d/check.log || { grep FAIL $$d/check.log; exit 1; }; \
	        echo "test-targets: $$(grep -c PASS $$d/check.log) kernels for $$isa match the reference"; \
	    else \
	        echo "test-targets: $$n kernels for $$isa compile with $$(cat $$d/cflags) (not run: this machine lacks $$isa)"; \
	    fi; \
	done

# The token kernels compile with clang and -Werror (compile only: the
# kernels run in test-unit). make test takes the slice tests/matrix.lua
# lists in $(B)/matrix/compile.list (the central forms of every other shape,
# a magnitude of each norm and fuse, the score × norm × fuse × mask
# combinations that hold every pair of values, every schedule value: a sixth
# of the matrix) but the kernels of $(B)/matrix/fastmath, which
# test-fastmath-clang compiles (same flags and warnings, -Ofast for -O2) and
# runs; test-clang-full (not in make test) compiles all of it.
.PHONY: test-clang-full

# $(call clang_matrix,LIST): the kernels of $(B)/matrix named by the shell
# command LIST (one file name a line) compiled by clang.
define clang_matrix
	@test -f $(B)/matrix/compile.list || { echo "$@: no $(B)/matrix: run make test-generator first"; exit 1; }
	rm -rf $(B)/clang && mkdir -p $(B)/clang
	cd $(B)/matrix && $(1) | sed 's|^|$(abspath $(B))/matrix/|' | (cd $(abspath $(B))/clang && \
	    xargs -P $(NPROC) -n $(XN) $(CLANG) $(CLANG_CFLAGS) -I$(abspath $(B))/matrix -c)
	@echo "$@: $$(ls $(B)/clang/*.o | wc -l) of $$(ls $(B)/matrix/*.c | grep -vc '/table\.c$$') kernels compile with clang $(CLANG_CFLAGS)"
endef

test-clang:
	$(call clang_matrix,cat compile.list | grep -vxF "$$(cd fastmath && ls *.c)")

test-clang-full:
	$(call clang_matrix,ls *.c | grep -v '^table\.c$$')

# The per-target slices above and test-neon's with every backward tile
# (tests/matrix_bwd_slice.lua: make test takes those holding each pair of
# their values); not in make test.
.PHONY: test-bwd-tiles-full
test-bwd-tiles-full:
	MATRIX_BWD_ALL=1 $(MAKE) --no-print-directory test-generator
	$(MAKE) --no-print-directory test-scalar test-targets test-clang test-neon
