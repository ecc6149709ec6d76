# golden.mk — generated files kept as text in tests/golden/, so a change to
# the generator's output is a visible diff (tests/golden/run.sh).

.PHONY: test-golden golden-update
TEST_TARGETS += test-golden

test-golden:
	@tests/golden/run.sh

golden-update:
	@tests/golden/run.sh --update
