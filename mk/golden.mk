# golden.mk — generated files kept as text in tests/golden/, so a change to
# the generator's output is a visible diff (tests/golden/run.sh); and the
# generated code stays reviewable (tests/size_check.sh: functions of at most
# 300 lines, the 7x7 neighborhood kernel at most 1500, on every target).

.PHONY: test-golden golden-update
TEST_TARGETS += test-golden

test-golden:
	@tests/golden/run.sh
	@tests/size_check.sh

golden-update:
	@tests/golden/run.sh --update
