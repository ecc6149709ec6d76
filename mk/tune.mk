# tune.mk — the autotuner (heed tune, heed wisdom): its tests and the tuning
# targets. Included by the Makefile (CC, CFLAGS, B, LUA are defined there).

TEST_TARGETS += test-tune

.PHONY: test-tune tune-targets tune-optimum

$(B)/test_tune: tests/test_tune.c tests/test_bench.c tests/cli_common.h
	@mkdir -p $(B)
	$(CC) $(CFLAGS) -DHEED_ROOT='"$(CURDIR)"' tests/test_tune.c tests/test_bench.c -lcriterion -o $@

$(B)/test_wisdom: tests/test_wisdom.c tests/cli_common.h runtime/wisdom.c $(RT_HDR)
	@mkdir -p $(B)
	$(CC) $(CFLAGS) -DHEED_ROOT='"$(CURDIR)"' -DHRT_TEST_COUNTERS -Iruntime tests/test_wisdom.c runtime/wisdom.c \
	  -lcriterion -lpthread -lm -o $@

# The CLI suites; test_tune runs the Lua unit checks (tests/tune_selftest.lua)
# on both interpreters too (its selftest_* tests). The tests whose outcome
# hangs on wall-clock time (TUNE_TIMED: a budget held or filled, every
# target timed within one, two CPU hogs beside real timings) run one at a
# time, alone; the others (timings judged stable by the test hook,
# HEED_TEST_TIMING, or none taken) two at a time. Its bench suite
# (tests/test_bench.c) builds heed bench with its peers: OpenBLAS and oneDNN
# are installed first (scripts/deps.sh bench), as make bench does.
TUNE_TIMED := budget_is_held|budget_counts_the_builds|exhaustive_when_the_space_fits|beside_two_cpu_hogs|$\
  searches_targets_and_records_the_winners|default_tune_tries_every_target_the_machine_runs
test-tune: $(B)/test_tune $(B)/test_wisdom
	@scripts/deps.sh bench
	$(B)/test_wisdom -j2
	$(B)/test_tune -j2 --filter '@(bench/*|tune/!($(TUNE_TIMED)))'; st=$$?; \
	$(B)/test_tune -j1 --filter 'tune/@($(TUNE_TIMED))' || st=1; exit $$st

# The closing targets: tune each spec of tune/specs/ (TUNE_BUDGET seconds),
# then time its default and its winner together, interleaved, and print the
# ratios (tune/targets.lua; results in $(B)/tune-targets/summary.txt).
# OMP_NUM_THREADS=1 make tune-targets tunes for one thread (less noisy on a
# busy machine).
# TUNE_SPECS picks some of the specs.
TUNE_BUDGET ?= 60
TUNE_SPECS ?= tune/specs/*.lua
tune-targets: deps
	TUNE_BUDGET=$(TUNE_BUDGET) HEED_ROOT=. $(LUA) tune/targets.lua $(B)/tune-targets $(TUNE_SPECS)

# The same, and each spec tuned again with TUNE_REF_BUDGET seconds (40 min:
# exhaustive where the space fits, as it does for local32) to see how far the
# short budget's winner is from that optimum:
#   make tune-optimum TUNE_SPECS=tune/specs/local32.lua
TUNE_REF_BUDGET ?= 2400
tune-optimum: deps
	TUNE_BUDGET=$(TUNE_BUDGET) TUNE_REF_BUDGET=$(TUNE_REF_BUDGET) HEED_ROOT=. $(LUA) tune/targets.lua \
	  $(B)/tune-optimum $(TUNE_SPECS)
