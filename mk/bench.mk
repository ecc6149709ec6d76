# bench.mk — make bench: every spec of bench/specs/ through `heed bench`
# (the generated kernel, the FMA peak on ymm and zmm, peer_blas, peer_dnnl and
# peer_naive at 1 and 2 threads, each in its own process), then build/bench.md: the table and the
# targets of the "Fast kernels" issue.
#
#   make bench                          all specs, threads 1,2
#   make bench BENCH_SPECS=bench/specs/std_4096.lua BENCH_THREADS=2

BENCH_SPECS   ?= $(sort $(wildcard bench/specs/*.lua))
BENCH_THREADS ?= 1,2
BENCH_OUT     := $(B)/bench

# Per-spec options (by file name). Plain loops take seconds a call at
# L = 4096 (the table says how many runs each got) and minutes at L = 16384,
# where the fused spec times peer_blas alone.
BENCH_OPTS_fused_mean_16384 := --peers blas
BENCH_OPTS_std_d128_4096    := --naive-reps 3
BENCH_OPTS_std_4096         := --naive-reps 5

# OpenBLAS at its best in every benchmark that runs it (docs/operator.md, Numbers):
# the core type of this CPU (bench/openblas-coretype.sh; heed bench also sets
# it itself and prints it), over the environment's.
BENCH_CORETYPE := $(shell sh bench/openblas-coretype.sh)
ifneq ($(BENCH_CORETYPE),)
bench bench-specs bench-nd bench-runtime: export OPENBLAS_CORETYPE := $(BENCH_CORETYPE)
endif

.PHONY: bench bench-deps bench-specs
BENCH_TARGETS += bench-specs

bench-deps:
	@scripts/deps.sh bench

# The kernels' table first, then the other areas' benchmarks (BENCH_TARGETS).
bench: bench-deps
	@rm -rf $(BENCH_OUT) && mkdir -p $(BENCH_OUT)
	@$(MAKE) --no-print-directory bench-specs
	$(LUA) bench/report.lua $(BENCH_OUT)/records.txt > $(B)/bench.md
	@cat $(B)/bench.md
	@$(MAKE) --no-print-directory $(filter-out bench-specs,$(BENCH_TARGETS))

bench-specs:
	@$(foreach s,$(BENCH_SPECS),./heed bench $(s) --threads $(BENCH_THREADS) --out $(BENCH_OUT)/records.txt \
		$(BENCH_OPTS_$(basename $(notdir $(s)))) -o $(BENCH_OUT)/$(basename $(notdir $(s))) && echo &&) true
