-- tests/matrix.lua's section 3e (split out to keep that file under 1000
-- lines): add(name, raw, sched) is matrix.lua's own.
return function(add)
  -- 3e. backward = true (tests/test_backward.c calls NAME and NAME_backward by
  -- name): L = 1, primes, Lq != Lk both ways, rows with no key (causal, lk <
  -- lq), keys no query sees (local, lk > lq), grouped heads (GQA, MQA),
  -- several key tiles of the backward's 64, dot and scaled_dot scores, each norm.
  add("bwd_l1", { heads = 2, lq = 1, lk = 1, dk = 3, dv = 2, fuse = "none", lse = true, backward = true }, 1)
  add("bwd_gqa_causal", { heads = 4, heads_kv = 2, lq = 13, lk = 17, dk = 7, dv = 5, fuse = "none", mask = "causal",
    lse = true, backward = true }, 2)
  add("bwd_mqa_causal_lk5", { heads = 3, heads_kv = 1, lq = 11, lk = 5, dk = 6, dv = 3, fuse = "none", mask = "causal",
    lse = true, backward = true }, 3)
  add("bwd_local_lk67", { heads = 4, heads_kv = 1, lq = 31, lk = 67, dk = 5, dv = 9, fuse = "none",
    mask = { kind = "local", radius = 2 }, lse = true, backward = true }, 1)
  add("bwd_local_eq", { heads = 2, lq = 71, lk = 71, dk = 8, dv = 4, fuse = "none", mask = { kind = "local", radius = 3 },
    lse = true, backward = true }, 2)
  add("bwd_dot_lk131", { heads = 2, lq = 7, lk = 131, dk = 16, dv = 8, score = "dot", fuse = "none", lse = true,
    backward = true }, 3)
  add("bwd_causal_lq29", { heads = 2, lq = 29, lk = 97, dk = 4, dv = 6, fuse = "none", mask = "causal", lse = true,
    backward = true }, 1)
  -- (the register-blocked tiles of softmax, gen/backward_tiles.lua: several
  -- query blocks of a key tile, columns of dk and dv past one block, a window
  -- wider than a tile; the tiles' lanes, rows and blocks end short everywhere)
  add("bwd_tiles_gqa_causal", { heads = 4, heads_kv = 2, lq = 151, lk = 163, dk = 19, dv = 13, fuse = "none",
    mask = "causal", lse = true, backward = true }, 2, { bwd_own = "q" })
  add("bwd_tiles_local_r40", { heads = 2, lq = 157, lk = 139, dk = 17, dv = 10, fuse = "none",
    mask = { kind = "local", radius = 40 }, lse = true, backward = true }, 3, { bwd_own = "q" })
  -- (the fused forms mean and sum on the tiles: a window wider than a tile with
  -- lq != lk and grouped heads; causal with lk < lq, so rows with no key, MQA;
  -- the sum computing pass 1's exponentials twice, bwd_store=0, the others
  -- keeping them)
  add("bwd_tiles_mean_gqa_local", { heads = 4, heads_kv = 2, lq = 131, lk = 157, dk = 17, dv = 10, fuse = "mean",
    mask = { kind = "local", radius = 40 }, backward = true }, 2)
  add("bwd_tiles_sum_mqa_causal", { heads = 3, heads_kv = 1, lq = 173, lk = 101, dk = 19, dv = 13, fuse = "sum",
    mask = "causal", backward = true }, 3, { bwd_store = 0 })
  -- (fuse max on the tiles: a window wider than a tile with lq != lk and
  -- grouped heads; causal with lk < lq, so rows with no key, MQA; no mask, for
  -- tied rows across query tiles, test_backward.c's max_ties_go_to_the_first_row)
  add("bwd_tiles_max_gqa_local", { heads = 4, heads_kv = 2, lq = 131, lk = 157, dk = 17, dv = 10, fuse = "max",
    mask = { kind = "local", radius = 40 }, backward = true }, 1)
  add("bwd_tiles_max_mqa_causal", { heads = 3, heads_kv = 1, lq = 173, lk = 101, dk = 19, dv = 13, fuse = "max",
    mask = "causal", backward = true }, 2)
  add("bwd_tiles_max_gqa", { heads = 4, heads_kv = 2, lq = 67, lk = 139, dk = 9, dv = 5, score = "dot", fuse = "max",
    backward = true }, 3)
  -- (the elementwise norms on the tiles: grouped heads with lq != lk, a window
  -- wider than a tile, causal with lk < lq and MQA)
  -- (the Gaussian window on the tiles, fuse none: a window wider than a tile with
  -- lq != lk and grouped heads; with bwd_own = kv below, sigmoid on MQA and
  -- bf16 out, whose D_i comes from the sweep's G-weighted dP)
  add("bwd_tiles_gauss_gqa", { heads = 4, heads_kv = 2, lq = 157, lk = 139, dk = 17, dv = 10, fuse = "none",
    mask = { kind = "local", radius = 40, gaussian = true }, lse = true, backward = true }, 1, { bwd_own = "q" })
  -- (and fused: mean on GQA and a window wider than a tile, keeping pass 1's
  -- exponentials; sum on MQA computing them twice; max on GQA, lq < lk; bf16
  -- max and mean on MQA, lq > lk; L = 1 below, rows masked whole in 3f)
  add("bwd_tiles_gauss_mean_gqa", { heads = 4, heads_kv = 2, lq = 157, lk = 139, dk = 17, dv = 10, fuse = "mean",
    mask = { kind = "local", radius = 40, gaussian = true }, backward = true }, 2, { bwd_store = 1 })
  add("bwd_tiles_gauss_sum_mqa", { heads = 3, heads_kv = 1, lq = 61, lk = 97, dk = 11, dv = 7, fuse = "sum",
    mask = { kind = "local", radius = 20, gaussian = true }, backward = true }, 3, { bwd_store = 0 })
  add("bwd_tiles_gauss_max_gqa", { heads = 4, heads_kv = 2, lq = 131, lk = 157, dk = 17, dv = 10, fuse = "max",
    mask = { kind = "local", radius = 40, gaussian = true }, backward = true }, 1)
  add("bwd_tiles_gauss_bf16_max", { heads = 3, heads_kv = 1, lq = 47, lk = 31, dk = 9, dv = 6, fuse = "max",
    dtype = "bf16", out_dtype = "bf16", mask = { kind = "local", radius = 9, gaussian = true }, backward = true }, 2)
  add("bwd_gauss_bf16_mean", { heads = 3, heads_kv = 1, lq = 53, lk = 37, dk = 9, dv = 6, fuse = "mean",
    dtype = "bf16", out_dtype = "bf16", mask = { kind = "local", radius = 11, gaussian = true }, backward = true }, 3)
  add("bwd_tiles_sigmoid_gqa_causal", { heads = 4, heads_kv = 2, lq = 149, lk = 167, dk = 19, dv = 13, norm = "sigmoid",
    fuse = "none", mask = "causal", backward = true }, 2, { bwd_own = "q" })
  add("bwd_tiles_relu_local_r40", { heads = 2, lq = 139, lk = 157, dk = 17, dv = 10, norm = "relu", fuse = "none",
    mask = { kind = "local", radius = 40 }, backward = true }, 3)
  add("bwd_tiles_none_mqa_causal", { heads = 3, heads_kv = 1, lq = 97, lk = 71, dk = 11, dv = 7, norm = "none",
    fuse = "none", mask = "causal", backward = true },
    { bq = 8, bk = 16, qtiles = 4 }) -- (qtiles: a value neon takes too)
  -- (16-bit storage on the tiles: bf16 q, k, v, out with lse on grouped heads,
  -- f16 with a float out in a window wider than a tile, a fused mean of bf16 on
  -- MQA with rows that see no key, f16 sigmoid; gradients rounded once)
  add("bwd_tiles_bf16_gqa_causal", { heads = 4, heads_kv = 2, lq = 67, lk = 71, dk = 19, dv = 13, fuse = "none",
    mask = "causal", dtype = "bf16", out_dtype = "bf16", lse = true, backward = true }, 1, { bwd_own = "q" })
  add("bwd_tiles_f16_gqa_local", { heads = 4, heads_kv = 2, lq = 61, lk = 53, dk = 17, dv = 10, fuse = "none",
    mask = { kind = "local", radius = 20 }, dtype = "f16", lse = true, backward = true }, 2)
  add("bwd_tiles_bf16_mean_mqa_causal", { heads = 3, heads_kv = 1, lq = 59, lk = 41, dk = 11, dv = 7, fuse = "mean",
    mask = "causal", dtype = "bf16", out_dtype = "bf16", backward = true }, 3)
  add("bwd_tiles_f16_sigmoid_causal", { heads = 2, lq = 43, lk = 47, dk = 9, dv = 6, norm = "sigmoid", fuse = "none",
    mask = "causal", dtype = "f16", out_dtype = "f16", backward = true }, 1)
  add("bwd_sigmoid_gqa_causal", { heads = 4, heads_kv = 2, lq = 13, lk = 83, dk = 7, dv = 5, norm = "sigmoid",
    fuse = "none", mask = "causal", backward = true }, 2)
  add("bwd_relu_local", { heads = 2, lq = 37, lk = 23, dk = 6, dv = 3, norm = "relu", fuse = "none",
    mask = { kind = "local", radius = 4 }, backward = true }, 3)
  add("bwd_none_causal_lk5", { heads = 3, heads_kv = 1, lq = 11, lk = 5, dk = 3, dv = 4, score = "dot", norm = "none",
    fuse = "none", mask = "causal", backward = true }, 1)
  -- (the general score on the tiles, templates/backward_tiles_general.c: the
  -- tiles on q' = Wᵀ q, dq = W dq', dW = Σ q ⊗ dq'; every norm, causal with
  -- lk < lq (rows with no key) on GQA and MQA, a window wider than a tile with
  -- lq != lk, bwd_own q and kv, L = 1, a fused max, bf16)
  add("bwd_tiles_general_gqa_causal", { heads = 4, heads_kv = 2, lq = 151, lk = 131, dk = 19, dv = 13, score = "general",
    fuse = "none", mask = "causal", lse = true, backward = true }, 1, { bwd_own = "kv" })
  add("bwd_tiles_general_local_q", { heads = 2, lq = 157, lk = 139, dk = 17, dv = 10, score = "general", fuse = "none",
    mask = { kind = "local", radius = 40 }, lse = true, backward = true }, 2, { bwd_own = "q" })
  add("bwd_tiles_general_sigmoid_mqa", { heads = 3, heads_kv = 1, lq = 97, lk = 71, dk = 11, dv = 7, score = "general",
    norm = "sigmoid", fuse = "none", mask = "causal", backward = true }, 3)
  add("bwd_general_relu_l1", { heads = 2, lq = 1, lk = 1, dk = 3, dv = 2, score = "general", norm = "relu",
    fuse = "none", backward = true }, 1)
  add("bwd_tiles_general_none_local", { heads = 2, lq = 37, lk = 23, dk = 6, dv = 3, score = "general", norm = "none",
    fuse = "none", mask = { kind = "local", radius = 4 }, backward = true }, 2)
  add("bwd_tiles_max_general_gqa", { heads = 4, heads_kv = 2, lq = 67, lk = 139, dk = 9, dv = 5, score = "general",
    fuse = "max", backward = true }, 3)
  add("bwd_tiles_bf16_general_gqa_causal", { heads = 4, heads_kv = 2, lq = 67, lk = 53, dk = 19, dv = 13,
    score = "general", fuse = "none", mask = "causal", dtype = "bf16", out_dtype = "bf16", lse = true, backward = true },
    1)
  -- (the location score on the tiles, templates/backward_tiles_location.c: W as
  -- each query head's keys, dW the batch items' dK slices summed in batch order;
  -- causal lk < lq on GQA (rows with no key, bwd_own q) and MQA (bwd_own kv),
  -- a fused mean in a window wider than a tile, L = 1, a fused max in bf16)
  add("bwd_tiles_location_gqa_causal", { heads = 4, heads_kv = 2, lq = 151, lk = 131, dk = 19, dv = 13,
    score = "location", fuse = "none", mask = "causal", lse = true, backward = true }, 2, { bwd_own = "q" })
  add("bwd_location_sigmoid_mqa", { heads = 3, heads_kv = 1, lq = 97, lk = 71, dk = 11, dv = 7,
    score = "location", norm = "sigmoid", fuse = "none", mask = "causal", backward = true }, 3)
  add("bwd_mean_location_local", { heads = 2, lq = 157, lk = 139, dk = 17, dv = 10, score = "location",
    fuse = "mean", mask = { kind = "local", radius = 40 }, backward = true }, 1)
  add("bwd_location_relu_l1", { heads = 2, lq = 1, lk = 1, dk = 3, dv = 2, score = "location", norm = "relu",
    fuse = "none", backward = true }, 2)
  add("bwd_tiles_bf16_max_location_gqa", { heads = 4, heads_kv = 2, lq = 67, lk = 53, dk = 19, dv = 13,
    score = "location", fuse = "max", dtype = "bf16", out_dtype = "bf16", backward = true }, 3)
  -- (the additive score on the tiles, templates/backward_tiles_additive.c: tanh
  -- along the lanes, dW_q, dW_k and dv_a; causal lk < lq on GQA (rows with no
  -- key), sigmoid in a window wider than a tile on MQA, L = 1, bf16)
  add("bwd_tiles_additive_gqa_causal", { heads = 4, heads_kv = 2, lq = 151, lk = 131, dk = 19, dv = 13,
    score = "additive", da = 11, fuse = "none", mask = "causal", lse = true, backward = true }, 1)
  add("bwd_tiles_additive_sigmoid_mqa", { heads = 3, heads_kv = 1, lq = 97, lk = 71, dk = 11, dv = 7, score = "additive",
    da = 5, norm = "sigmoid", fuse = "none", mask = { kind = "local", radius = 40 }, backward = true }, 2)
  add("bwd_additive_relu_l1", { heads = 2, lq = 1, lk = 1, dk = 3, dv = 2, score = "additive", da = 3, norm = "relu",
    fuse = "none", backward = true }, 3)
  add("bwd_tiles_bf16_additive_gqa_causal", { heads = 4, heads_kv = 2, lq = 67, lk = 53, dk = 19, dv = 13,
    score = "additive", da = 7, fuse = "none", mask = "causal", dtype = "bf16", out_dtype = "bf16", lse = true,
    backward = true }, 1)
  -- (its fused forms mean and sum: every row's dO is dy (/ LQ), D_i from the
  -- sweep; mean causal lk < lq on GQA, sum in a window with lk > lq on MQA, bf16 mean)
  add("bwd_tiles_additive_mean_gqa_causal", { heads = 4, heads_kv = 2, lq = 83, lk = 61, dk = 13, dv = 9,
    score = "additive", da = 6, fuse = "mean", mask = "causal", backward = true }, 2)
  add("bwd_tiles_additive_sum_mqa_local", { heads = 3, heads_kv = 1, lq = 37, lk = 71, dk = 11, dv = 7,
    score = "additive", da = 5, fuse = "sum", mask = { kind = "local", radius = 20 }, backward = true }, 3)
  add("bwd_tiles_bf16_additive_mean", { heads = 2, lq = 29, lk = 31, dk = 8, dv = 5, score = "additive", da = 4,
    fuse = "mean", dtype = "bf16", out_dtype = "bf16", backward = true }, 1)
  -- (and fuse max: dP_ij = c_j on key j's first max row; causal lk < lq on GQA
  -- (rows with no key), a window with lk > lq on MQA, no mask on GQA for tied
  -- rows (test_backward.c's max_ties_go_to_the_first_row), L = 1, bf16)
  add("bwd_tiles_additive_max_gqa_causal", { heads = 4, heads_kv = 2, lq = 83, lk = 61, dk = 13, dv = 9,
    score = "additive", da = 6, fuse = "max", mask = "causal", backward = true }, 2)
  add("bwd_tiles_additive_max_mqa_local", { heads = 3, heads_kv = 1, lq = 37, lk = 71, dk = 11, dv = 7,
    score = "additive", da = 5, fuse = "max", mask = { kind = "local", radius = 20 }, backward = true }, 3)
  add("bwd_tiles_additive_max_gqa", { heads = 4, heads_kv = 2, lq = 67, lk = 41, dk = 9, dv = 5, score = "additive",
    da = 7, fuse = "max", backward = true }, 1)
  add("bwd_additive_max_l1", { heads = 2, lq = 1, lk = 1, dk = 3, dv = 2, score = "additive", da = 3, fuse = "max",
    backward = true }, 2)
  add("bwd_tiles_bf16_additive_max", { heads = 3, heads_kv = 1, lq = 29, lk = 31, dk = 8, dv = 5, score = "additive",
    da = 4, fuse = "max", mask = { kind = "local", radius = 9 }, dtype = "bf16", out_dtype = "bf16", backward = true }, 3)
  -- (and the Gaussian window: dP ∘ G, P ∘ G into dV or α; GQA with lq > lk and
  -- lse, sigmoid on MQA with lk > lq, mean, max on GQA, bf16 (D_i from the
  -- sweep's G-weighted dP), L = 1 with max)
  add("bwd_tiles_additive_gauss_gqa", { heads = 4, heads_kv = 2, lq = 61, lk = 53, dk = 13, dv = 9, score = "additive",
    da = 6, fuse = "none", mask = { kind = "local", radius = 20, gaussian = true }, lse = true, backward = true }, 1)
  add("bwd_tiles_additive_gauss_sigmoid_mqa", { heads = 3, heads_kv = 1, lq = 37, lk = 71, dk = 11, dv = 7,
    score = "additive", da = 5, norm = "sigmoid", fuse = "none", mask = { kind = "local", radius = 9, gaussian = true },
    backward = true }, 2)
  add("bwd_tiles_additive_gauss_mean", { heads = 2, lq = 47, lk = 31, dk = 8, dv = 5, score = "additive", da = 4,
    fuse = "mean", mask = { kind = "local", radius = 9, gaussian = true }, backward = true }, 3)
  add("bwd_tiles_additive_gauss_max_gqa", { heads = 4, heads_kv = 2, lq = 43, lk = 59, dk = 9, dv = 6,
    score = "additive", da = 5, fuse = "max", mask = { kind = "local", radius = 12, gaussian = true }, backward = true },
    1)
  add("bwd_tiles_bf16_additive_gauss", { heads = 2, lq = 37, lk = 29, dk = 9, dv = 6, score = "additive", da = 4,
    fuse = "none", dtype = "bf16", out_dtype = "bf16", mask = { kind = "local", radius = 9, gaussian = true },
    lse = true, backward = true }, 2)
  add("bwd_additive_gauss_max_l1", { heads = 2, heads_kv = 1, lq = 1, lk = 1, dk = 3, dv = 2, score = "additive",
    da = 3, fuse = "max", mask = { kind = "local", radius = 1, gaussian = true }, backward = true }, 3)
  -- (the cosine score on the tiles, templates/backward_tiles_cosine.c: the tiles
  -- on q̂, k̂ in float, then dq = (dq̂ - (dq̂·q̂) q̂) / |q| and dk likewise; causal
  -- lk < lq on GQA with bwd_own kv, a window wider than a tile with bwd_own q,
  -- a fused max, a Gaussian window with sigmoid on MQA, bf16; bwd_cosine_l1
  -- and _gqa_causal, bwd_mean_cosine_local above take the tiles too)
  add("bwd_tiles_cosine_gqa_causal", { heads = 4, heads_kv = 2, lq = 151, lk = 131, dk = 19, dv = 13, score = "cosine",
    fuse = "none", mask = "causal", lse = true, backward = true }, 2, { bwd_own = "kv" })
  add("bwd_cosine_tiles_local_q", { heads = 2, lq = 157, lk = 139, dk = 17, dv = 10, score = "cosine", fuse = "none",
    mask = { kind = "local", radius = 40 }, lse = true, backward = true }, 3, { bwd_own = "q" })
  add("bwd_max_cosine_tiles_gqa", { heads = 4, heads_kv = 2, lq = 67, lk = 139, dk = 9, dv = 5, score = "cosine",
    fuse = "max", backward = true }, 1)
  add("bwd_cosine_tiles_gauss_sigmoid_mqa", { heads = 3, heads_kv = 1, lq = 61, lk = 97, dk = 11, dv = 7,
    score = "cosine", norm = "sigmoid", fuse = "none", mask = { kind = "local", radius = 20, gaussian = true },
    backward = true }, 2)
  add("bwd_tiles_bf16_cosine_gqa_causal", { heads = 4, heads_kv = 2, lq = 67, lk = 53, dk = 19, dv = 13,
    score = "cosine", fuse = "none", mask = "causal", dtype = "bf16", out_dtype = "bf16", lse = true, backward = true },
    3)
  -- (bwd_own = kv, the default, and q on bwd_tiles_gqa_causal, _local_r40,
  -- _sigmoid_gqa_causal, _bf16_gqa_causal and bwd_mod_tiles_doc_gqa; kv
  -- named on the twins below: a task per chunk of key tiles owns
  -- dk, dv and adds dS·K into its chunk's dQ partial: L = 1, a chunk of
  -- several tiles (8 K/V heads: 4 chunks of 331 keys), causal with lk < lq
  -- (rows with no key) on MQA without lse, a window wider than a tile with lq
  -- != lk, GQA, sigmoid, bf16; a window narrower than a chunk of several
  -- tiles, whose rows' hull grows tile by tile: its partial rows zeroed as
  -- they come, the sum reading them only)
  add("bwd_own_l1", { heads = 2, lq = 1, lk = 1, dk = 3, dv = 2, fuse = "none", lse = true, backward = true }, 1,
    { bwd_own = "kv" })
  add("bwd_own_chunks", { heads = 8, lq = 37, lk = 331, dk = 9, dv = 5, score = "dot", fuse = "none", lse = true,
    backward = true }, 2, { bwd_own = "kv" })
  add("bwd_own_gqa_causal", { heads = 4, heads_kv = 2, lq = 151, lk = 163, dk = 19, dv = 13, fuse = "none",
    mask = "causal", lse = true, backward = true }, 3, { bwd_own = "kv" })
  add("bwd_own_mqa_causal_nolse", { heads = 3, heads_kv = 1, lq = 173, lk = 101, dk = 11, dv = 7, fuse = "none",
    mask = "causal", backward = true }, 1, { bwd_own = "kv" })
  add("bwd_own_local_r40", { heads = 2, lq = 157, lk = 139, dk = 17, dv = 10, fuse = "none",
    mask = { kind = "local", radius = 40 }, lse = true, backward = true }, 2, { bwd_own = "kv" })
  add("bwd_own_local_chunks", { heads = 8, lq = 97, lk = 331, dk = 9, dv = 5, fuse = "none",
    mask = { kind = "local", radius = 12 }, lse = true, backward = true }, 3, { bwd_own = "kv" })
  add("bwd_own_sigmoid_gqa_causal", { heads = 4, heads_kv = 2, lq = 149, lk = 167, dk = 19, dv = 13, norm = "sigmoid",
    fuse = "none", mask = "causal", backward = true }, 3, { bwd_own = "kv" })
  add("bwd_own_bf16_gqa_causal", { heads = 4, heads_kv = 2, lq = 67, lk = 71, dk = 19, dv = 13, fuse = "none",
    mask = "causal", dtype = "bf16", out_dtype = "bf16", lse = true, backward = true }, 1, { bwd_own = "kv" })
  add("bwd_own_gauss_sigmoid_mqa", { heads = 3, heads_kv = 1, lq = 61, lk = 97, dk = 11, dv = 7, norm = "sigmoid",
    fuse = "none", mask = { kind = "local", radius = 20, gaussian = true }, backward = true }, 2, { bwd_own = "kv" })
  add("bwd_own_gauss_bf16", { heads = 2, lq = 37, lk = 29, dk = 9, dv = 6, fuse = "none", dtype = "bf16",
    out_dtype = "bf16", mask = { kind = "local", radius = 9, gaussian = true }, lse = true, backward = true }, 3,
    { bwd_own = "kv" })
  -- The fused forms (mean, sum, max): L = 1, rows with no key, keys no query sees, GQA and MQA, several key tiles, each
  -- norm; max with mask none for tied rows (test_backward.c: the first row attaining the max), max of a signed P with
  -- masked rows counting 0, mean of norm none with no mask (the forward's linear collapse).
  add("bwd_mean_l1", { heads = 2, lq = 1, lk = 1, dk = 3, dv = 2, fuse = "mean", backward = true }, 1)
  add("bwd_mean_gqa_causal", { heads = 4, heads_kv = 2, lq = 13, lk = 17, dk = 7, dv = 5, fuse = "mean",
    mask = "causal", backward = true }, 2)
  add("bwd_sum_mqa_causal_lk5", { heads = 3, heads_kv = 1, lq = 11, lk = 5, dk = 6, dv = 3, fuse = "sum",
    mask = "causal", backward = true }, 3)
  add("bwd_max_local_lk67", { heads = 4, heads_kv = 1, lq = 31, lk = 67, dk = 5, dv = 9, fuse = "max",
    mask = { kind = "local", radius = 2 }, backward = true }, 1)
  add("bwd_max_gqa_lk131", { heads = 4, heads_kv = 2, lq = 7, lk = 131, dk = 8, dv = 6, score = "dot", fuse = "max",
    backward = true }, 2)
  add("bwd_max_none_causal", { heads = 2, lq = 11, lk = 7, dk = 4, dv = 3, norm = "none", fuse = "max",
    mask = "causal", backward = true }, 3)
  add("bwd_max_relu_gqa", { heads = 4, heads_kv = 2, lq = 9, lk = 13, dk = 5, dv = 4, norm = "relu", fuse = "max",
    backward = true }, 1)
  add("bwd_mean_sigmoid_local", { heads = 2, lq = 37, lk = 23, dk = 6, dv = 3, norm = "sigmoid", fuse = "mean",
    mask = { kind = "local", radius = 4 }, backward = true }, 2)
  add("bwd_sum_relu_causal", { heads = 4, heads_kv = 2, lq = 13, lk = 83, dk = 7, dv = 5, norm = "relu", fuse = "sum",
    mask = "causal", backward = true }, 3)
  add("bwd_mean_none_dot", { heads = 2, lq = 19, lk = 29, dk = 5, dv = 4, score = "dot", norm = "none", fuse = "mean",
    backward = true }, 1)
  -- The other scores (cosine; general, location, additive with NAME_grads): L = 1, GQA and MQA, rows with no key
  -- (causal, lk < lq), keys no query sees, Lq != Lk, primes, fused forms; and 16-bit storage (bf16, f16; out f32 or
  -- 16-bit, gradients rounded once), with weights too.
  add("bwd_cosine_gqa_causal", { heads = 4, heads_kv = 2, lq = 13, lk = 17, dk = 7, dv = 5, score = "cosine",
    fuse = "none", mask = "causal", lse = true, backward = true }, 2)
  add("bwd_cosine_l1", { heads = 2, lq = 1, lk = 1, dk = 3, dv = 2, score = "cosine", fuse = "none", lse = true,
    backward = true }, 1)
  add("bwd_mean_cosine_local", { heads = 2, lq = 37, lk = 23, dk = 6, dv = 3, score = "cosine", fuse = "mean",
    mask = { kind = "local", radius = 4 }, backward = true }, 3)
  add("bwd_general_gqa_local", { heads = 4, heads_kv = 2, lq = 31, lk = 67, dk = 5, dv = 3, score = "general",
    fuse = "none", mask = { kind = "local", radius = 2 }, lse = true, backward = true }, 1)
  add("bwd_location_mqa_causal", { heads = 3, heads_kv = 1, lq = 11, lk = 5, dk = 6, dv = 3, score = "location",
    fuse = "none", mask = "causal", lse = true, backward = true }, 2)
  add("bwd_additive_gqa_causal", { heads = 4, heads_kv = 2, lq = 13, lk = 83, dk = 7, dv = 5, score = "additive", da = 5,
    fuse = "none", mask = "causal", lse = true, backward = true }, 3)
  add("bwd_mean_general_l1", { heads = 2, lq = 1, lk = 1, dk = 3, dv = 2, score = "general", fuse = "mean",
    backward = true }, 1)
  add("bwd_max_additive_relu_local", { heads = 2, lq = 29, lk = 19, dk = 4, dv = 3, score = "additive", da = 3,
    norm = "relu", fuse = "max", mask = { kind = "local", radius = 3 }, backward = true }, 2)
  add("bwd_sum_location_sigmoid", { heads = 4, heads_kv = 2, lq = 7, lk = 131, dk = 5, dv = 4, score = "location",
    norm = "sigmoid", fuse = "sum", backward = true }, 3)
  add("bwd_bf16_gqa_causal", { heads = 4, heads_kv = 2, lq = 13, lk = 17, dk = 7, dv = 5, fuse = "none",
    mask = "causal", dtype = "bf16", out_dtype = "bf16", lse = true, backward = true }, 1)
  add("bwd_f16_sigmoid_local", { heads = 2, lq = 37, lk = 23, dk = 6, dv = 3, norm = "sigmoid", fuse = "none",
    mask = { kind = "local", radius = 4 }, dtype = "f16", backward = true }, 2)
  add("bwd_bf16_mean_general", { heads = 2, lq = 19, lk = 29, dk = 5, dv = 4, score = "general", fuse = "mean",
    dtype = "bf16", out_dtype = "bf16", backward = true }, 3)
  -- The Gaussian local window (P ∘ G after the norm; softmax on the tiles, the fused elementwise norms and the
  -- other scores the plain loops; docs/backward.md).
  add("bwd_gauss_gqa", { heads = 4, heads_kv = 2, lq = 13, lk = 29, dk = 7, dv = 5, fuse = "none",
    mask = { kind = "local", radius = 3, gaussian = true }, lse = true, backward = true }, 1)
  add("bwd_gauss_l1", { heads = 2, lq = 1, lk = 1, dk = 3, dv = 2, fuse = "none",
    mask = { kind = "local", radius = 2, gaussian = true }, lse = true, backward = true }, 2)
  add("bwd_gauss_mean_sigmoid_mqa", { heads = 3, heads_kv = 1, lq = 31, lk = 131, dk = 5, dv = 4, norm = "sigmoid",
    fuse = "mean", mask = { kind = "local", radius = 7, gaussian = true }, backward = true }, 3)
  add("bwd_gauss_max", { heads = 2, lq = 29, lk = 19, dk = 6, dv = 3, fuse = "max",
    mask = { kind = "local", radius = 4, gaussian = true }, backward = true }, 1)
  add("bwd_gauss_general_eq", { heads = 2, lq = 37, lk = 37, dk = 5, dv = 3, score = "general", fuse = "none",
    mask = { kind = "local", radius = 5, gaussian = true }, lse = true, backward = true }, 2)
  add("bwd_gauss_f16_sum", { heads = 4, heads_kv = 2, lq = 23, lk = 17, dk = 6, dv = 4, fuse = "sum",
    mask = { kind = "local", radius = 2, gaussian = true }, dtype = "f16", backward = true }, 3)
  add("bwd_gauss_mean_l1", { heads = 2, lq = 1, lk = 1, dk = 3, dv = 2, fuse = "mean",
    mask = { kind = "local", radius = 2, gaussian = true }, backward = true }, 1)
  add("bwd_gauss_max_l1", { heads = 2, heads_kv = 1, lq = 1, lk = 1, dk = 3, dv = 2, fuse = "max",
    mask = { kind = "local", radius = 1, gaussian = true }, backward = true }, 2)
end
