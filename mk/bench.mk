# bench.mk — make bench: every spec of bench/specs/ through `heed bench`
# (the generated kernel, the FMA peak on ymm and zmm, peer_blas, peer_dnnl and
# peer_naive at 1 and 2 threads, each in its own process), then build/bench.md: the table and the
# targets of the "Fast kernels" issue.
#
#   make bench                          all specs, threads 1,2
#   make bench BENCH_SPECS=bench/specs/std_4096.lua BENCH_THREADS=2
#   make bench-decode                   the decode specs alone (and the triad): build/bench-decode.md
#   make bench-check-peers              the peers against the reference (bench/check_peers.c)

BENCH_SPECS   ?= $(sort $(wildcard bench/specs/*.lua))
BENCH_THREADS ?= 1,2
BENCH_OUT     := $(B)/bench

# Per-spec options (by file name). Plain loops take seconds a call at
# L = 4096 (the table says how many runs each got) and minutes at L = 16384,
# where the fused spec times peer_blas alone.
BENCH_OPTS_fused_mean_16384 := --peers blas
BENCH_OPTS_std_d128_4096    := --naive-reps 3
BENCH_OPTS_std_4096         := --naive-reps 5
# Decode calls take about a millisecond (Lk = 4096) to tens (Lk = 32768):
# at least 2 s of timed calls each. The GQA pair at L = 4096 runs the
# compositions alone (the plain loops take seconds a call and say nothing
# about grouping).
BENCH_DECODE_OPTS := --reps 5 --min-time 2 --naive-reps 5
$(foreach n,4096 32768,$(foreach t,f32 bf16 f16,$(eval BENCH_OPTS_decode_h32kv8_d128_$(n)_$(t) := $(BENCH_DECODE_OPTS))))
BENCH_OPTS_decode_sinks_32768 := $(BENCH_DECODE_OPTS)
# Calls of a few milliseconds or less (local windows, the N-d spec): at least
# 1 s of timed calls. Ten calls of the neighborhood kernel (4 ms in all,
# right after the triad's process frees its 1.5 GiB) ran at 0.99-1.40 ms
# medians with 71-91% of the CPU; a second of calls at 0.374-0.379 ms, 99%.
$(foreach n,local64_1024 local64_4096 local64_16384 nd_nb7x7_56,$(eval BENCH_OPTS_$(n) := --min-time 1))
# The backward rows (issue 40): NAME_backward against peer_blas's backward
# composition; 3 timed calls while the backward is plain loops (seconds a call).
BENCH_OPTS_bwd_std_4096     := --pass backward --peers blas --reps 3
BENCH_OPTS_bwd_causal_4096  := --pass backward --peers blas --reps 3
BENCH_OPTS_bwd_fused_mean_4096 := --pass backward --peers blas --reps 3
# (a Gaussian window: no peer composes its weight)
BENCH_OPTS_bwd_gauss128_4096 := --pass backward --peers none --reps 3
# (the general score: W per head, dW compared by bench/ab/run.sh with BACKWARD=1)
BENCH_OPTS_bwd_general_1024 := --pass backward --peers none --reps 5
# The N-d backward (a few milliseconds a call): at least 1 s of timed calls;
# its peer is the N-d reference's backward (peer_naive, tens of ms a call).
BENCH_OPTS_bwd_nd_nb7x7_56      := --pass backward --min-time 1
BENCH_OPTS_bwd_nd_nb1d_k13_4096 := --pass backward --min-time 1
BENCH_OPTS_bwd_nd_halo8_56     := --pass backward --min-time 1
BENCH_OPTS_bwd_nd_pool_56      := --pass backward --min-time 1
# The dense causal kernel at L = 16384 takes most of a second a call.
BENCH_OPTS_std_causal_16384 := --peers none --reps 3
BENCH_OPTS_gqa_h8kv2_4096   := --peers blas,dnnl
BENCH_OPTS_gqa_h8kv8_4096   := --peers blas,dnnl

# OpenBLAS at its best in every benchmark that runs it (docs/operator.md, Numbers):
# the core type of this CPU (bench/openblas-coretype.sh; heed bench also sets
# it itself and prints it), over the environment's.
BENCH_CORETYPE := $(shell sh bench/openblas-coretype.sh)
ifneq ($(BENCH_CORETYPE),)
bench bench-specs bench-decode bench-check-peers bench-nd bench-runtime: export OPENBLAS_CORETYPE := $(BENCH_CORETYPE)
endif

.PHONY: bench bench-deps bench-specs bench-gqa-rounds bench-decode bench-check-peers
BENCH_TARGETS += bench-specs

bench-deps:
	@scripts/deps.sh bench

# The GQA pair's target compares two kernels a few percent apart, less than
# this machine's drift between two processes a minute apart: after its rows
# in the table, the pair runs GQA_ROUNDS more times in alternation (kv8, kv2,
# kv8, kv2, ...; heed alone, 5 timed calls a round, at the target's 2
# threads), and the target is read from the ratios of the rounds
# (bench/report.lua). Only when both specs are in BENCH_SPECS.
GQA_PAIR   := bench/specs/gqa_h8kv8_4096.lua bench/specs/gqa_h8kv2_4096.lua
GQA_ROUNDS ?= 6
GQA_RUN    := $(if $(filter $(GQA_PAIR),$(BENCH_SPECS)),$(if $(filter-out $(BENCH_SPECS),$(GQA_PAIR)),,yes))

# The kernels' table first, then the other areas' benchmarks (BENCH_TARGETS).
bench: bench-deps
	@rm -rf $(BENCH_OUT) && mkdir -p $(BENCH_OUT)
	@$(MAKE) --no-print-directory bench-specs
	@$(if $(GQA_RUN),$(MAKE) --no-print-directory bench-gqa-rounds,true)
	$(LUA) bench/report.lua $(BENCH_OUT)/records.txt 2 $(if $(GQA_RUN),$(BENCH_OUT)/gqa-rounds.txt) > $(B)/bench.md
	@cat $(B)/bench.md
	@$(MAKE) --no-print-directory $(filter-out bench-specs,$(BENCH_TARGETS))

bench-specs:
	@$(foreach s,$(BENCH_SPECS),./heed bench $(s) --threads $(BENCH_THREADS) --out $(BENCH_OUT)/records.txt \
		$(BENCH_OPTS_$(basename $(notdir $(s)))) -o $(BENCH_OUT)/$(basename $(notdir $(s))) && echo &&) true

bench-gqa-rounds:
	@echo "GQA pair: $(GQA_ROUNDS) rounds in alternation (kv8, kv2), heed at 2 threads; log: $(BENCH_OUT)/gqa-rounds.log"
	@for r in $$(seq $(GQA_ROUNDS)); do for s in $(GQA_PAIR); do \
		./heed bench $$s --threads 2 --peers none --reps 5 --out $(BENCH_OUT)/gqa-rounds.txt \
			-o $(BENCH_OUT)/gqa-rounds-$$(basename $$s .lua) >> $(BENCH_OUT)/gqa-rounds.log 2>&1 \
			|| { tail -20 $(BENCH_OUT)/gqa-rounds.log; exit 1; }; \
	done; done

# The decode rows of the "bf16/f16 storage, grouped K/V heads" issue alone,
# each with the STREAM triad of its run: build/bench-decode.md (quick: a few
# seconds a row).
BENCH_DECODE_SPECS := $(sort $(wildcard bench/specs/decode_*.lua))
bench-decode: bench-deps
	@rm -rf $(B)/bench-decode && mkdir -p $(B)/bench-decode
	@$(MAKE) --no-print-directory bench-specs BENCH_SPECS="$(BENCH_DECODE_SPECS)" BENCH_OUT=$(B)/bench-decode
	$(LUA) bench/report.lua $(B)/bench-decode/records.txt > $(B)/bench-decode.md
	@cat $(B)/bench-decode.md

# The peers against the double reference on random problems (every norm,
# fuse, mask, grouped K/V heads), large fixed ones and large magnitudes:
# bench/check_peers.c. Twice: peer_blas as bench runs it (blocks of 256
# query rows), and with blocks of 8 rows (check_peers_rb8), so that the
# random problems (up to 48 rows) cross blocks and heads inside a block.
bench-check-peers: bench-deps
	@mkdir -p $(B)
	$(CC) $(CFLAGS) -DHEED_BENCH_DNNL -Iruntime -Ibench bench/check_peers.c bench/peers.c bench/peer_dnnl.c runtime/ref.c \
		-o $(B)/check_peers -ldnnl -lopenblas -lm
	$(CC) $(CFLAGS) -DROW_BLOCK=8 -DHEED_BENCH_DNNL -Iruntime -Ibench bench/check_peers.c bench/peers.c bench/peer_dnnl.c \
		runtime/ref.c -o $(B)/check_peers_rb8 -ldnnl -lopenblas -lm
	$(B)/check_peers $(CHECK_PEERS_CASES)
	$(B)/check_peers_rb8 $(CHECK_PEERS_CASES)

# bench/ab/run.sh end to end (a few seconds): the 7x7 neighborhood kernel
# against itself (the same bits: "max |old - new| 0"), fused mean against its
# scalar target (within the kernels' tolerance), a spec
# with run-time weights refused, NEW_SED and AB_CPU applied (the softmax
# removed: results differ), a NEW_SED that changes nothing refused, AB_PEAK's
# shares printed; bench/dtype_ab/run.sh on fused mean (each
# 16-bit kernel within its out type's rounding, 2^-9 / 2^-12 of |out| <= 1,
# of the f32 kernel on the same inputs), and a spec with weights refused.
.PHONY: test-ab
TEST_TARGETS += test-ab
test-ab: deps
	@set -e; o=$$(bench/ab/run.sh bench/specs/nd_nb7x7_56.lua . 5); \
	echo "$$o" | grep -q '^  max |old - new| 0$$' || { echo "$$o"; echo "test-ab: one kernel twice differs"; exit 1; }; \
	o=$$(NEW_FLAGS="--target scalar" bench/ab/run.sh examples/vit_pool.lua . 5); \
	echo "$$o" | grep -q 'target scalar' || { echo "$$o"; echo "test-ab: NEW_FLAGS not applied"; exit 1; }; \
	d=$$(echo "$$o" | sed -n 's/^  max |old - new| \([^ ]*\).*/\1/p'); \
	awk -v d="$$d" 'BEGIN { exit !(d != "" && d + 0 < 1e-5) }' || { echo "$$o"; echo "test-ab: avx vs scalar: $$d"; exit 1; }; \
	if bench/ab/run.sh examples/nd_neighborhood.lua . 5 >/dev/null 2>&1; then echo "test-ab: a spec with weights ran"; exit 1; fi; \
	printf 'return { name = "ab_sed", heads = 2, lq = 64, lk = 64, dk = 16, dv = 16, fuse = "none" }\n' > $(B)/ab_sed.lua; \
	o=$$(AB_CPU=1 NEW_SED='/^static int softmax_tile(/,/^{/s/^{/{ if (exact >= 0) return 2;/' bench/ab/run.sh $(B)/ab_sed.lua . 3); \
	{ echo "$$o" | grep -q 'edited by NEW_SED' && echo "$$o" | grep -q "CPU time" \
	  && ! echo "$$o" | grep -q '^  max |old - new| 0$$'; } || { echo "$$o"; echo "test-ab: NEW_SED or AB_CPU not applied"; exit 1; }; \
	if NEW_SED='s/no such line//' bench/ab/run.sh $(B)/ab_sed.lua . 3 >/dev/null 2>&1; then echo "test-ab: a NEW_SED that changed nothing ran"; exit 1; fi; \
	o=$$(AB_PEAK=1 bench/ab/run.sh $(B)/ab_sed.lua . 3); \
	[ "$$(echo "$$o" | grep -c "share of its round's peak: median [0-9]")" = 2 ] || { echo "$$o"; echo "test-ab: AB_PEAK not applied"; exit 1; }; \
	o=$$(bench/dtype_ab/run.sh examples/vit_pool.lua 3); \
	for t in bf16:4e-3 f16:5e-4; do \
		d=$$(echo "$$o" | sed -n "s/^  $${t%%:*} .* f32\/$${t%%:*} [0-9.]* (.*max |out - f32 kernel| \([^ ]*\)$$/\1/p"); \
		awk -v d="$$d" -v b="$${t#*:}" 'BEGIN { exit !(d != "" && d + 0 <= b + 0) }' || { echo "$$o"; echo "test-ab: dtype_ab $${t%%:*}: '$$d'"; exit 1; }; \
	done; \
	if bench/dtype_ab/run.sh examples/nd_neighborhood.lua 3 >/dev/null 2>&1; then echo "test-ab: dtype_ab ran a spec with weights"; exit 1; fi; \
	echo "test-ab: passed"

# heed.torch against torch in one process (issue 42, item 4): attention on
# ViT-B/16's shapes, ViT-B/16's attention module and a long-sequence
# encoder layer end to end, at BENCH_MODELS_THREADS threads, medians of
# BENCH_MODELS_N calls (bench/python/models.py; figures in docs/python.md).
BENCH_MODELS_THREADS ?= 2
BENCH_MODELS_N       ?= 20
.PHONY: bench-models
BENCH_TARGETS += bench-models
bench-models: install-files
	@scripts/deps.sh torch
	HEED_CACHE=$(CURDIR)/$(B)/bench-models-cache PYTHONPATH=$(CURDIR)/python HEED_LIB=$(CURDIR)/$(B)/libheed.so.0 \
	  $(PY) bench/python/models.py $(BENCH_MODELS_THREADS) $(BENCH_MODELS_N)

# One training step of ViT-B/16's attention (issue 40): forward + backward
# through autograd, heed.torch.attention(backward=True) against torch's own
# CPU path in one process (bench/python/vit_train.py; target torch / heed >= 2).
.PHONY: bench-vit-train
BENCH_TARGETS += bench-vit-train
bench-vit-train: install-files
	@scripts/deps.sh torch
	HEED_CACHE=$(CURDIR)/$(B)/bench-models-cache PYTHONPATH=$(CURDIR)/python HEED_LIB=$(CURDIR)/$(B)/libheed.so.0 \
	  $(PY) bench/python/vit_train.py $(BENCH_MODELS_THREADS) $(BENCH_MODELS_N)
