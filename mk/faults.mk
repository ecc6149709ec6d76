# faults.mk — heed under faults and bad input (issue 7): tests/test_faults.c
# and the scripts of tests/faults/ it runs (no compiler, failing compiler,
# unwritable and full cache, a tuner killed mid-write).
# Included by the Makefile (CC, CFLAGS, B, GEN_SRC).

TEST_TARGETS += test-faults

FT := $(B)/faults

.PHONY: test-faults

# Two generated kernels and their table, linked into the test.
$(FT)/gen/table.c: tests/faults/ft_causal.lua tests/faults/ft_fused.lua $(GEN_SRC)
	rm -rf $(FT)/gen && mkdir -p $(FT)/gen
	./heed gen tests/faults/ft_causal.lua tests/faults/ft_fused.lua -o $(FT)/gen --table $@

# Its own copy of the runtime tests' "tuned" fixture (tests/runtime/mkso.sh),
# so a run never races another suite rebuilding build/rt-test/fixtures.
$(FT)/fixtures/%.so: tests/runtime/%.lua tests/runtime/mkso.sh $(GEN_SRC)
	@mkdir -p $(@D)
	CC='$(CC)' CFLAGS='$(CFLAGS)' tests/runtime/mkso.sh $< $(@D)

$(FT)/test_faults: tests/test_faults.c tests/rt_files.h $(FT)/gen/table.c runtime/verify.c $(B)/libheed.a runtime/heed.h \
  runtime/hrt.h runtime/hrt_inline.h runtime/verify.h
	$(CC) $(CFLAGS) -Werror -Iruntime -I$(FT)/gen -DHEED_ROOT='"$(CURDIR)"' \
	  -DRT_FIXTURES='"$(CURDIR)/$(FT)/fixtures"' -DFT_BIN='"$(CURDIR)/$@"' \
	  tests/test_faults.c $(FT)/gen/ft_causal.c $(FT)/gen/ft_fused.c $(FT)/gen/table.c runtime/verify.c \
	  $(B)/libheed.a -lcriterion -fopenmp -ldl -lpthread -lm -o $@

test-faults: $(FT)/test_faults $(FT)/fixtures/rt_causal.so
	$(FT)/test_faults -j2
	@echo "test-faults: passed"
