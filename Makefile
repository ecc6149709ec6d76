# heed — make demo (the main job), make test (everything), make bench.
CC      ?= cc
CFLAGS  ?= -std=c11 -O2 -march=native -fopenmp -Wall -Wextra
SAN     := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
# Generated kernels built with $(SAN) take line tables only: their reports
# still name function, file and line, the instrumented code is the same, and
# GCC spends about a third less CPU a file than with -g (test-asan,
# test-nd-asan, test-guard).
SAN_KG  := -g1
B       := build
NPROC   := $(shell nproc 2>/dev/null || echo 2)
# Files one compiler run takes when a directory of kernels is built with
# xargs -P $(NPROC): few, so that every core stays busy to the end (gcc runs
# cc1 once a file whatever the count; batches of 24 left a core idle for
# the last batch, up to a minute under the sanitizers, where the files are
# the backward's, the slowest to compile, side by side in ls order).
XN      := 2
LUA     := $(shell command -v luajit 2>/dev/null || command -v lua5.4 2>/dev/null || echo luajit)
RT_SRC  := runtime/ref.c runtime/verify.c
# libheed's sources (mk/runtime.mk builds them; mk/fuzz.mk and mk/sanitize.mk
# instrument them): one file per concern, runtime/README.md says which.
RT_SRC_LIB := $(addprefix runtime/,planner.c execute.c wisdom_known.c loader.c registry.c spawn.c cache.c \
                errors.c wisdom.c problem.c sha256.c generic.c ref.c ref_nd.c problem_nd.c ref_backward.c \
                ref_nd_backward.c ref_nd_xbackward.c bwd_weights.c)
# The runtime's Criterion suites, one file per runtime module, linked into
# one binary (build/rt-test/test_runtime, mk/runtime.mk; mk/sanitize.mk),
# their helpers in tests/runtime/rt_common.h.
RT_SUITES := $(addprefix tests/runtime/,t_sha256.c t_problem.c t_generic.c t_storage.c t_registry.c t_isa.c \
               t_loader.c t_wisdom_known.c t_spawn.c t_ref_nd.c t_problem_nd.c t_nd_tuned.c t_wisdom.c t_api.c t_unified.c \
               t_concurrency.c t_backward.c t_backward16.c t_backward_threads.c t_backward_nd_scores.c \
               t_nd_backward16.c t_backward_ndx.c \
               t_backward_nd_fused.c t_backward_wtuned.c t_tuned_mods.c)
RT_SUITE_DEPS := $(RT_SUITES) tests/runtime/rt_common.h tests/rt_files.h tests/guard.h
GEN_SRC := $(wildcard cli/*.lua gen/*.lua gen/targets/*.lua gen/methods/*.lua templates/*)

.PHONY: all deps demo test test-generator test-unit test-asan check-examples clean

all: deps
	./heed gen examples/*.lua -o $(B)/examples

deps:
	@scripts/deps.sh

# The main job on the built-in default spec: generate, build, check, time.
demo: deps
	@$(MAKE) --no-print-directory libheed
	./heed demo -o $(B)/demo --libheed $(B)/libheed.a

# Every test: the reference, the spec/CLI suite, every kernel of the matrix
# (built with -Werror) against the reference, heed check on examples/, and
# the same Criterion suites again under ASan + UBSan.
test: deps
	@$(MAKE) --no-print-directory $(TEST_TARGETS) test-asan
	@echo "make test: all suites passed"

# Areas add their own targets to TEST_TARGETS (and BENCH_TARGETS) in mk/*.mk.
TEST_TARGETS := test-generator test-unit check-examples
BENCH_TARGETS :=
-include $(wildcard mk/*.mk)

# The generator writes byte-identical files on LuaJIT and Lua 5.4. Each
# interpreter runs on one core: the Lua 5.4 runs (GEN_LUA54, their output in
# $(B)/gen-lua54.log) go on beside the LuaJIT ones, and are compared after.
GEN_LUA54 := HEED_ROOT=. lua5.4 tests/matrix.lua $(B)/matrix-lua54 && HEED_ROOT=. lua5.4 tests/ext_check.lua \
  && HEED_ROOT=. lua5.4 tests/expr_check.lua > $(B)/expr_check.lua54 \
  && MODS_GEN_ONLY=1 HEED_ROOT=. lua5.4 tests/mods_check.lua > $(B)/mods_check.lua54 \
  && HEED_ROOT=. lua5.4 tests/flops_check.lua > $(B)/flops_check.lua54
test-generator: $(GEN_SRC) tests/matrix.lua tests/matrix_decode.lua tests/matrix_backward.lua tests/ext_check.lua tests/expr_check.lua tests/mods_check.lua tests/flops_check.lua
	rm -rf $(B)/matrix $(B)/matrix-lua54 && mkdir -p $(B)
	{ $(GEN_LUA54); } > $(B)/gen-lua54.log 2>&1 & lua54=$$!; \
	HEED_ROOT=. luajit tests/matrix.lua $(B)/matrix && HEED_ROOT=. luajit tests/names_check.lua \
	  && HEED_ROOT=. luajit tests/ext_check.lua && HEED_ROOT=. luajit tests/expr_check.lua > $(B)/expr_check.luajit \
	  && HEED_ROOT=. luajit tests/mods_check.lua > $(B)/mods_check.luajit \
	  && HEED_ROOT=. luajit tests/flops_check.lua > $(B)/flops_check.luajit; st=$$?; \
	wait $$lua54 || st=1; echo "--- Lua 5.4:"; cat $(B)/gen-lua54.log; exit $$st
	diff -r $(B)/matrix $(B)/matrix-lua54
	@echo "generator: LuaJIT and Lua 5.4 output identical"
	@HEED_ROOT=. luajit runtime/isa_key.lua | diff runtime/isa_key.h - \
	    || { echo "runtime/isa_key.h is stale: HEED_ROOT=. luajit runtime/isa_key.lua > runtime/isa_key.h"; exit 1; }
	@HEED_ROOT=. lua5.4 runtime/isa_key.lua | diff runtime/isa_key.h -
	@echo "generator: runtime/isa_key.h holds gen/target.lua's key flags"
	diff $(B)/expr_check.luajit $(B)/expr_check.lua54
	@cat $(B)/expr_check.luajit
	@echo "generator: mask/score expressions identical on LuaJIT and Lua 5.4"
	grep digest $(B)/mods_check.luajit | diff - $(B)/mods_check.lua54
	@cat $(B)/mods_check.luajit
	@echo "generator: mask_mod/score_mod kernels identical on LuaJIT and Lua 5.4 and match the reference"
	diff $(B)/flops_check.luajit $(B)/flops_check.lua54
	@tail -1 $(B)/flops_check.luajit

# Compiles a matrix directory: $(call matrix_pch,DIR,FLAGS) through a
# precompiled header of the system headers every kernel includes
# (scripts/cc-objs.sh: the same objects, a quarter second less a file);
# matrix_objs (test-unit's and test-nd's builds of the whole matrices) the
# same after compiling each kernel's header alone (-fsyntax-only, about a
# hundredth of a second a header), so an #include a generated header lacks
# is still an error where the precompiled header, given first, would supply it.
define matrix_objs
	cd $(1) && ls *.h | xargs -P $(NPROC) -n 64 $(CC) $(2) -Werror -I. -I$(CURDIR)/runtime -fsyntax-only
	$(call matrix_pch,$(1),$(2))
endef
define matrix_pch
	cd $(1) && $(CURDIR)/scripts/cc-objs.sh $(NPROC) $(XN) $(CC) $(2) -Werror -I. -I$(CURDIR)/runtime
endef

$(B)/test_ref: runtime/ref.c tests/test_ref.c runtime/heed.h runtime/hrt_inline.h runtime/dtype.h
	$(CC) $(CFLAGS) -Iruntime runtime/ref.c tests/test_ref.c -lcriterion -lm -o $@

# The spec/CLI suites: token specs, and N-d specs (test_nd_spec.c).
SPEC_TESTS := tests/test_spec.c tests/test_nd_spec.c
$(B)/test_spec: $(SPEC_TESTS) tests/cli_common.h
	$(CC) $(CFLAGS) -DHEED_ROOT='"$(CURDIR)"' $(SPEC_TESTS) -lcriterion -o $@

test-unit: $(B)/test_ref $(B)/test_spec
	$(call matrix_objs,$(B)/matrix,$(CFLAGS))
	$(CC) $(CFLAGS) -Iruntime $(B)/matrix/*.o $(RT_SRC) runtime/ref_backward.c tests/test_kernels.c tests/test_backward.c -lcriterion -lm -o $(B)/test_kernels
	$(B)/test_ref -j2
	$(B)/test_spec -j2
	$(B)/test_kernels -j2

check-examples:
	@for f in examples/*.lua; do ./heed check "$$f" || exit 1; done

# The kernels under ASan + UBSan: test-asan the matrix's sanitizer slice
# (tests/matrix.lua, section 11: over a quarter of it, every form and
# schedule value), test-asan-full (not in make test) all of it.
.PHONY: test-asan-full
test-asan:
	$(call asan_kernels,$(B)/matrix/asan,-DHEED_MATRIX_SLICE -DHEED_BWD_SLICE_N=$$(wc -l < $(B)/matrix/asan/bwd.list))

test-asan-full:
	$(call asan_kernels,$(B)/matrix,)

# $(call asan_kernels,DIR,DEFS): DIR's kernels and table, and test_ref, under the sanitizers.
define asan_kernels
	@test -f $(1)/table.c || { echo "$@: no $(1): run make test-generator first"; exit 1; }
	rm -rf $(B)/asan && mkdir -p $(B)/asan && cp $(1)/*.c $(1)/*.h $(B)/asan/
	$(call matrix_pch,$(B)/asan,-std=c11 -O1 $(SAN_KG) -march=native -fopenmp -Wall -Wextra $(SAN))
	$(CC) -std=c11 -O1 -g -fopenmp $(SAN) $(2) -Iruntime $(B)/asan/*.o $(RT_SRC) runtime/ref_backward.c tests/test_kernels.c tests/test_backward.c -lcriterion -lm \
	  -o $(B)/asan/test_kernels
	$(CC) -std=c11 -O1 -g $(SAN) -Iruntime runtime/ref.c tests/test_ref.c -lcriterion -lm -o $(B)/asan/test_ref
	ASAN_OPTIONS=detect_leaks=1 $(B)/asan/test_ref -j2
	ASAN_OPTIONS=detect_leaks=1 $(B)/asan/test_kernels -j2
endef

clean:
	rm -rf $(B)
