# fuzz.mk — fuzzing (issue 7): five libFuzzer targets in fuzz/ (the spec
# loader/validator, the --set/--schedule parsers, the wisdom readers of
# runtime/ and tune/, the runtime's problem descriptor), `make fuzz FUZZ_SECONDS=N`, and
# test-fuzz-regress, which replays every seed and every saved crash input
# through the same target code built with gcc + ASan/UBSan (no clang needed).
# Included by the Makefile (which defines CC, B, SAN and TEST_TARGETS).

FUZZ_SECONDS ?= 60
FUZZ_RUNS    ?=
FUZZ_TARGETS := fuzz_spec fuzz_cli fuzz_wisdom fuzz_wisdom_lua fuzz_problem
FZ           := $(B)/fuzz
FUZZ_LUA     := $(shell pkg-config --cflags --libs lua5.4 2>/dev/null || echo -I/usr/include/lua5.4 -llua5.4)
FUZZ_DEFS    := -DHEED_ROOT='"$(CURDIR)"' -Iruntime
FUZZ_PROBLEM_SRC := $(RT_SRC_LIB) fuzz/stub_registry.c
FUZZ_HDR     := runtime/heed.h runtime/hrt.h runtime/hrt_inline.h runtime/kernel_table.h

# What each target links besides its own file, and its extra libraries.
fuzz_src_fuzz_spec    := fuzz/lua_target.h
fuzz_src_fuzz_cli     := fuzz/lua_target.h
fuzz_src_fuzz_wisdom  := runtime/wisdom.c
fuzz_src_fuzz_wisdom_lua := fuzz/lua_target.h
fuzz_src_fuzz_problem := $(FUZZ_PROBLEM_SRC)
fuzz_lib_fuzz_spec    = $(FUZZ_LUA)
fuzz_lib_fuzz_cli     = $(FUZZ_LUA)
fuzz_lib_fuzz_wisdom  := -lpthread -lm
fuzz_lib_fuzz_wisdom_lua = $(FUZZ_LUA)
fuzz_lib_fuzz_problem := -fopenmp -ldl -lpthread -lm

.PHONY: fuzz fuzz-build test-fuzz-regress

TEST_TARGETS += test-fuzz-regress

# ---- libFuzzer (clang) --------------------------------------------------------------

FUZZ_CLANG := clang -std=c11 -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined \
              -fno-sanitize-recover=undefined -Wall -Wextra -Wno-pass-failed

# $(call fuzz_rules,TARGET): its libFuzzer binary and its replay binary.
define fuzz_rules
$(FZ)/bin/$(1): fuzz/$(1).c $(fuzz_src_$(1)) $(FUZZ_HDR) mk/fuzz.mk
	@mkdir -p $$(@D)
	$$(FUZZ_CLANG) $$(FUZZ_DEFS) fuzz/$(1).c $(filter %.c,$(fuzz_src_$(1))) $$(fuzz_lib_$(1)) -o $$@

$(FZ)/replay/$(1): fuzz/$(1).c fuzz/replay.c $(fuzz_src_$(1)) $(FUZZ_HDR) mk/fuzz.mk
	@mkdir -p $$(@D)
	$$(FUZZ_GCC) $$(FUZZ_DEFS) fuzz/$(1).c fuzz/replay.c $(filter %.c,$(fuzz_src_$(1))) $$(fuzz_lib_$(1)) -o $$@
endef

fuzz-build:
	@scripts/deps.sh fuzz
	@$(MAKE) --no-print-directory $(addprefix $(FZ)/bin/,$(FUZZ_TARGETS))

# Each target for FUZZ_SECONDS (or FUZZ_RUNS executions), one after another:
# working corpus in build/fuzz/corpus/, crash inputs in build/fuzz/crashes/.
fuzz: fuzz-build
	FUZZ_SECONDS='$(FUZZ_SECONDS)' FUZZ_RUNS='$(FUZZ_RUNS)' fuzz/run.sh $(FZ) $(FUZZ_TARGETS)

# ---- the regression replay (gcc) ------------------------------------------------------

FUZZ_GCC := $(CC) -std=c11 -g -O1 $(SAN) -Wall -Wextra

$(foreach t,$(FUZZ_TARGETS),$(eval $(call fuzz_rules,$(t))))

test-fuzz-regress:
	@scripts/deps.sh
	@$(MAKE) --no-print-directory $(addprefix $(FZ)/replay/,$(FUZZ_TARGETS))
	@for t in $(FUZZ_TARGETS); do \
	  dirs=$$(ls -d fuzz/corpus/$$t fuzz/regress/$$t 2>/dev/null); \
	  ASAN_OPTIONS=abort_on_error=1:detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	    $(FZ)/replay/$$t $$dirs || { echo "test-fuzz-regress: $$t FAILED"; exit 1; }; \
	done
	@echo "test-fuzz-regress: passed"
